// The SQLite LockStore: rows of jobpact_locks, and one fencing-token counter
// in jobpact_counters shared by every process using the file, so tokens grow
// strictly across processes too.
#include "jobpact/lock_store.h"

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jobpact/job.h"
#include "src/backends/sqlite/connection.h"
#include "src/backends/sqlite/core.h"
#include "src/backends/sqlite/guard_rows.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace sqlite {

using internal::Connection;
using internal::LockRow;
using internal::MakeLockLease;
using internal::ReadLock;
using internal::Stmt;
using internal::TimeFromNs;
using internal::ToNs;
using Core = SqliteBackend::Core;

namespace {

class SqliteLockStore final : public LockStore {
 public:
  explicit SqliteLockStore(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  std::string_view Name() const override { return "sqlite"; }

  Result<LockLease> Acquire(std::string_view key, std::string_view owner, Duration ttl) override {
    return ::jobpact::internal::Guarded("LockStore::Acquire", [&]() -> Result<LockLease> {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("LockStore::Acquire", key, owner, ttl));
      LockLease lease;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Write("LockStore::Acquire", [&](Connection& conn) -> Status {
            const std::int64_t now_ns = ToNs(core_->Now());
            const std::int64_t expires_ns = now_ns + ToNs(ttl);
            JOBPACT_ASSIGN_OR_RETURN(
                lease, internal::AcquireLockRow(conn, key, owner, now_ns, expires_ns,
                                                "LockStore::Acquire"));
            return Status::Ok();
          }));
      return lease;
    });
  }

  Result<LockLease> Renew(std::string_view key, std::string_view owner, Duration ttl) override {
    return ::jobpact::internal::Guarded("LockStore::Renew", [&]() -> Result<LockLease> {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("LockStore::Renew", key, owner, ttl));
      LockLease lease;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Write("LockStore::Renew", [&](Connection& conn) -> Status {
            const std::int64_t now_ns = ToNs(core_->Now());
            const std::int64_t expires_ns = now_ns + ToNs(ttl);
            JOBPACT_ASSIGN_OR_RETURN(
                sqlite3_stmt * raw,
                conn.Prepare("UPDATE jobpact_locks SET expires_at_ns = ?4 WHERE key = ?1 AND owner "
                             "= ?2 AND expires_at_ns > ?3 RETURNING fencing_token"));
            Stmt st(raw);
            st.Bind(1, key).Bind(2, owner).Bind(3, now_ns).Bind(4, expires_ns);
            int rc = st.Step();
            if (rc == SQLITE_DONE) {
              return Status::Aborted("lock " + std::string(key) + " is no longer held by " +
                                     std::string(owner) + " (expired, taken or released)");
            }
            if (rc != SQLITE_ROW) return conn.Error(rc, "LockStore::Renew");
            lease = MakeLockLease(key, std::string(owner), static_cast<std::uint64_t>(st.Int(0)),
                              expires_ns);
            rc = st.Step();
            if (rc != SQLITE_DONE) return conn.Error(rc, "LockStore::Renew");
            return Status::Ok();
          }));
      return lease;
    });
  }

  Status Release(std::string_view key, std::string_view owner) override {
    return ::jobpact::internal::Guarded("LockStore::Release", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckKeyOwnerTtl("LockStore::Release", key, owner));
      return core_->Write("LockStore::Release", [&](Connection& conn) -> Status {
        return internal::ReleaseLockRow(conn, key, owner, ToNs(core_->Now()), "LockStore::Release");
      });
    });
  }

  Result<std::optional<LockLease>> Inspect(std::string_view key) override {
    using Out = std::optional<LockLease>;
    return ::jobpact::internal::Guarded("LockStore::Inspect", [&]() -> Result<Out> {
      Out out;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("LockStore::Inspect", false, [&](Connection& conn) -> Status {
            JOBPACT_ASSIGN_OR_RETURN(std::optional<LockRow> held,
                                     ReadLock(conn, key, ToNs(core_->Now()), "LockStore::Inspect"));
            if (held) out = MakeLockLease(key, std::move(held->owner), held->token, held->expires_ns);
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
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("LockStore::List", false, [&](Connection& conn) -> Status {
            out.clear();
            JOBPACT_ASSIGN_OR_RETURN(
                sqlite3_stmt * raw,
                conn.Prepare("SELECT key, owner, fencing_token, expires_at_ns FROM jobpact_locks "
                             "WHERE expires_at_ns > ?1 ORDER BY key LIMIT ?2"));
            Stmt st(raw);
            st.Bind(1, ToNs(core_->Now())).Bind(2, static_cast<std::int64_t>(limit));
            while (true) {
              int rc = st.Step();
              if (rc == SQLITE_DONE) break;
              if (rc != SQLITE_ROW) return conn.Error(rc, "LockStore::List");
              out.push_back(MakeLockLease(st.Text(0), st.Text(1),
                                      static_cast<std::uint64_t>(st.Int(2)), st.Int(3)));
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

std::shared_ptr<LockStore> SqliteBackend::Core::MakeLocks(std::shared_ptr<Core> core) {
  return std::make_shared<SqliteLockStore>(std::move(core));
}

}  // namespace sqlite
}  // namespace jobpact
