// Private: the half of a RateLimitStore (jobpact/rate_limit_store.h) that
// does not depend on where a limiter is kept, for the stores that keep each
// limiter as one row and change it in one transaction (SQLite, PostgreSQL):
// the row, what each operation does to it, and the checks before it. Such a
// store implements only ChangeRow (load or create the row, apply the change,
// save it, atomically) and List, as spdlog's base_sink leaves only
// sink_it_() to its sinks.
#ifndef JOBPACT_SRC_INTERNAL_RATE_LIMITER_ROW_H_
#define JOBPACT_SRC_INTERNAL_RATE_LIMITER_ROW_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "jobpact/rate_limit_store.h"
#include "src/internal/gcra.h"
#include "src/internal/guarded.h"
#include "src/internal/time_ns.h"

namespace jobpact::internal {

// One limiter as stored: the columns of the rate_limits tables.
struct RateLimiterRow {
  std::string key;
  GcraState gcra;
  std::string backoff_reason;
  std::optional<RateLimit> override_limit;
  std::string override_actor;
  std::string override_reason;
  std::int64_t updated_ns = 0;
};

// `row` as List shows it at `now_ns`: a backoff only while it lasts.
inline RateLimiterState RowToState(RateLimiterRow row, std::int64_t now_ns) {
  RateLimiterState s;
  s.key = std::move(row.key);
  s.tat = TimeFromNs(row.gcra.tat_ns);
  if (row.gcra.backoff_until_ns > now_ns) {
    s.backoff_until = TimeFromNs(row.gcra.backoff_until_ns);
    s.backoff_reason = std::move(row.backoff_reason);
  }
  s.override_limit = row.override_limit;
  s.override_actor = std::move(row.override_actor);
  s.override_reason = std::move(row.override_reason);
  s.updated_at = TimeFromNs(row.updated_ns);
  return s;
}

// Thread-safe if ChangeRow and List are.
class RowRateLimitStore : public RateLimitStore {
 public:
  Result<RateDecision> Take(std::string_view key, const RateLimit& limit) final {
    RateDecision d;
    JOBPACT_RETURN_IF_ERROR(
        Change("RateLimitStore::Take", key, &limit, false,
               [&](RateLimiterRow& r, std::int64_t now_ns) {
                 d = GcraTake(r.gcra, r.override_limit ? *r.override_limit : limit, now_ns);
               }));
    return d;
  }

  Status Backoff(std::string_view key, TimePoint until, std::string_view reason) final {
    const std::int64_t until_ns = ToNs(until);
    return Change("RateLimitStore::Backoff", key, nullptr, false,
                  [&](RateLimiterRow& r, std::int64_t) {
                    // A later end replaces the backoff and its reason.
                    if (until_ns > r.gcra.backoff_until_ns) r.backoff_reason = std::string(reason);
                    GcraBackoff(r.gcra, until_ns);
                  });
  }

  Status SetOverride(std::string_view key, std::optional<RateLimit> limit, std::string_view actor,
                     std::string_view reason) final {
    JOBPACT_RETURN_IF_ERROR(CheckRateOverride(limit, actor, reason));
    return Change("RateLimitStore::SetOverride", key, nullptr, false,
                  [&](RateLimiterRow& r, std::int64_t) {
                    r.override_limit = limit;
                    r.override_actor = std::string(actor);
                    r.override_reason = std::string(reason);
                  });
  }

  Status ClearBackoff(std::string_view key) final {
    return Change("RateLimitStore::ClearBackoff", key, nullptr, /*must_exist=*/true,
                  [&](RateLimiterRow& r, std::int64_t now_ns) {
                    GcraClearBackoff(r.gcra, now_ns);
                    r.backoff_reason.clear();
                  });
  }

 protected:
  // A change to a row, given the store's now (nanoseconds since the epoch).
  using RowChange = std::function<void(RateLimiterRow& row, std::int64_t now_ns)>;

  // In one atomic step (a transaction): reads the clock, loads `key`'s row
  // -- a fresh one (all zero, with the key) if there is none, or, with
  // `must_exist`, NoRateLimiter(key) -- applies `change`, and saves the row.
  // `what` names the operation for messages. REQUIRES: `key` is valid
  // (checked by the caller).
  virtual Status ChangeRow(std::string_view what, std::string_view key, bool must_exist,
                           const RowChange& change) = 0;

 private:
  // Checks the key (and `limit`, if given), then runs `change` through
  // ChangeRow with the row's update time set; exceptions become kInternal.
  Status Change(std::string_view what, std::string_view key, const RateLimit* limit,
                bool must_exist, const RowChange& change) {
    return Guarded(what, [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(ValidateRateLimitKey(key));
      if (limit != nullptr) JOBPACT_RETURN_IF_ERROR(limit->Validate());
      return ChangeRow(what, key, must_exist, [&](RateLimiterRow& r, std::int64_t now_ns) {
        change(r, now_ns);
        r.updated_ns = now_ns;
      });
    });
  }
};

}  // namespace jobpact::internal

#endif  // JOBPACT_SRC_INTERNAL_RATE_LIMITER_ROW_H_
