// The SQLite IdempotencyStore: rows of jobpact_idempotency. A record is live
// while expires_at > now; an expired row counts as missing and is replaced
// by the next claim (PurgeExpired deletes the rest).
#include "jobpact/idempotency_store.h"

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "src/backends/sqlite/connection.h"
#include "src/backends/sqlite/core.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace sqlite {

using internal::Connection;
using internal::Stmt;
using internal::TimeFromNs;
using internal::ToNs;
using Core = SqliteBackend::Core;

namespace {

constexpr std::string_view kInProgress = "in_progress";
constexpr std::string_view kCompleted = "completed";


Result<std::optional<IdempotencyRecord>> ReadLive(Connection& conn, std::string_view key,
                                                  std::int64_t now_ns, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT state, owner, result, expires_at_ns FROM jobpact_idempotency WHERE "
                   "key = ?1 AND expires_at_ns > ?2"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, now_ns);
  int rc = st.Step();
  if (rc == SQLITE_DONE) return std::optional<IdempotencyRecord>();
  if (rc != SQLITE_ROW) return conn.Error(rc, what);
  IdempotencyRecord r;
  r.key = std::string(key);
  r.state = st.Text(0) == kCompleted ? IdempotencyRecord::State::kCompleted
                                     : IdempotencyRecord::State::kInProgress;
  r.owner = st.Text(1);
  r.result = st.Text(2);
  r.expires_at = TimeFromNs(st.Int(3));
  return std::optional<IdempotencyRecord>(std::move(r));
}

