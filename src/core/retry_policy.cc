#include "jobpact/retry_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>

#include "jobpact/job_status.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

// --- Names -------------------------------------------------------------------

template <typename E>
struct NamedValue {
  E value;
  std::string_view name;
};

// One row per line, so a new value is a one-line diff.
// clang-format off
constexpr NamedValue<FailureClass> kFailureClassNames[] = {
    {FailureClass::kTransient, "transient"},
    {FailureClass::kPermanent, "permanent"},
    {FailureClass::kUnknown, "unknown"},
};

constexpr NamedValue<BackoffKind> kBackoffKindNames[] = {
    {BackoffKind::kFixed, "fixed"},
    {BackoffKind::kExponential, "exponential"},
    {BackoffKind::kDecorrelated, "decorrelated"},
};

constexpr NamedValue<JitterKind> kJitterKindNames[] = {
    {JitterKind::kNone, "none"},
    {JitterKind::kFull, "full"},
    {JitterKind::kEqual, "equal"},
    {JitterKind::kDecorrelated, "decorrelated"},
};

constexpr NamedValue<FailureAction> kFailureActionNames[] = {
    {FailureAction::kRetry, "retry"},
    {FailureAction::kDeadLetter, "dead_letter"},
    {FailureAction::kFail, "fail"},
};
// clang-format on

template <typename E, std::size_t N>
std::string_view NameOf(const NamedValue<E> (&table)[N], E value) {
  for (const NamedValue<E>& n : table) {
    if (n.value == value) return n.name;
  }
  // Only reachable with a value cast from an out-of-range integer.
  return "invalid";
}

template <typename E, std::size_t N>
bool IsKnown(const NamedValue<E> (&table)[N], E value) {
  for (const NamedValue<E>& n : table) {
    if (n.value == value) return true;
  }
  return false;
}

// `what` is the noun used in the error ("failure class"); the error names the
// bad value and lists every accepted name, so a config typo is fixed in one go.
template <typename E, std::size_t N>
Result<E> ParseNamed(const NamedValue<E> (&table)[N], std::string_view what,
                     std::string_view name) {
  for (const NamedValue<E>& n : table) {
    if (n.name == name) return n.value;
  }
  std::string msg = fmt::format("unknown {} '{}'; accepted:", what, name);
  for (std::size_t i = 0; i < N; ++i) {
    msg += i == 0 ? " " : ", ";
    msg += table[i].name;
  }
  return Status::InvalidArgument(std::move(msg));
}

// --- Backoff -------------------------------------------------------------------

// Durations are computed in double ticks of Duration (nanoseconds with
// libstdc++): a double holds every tick count below 2^53 (~104 days) exactly,
// far beyond any sensible cap, and it saturates to inf instead of wrapping on
// overflow, which the clamps below then turn into the cap.
using Ticks = double;

Ticks ToTicks(Duration d) { return static_cast<Ticks>(d.count()); }

// Rounds `t` to a Duration within [lo, hi]. NaN maps to `hi`: an undefined
// delay must still respect the documented bound, and the cap is the safe side.
Duration ClampToDuration(Ticks t, Duration lo, Duration hi) {
  if (hi < lo) hi = lo;
  if (std::isnan(t) || t >= ToTicks(hi)) return hi;
  if (t <= ToTicks(lo)) return lo;
  auto rounded = static_cast<Duration::rep>(std::llround(t));
  return std::clamp(Duration(rounded), lo, hi);
}

// A sample outside [0,1) (a buggy RandomSource) is clamped rather than
// trusted, so it cannot push a delay outside its bounds.
double ClampSample(double sample) {
  if (std::isnan(sample)) return 0.0;
  return std::clamp(sample, 0.0, 1.0);
}

std::string BlankOr(std::string_view s) { return s.empty() ? std::string("-") : std::string(s); }

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; });
}

