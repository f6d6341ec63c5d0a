// File: jobpact/retry_budget.h
//
// A retry budget keeps retries from outgrowing traffic (SPEC 10, 11): per job
// type, retries may not exceed `percent` of first attempts over a sliding
// `window`, plus a floor of `min_retries_per_second` so that a type with
// little traffic can still retry. Without it, a failing dependency turns every
// job into 1 + max_attempts deliveries and the retries become the storm.
//
// The semantics are Finagle's RetryBudget (TokenRetryBudget over a leaky
// bucket): each first attempt deposits `percent` of a retry, each retry
// withdraws one, and a constant reserve of `min_retries_per_second * window`
// retries is always added. Deposits and withdrawals are kept in `buckets`
// time slices of `window / buckets` each and are forgotten once their slice
// leaves the window, so memory is O(buckets) per job type. With the SPEC 11
// defaults (20%, 10 s, 10 retries/s) a job type may retry
//   100 + 0.2 * (first attempts in the last 10 s) - (retries in the last 10 s)
// more times right now. Note that the floor is a reserve per window, as in
// Finagle: with no traffic at all, 100 retries may happen in one burst, and
// the next 100 become available as those leave the window.
//
// Time comes only from the injected Clock, so tests pin every rule with
// testing::ManualClock.
//
// Example (what a runner does with a failed attempt that its policy retries):
//   auto budgets = jobpact::RetryBudgets::Create().value();  // SPEC 11 defaults.
//   budgets->RecordFirstAttempt("invoice.generate");         // on attempt 1
//   ...
//   if (!budgets->TryRetry("invoice.generate")) {
//     // Dead-letter (or delay) with reason::kRetryBudgetExhausted.
//   }
#ifndef JOBPACT_RETRY_BUDGET_H_
#define JOBPACT_RETRY_BUDGET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

// SPEC 11 defaults.
struct RetryBudgetOptions {
  // Retries allowed per first attempt, as a fraction (0.2 = 20%). In [0, 1000].
  double percent = 0.2;
  // How long a first attempt or retry is remembered. REQUIRES: > 0.
  Duration window = Seconds(10);
  // The floor: min_retries_per_second * window retries are always allowed
  // per window, whatever the traffic. REQUIRES: >= 0.
  double min_retries_per_second = 10;
  // Time slices of the window; an event is forgotten between
  // window - window/buckets and window after it was recorded. In [1, 3600],
  // and window / buckets must be at least one clock tick.
  int buckets = 10;
};

// OK, or kInvalidArgument naming the bad field.
JOBPACT_EXPORT Status ValidateRetryBudgetOptions(const RetryBudgetOptions& options);

// What a budget holds right now, for status pages and metrics.
struct RetryBudgetSnapshot {
  // Retries available now (may be negative when deposits left the window
  // before the retries they paid for). TryRetry succeeds while >= 1.
  double balance = 0;
  // First attempts and allowed retries still inside the window.
  std::int64_t first_attempts = 0;
  std::int64_t retries = 0;
  // TryRetry refusals since construction.
  std::int64_t rejected_total = 0;
};

// The budget of one job type. Thread-safe.
class JOBPACT_EXPORT RetryBudget final {
 public:
  // kInvalidArgument for bad options. A null clock means SystemClock::Default().
  static Result<std::unique_ptr<RetryBudget>> Create(RetryBudgetOptions options = {},
                                                     std::shared_ptr<Clock> clock = nullptr);

  RetryBudget(const RetryBudget&) = delete;
  RetryBudget& operator=(const RetryBudget&) = delete;
  ~RetryBudget();

  // Deposits: call once per first attempt (attempt 1) of a job, not for
  // retries, lock-busy requeues or snoozes.
  void RecordFirstAttempt();
  // Withdraws one retry if the balance allows it and returns true (the
  // retry is counted: schedule it). Returns false, counting nothing, when
  // the budget is exhausted: dead-letter or delay the job with reason
  // "retry_budget_exhausted".
  [[nodiscard]] bool TryRetry();
  // Retries available now; see RetryBudgetSnapshot::balance.
  double Balance() const;
  RetryBudgetSnapshot Snapshot() const;
  const RetryBudgetOptions& options() const { return options_; }