class SqliteIdempotencyStore final : public IdempotencyStore {
 public:
  explicit SqliteIdempotencyStore(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  std::string_view Name() const override { return "sqlite"; }

  Result<ClaimOutcome> Claim(std::string_view key, std::string_view owner,
                             Duration claim_ttl) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Claim", [&]() -> Result<ClaimOutcome> {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Claim", key, owner, claim_ttl));
      ClaimOutcome out;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Write("IdempotencyStore::Claim", [&](Connection& conn) -> Status {
            const std::int64_t now_ns = ToNs(core_->Now());
            const std::int64_t expires_ns = now_ns + ToNs(claim_ttl);
            JOBPACT_ASSIGN_OR_RETURN(std::optional<IdempotencyRecord> live,
                                     ReadLive(conn, key, now_ns, "IdempotencyStore::Claim"));
            if (live && live->state == IdempotencyRecord::State::kCompleted) {
              out.kind = ClaimOutcome::Kind::kCompleted;
              out.record = std::move(*live);
              return Status::Ok();
            }
            if (live && live->owner != owner) {
              out.kind = ClaimOutcome::Kind::kInProgress;
              out.record = std::move(*live);
              return Status::Ok();
            }
            // Missing, expired, or our own claim: (re)claim until now + ttl.
            JOBPACT_ASSIGN_OR_RETURN(
                sqlite3_stmt * raw,
                conn.Prepare("INSERT OR REPLACE INTO jobpact_idempotency (key, state, owner, "
                             "result, expires_at_ns) VALUES (?1, 'in_progress', ?2, '', ?3)"));
            Stmt st(raw);
            st.Bind(1, key).Bind(2, owner).Bind(3, expires_ns);
            int rc = st.Step();
            if (rc != SQLITE_DONE) return conn.Error(rc, "IdempotencyStore::Claim");
            out.kind = ClaimOutcome::Kind::kClaimed;
            out.record.key = std::string(key);
            out.record.state = IdempotencyRecord::State::kInProgress;
            out.record.owner = std::string(owner);
            out.record.expires_at = TimeFromNs(expires_ns);
            return Status::Ok();
          }));
      return out;
    });
  }

  Status Complete(std::string_view key, std::string_view owner, std::string_view result,
                  Duration retention) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Complete", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Complete", key, owner, retention));
      return UpdateOwnClaim(
          "IdempotencyStore::Complete",
          "UPDATE jobpact_idempotency SET state = 'completed', result = ?4, expires_at_ns = ?5 "
          "WHERE key = ?1 AND owner = ?2 AND state = 'in_progress' AND expires_at_ns > ?3",
          key, owner, retention, result);
    });
  }

  // An expired claim of the owner's own may still be dropped (as in memory);
  // a completed record never is.
  Status Release(std::string_view key, std::string_view owner) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Release", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Release", key, owner));
      return UpdateOwnClaim("IdempotencyStore::Release",
                            "DELETE FROM jobpact_idempotency WHERE key = ?1 AND owner = ?2 AND "
                            "state = 'in_progress' AND ?3 IS NOT NULL",
                            key, owner, std::nullopt, std::nullopt);
    });
  }

  Status Extend(std::string_view key, std::string_view owner, Duration claim_ttl) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Extend", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Extend", key, owner, claim_ttl));
      return UpdateOwnClaim("IdempotencyStore::Extend",
                            "UPDATE jobpact_idempotency SET expires_at_ns = ?5 WHERE key = ?1 "
                            "AND owner = ?2 AND state = 'in_progress' AND expires_at_ns > ?3",
                            key, owner, claim_ttl, std::nullopt);
    });
  }

  Result<std::optional<IdempotencyRecord>> Get(std::string_view key) override {
    using Out = std::optional<IdempotencyRecord>;
    return ::jobpact::internal::Guarded("IdempotencyStore::Get", [&]() -> Result<Out> {
      Out out;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("IdempotencyStore::Get", false, [&](Connection& conn) -> Status {
            JOBPACT_ASSIGN_OR_RETURN(
                out, ReadLive(conn, key, ToNs(core_->Now()), "IdempotencyStore::Get"));
            return Status::Ok();
          }));
      return out;
    });
  }

  Result<int> PurgeExpired() override {
    return ::jobpact::internal::Guarded("IdempotencyStore::PurgeExpired", [&]() -> Result<int> {
      int deleted = 0;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Write("IdempotencyStore::PurgeExpired", [&](Connection& conn) -> Status {
            JOBPACT_ASSIGN_OR_RETURN(
                sqlite3_stmt * raw,
                conn.Prepare("DELETE FROM jobpact_idempotency WHERE expires_at_ns <= ?1"));
            Stmt st(raw);
            st.Bind(1, ToNs(core_->Now()));
            int rc = st.Step();
            if (rc != SQLITE_DONE) return conn.Error(rc, "IdempotencyStore::PurgeExpired");
            deleted = sqlite3_changes(conn.db());
            return Status::Ok();
          }));
      return deleted;
    });
  }

 private:
  // Runs `sql` (?1 key, ?2 owner, ?3 now, ?4 result, ?5 now + ttl) on the
  // owner's live claim; kAborted if there is none.
  Status UpdateOwnClaim(const char* what, const char* sql, std::string_view key,
                        std::string_view owner, std::optional<Duration> ttl,
                        std::optional<std::string_view> result) {
    return core_->Write(what, [&](Connection& conn) -> Status {
      const std::int64_t now_ns = ToNs(core_->Now());
      JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql));
      {
        Stmt st(raw);
        st.Bind(1, key).Bind(2, owner).Bind(3, now_ns);
        if (result) st.Bind(4, *result);
        if (ttl) st.Bind(5, now_ns + ToNs(*ttl));
        int rc = st.Step();
        if (rc != SQLITE_DONE) return conn.Error(rc, what);
      }
      if (sqlite3_changes(conn.db()) == 0) {
        return Status::Aborted(std::string(what) + ": " + std::string(owner) +
                               " does not hold a live claim on idempotency key " +
                               std::string(key) + " (expired, released, completed or taken)");
      }
      return Status::Ok();
    });
  }

  const std::shared_ptr<Core> core_;
};

}  // namespace

std::shared_ptr<IdempotencyStore> SqliteBackend::Core::MakeIdempotency(std::shared_ptr<Core> core) {
  return std::make_shared<SqliteIdempotencyStore>(std::move(core));
}

}  // namespace sqlite
}  // namespace jobpact