RetryDecision Retry(Duration delay, std::string_view why) {
  return RetryDecision{RetryDecision::Kind::kRetry, delay, std::string(why)};
}
RetryDecision DeadLetter(std::string_view why) {
  return RetryDecision{RetryDecision::Kind::kDeadLetter, Duration{}, std::string(why)};
}
RetryDecision Fail(std::string_view why) {
  return RetryDecision{RetryDecision::Kind::kFail, Duration{}, std::string(why)};
}

// Applies a class's non-retry action at once, with the class's own reason.
RetryDecision Terminal(FailureAction action, std::string_view why) {
  return action == FailureAction::kFail ? Fail(why) : DeadLetter(why);
}

std::string FormatSeconds(Duration d) { return fmt::format("{:g}s", ToSeconds(d)); }

}  // namespace

// --- Names -------------------------------------------------------------------

std::string_view FailureClassName(FailureClass c) { return NameOf(kFailureClassNames, c); }
Result<FailureClass> ParseFailureClass(std::string_view name) {
  return ParseNamed(kFailureClassNames, "failure class", name);
}

std::string_view BackoffKindName(BackoffKind k) { return NameOf(kBackoffKindNames, k); }
Result<BackoffKind> ParseBackoffKind(std::string_view name) {
  return ParseNamed(kBackoffKindNames, "backoff kind", name);
}

std::string_view JitterKindName(JitterKind k) { return NameOf(kJitterKindNames, k); }
Result<JitterKind> ParseJitterKind(std::string_view name) {
  return ParseNamed(kJitterKindNames, "jitter kind", name);
}

std::string_view FailureActionName(FailureAction a) { return NameOf(kFailureActionNames, a); }
Result<FailureAction> ParseFailureAction(std::string_view name) {
  return ParseNamed(kFailureActionNames, "failure action", name);
}

// --- Validation ----------------------------------------------------------------

// Field names follow the envelope's "retry_policy" JSON object (SPEC 1), so
// an error points at the line of config to fix.
Status ValidateBackoff(const BackoffSpec& spec) {
  if (!IsKnown(kBackoffKindNames, spec.kind)) {
    return Status::InvalidArgument("retry_policy.backoff is not a known backoff kind");
  }
  if (!IsKnown(kJitterKindNames, spec.jitter)) {
    return Status::InvalidArgument("retry_policy.jitter is not a known jitter kind");
  }
  // Zero is an immediate retry (BullMQ and Sidekiq allow it too); only a
  // negative delay is meaningless.
  if (spec.base_delay < Duration::zero()) {
    return Status::InvalidArgument(fmt::format(
        "retry_policy.base_delay_seconds must be >= 0 (got {})", ToSeconds(spec.base_delay)));
  }
  if (spec.max_delay < spec.base_delay) {
    return Status::InvalidArgument(
        fmt::format("retry_policy.max_delay_seconds must be >= base_delay_seconds (got {} < {})",
                    ToSeconds(spec.max_delay), ToSeconds(spec.base_delay)));
  }
  // `!(x >= 1)` also refuses NaN.
  if (!(spec.multiplier >= 1.0) || std::isinf(spec.multiplier)) {
    return Status::InvalidArgument(
        fmt::format("retry_policy.multiplier must be finite and >= 1 (got {})", spec.multiplier));
  }
  return Status::Ok();
}

Status ValidateRetryPolicy(const RetryPolicy& policy) {
  if (policy.max_attempts < 1) {
    return Status::InvalidArgument(
        fmt::format("retry_policy.max_attempts must be >= 1 (got {})", policy.max_attempts));
  }
  if (policy.max_unknown_attempts < 1) {
    return Status::InvalidArgument(fmt::format(
        "retry_policy.max_unknown_attempts must be >= 1 (got {})", policy.max_unknown_attempts));
  }
  // DecideRetry would cap it anyway, but a policy that says so was written
  // that way: refusing it tells the author instead of ignoring what they wrote.
  if (policy.max_unknown_attempts > policy.max_attempts) {
    return Status::InvalidArgument(fmt::format(
        "retry_policy.max_unknown_attempts must be <= max_attempts (got {} > {}): unknown "
        "errors spend the same attempts, so at most {} are possible; set "
        "max_unknown_attempts to at most {}",
        policy.max_unknown_attempts, policy.max_attempts, policy.max_attempts,
        policy.max_attempts));
  }
  if (!IsKnown(kFailureActionNames, policy.on_transient)) {
    return Status::InvalidArgument("retry_policy.on_transient is not a known action");
  }
  if (!IsKnown(kFailureActionNames, policy.on_permanent)) {
    return Status::InvalidArgument("retry_policy.on_permanent is not a known action");
  }
  if (!IsKnown(kFailureActionNames, policy.on_unknown)) {
    return Status::InvalidArgument("retry_policy.on_unknown is not a known action");
  }
  return ValidateBackoff(policy.backoff);
}

