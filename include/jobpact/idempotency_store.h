// File: jobpact/idempotency_store.h
//
// IdempotencyStore makes a business effect happen once even when a job runs
// twice (SPEC 6): the key is claimed before the side effect (so two
// concurrent duplicates cannot both run it), recorded as completed with its
// result after success (kept for a retention period, default 24 h), and
// released on failure so a retry can claim it again. A claim expires on its
// own (with the delivery lease), so a crashed worker never blocks the key.
//
// Contract for every implementation: all methods may be called concurrently
// (from threads, and for shared stores from processes); methods must not
// throw; time comes from the injected Clock; kUnavailable means the store is
// unreachable (retryable).
#ifndef JOBPACT_IDEMPOTENCY_STORE_H_
#define JOBPACT_IDEMPOTENCY_STORE_H_

#include <optional>
#include <string>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

struct IdempotencyRecord {
  enum class State {
    kInProgress,  // Claimed by `owner` until `expires_at`.
    kCompleted,   // Done; `result` is the stored result, kept until `expires_at`.
  };
  std::string key;
  State state = State::kInProgress;
  std::string owner;
  std::string result;
  TimePoint expires_at;
};

struct ClaimOutcome {
  enum class Kind {
    kClaimed,     // The caller now holds the claim: run the effect.
    kCompleted,   // Already done: skip the effect; `record.result` holds the result.
    kInProgress,  // Another owner holds a live claim: try again later.
  };
  Kind kind = Kind::kClaimed;
  IdempotencyRecord record;
};

class JOBPACT_EXPORT IdempotencyStore {
 public:
  IdempotencyStore() = default;
  IdempotencyStore(const IdempotencyStore&) = delete;
  IdempotencyStore& operator=(const IdempotencyStore&) = delete;
  virtual ~IdempotencyStore();

  virtual std::string_view Name() const = 0;

  // Claims `key` for `owner` until now + claim_ttl. A missing or expired
  // record is claimed; a claim by the same owner is extended; a live claim by
  // another owner gives kInProgress; a live completed record gives
  // kCompleted. kInvalidArgument for an empty key/owner or ttl <= 0.
  virtual Result<ClaimOutcome> Claim(std::string_view key, std::string_view owner,
                                     Duration claim_ttl) = 0;

  // Marks the claim completed with `result`, kept until now + retention.
  // kAborted if `owner` does not hold a live claim (it expired and another
  // owner claimed it, or it was released).
  virtual Status Complete(std::string_view key, std::string_view owner, std::string_view result,
                          Duration retention) = 0;

  // Drops `owner`'s claim so a retry can claim the key. kAborted if `owner`
  // does not hold the claim; completed records are never released.
  virtual Status Release(std::string_view key, std::string_view owner) = 0;

  // Extends `owner`'s claim to now + claim_ttl (renewed with the lease).
  // kAborted if `owner` does not hold a live claim.
  virtual Status Extend(std::string_view key, std::string_view owner, Duration claim_ttl) = 0;

  // The live record for `key`, or empty (missing or expired).
  virtual Result<std::optional<IdempotencyRecord>> Get(std::string_view key) = 0;

  // Deletes expired records. Returns how many.
  virtual Result<int> PurgeExpired() = 0;
};

}  // namespace jobpact

#endif  // JOBPACT_IDEMPOTENCY_STORE_H_
