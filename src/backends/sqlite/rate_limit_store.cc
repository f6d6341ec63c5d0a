// The SQLite RateLimitStore: one row of jobpact_rate_limits per limiter,
// each step one write transaction that reads the row, applies the shared
// change (src/internal/rate_limiter_row.h: the GCRA step of
// src/internal/gcra.h) and writes it back, so every process using the file
// takes from the same limiter.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/rate_limit_store.h"
#include "src/backends/sqlite/connection.h"
#include "src/backends/sqlite/core.h"
#include "src/internal/gcra.h"
#include "src/internal/guarded.h"
#include "src/internal/rate_limiter_row.h"

namespace jobpact {
namespace sqlite {

using internal::Connection;
using internal::Stmt;
using internal::ToNs;
using Core = SqliteBackend::Core;

namespace {

constexpr const char* kColumns =
    "key, tat_ns, backoff_until_ns, hint_ns, backoff_reason, override_per_second, "
    "override_burst, override_actor, override_reason, updated_at_ns";

using Row = ::jobpact::internal::RateLimiterRow;

Row ReadRow(const Stmt& st) {
  Row r;
  r.key = st.Text(0);
  r.gcra.tat_ns = st.Int(1);
  r.gcra.backoff_until_ns = st.Int(2);
  r.gcra.hint_ns = st.Int(3);
  r.backoff_reason = st.Text(4);
  if (!st.IsNull(5)) r.override_limit = RateLimit{st.Double(5), static_cast<int>(st.Int(6))};
  r.override_actor = st.Text(7);
  r.override_reason = st.Text(8);
  r.updated_ns = st.Int(9);
  return r;
}

// The row of `key` in the current transaction, or a fresh one.
Result<Row> Load(Connection& conn, std::string_view key, std::string_view what, bool* found) {
  static const std::string sql =
      std::string("SELECT ") + kColumns + " FROM jobpact_rate_limits WHERE key = ?1";
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
  Stmt st(raw);
  st.Bind(1, key);
  int rc = st.Step();
  if (rc == SQLITE_DONE) {
    *found = false;
    Row r;
    r.key = std::string(key);
    return r;
  }
  if (rc != SQLITE_ROW) return conn.Error(rc, what);
  *found = true;
  return ReadRow(st);
}

Status Store(Connection& conn, const Row& r, std::string_view what) {
  static const std::string sql = std::string("INSERT OR REPLACE INTO jobpact_rate_limits (") +
                                 kColumns + ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
  Stmt st(raw);
  st.Bind(1, r.key)
      .Bind(2, r.gcra.tat_ns)
      .Bind(3, r.gcra.backoff_until_ns)
      .Bind(4, r.gcra.hint_ns)
      .Bind(5, r.backoff_reason);
  if (r.override_limit) {
    st.Bind(6, r.override_limit->per_second).Bind(7, r.override_limit->burst);
  } else {
    st.BindNull(6).BindNull(7);
  }
  st.Bind(8, r.override_actor).Bind(9, r.override_reason).Bind(10, r.updated_ns);
  int rc = st.Step();
  if (rc != SQLITE_DONE) return conn.Error(rc, what);
  return Status::Ok();
}

class SqliteRateLimitStore final : public ::jobpact::internal::RowRateLimitStore {
 public:
  explicit SqliteRateLimitStore(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  Result<std::vector<RateLimiterState>> List(std::size_t limit) override {
    using Out = std::vector<RateLimiterState>;
    return ::jobpact::internal::Guarded("RateLimitStore::List", [&]() -> Result<Out> {
      if (limit == 0) return Status::InvalidArgument("RateLimitStore::List: limit must be >= 1");
      Out out;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("RateLimitStore::List", false, [&](Connection& conn) -> Status {
            out.clear();
            static const std::string sql = std::string("SELECT ") + kColumns +
                                           " FROM jobpact_rate_limits ORDER BY key LIMIT ?1";
            JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
            Stmt st(raw);
            st.Bind(1, static_cast<std::int64_t>(limit));
            const std::int64_t now_ns = ToNs(core_->Now());
            while (true) {
              int rc = st.Step();
              if (rc == SQLITE_DONE) break;
              if (rc != SQLITE_ROW) return conn.Error(rc, "RateLimitStore::List");
              out.push_back(::jobpact::internal::RowToState(ReadRow(st), now_ns));
            }
            return Status::Ok();
          }));
      return out;
    });
  }

 private:
  // One write transaction: load the row, change it, store it back.
  Status ChangeRow(std::string_view what, std::string_view key, bool must_exist,
                   const RowChange& change) override {
    return core_->Write(what, [&](Connection& conn) -> Status {
      const std::int64_t now_ns = ToNs(core_->Now());
      bool found = false;
      JOBPACT_ASSIGN_OR_RETURN(Row r, Load(conn, key, what, &found));
      if (must_exist && !found) return ::jobpact::internal::NoRateLimiter(key);
      change(r, now_ns);
      return Store(conn, r, what);
    });
  }

  const std::shared_ptr<Core> core_;
};

}  // namespace

std::shared_ptr<RateLimitStore> SqliteBackend::Core::MakeRateLimits(std::shared_ptr<Core> core) {
  return std::make_shared<SqliteRateLimitStore>(std::move(core));
}

}  // namespace sqlite
}  // namespace jobpact