// --- ComputeBackoff --------------------------------------------------------------
//
// Two steps, as in AWS's "Exponential Backoff And Jitter":
//   1. the ceiling from the backoff kind:
//        fixed:        base
//        exponential:  min(cap, base * multiplier^(attempt-1))
//   2. the jitter, applied below the ceiling:
//        none:  ceiling
//        full:  sample * ceiling                    = U(0, ceiling)
//        equal: ceiling/2 + sample * ceiling/2      = U(ceiling/2, ceiling)
// The decorrelated form (chosen by either BackoffKind::kDecorrelated or
// JitterKind::kDecorrelated) replaces both steps, since it grows from the
// previous delay rather than from the attempt number:
//        min(cap, base + sample * (max(previous*3, base) - base))
//                                                   = min(cap, U(base, previous*3))
// where previous = 0 (the first retry) counts as base, giving U(base, 3*base).
//
// A zero base is an immediate retry, so it gives 0 for every kind and
// jitter, whatever `previous` is (a lock_busy wait or a snooze also leaves a
// previous delay, which would otherwise seed a decorrelated chain). It is
// answered before any arithmetic: the exponential ceiling 0 * multiplier^n
// would be 0 * inf = NaN for a large attempt, which reads as "the cap".
//
// Being total matters more than being strict here: this runs on worker
// threads, so an invalid spec (which ValidateBackoff refuses up front) still
// yields a delay within [0, max_delay], never NaN, inf or a negative value.
Duration ComputeBackoff(const BackoffSpec& spec, int attempt, double sample, Duration previous) {
  const Duration cap = std::max(spec.max_delay, Duration::zero());
  const Duration base = std::clamp(spec.base_delay, Duration::zero(), cap);
  if (base == Duration::zero()) return Duration::zero();
  const double u = ClampSample(sample);

  if (spec.kind == BackoffKind::kDecorrelated || spec.jitter == JitterKind::kDecorrelated) {
    const Ticks prev = previous > Duration::zero() ? ToTicks(previous) : ToTicks(base);
    const Ticks upper = std::max(prev * 3.0, ToTicks(base));
    return ClampToDuration(ToTicks(base) + u * (upper - ToTicks(base)), base, cap);
  }

  Ticks ceiling = ToTicks(base);
  if (spec.kind == BackoffKind::kExponential) {
    const int n = std::max(attempt, 1) - 1;
    // pow saturates to inf for large n (attempt 10000 at x2), and NaN comes
    // from a NaN multiplier; the `!(ceiling < cap)` test turns both into cap.
    ceiling = ToTicks(base) * std::pow(spec.multiplier, static_cast<double>(n));
    if (!(ceiling < ToTicks(cap))) ceiling = ToTicks(cap);
  }

  Ticks delay = ceiling;
  switch (spec.jitter) {
    case JitterKind::kNone:
      delay = ceiling;
      break;
    case JitterKind::kFull:
      delay = u * ceiling;
      break;
    case JitterKind::kEqual:
      delay = ceiling / 2.0 + u * (ceiling / 2.0);
      break;
    case JitterKind::kDecorrelated:  // Handled above.
      break;
  }
  return ClampToDuration(delay, Duration::zero(), cap);
}