 private:
  struct Bucket {
    std::int64_t first_attempts = 0;
    std::int64_t retries = 0;
  };

  RetryBudget(const RetryBudgetOptions& options, std::shared_ptr<Clock> clock);
  friend class RetryBudgets;

  // Moves the window to the slice holding `now`, forgetting expired slices.
  // A clock that went backwards leaves the window where it is.
  void AdvanceLocked(TimePoint now) const;
  // The balance in millionths of a retry. REQUIRES: mu_ held, window advanced.
  std::int64_t BalanceUnitsLocked() const;
  // The bucket of the newest slice. REQUIRES: mu_ held.
  Bucket& CurrentBucketLocked() const;

  // Immutable after construction.
  const RetryBudgetOptions options_;
  const std::shared_ptr<Clock> clock_;
  const Duration slice_;
  const std::int64_t deposit_units_;  // percent, in millionths of a retry.
  const std::int64_t reserve_units_;  // min_retries_per_second * window, ditto.

  mutable std::mutex mu_;
  // Guarded by mu_. Mutable: reads advance the window too.
  mutable std::vector<Bucket> buckets_;
  mutable std::int64_t current_slice_ = 0;   // Index of the newest slice.
  mutable std::int64_t first_attempts_ = 0;  // Sums over buckets_.
  mutable std::int64_t retries_ = 0;
  std::int64_t rejected_total_ = 0;
};

// Retry budgets keyed by job type, created on first use with the default
// options or the type's override. Budgets are never removed, so memory grows
// with the number of distinct job types (a small, fixed set in practice:
// only types with a registered handler reach a retry). Thread-safe.
class JOBPACT_EXPORT RetryBudgets final {
 public:
  // kInvalidArgument for bad default options. A null clock means
  // SystemClock::Default().
  static Result<std::unique_ptr<RetryBudgets>> Create(RetryBudgetOptions defaults = {},
                                                      std::shared_ptr<Clock> clock = nullptr);

  RetryBudgets(const RetryBudgets&) = delete;
  RetryBudgets& operator=(const RetryBudgets&) = delete;
  ~RetryBudgets();

  // Gives `job_type` its own options (SPEC 11: every override documented).
  // kInvalidArgument for bad options or an empty reason; kFailedPrecondition
  // if the type's budget is already in use (configure at startup).
  Status Override(std::string_view job_type, const RetryBudgetOptions& options, std::string reason);

  // RetryBudget::RecordFirstAttempt / TryRetry / Balance of `job_type`'s budget.
  void RecordFirstAttempt(std::string_view job_type);
  [[nodiscard]] bool TryRetry(std::string_view job_type);
  double Balance(std::string_view job_type);

  // The budget of `job_type`, created if needed. The reference stays valid
  // for the registry's lifetime.
  RetryBudget& ForJobType(std::string_view job_type);

  // A snapshot of every budget created so far, by job type.
  std::map<std::string, RetryBudgetSnapshot> Snapshots() const;
  // The overrides and their reasons, one per line:
  //   "<job_type>: percent=0.5 window=10s min_retries_per_second=1 buckets=10 (<reason>)".
  std::string DescribeOverrides() const;

 private:
  struct OverrideEntry {
    RetryBudgetOptions options;
    std::string reason;
  };

  RetryBudgets(const RetryBudgetOptions& defaults, std::shared_ptr<Clock> clock);

  // Immutable after construction.
  const RetryBudgetOptions defaults_;
  const std::shared_ptr<Clock> clock_;

  mutable std::shared_mutex mu_;
  // Guarded by mu_.
  std::map<std::string, std::unique_ptr<RetryBudget>, std::less<>> budgets_;
  std::map<std::string, OverrideEntry, std::less<>> overrides_;
};

}  // namespace jobpact

#endif  // JOBPACT_RETRY_BUDGET_H_
