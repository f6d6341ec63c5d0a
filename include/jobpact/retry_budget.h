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
// A retry the budget refuses is not dropped (SPEC 10: the budget sheds
// retries by time, never by dropping work): ReserveRetry() books it at the
// earliest time the budget allows it -- the first time slice whose balance,
// counting what leaves the window by then and the retries already booked,
// is at least 1, and at least `min_deferral` from now -- and counts it
// there, so deferred retries come back spread at the pace the budget
// allows instead of all at once. Which slice that is assumes no new first
// attempts (new traffic only makes room sooner). Dead-lettering a refused
// retry instead is an opt-in per job type: `on_exhausted = kDeadLetter`,
// set through RetryBudgets::Override with its reason.
//
// Time comes only from the injected Clock, so tests pin every rule with
// testing::ManualClock.
//
// Example (what a runner does with a failed attempt that its policy retries):
//   auto budgets = jobpact::RetryBudgets::Create().value();  // SPEC 11 defaults.
//   budgets->RecordFirstAttempt("invoice.generate");         // on attempt 1
//   ...
//   jobpact::RetryReservation r = budgets->ReserveRetry("invoice.generate", deadline);
//   // kNow: retry after the backoff. kDeferred: retry at max(backoff, r.at),
//   // reason::kRetryBudgetDeferred. kPastDeadline: r.at is past the total
//   // deadline; dead-letter with reason::kTotalDeadlinePassed.
#ifndef JOBPACT_RETRY_BUDGET_H_
#define JOBPACT_RETRY_BUDGET_H_

#include <cstdint>
#include <functional>
#include <map>
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

namespace metric {
// Retries the budget deferred (RetryBudgetExhaustedAction::kDefer), by job
// type and queue. Each also counts in jobpact_retry_budget_exhausted_total,
// which counts every refusal.
inline constexpr std::string_view kRetryBudgetDeferred = "jobpact_retry_budget_deferred_total";
}  // namespace metric

namespace reason {
// A retry the budget deferred: retry_scheduled at the time the budget
// allows it, the attempt spent (the failure is kept as last_failure).
inline constexpr std::string_view kRetryBudgetDeferred = "retry_budget_deferred";
}  // namespace reason

// What happens to a retry the budget refuses.
enum class RetryBudgetExhaustedAction {
  // Deferred to the earliest time the budget allows it (ReserveRetry), the
  // attempt spent as usual. The default (SPEC 10, 11).
  kDefer,
  // Dead-lettered with reason "retry_budget_exhausted" (quarantine; replay
  // it with JobRunner::ReplayDeadLetters). Opt in per job type, with a
  // reason, for work that is worthless late (e.g. a one-time code).
  kDeadLetter,
};

// "defer" or "dead_letter".
JOBPACT_EXPORT std::string_view RetryBudgetExhaustedActionName(RetryBudgetExhaustedAction a);

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
  // What the runner does with a refused retry (see above).
  RetryBudgetExhaustedAction on_exhausted = RetryBudgetExhaustedAction::kDefer;
  // The floor of a deferral: a deferred retry is never booked sooner than
  // this after its refusal, so a job cannot spin through the queue.
  // REQUIRES: > 0.
  Duration min_deferral = Seconds(1);
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
  // Retries booked by ReserveRetry for time slices that have not begun yet
  // (they join `retries` when their slice does).
  std::int64_t reserved = 0;
  // Refusals since construction: TryRetry returning false, and ReserveRetry
  // finding no room now (deferred or past the deadline).
  std::int64_t rejected_total = 0;
  // ReserveRetry deferrals since construction.
  std::int64_t deferred_total = 0;
};

// What ReserveRetry decided.
struct RetryReservation {
  enum class Kind {
    kNow,           // Withdrawn now, as TryRetry: schedule the retry as usual.
    kDeferred,      // Booked for `at`: the retry may run from then on.
    kPastDeadline,  // The earliest time, `at`, is after the deadline: nothing booked.
  };
  Kind kind = Kind::kNow;
  // kNow: now. Otherwise the earliest time the budget allows the retry,
  // at least options.min_deferral after now.
  TimePoint at;
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
  // Withdraws one retry if the balance allows it (and the withdrawal leaves
  // every retry already booked by ReserveRetry paid for) and returns true:
  // the retry is counted, schedule it. Returns false, counting nothing but
  // the refusal, when the budget is exhausted.
  [[nodiscard]] bool TryRetry();
  // TryRetry, or, when it would refuse, books the retry at the earliest time
  // the budget allows it (see the file comment) and returns kDeferred with
  // that time. If that time is after `not_after` (the job's total
  // deadline), books nothing and returns kPastDeadline. With no floor
  // (min_retries_per_second * window < 1) and no first attempts left to
  // pay for it, the budget can promise no time; the retry is then booked
  // one window after the last known event, so such retries run one per
  // window.
  RetryReservation ReserveRetry(std::optional<TimePoint> not_after = std::nullopt);
  // Retries available now; see RetryBudgetSnapshot::balance.
  double Balance() const;
  RetryBudgetSnapshot Snapshot() const;
  const RetryBudgetOptions& options() const { return options_; }

 private:
  // The window and the lock over it (retry_budget.cc), out of this header
  // so that the lock is the library's annotated one, which clang's thread
  // safety analysis checks, and no private header leaks in here.
  class Impl;

  RetryBudget(const RetryBudgetOptions& options, std::shared_ptr<Clock> clock);
  friend class RetryBudgets;

  // Immutable after construction.
  const RetryBudgetOptions options_;
  const std::unique_ptr<Impl> impl_;
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

  // RetryBudget::RecordFirstAttempt / TryRetry / ReserveRetry / Balance of
  // `job_type`'s budget.
  void RecordFirstAttempt(std::string_view job_type);
  [[nodiscard]] bool TryRetry(std::string_view job_type);
  RetryReservation ReserveRetry(std::string_view job_type,
                                std::optional<TimePoint> not_after = std::nullopt);
  double Balance(std::string_view job_type);

  // The budget of `job_type`, created if needed. The reference stays valid
  // for the registry's lifetime.
  RetryBudget& ForJobType(std::string_view job_type);

  // A snapshot of every budget created so far, by job type.
  std::map<std::string, RetryBudgetSnapshot> Snapshots() const;
  // The overrides and their reasons, one per line:
  //   "<job_type>: percent=0.5 window=10s min_retries_per_second=1 buckets=10 (<reason>)",
  // with " on_exhausted=dead_letter" and " min_deferral=<n>s" before the
  // reason when they differ from the defaults.
  std::string DescribeOverrides() const;

 private:
  // The budgets, the overrides and their lock (retry_budget.cc).
  struct Registry;

  RetryBudgets(const RetryBudgetOptions& defaults, std::shared_ptr<Clock> clock);

  // Immutable after construction.
  const RetryBudgetOptions defaults_;
  const std::shared_ptr<Clock> clock_;
  const std::unique_ptr<Registry> registry_;
};

}  // namespace jobpact

#endif  // JOBPACT_RETRY_BUDGET_H_
