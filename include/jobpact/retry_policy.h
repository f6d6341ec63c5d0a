// File: jobpact/retry_policy.h
//
// Failure classes, the retry policy and backoff with jitter (SPEC 4 and 11).
//
// Backoff is a pure function of (spec, attempt, sample in [0,1)); the sample
// comes from an injected RandomSource, so tests assert exact delays. A global
// default policy applies to every job type; a per job-type override must carry
// a written reason, kept by the PolicyRegistry and printable as a table.
//
// Example:
//   jobpact::PolicyRegistry policies;  // SPEC 11 defaults.
//   jobpact::RetryPolicy p = policies.Default();
//   p.max_attempts = 8;
//   auto s = policies.Override("report.build", p, "reports hit a slow warehouse; see RB-12");
//   jobpact::Duration d = jobpact::ComputeBackoff(p.backoff, 3, 0.5, jobpact::Duration{});
#ifndef JOBPACT_RETRY_POLICY_H_
#define JOBPACT_RETRY_POLICY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/random.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

// How a failed attempt is classified (SPEC 4).
enum class FailureClass {
  kTransient,  // Timeout, connection reset, 502/503, rate limited: retry with backoff.
  kPermanent,  // Invalid payload, entity will never exist, business rule: never retried.
  kUnknown,    // Unclassified: retried on a smaller budget, logged as an anomaly.
};
// "transient", "permanent", "unknown".
JOBPACT_EXPORT std::string_view FailureClassName(FailureClass c);
JOBPACT_EXPORT Result<FailureClass> ParseFailureClass(std::string_view name);

enum class BackoffKind {
  kFixed,         // base every time.
  kExponential,   // min(cap, base * multiplier^(attempt-1)).
  kDecorrelated,  // min(cap, U(base, previous * 3)): AWS "decorrelated jitter".
};
// "fixed", "exponential", "decorrelated".
JOBPACT_EXPORT std::string_view BackoffKindName(BackoffKind k);
JOBPACT_EXPORT Result<BackoffKind> ParseBackoffKind(std::string_view name);

enum class JitterKind {
  kNone,          // The ceiling itself.
  kFull,          // U(0, ceiling).
  kEqual,         // ceiling/2 + U(0, ceiling/2).
  kDecorrelated,  // min(cap, U(base, previous * 3)), whatever the backoff kind.
};
// "none", "full", "equal", "decorrelated".
JOBPACT_EXPORT std::string_view JitterKindName(JitterKind k);
JOBPACT_EXPORT Result<JitterKind> ParseJitterKind(std::string_view name);

// The delay schedule. Defaults are SPEC 11's: exponential, base 1 s, x2, cap
// 300 s, full jitter.
struct BackoffSpec {
  BackoffKind kind = BackoffKind::kExponential;
  // >= 0. Zero is an immediate retry: every kind and jitter then gives a
  // delay of 0.
  Duration base_delay = Seconds(1);
  double multiplier = 2.0;
  Duration max_delay = Seconds(300);
  JitterKind jitter = JitterKind::kFull;
};

// OK, or kInvalidArgument naming the bad field (base < 0, cap < base,
// multiplier < 1 or not finite, an unknown kind or jitter). A zero base is
// valid: an immediate retry.
JOBPACT_EXPORT Status ValidateBackoff(const BackoffSpec& spec);

// The delay before retry number `attempt` (1 = the delay after the first
// failed attempt). `sample` is uniform in [0,1). `previous` is the previous
// delay (zero for the first), used by the decorrelated forms. The result is
// always within [0, max_delay]; decorrelated results are within
// [base_delay, max_delay]. With base_delay 0 (an immediate retry) the
// result is 0 for every kind, jitter, attempt and `previous`. Pure: no
// clock, no randomness of its own.
JOBPACT_EXPORT Duration ComputeBackoff(const BackoffSpec& spec, int attempt, double sample,
                                       Duration previous);

// What to do with a failed attempt of a class, while budget remains.
enum class FailureAction {
  kRetry,       // retry_scheduled after the backoff delay.
  kDeadLetter,  // dead_lettered at once.
  kFail,        // failed (final) at once, not kept in the DLQ.
};
JOBPACT_EXPORT std::string_view FailureActionName(FailureAction a);
JOBPACT_EXPORT Result<FailureAction> ParseFailureAction(std::string_view name);

