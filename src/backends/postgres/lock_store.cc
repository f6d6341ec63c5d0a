// The PostgreSQL LockStore: rows of the locks table; fencing tokens come
// from one sequence shared by every process using the schema, so they grow
// strictly across processes too. Acquire and renew are one conditional
// statement each (compare-and-set on owner and expiry).
#include "jobpact/lock_store.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/job.h"
#include "src/internal/lock_lease.h"
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

class PostgresLockStore final : public LockStore {
 public:
  explicit PostgresLockStore(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  std::string_view Name() const override { return "postgres"; }

  Result<LockLease> Acquire(std::string_view key, std::string_view owner, Duration ttl) override {
    return ::jobpact::internal::Guarded("LockStore::Acquire", [&]() -> Result<LockLease> {
      JOBPACT_RETURN_IF_ERROR(
          ::jobpact::internal::CheckKeyOwnerTtl("LockStore::Acquire", key, owner, ttl));
      LockLease lease;
      // One statement, committed on its own (guard_rows.h).
      JOBPACT_PG_RETURN_IF_ERROR(
          core_->Autocommit("LockStore::Acquire", [&](Connection& conn) -> Status {
            const std::int64_t now_ns = ToNs(core_->Now());
            JOBPACT_ASSIGN_OR_RETURN(lease, internal::AcquireLockRow(*core_, conn, key, owner, now_ns,
                                                                 now_ns + ToNs(ttl),
                                                                 "LockStore::Acquire"));
            return Status::Ok();
          }));
      return lease;
    });
  }

  Result<LockLease> Renew(std::string_view key, std::string_view owner, Duration ttl) override {
    return ::jobpact::internal::Guarded("LockStore::Renew", [&]() -> Result<LockLease> {
      JOBPACT_RETURN_IF_ERROR(
          ::jobpact::internal::CheckKeyOwnerTtl("LockStore::Renew", key, owner, ttl));
      LockLease lease;
      JOBPACT_PG_RETURN_IF_ERROR(core_->Tx("LockStore::Renew", [&](Connection& conn) -> Status {
        const std::int64_t now_ns = ToNs(core_->Now());
        const std::int64_t expires_ns = now_ns + ToNs(ttl);
        JOBPACT_ASSIGN_OR_RETURN(
            PgResult r,
            conn.Exec(core_->Sql("UPDATE {t}locks SET expires_at_ns = $4 WHERE key = $1 AND "
                                 "owner = $2 AND expires_at_ns > $3 RETURNING fencing_token"),
                      Params().Add(key).Add(owner).Add(now_ns).Add(expires_ns),
                      "LockStore::Renew"));
        if (r.rows() == 0) {
          return Status::Aborted("lock " + std::string(key) + " is no longer held by " +
                                 std::string(owner) + " (expired, taken or released)");
        }
        lease = ::jobpact::internal::MakeLockLease(key, std::string(owner), static_cast<std::uint64_t>(r.Int(0, 0)),
                          expires_ns);
        return Status::Ok();
      }));
      return lease;
    });
  }

  Status Release(std::string_view key, std::string_view owner) override {
    return ::jobpact::internal::Guarded("LockStore::Release", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(
          ::jobpact::internal::CheckKeyOwnerTtl("LockStore::Release", key, owner));
      return core_->Tx("LockStore::Release", [&](Connection& conn) -> Status {
        const std::int64_t now_ns = ToNs(core_->Now());
        JOBPACT_ASSIGN_OR_RETURN(
            PgResult r,
            conn.Exec(core_->Sql("DELETE FROM {t}locks WHERE key = $1 AND owner = $2 AND "
                                 "expires_at_ns > $3"),
                      Params().Add(key).Add(owner).Add(now_ns), "LockStore::Release"));
        if (r.affected() > 0) return Status::Ok();
        JOBPACT_ASSIGN_OR_RETURN(
            PgResult held,
            conn.Exec(core_->Sql("SELECT owner FROM {t}locks WHERE key = $1 AND expires_at_ns "
                                 "> $2"),
                      Params().Add(key).Add(now_ns), "LockStore::Release"));
        if (held.rows() == 0) {
          return Status::NotFound("lock " + std::string(key) +
                                  " is not held (already expired or released)");
        }
        return Status::Aborted("lock " + std::string(key) + " is held by " + held.Text(0, 0) +
                               ", not by " + std::string(owner));
      });
    });
  }

  Result<std::optional<LockLease>> Inspect(std::string_view key) override {
    using Out = std::optional<LockLease>;
    return ::jobpact::internal::Guarded("LockStore::Inspect", [&]() -> Result<Out> {
      Out out;
      JOBPACT_PG_RETURN_IF_ERROR(core_->Read("LockStore::Inspect", [&](Connection& conn) -> Status {
        JOBPACT_ASSIGN_OR_RETURN(
            PgResult r,
            conn.Exec(core_->Sql("SELECT owner, fencing_token, expires_at_ns FROM {t}locks "
                                 "WHERE key = $1 AND expires_at_ns > $2"),
                      Params().Add(key).Add(ToNs(core_->Now())), "LockStore::Inspect"));
        if (r.rows() > 0) {
          out = ::jobpact::internal::MakeLockLease(key, r.Text(0, 0), static_cast<std::uint64_t>(r.Int(0, 1)),
                          r.Int(0, 2));
        }
        return Status::Ok();
      }));
      return out;
    });
  }

  Result<std::vector<LockLease>> List(std::size_t limit) override {
    using Out = std::vector<LockLease>;
    return ::jobpact::internal::Guarded("LockStore::List", [&]() -> Result<Out> {
      if (limit == 0) return Status::InvalidArgument("LockStore::List: limit must be >= 1");
      Out out;
      JOBPACT_PG_RETURN_IF_ERROR(core_->Read("LockStore::List", [&](Connection& conn) -> Status {
        out.clear();
        JOBPACT_ASSIGN_OR_RETURN(
            PgResult r,
            conn.Exec(core_->Sql("SELECT key, owner, fencing_token, expires_at_ns FROM "
                                 "{t}locks WHERE expires_at_ns > $1 ORDER BY key LIMIT $2"),
                      Params()
                          .Add(ToNs(core_->Now()))
                          .Add(static_cast<std::int64_t>(std::min<std::size_t>(limit, 1u << 30))),
                      "LockStore::List"));
        for (int i = 0; i < r.rows(); ++i) {
          out.push_back(::jobpact::internal::MakeLockLease(r.Text(i, 0), r.Text(i, 1),
                                  static_cast<std::uint64_t>(r.Int(i, 2)), r.Int(i, 3)));
        }
        return Status::Ok();
      }));
      return out;
    });
  }

 private:
  const std::shared_ptr<Core> core_;
};

}  // namespace

std::shared_ptr<LockStore> PostgresBackend::Core::MakeLocks(std::shared_ptr<Core> core) {
  return std::make_shared<PostgresLockStore>(std::move(core));
}

}  // namespace postgres
}  // namespace jobpact
