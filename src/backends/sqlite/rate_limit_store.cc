// The SQLite RateLimitStore: one row of jobpact_rate_limits per limiter,
// each step one write transaction that reads the row, applies the shared
// GCRA step (src/internal/gcra.h) and writes it back, so every process
// using the file takes from the same limiter.
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

namespace jobpact {
namespace sqlite {

using internal::Connection;
using internal::Stmt;
using internal::TimeFromNs;
using internal::ToNs;
using Core = SqliteBackend::Core;

namespace {

constexpr const char* kColumns =
    "key, tat_ns, backoff_until_ns, hint_ns, backoff_reason, override_per_second, "
    "override_burst, override_actor, override_reason, updated_at_ns";

// One row of jobpact_rate_limits.
struct Row {
  std::string key;
  ::jobpact::internal::GcraState gcra;
  std::string backoff_reason;
  std::optional<RateLimit> override_limit;
  std::string override_actor;
  std::string override_reason;
  std::int64_t updated_ns = 0;
};

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

class SqliteRateLimitStore final : public RateLimitStore {
 public:
  explicit SqliteRateLimitStore(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  Result<RateDecision> Take(std::string_view key, const RateLimit& limit) override {
    return Change<RateDecision>("RateLimitStore::Take", key, [&](Row& r, std::int64_t now_ns) {
      return Result<RateDecision>(::jobpact::internal::GcraTake(
          r.gcra, r.override_limit ? *r.override_limit : limit, now_ns));
    }, &limit);
  }

  Status Backoff(std::string_view key, TimePoint until, std::string_view reason) override {
    return Change<bool>("RateLimitStore::Backoff", key, [&](Row& r, std::int64_t) {
             if (ToNs(until) > r.gcra.backoff_until_ns) r.backoff_reason = std::string(reason);
             ::jobpact::internal::GcraBackoff(r.gcra, ToNs(until));
             return Result<bool>(true);
           }).status();
  }

  Status SetOverride(std::string_view key, std::optional<RateLimit> limit, std::string_view actor,
                     std::string_view reason) override {
    JOBPACT_RETURN_IF_ERROR(::jobpact::internal::CheckRateOverride(limit, actor, reason));
    return Change<bool>("RateLimitStore::SetOverride", key, [&](Row& r, std::int64_t) {
             r.override_limit = limit;
             r.override_actor = std::string(actor);
             r.override_reason = std::string(reason);
             return Result<bool>(true);
           }).status();
  }

  Status ClearBackoff(std::string_view key) override {
    return Change<bool>(
               "RateLimitStore::ClearBackoff", key,
               [&](Row& r, std::int64_t now_ns) {
                 ::jobpact::internal::GcraClearBackoff(r.gcra, now_ns);
                 r.backoff_reason.clear();
                 return Result<bool>(true);
               },
               nullptr, /*must_exist=*/true)
        .status();
  }

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
              Row r = ReadRow(st);
              RateLimiterState s;
              s.key = std::move(r.key);
              s.tat = TimeFromNs(r.gcra.tat_ns);
              if (r.gcra.backoff_until_ns > now_ns) {
                s.backoff_until = TimeFromNs(r.gcra.backoff_until_ns);
                s.backoff_reason = std::move(r.backoff_reason);
              }
              s.override_limit = r.override_limit;
              s.override_actor = std::move(r.override_actor);
              s.override_reason = std::move(r.override_reason);
              s.updated_at = TimeFromNs(r.updated_ns);
              out.push_back(std::move(s));
            }
            return Status::Ok();
          }));
      return out;
    });
  }

 private:
  // One step on `key`'s row: checks the key (and `limit` if given), then in
  // one write transaction loads the row, applies `fn` and stores it back.
  // With `must_exist`, a key without a row is kNotFound.
  template <typename T, typename Fn>
  Result<T> Change(std::string_view what, std::string_view key, Fn fn,
                   const RateLimit* limit = nullptr, bool must_exist = false) {
    return ::jobpact::internal::Guarded(std::string(what), [&]() -> Result<T> {
      JOBPACT_RETURN_IF_ERROR(ValidateRateLimitKey(key));
      if (limit != nullptr) JOBPACT_RETURN_IF_ERROR(limit->Validate());
      std::optional<T> out;
      JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write(what, [&](Connection& conn) -> Status {
        const std::int64_t now_ns = ToNs(core_->Now());
        bool found = false;
        JOBPACT_ASSIGN_OR_RETURN(Row r, Load(conn, key, what, &found));
        if (must_exist && !found) return ::jobpact::internal::NoRateLimiter(key);
        JOBPACT_ASSIGN_OR_RETURN(T v, fn(r, now_ns));
        r.updated_ns = now_ns;
        JOBPACT_RETURN_IF_ERROR(Store(conn, r, what));
        out = std::move(v);
        return Status::Ok();
      }));
      return std::move(*out);
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
