// The PostgreSQL IdempotencyStore: rows of the idempotency table (one per
// key: the primary key is the unique constraint). A record is live while
// expires_at > now; an expired row counts as missing and is taken over by
// the next claim in the same statement that checks it.
#include "jobpact/idempotency_store.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "src/backends/postgres/core.h"
#include "src/backends/postgres/guard_rows.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using ::jobpact::internal::TimeFromNs;
using ::jobpact::internal::ToNs;
using internal::Connection;
using internal::Params;
using internal::PgResult;
using Core = PostgresBackend::Core;

namespace {

IdempotencyRecord RecordOf(std::string_view key, const PgResult& r) {
  IdempotencyRecord rec;
  rec.key = std::string(key);
  rec.state = r.Text(0, 0) == "completed" ? IdempotencyRecord::State::kCompleted
                                          : IdempotencyRecord::State::kInProgress;
  rec.owner = r.Text(0, 1);
  rec.result = r.Text(0, 2);
  rec.expires_at = TimeFromNs(r.Int(0, 3));
  return rec;
}

class PostgresIdempotencyStore final : public IdempotencyStore {
 public:
  explicit PostgresIdempotencyStore(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  std::string_view Name() const override { return "postgres"; }

  Result<ClaimOutcome> Claim(std::string_view key, std::string_view owner,
                             Duration claim_ttl) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Claim", [&]() -> Result<ClaimOutcome> {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Claim",
                                                                    key, owner, claim_ttl));
      ClaimOutcome out;
      // One statement, committed on its own (guard_rows.h).
      JOBPACT_PG_RETURN_IF_ERROR(
          core_->Autocommit("IdempotencyStore::Claim", [&](Connection& conn) -> Status {
            const std::int64_t now_ns = ToNs(core_->Now());
            JOBPACT_ASSIGN_OR_RETURN(out, internal::ClaimRow(*core_, conn, key, owner, now_ns,
                                                             now_ns + ToNs(claim_ttl),
                                                             "IdempotencyStore::Claim"));
            return Status::Ok();
          }));
      return out;
    });
  }

  Status Complete(std::string_view key, std::string_view owner, std::string_view result,
                  Duration retention) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Complete", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl(
          "IdempotencyStore::Complete", key, owner, retention));
      const std::int64_t now_ns = ToNs(core_->Now());
      return UpdateOwnClaim("IdempotencyStore::Complete",
                            "UPDATE {t}idempotency SET state = 'completed', result = $4, "
                            "expires_at_ns = $5 WHERE key = $1 AND owner = $2 AND state = "
                            "'in_progress' AND expires_at_ns > $3",
                            Params().Add(key).Add(owner).Add(now_ns).Add(result).Add(
                                now_ns + ToNs(retention)),
                            key, owner);
    });
  }

  // An expired claim of the owner's own may still be dropped (as in memory);
  // a completed record never is.
  Status Release(std::string_view key, std::string_view owner) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Release", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(
          ::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Release", key, owner));
      return UpdateOwnClaim("IdempotencyStore::Release",
                            "DELETE FROM {t}idempotency WHERE key = $1 AND owner = $2 AND state "
                            "= 'in_progress'",
                            Params().Add(key).Add(owner), key, owner);
    });
  }

  Status Extend(std::string_view key, std::string_view owner, Duration claim_ttl) override {
    return ::jobpact::internal::Guarded("IdempotencyStore::Extend", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("IdempotencyStore::Extend",
                                                                    key, owner, claim_ttl));
      const std::int64_t now_ns = ToNs(core_->Now());
      return UpdateOwnClaim("IdempotencyStore::Extend",
                            "UPDATE {t}idempotency SET expires_at_ns = $4 WHERE key = $1 AND "
                            "owner = $2 AND state = 'in_progress' AND expires_at_ns > $3",
                            Params().Add(key).Add(owner).Add(now_ns).Add(now_ns + ToNs(claim_ttl)),
                            key, owner);
    });
  }

  Result<std::optional<IdempotencyRecord>> Get(std::string_view key) override {
    using Out = std::optional<IdempotencyRecord>;
    return ::jobpact::internal::Guarded("IdempotencyStore::Get", [&]() -> Result<Out> {
      Out out;
      JOBPACT_PG_RETURN_IF_ERROR(core_->Read("IdempotencyStore::Get", [&](Connection& conn) -> Status {
        JOBPACT_ASSIGN_OR_RETURN(
            PgResult r,
            conn.Exec(core_->Sql("SELECT state, owner, result, expires_at_ns FROM "
                                 "{t}idempotency WHERE key = $1 AND expires_at_ns > $2"),
                      Params().Add(key).Add(ToNs(core_->Now())), "IdempotencyStore::Get"));
        if (r.rows() > 0) out = RecordOf(key, r);
        return Status::Ok();
      }));
      return out;
    });
  }

  Result<int> PurgeExpired() override {
    return ::jobpact::internal::Guarded("IdempotencyStore::PurgeExpired", [&]() -> Result<int> {
      int deleted = 0;
      JOBPACT_PG_RETURN_IF_ERROR(
          core_->Tx("IdempotencyStore::PurgeExpired", [&](Connection& conn) -> Status {
            JOBPACT_ASSIGN_OR_RETURN(
                PgResult r,
                conn.Exec(core_->Sql("DELETE FROM {t}idempotency WHERE expires_at_ns <= $1"),
                          Params().Add(ToNs(core_->Now())), "IdempotencyStore::PurgeExpired"));
            deleted = static_cast<int>(r.affected());
            return Status::Ok();
          }));
      return deleted;
    });
  }

 private:
  // Runs `tmpl` on the owner's live claim; kAborted if it touched no row.
  Status UpdateOwnClaim(const char* what, const char* tmpl, const Params& params,
                        std::string_view key, std::string_view owner) {
    return core_->Tx(what, [&](Connection& conn) -> Status {
      JOBPACT_ASSIGN_OR_RETURN(PgResult r, conn.Exec(core_->Sql(tmpl), params, what));
      if (r.affected() == 0) {
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

std::shared_ptr<IdempotencyStore> PostgresBackend::Core::MakeIdempotency(
    std::shared_ptr<Core> core) {
  return std::make_shared<PostgresIdempotencyStore>(std::move(core));
}

}  // namespace postgres
}  // namespace jobpact
