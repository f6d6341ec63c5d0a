// File: jobpact/rate_limit_store.h
//
// Rate limits shared by every process of a backend (SPEC 10 "backoff on
// rate limits"): how many jobs of a type, or calls to a dependency, may
// start per second across all of them, and a backoff that one process
// sets when an upstream answers "429, retry after D" and that every
// process then obeys.
//
// A limiter is a key ("type:mail.send", "dependency:payments-api") with
// the state of a GCRA (the generic cell rate algorithm, a token bucket
// kept as one time, as in ATM networks and redis-cell): with a rate r per
// second and a burst b, the emission interval is T = 1/r and the tolerance
// tau = (b - 1) * T; a start at `now` is allowed if tat - tau <= now, and
// then tat = max(tat, now) + T; refused starts change nothing and are told
// to come back at tat - tau. So after a quiet spell b starts go at once,
// then one every T. A backoff to `until` sets tat = max(tat, until + tau):
// nothing starts before `until`, with or without a rate.
//
// The JobRunner takes a start from the limiters of a job (its type's and
// its handler's dependency's) before its handler runs; a refused job is
// rescheduled to the time the limiter names, with no attempt spent
// (reason "rate_limited"). Operators see the limiters and can override a
// rate or lift a backoff (the `jobpact ratelimit` command).
//
// Contract for every implementation: all methods may be called concurrently
// (from threads, and for shared stores from processes), each change is one
// atomic step; methods must not throw; time comes from the injected Clock;
// kUnavailable means the store is unreachable (retryable). Keys are safe
// names ("type:" or "dependency:" then a job type or dependency name; see
// ValidateRateLimitKey). The conformance suite is part of
// jobpact/testing/backend_contract.h (BackendSet::rate_limits).
#ifndef JOBPACT_RATE_LIMIT_STORE_H_
#define JOBPACT_RATE_LIMIT_STORE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

// A rate: `per_second` starts per second sustained, `burst` at once after
// a quiet spell. per_second == 0 means no rate (only backoffs hold it).
struct RateLimit {
  double per_second = 0;
  int burst = 1;

  // kInvalidArgument unless per_second is finite and in [0, 1e6] and burst
  // in [1, 1e6], naming the bad field.
  Status Validate() const;
  friend bool operator==(const RateLimit& a, const RateLimit& b) {
    return a.per_second == b.per_second && a.burst == b.burst;
  }
};

// What Take decided.
struct RateDecision {
  bool allowed = false;
  // Refused: the earliest time a start may be allowed. Allowed: now.
  TimePoint retry_at;
  // The rate that was applied: the operator's override if one is set,
  // else the caller's.
  RateLimit applied;
};

// One limiter as stored, for operators.
struct RateLimiterState {
  std::string key;
  // The GCRA's theoretical arrival time (see the file comment).
  TimePoint tat;
  // The end of the last backoff set (by Backoff), if it is not over.
  std::optional<TimePoint> backoff_until;
  std::string backoff_reason;
  // An operator's rate, used instead of the callers' (SetOverride).
  std::optional<RateLimit> override_limit;
  std::string override_actor;
  std::string override_reason;
  TimePoint updated_at;
};

class JOBPACT_EXPORT RateLimitStore {
 public:
  RateLimitStore() = default;
  RateLimitStore(const RateLimitStore&) = delete;
  RateLimitStore& operator=(const RateLimitStore&) = delete;
  virtual ~RateLimitStore();

  // Takes one start from `key` under `limit` (or the key's override),
  // at the store's now. kInvalidArgument for a bad key or limit.
  virtual Result<RateDecision> Take(std::string_view key, const RateLimit& limit) = 0;
  // Holds `key` until `until` (no start before it, in any process); a later
  // backoff extends it, an earlier one changes nothing. `reason` is kept
  // ("http 429 from payments-api"). kInvalidArgument for a bad key.
  virtual Status Backoff(std::string_view key, TimePoint until, std::string_view reason) = 0;
  // Sets (or, with nullopt, clears) the operator's rate of `key`; actor and
  // reason required (kInvalidArgument otherwise).
  virtual Status SetOverride(std::string_view key, std::optional<RateLimit> limit,
                             std::string_view actor, std::string_view reason) = 0;
  // Ends `key`'s backoff now (an operator who knows the upstream is back):
  // tat goes back to now. kNotFound if the key has no state.
  virtual Status ClearBackoff(std::string_view key) = 0;
  // The stored limiters, by key, at most `limit` (>= 1).
  virtual Result<std::vector<RateLimiterState>> List(std::size_t limit) = 0;
};

// The reference RateLimitStore: one process (every runner on one
// InMemoryBackend shares it). Thread-safe.
JOBPACT_EXPORT std::shared_ptr<RateLimitStore> MakeInMemoryRateLimitStore(
    std::shared_ptr<Clock> clock);

// "type:<job type>" and "dependency:<name>": the keys the runner uses.
JOBPACT_EXPORT std::string RateLimitKeyForType(std::string_view job_type);
JOBPACT_EXPORT std::string RateLimitKeyForDependency(std::string_view dependency);
// OK for "type:<safe name>" or "dependency:<safe name>"; kInvalidArgument
// naming the problem otherwise.
JOBPACT_EXPORT Status ValidateRateLimitKey(std::string_view key);

}  // namespace jobpact

#endif  // JOBPACT_RATE_LIMIT_STORE_H_
