// The PostgreSQL RateLimitStore: one row of the rate_limits table per
// limiter (schema migration 2). Each step is one transaction that makes
// sure the row exists (INSERT ... ON CONFLICT DO NOTHING), locks it
// (SELECT ... FOR UPDATE), applies the shared change in C++
// (src/internal/rate_limiter_row.h: the GCRA step of src/internal/gcra.h)
// and writes it back, so every process using the schema takes from the
// same limiter, one taker at a time per key.
// Times are bigint nanoseconds of the injected Clock, as in the SQLite
// store: the results are the in-memory reference's to the nanosecond.
#include "jobpact/rate_limit_store.h"

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "src/backends/postgres/core.h"
#include "src/internal/gcra.h"
#include "src/internal/guarded.h"
#include "src/internal/rate_limiter_row.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using ::jobpact::internal::ToNs;
using internal::Connection;
using internal::Params;
using internal::PgResult;
using Core = PostgresBackend::Core;

namespace {

using Row = ::jobpact::internal::RateLimiterRow;

// The columns ReadRow reads, in its order.
#define JOBPACT_PG_RATE_COLUMNS                                                   \
  "key, tat_ns, backoff_until_ns, hint_ns, backoff_reason, override_per_second, " \
  "override_burst, override_actor, override_reason, updated_at_ns"

Result<Row> ReadRow(const PgResult& r, int i, std::string_view what) {
  Row row;
  row.key = r.Text(i, 0);
  row.gcra.tat_ns = r.Int(i, 1);
  row.gcra.backoff_until_ns = r.Int(i, 2);
  row.gcra.hint_ns = r.Int(i, 3);
  row.backoff_reason = r.Text(i, 4);
  if (!r.IsNull(i, 5)) {
    // float8 text output is the shortest that reads back exactly.
    const std::string text = r.Text(i, 5);
    RateLimit limit;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), limit.per_second);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return Status::Internal(std::string(what) + ": rate limiter " + row.key +
                              " has an unreadable override_per_second '" + text + "'");
    }
    limit.burst = static_cast<int>(r.Int(i, 6));
    row.override_limit = limit;
  }
  row.override_actor = r.Text(i, 7);
  row.override_reason = r.Text(i, 8);
  row.updated_ns = r.Int(i, 9);
  return row;
}

class PostgresRateLimitStore final : public ::jobpact::internal::RowRateLimitStore {
 public:
  explicit PostgresRateLimitStore(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  Result<std::vector<RateLimiterState>> List(std::size_t limit) override {
    using Out = std::vector<RateLimiterState>;
    return ::jobpact::internal::Guarded("RateLimitStore::List", [&]() -> Result<Out> {
      if (limit == 0) return Status::InvalidArgument("RateLimitStore::List: limit must be >= 1");
      Out out;
      JOBPACT_PG_RETURN_IF_ERROR(
          core_->Read("RateLimitStore::List", [&](Connection& conn) -> Status {
            out.clear();
            const std::int64_t now_ns = ToNs(core_->Now());
            JOBPACT_ASSIGN_OR_RETURN(
                PgResult r,
                conn.Exec(core_->Sql("SELECT " JOBPACT_PG_RATE_COLUMNS
                                     " FROM {t}rate_limits ORDER BY key LIMIT $1"),
                          Params().Add(
                              static_cast<std::int64_t>(std::min<std::size_t>(limit, 1u << 30))),
                          "RateLimitStore::List"));
            for (int i = 0; i < r.rows(); ++i) {
              JOBPACT_ASSIGN_OR_RETURN(Row row, ReadRow(r, i, "RateLimitStore::List"));
              out.push_back(::jobpact::internal::RowToState(std::move(row), now_ns));
            }
            return Status::Ok();
          }));
      return out;
    });
  }

 private:
  Status ChangeRow(std::string_view what, std::string_view key, bool must_exist,
                   const RowChange& change) override {
    return core_->Tx(what, [&](Connection& conn) -> Status {
      const std::int64_t now_ns = ToNs(core_->Now());
      if (!must_exist) {
        // Of two first takers of a key, one inserts and the other waits for
        // its commit, then finds the row.
        JOBPACT_RETURN_IF_ERROR(
            conn.Exec(core_->Sql("INSERT INTO {t}rate_limits (key, updated_at_ns) VALUES ($1, "
                                 "$2) ON CONFLICT (key) DO NOTHING"),
                      Params().Add(key).Add(now_ns), what)
                .status());
      }
      JOBPACT_ASSIGN_OR_RETURN(
          PgResult r, conn.Exec(core_->Sql("SELECT " JOBPACT_PG_RATE_COLUMNS
                                           " FROM {t}rate_limits WHERE key = $1 FOR UPDATE"),
                                Params().Add(key), what));
      if (r.rows() == 0) {
        if (must_exist) return ::jobpact::internal::NoRateLimiter(key);
        return Status::Internal(std::string(what) + ": postgres " + core_->server() +
                                ": the row of rate limiter " + std::string(key) +
                                " vanished inside its transaction");
      }
      JOBPACT_ASSIGN_OR_RETURN(Row row, ReadRow(r, 0, what));
      change(row, now_ns);
      Params p;
      p.Add(key)
          .Add(row.gcra.tat_ns)
          .Add(row.gcra.backoff_until_ns)
          .Add(row.gcra.hint_ns)
          .Add(row.backoff_reason);
      if (row.override_limit) {
        p.Add(::jobpact::internal::RateText(row.override_limit->per_second))
            .Add(row.override_limit->burst);
      } else {
        p.Null().Null();
      }
      p.Add(row.override_actor).Add(row.override_reason).Add(row.updated_ns);
      return conn
          .Exec(core_->Sql("UPDATE {t}rate_limits SET tat_ns = $2, backoff_until_ns = $3, "
                           "hint_ns = $4, backoff_reason = $5, override_per_second = $6, "
                           "override_burst = $7, override_actor = $8, override_reason = $9, "
                           "updated_at_ns = $10 WHERE key = $1"),
                p, what)
          .status();
    });
  }

  const std::shared_ptr<Core> core_;
};

#undef JOBPACT_PG_RATE_COLUMNS

}  // namespace

std::shared_ptr<RateLimitStore> PostgresBackend::Core::MakeRateLimits(std::shared_ptr<Core> core) {
  return std::make_shared<PostgresRateLimitStore>(std::move(core));
}

}  // namespace postgres
}  // namespace jobpact