// The retry policy of a job type. Defaults are SPEC 11's.
//
// The unknown-error budget. Unknown failures spend the same attempts as any
// other, so one rule holds wherever max_attempts comes from: a job whose
// failures are unknown gets min(max_unknown_attempts, max_attempts)
// attempts. A policy handed to the PolicyRegistry (SetDefault, Override,
// HandlerOptions::policy) that says max_unknown_attempts > max_attempts is
// refused by ValidateRetryPolicy: the configuration contradicts itself. An
// envelope's max_attempts replaces the policy's for that one job, and then
// caps the unknown-error budget the same way: max_attempts 2 under the
// default policy leaves 2 attempts for unknown errors, while max_attempts 10
// still leaves 3 (an envelope can lower the unknown-error budget, never raise
// it).
struct RetryPolicy {
  // Attempts in all, the first included (gRPC's maxAttempts).
  int max_attempts = 5;
  // Attempts in all while the failures are of class unknown. >= 1 and
  // <= max_attempts (see above).
  int max_unknown_attempts = 3;
  BackoffSpec backoff;
  FailureAction on_transient = FailureAction::kRetry;
  FailureAction on_permanent = FailureAction::kDeadLetter;
  FailureAction on_unknown = FailureAction::kRetry;
};

// OK, or kInvalidArgument naming the bad field: max_attempts < 1,
// max_unknown_attempts < 1 or > max_attempts, an unknown action, or any
// ValidateBackoff problem.
JOBPACT_EXPORT Status ValidateRetryPolicy(const RetryPolicy& policy);

// The outcome of one failed attempt under a policy.
struct RetryDecision {
  enum class Kind { kRetry, kDeadLetter, kFail };
  Kind kind = Kind::kRetry;
  Duration delay{};    // Meaningful for kRetry.
  std::string reason;  // A reason:: name, e.g. "max_attempts_exceeded".
};

// A policy as one JSON object (durations in nanoseconds, names as above):
// {"max_attempts":5,"max_unknown_attempts":3,"backoff":{"kind":"exponential",
// "base_delay_ns":1000000000,"multiplier":2,"max_delay_ns":300000000000,
// "jitter":"full"},"on_transient":"retry","on_permanent":"dead_letter",
// "on_unknown":"retry"}. The parser requires every field and names the first
// one missing or wrong (kInvalidArgument); it does not validate the policy.
JOBPACT_EXPORT std::string RetryPolicyToJson(const RetryPolicy& policy);
JOBPACT_EXPORT Result<RetryPolicy> ParseRetryPolicyJson(std::string_view json);

// Decides what follows failed attempt number `attempt` (1-based) of class `c`.
// Budget exhausted -> dead-letter with "max_attempts_exceeded" (or, for
// unknown errors, "unknown_non_retryable" once the smaller budget,
// min(max_unknown_attempts, max_attempts), is spent; when both are spent
// the reason is "max_attempts_exceeded"); a class whose action is not kRetry
// -> that action at once. `policy` need not pass ValidateRetryPolicy (the
// runner puts an envelope's max_attempts into it). `sample` and
// `previous_delay` feed ComputeBackoff.
JOBPACT_EXPORT RetryDecision DecideRetry(const RetryPolicy& policy, FailureClass c, int attempt,
                                         double sample, Duration previous_delay);

// The global default policy and the per job-type overrides. Each override
// must carry a non-empty written reason (an undocumented override is how the
// contract breaks apart). Thread-safe.
class JOBPACT_EXPORT PolicyRegistry {
 public:
  struct Entry {
    std::string job_type;  // Empty for the global default.
    RetryPolicy policy;
    std::string reason;  // Why this type differs from the default.
  };

  PolicyRegistry();  // The global default is RetryPolicy{}.
  explicit PolicyRegistry(RetryPolicy global_default);
  PolicyRegistry(const PolicyRegistry&) = delete;
  PolicyRegistry& operator=(const PolicyRegistry&) = delete;
  ~PolicyRegistry();

  // Replaces the global default. kInvalidArgument if the policy is invalid.
  Status SetDefault(RetryPolicy policy);
  // Adds or replaces the override of `job_type`. kInvalidArgument if the
  // reason is empty or blank, the job type empty, or the policy invalid.
  Status Override(std::string_view job_type, RetryPolicy policy, std::string_view reason);

  RetryPolicy Default() const;
  // The override of `job_type` if any, else the default.
  RetryPolicy For(std::string_view job_type) const;
  // The default first, then each override sorted by job type.
  std::vector<Entry> Entries() const;
  // A fixed-width text table of Entries(): job type, attempts, unknown
  // attempts, backoff, base, multiplier, cap, jitter, actions, reason.
  std::string ToTable() const;

 private:
  // The policies and their lock (retry_policy.cc), out of this header so
  // that the lock is the library's annotated one, which clang's thread
  // safety analysis checks.
  struct Policies;
  const std::unique_ptr<Policies> policies_;
};

}  // namespace jobpact

#endif  // JOBPACT_RETRY_POLICY_H_
