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
#include "src/backends/sqlite/guard_rows.h"
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
            JOBPACT_ASSIGN_OR_RETURN(out, internal::ClaimRow(conn, key, owner, now_ns, expires_ns,
                                                             "IdempotencyStore::Claim"));
            return Status::Ok();
          }));
      return out;
    });
  }

  Status Complete(std::string_view key, std::string_view owner, std::string_view result,
                  Duration retention) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Complete", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Complete", key, owner, retention));
      return core_->Write("IdempotencyStore::Complete", [&](Connection& conn) -> Status {
        const std::int64_t now_ns = ToNs(core_->Now());
        return internal::CompleteClaimRow(conn, key, owner, result, now_ns,
                                          now_ns + ToNs(retention), "IdempotencyStore::Complete");
      });
    });
  }

  // An expired claim of the owner's own may still be dropped (as in memory);
  // a completed record never is.
  Status Release(std::string_view key, std::string_view owner) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Release", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Release", key, owner));
      return core_->Write("IdempotencyStore::Release", [&](Connection& conn) -> Status {
        return internal::ReleaseClaimRow(conn, key, owner, "IdempotencyStore::Release");
      });
    });
  }

  Status Extend(std::string_view key, std::string_view owner, Duration claim_ttl) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Extend", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Extend", key, owner, claim_ttl));
      return core_->Write("IdempotencyStore::Extend", [&](Connection& conn) -> Status {
        const std::int64_t now_ns = ToNs(core_->Now());
        return internal::ExtendClaimRow(conn, key, owner, now_ns, now_ns + ToNs(claim_ttl),
                                        "IdempotencyStore::Extend");
      });
    });
  }

  Result<std::optional<IdempotencyRecord>> Get(std::string_view key) override {
    using Out = std::optional<IdempotencyRecord>;
    return ::jobpact::internal::Guarded("IdempotencyStore::Get", [&]() -> Result<Out> {
      Out out;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("IdempotencyStore::Get", false, [&](Connection& conn) -> Status {
            JOBPACT_ASSIGN_OR_RETURN(
                out, internal::ReadLiveClaim(conn, key, ToNs(core_->Now()), "IdempotencyStore::Get"));
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
  const std::shared_ptr<Core> core_;
};

}  // namespace

std::shared_ptr<IdempotencyStore> SqliteBackend::Core::MakeIdempotency(std::shared_ptr<Core> core) {
  return std::make_shared<SqliteIdempotencyStore>(std::move(core));
}

}  // namespace sqlite
}  // namespace jobpact