// --- DecideRetry -------------------------------------------------------------------
//
// `attempt` is the 1-based number of the attempt that just failed, so with
// max_attempts = 5 the failures of attempts 1..4 may be retried and the failure
// of attempt 5 ends the job. Per class:
//
//   transient  on_transient == kRetry:
//                attempt >= max_attempts          -> dead_letter "max_attempts_exceeded"
//                otherwise                        -> retry "transient_error" after backoff
//              on_transient == kDeadLetter/kFail  -> that action at once, "transient_error"
//   permanent  on_permanent == kDeadLetter/kFail  -> that action at once, "permanent_error"
//                (the default: permanent failures are never retried)
//              on_permanent == kRetry             -> as transient, with the full budget,
//                                                    reason "permanent_error"
//   unknown    on_unknown == kRetry:
//                attempt >= max_attempts          -> dead_letter "max_attempts_exceeded"
//                attempt >= unknown budget        -> dead_letter "unknown_non_retryable"
//                otherwise                        -> retry "unknown_error" after backoff
//              where the unknown budget is min(max_unknown_attempts, max_attempts)
//              on_unknown == kDeadLetter/kFail    -> that action at once, "unknown_error"
//
// The budget is only consulted when the class's action is kRetry: an operator
// who routes a class straight to the DLQ or to failed (SPEC 10, "route a
// failing class to the DLQ") wants that action whatever the attempt number,
// and the class's reason is more useful on the DLQ entry than
// "max_attempts_exceeded". The overall budget is checked before the unknown
// one, so a job that spent its whole budget says so even if its last failure
// happened to be unknown.
//
// The policy here is not necessarily a validated one: the runner replaces
// max_attempts with the envelope's, which may be below max_unknown_attempts.
// The min() states the one rule (retry_policy.h) instead of leaving it to the
// order of the two checks.
RetryDecision DecideRetry(const RetryPolicy& policy, FailureClass c, int attempt, double sample,
                          Duration previous_delay) {
  FailureAction action = policy.on_unknown;
  std::string_view why = reason::kUnknownError;
  switch (c) {
    case FailureClass::kTransient:
      action = policy.on_transient;
      why = reason::kTransientError;
      break;
    case FailureClass::kPermanent:
      action = policy.on_permanent;
      why = reason::kPermanentError;
      break;
    case FailureClass::kUnknown:
      break;
  }
  if (action != FailureAction::kRetry) return Terminal(action, why);

  if (attempt >= policy.max_attempts) return DeadLetter(reason::kMaxAttemptsExceeded);
  const int unknown_budget = std::min(policy.max_unknown_attempts, policy.max_attempts);
  if (c != FailureClass::kTransient && c != FailureClass::kPermanent &&
      attempt >= unknown_budget) {
    return DeadLetter(reason::kUnknownNonRetryable);
  }
  return Retry(ComputeBackoff(policy.backoff, attempt, sample, previous_delay), why);
}

// --- PolicyRegistry ------------------------------------------------------------------

struct PolicyRegistry::Policies {
  mutable internal::PlainMutex mu;
  RetryPolicy default_policy JOBPACT_GUARDED_BY(mu);
  std::map<std::string, Entry, std::less<>> overrides JOBPACT_GUARDED_BY(mu);
};

PolicyRegistry::PolicyRegistry() : PolicyRegistry(RetryPolicy{}) {}

// A constructor cannot return a Status; an invalid default given here is kept
// as given (SetDefault is the checked path), and ComputeBackoff stays total.
PolicyRegistry::PolicyRegistry(RetryPolicy global_default) : policies_(std::make_unique<Policies>()) {
  internal::MutexLock lock(policies_->mu);  // Not shared yet: for the analysis only.
  policies_->default_policy = std::move(global_default);
}

PolicyRegistry::~PolicyRegistry() = default;

Status PolicyRegistry::SetDefault(RetryPolicy policy) {
  Status valid = ValidateRetryPolicy(policy);
  if (!valid.ok()) {
    return Status::InvalidArgument("default policy: " + valid.message());
  }
  Policies& p = *policies_;
  internal::MutexLock lock(p.mu);
  p.default_policy = std::move(policy);
  return Status::Ok();
}

Status PolicyRegistry::Override(std::string_view job_type, RetryPolicy policy,
                                std::string_view why) {
  if (IsBlank(job_type)) {
    return Status::InvalidArgument("override: job_type must not be empty");
  }
  if (IsBlank(why)) {
    return Status::InvalidArgument(
        fmt::format("override of '{}': reason must not be empty; write down why this job type "
                    "differs from the default",
                    job_type));
  }
  Status valid = ValidateRetryPolicy(policy);
  if (!valid.ok()) {
    return Status::InvalidArgument(fmt::format("override of '{}': {}", job_type, valid.message()));
  }
  Entry entry{std::string(job_type), std::move(policy), std::string(why)};
  Policies& p = *policies_;
  internal::MutexLock lock(p.mu);
  auto it = p.overrides.find(job_type);
  if (it == p.overrides.end()) {
    p.overrides.emplace(entry.job_type, std::move(entry));
  } else {
    it->second = std::move(entry);
  }
  return Status::Ok();
}

RetryPolicy PolicyRegistry::Default() const {
  Policies& p = *policies_;
  internal::MutexLock lock(p.mu);
  return p.default_policy;
}

RetryPolicy PolicyRegistry::For(std::string_view job_type) const {
  Policies& p = *policies_;
  internal::MutexLock lock(p.mu);
  auto it = p.overrides.find(job_type);
  return it == p.overrides.end() ? p.default_policy : it->second.policy;
}

std::vector<PolicyRegistry::Entry> PolicyRegistry::Entries() const {
  Policies& p = *policies_;
  internal::MutexLock lock(p.mu);
  std::vector<Entry> out;
  out.reserve(p.overrides.size() + 1);
  out.push_back(Entry{"", p.default_policy, ""});
  for (const auto& [type, entry] : p.overrides) out.push_back(entry);  // std::map: sorted.
  return out;
}

std::string PolicyRegistry::ToTable() const {
  // Snapshot first, so formatting happens without the lock held.
  const std::vector<Entry> entries = Entries();

  using Row = std::vector<std::string>;
  std::vector<Row> rows;
  rows.push_back({"job type", "attempts", "unknown attempts", "backoff", "base", "multiplier",
                  "cap", "jitter", "on transient", "on permanent", "on unknown", "reason"});
  for (const Entry& e : entries) {
    const RetryPolicy& p = e.policy;
    rows.push_back(
        {e.job_type.empty() ? std::string("(default)") : e.job_type, std::to_string(p.max_attempts),
         std::to_string(p.max_unknown_attempts), std::string(BackoffKindName(p.backoff.kind)),
         FormatSeconds(p.backoff.base_delay), fmt::format("{:g}", p.backoff.multiplier),
         FormatSeconds(p.backoff.max_delay), std::string(JitterKindName(p.backoff.jitter)),
         std::string(FailureActionName(p.on_transient)),
         std::string(FailureActionName(p.on_permanent)),
         std::string(FailureActionName(p.on_unknown)), BlankOr(e.reason)});
  }

  // Every column but the last (the free-text reason) is padded to its widest
  // cell, so the table reads in a terminal and diffs cleanly in a review.
  const std::size_t columns = rows.front().size();
  std::vector<std::size_t> width(columns, 0);
  for (const Row& row : rows) {
    for (std::size_t i = 0; i < columns; ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  auto append_row = [&](const Row& row) {
    std::string line;
    for (std::size_t i = 0; i < columns; ++i) {
      if (i + 1 == columns) {
        line += row[i];
      } else {
        line += row[i];
        line.append(width[i] - row[i].size() + 2, ' ');
      }
    }
    out += line;
    out += '\n';
  };
  append_row(rows.front());
  Row rule;
  for (std::size_t i = 0; i < columns; ++i) rule.push_back(std::string(width[i], '-'));
  append_row(rule);
  for (std::size_t r = 1; r < rows.size(); ++r) append_row(rows[r]);
  return out;
}

}  // namespace jobpact
