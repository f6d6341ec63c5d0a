// File: jobpact/circuit_breaker.h
//
// A circuit breaker per dependency (SPEC 10, 11): when a dependency (a
// payment API, a database, a mail relay) keeps failing, jobs that need it
// stop calling it for a while instead of piling retries onto it, and a few
// trial calls find out when it has recovered.
//
// The semantics are resilience4j's count-based breaker, with its defaults:
//   - closed: every call is permitted; the outcomes of the last
//     `window_size` (100) calls are kept. Once at least `minimum_calls` (20)
//     are recorded and failures / calls >= `failure_rate_threshold` (50%),
//     the breaker opens.
//   - open: every call is refused for `open_duration` (60 s, measured on the
//     injected Clock), then the breaker is half-open.
//   - half_open: `half_open_calls` (10) trial calls are permitted, the rest
//     refused. When all their outcomes are recorded, a failure rate >= the
//     threshold opens the breaker again, anything lower closes it with an
//     empty window.
// Outcomes recorded while open are ignored. The open -> half_open move
// happens on the first call into the breaker once the open period is over;
// state() and the other readers already report half_open by then.
//
// Example (a job handler calling a dependency):
//   auto breakers = jobpact::CircuitBreakers::Create().value();  // SPEC 11 defaults.
//   jobpact::CircuitBreaker& psp = breakers->Get("payments-api");
//   jobpact::Result<jobpact::CircuitBreaker::Permit> permit = psp.Acquire();
//   if (!permit.ok()) return ctx.Snooze(psp.retry_after() - now);  // kUnavailable
//   jobpact::Status s = CallPaymentsApi(...);
//   if (s.ok()) psp.RecordSuccess(*permit); else psp.RecordFailure(*permit);
#ifndef JOBPACT_CIRCUIT_BREAKER_H_
#define JOBPACT_CIRCUIT_BREAKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

enum class CircuitState { kClosed, kOpen, kHalfOpen };
// "closed", "open", "half_open".
JOBPACT_EXPORT std::string_view CircuitStateName(CircuitState state);

// One state change, passed to CircuitBreakerOptions::on_state_change.
struct CircuitStateChange {
  std::string dependency;
  CircuitState from = CircuitState::kClosed;
  CircuitState to = CircuitState::kClosed;
  TimePoint at;
  // The outcomes that decided the change (window or trials) and their
  // failure rate; zero for open -> half_open.
  int calls = 0;
  int failures = 0;
  double failure_rate = 0;
};

// SPEC 11 defaults (resilience4j's).
struct CircuitBreakerOptions {
  // Outcomes kept while closed (count-based sliding window). REQUIRES: >= 1.
  int window_size = 100;
  // Outcomes needed before the failure rate is judged. REQUIRES: >= 1;
  // values above window_size act as window_size.
  int minimum_calls = 20;
  // Opens when failures / calls >= this. In (0, 1].
  double failure_rate_threshold = 0.5;
  // How long the breaker stays open. REQUIRES: > 0.
  Duration open_duration = Seconds(60);
  // Trial calls permitted while half-open. REQUIRES: >= 1.
  int half_open_calls = 10;
  // While half-open with every trial permit taken: if no trial outcome was
  // recorded (or permit released or handed out) for this long, the permits
  // still unreported are presumed lost (a crashed worker, a forgotten
  // Release) and their slots are handed out again, so the breaker cannot
  // stay half-open forever. Longer than the default execution timeout plus
  // lease (45 s). REQUIRES: > 0.
  Duration half_open_trial_timeout = Seconds(60);
  // While half-open with every trial permit taken, a refused caller is told
  // to come back after this long (retry_after() = now + this). REQUIRES: > 0.
  Duration half_open_busy_delay = Seconds(1);
  // Called once per state change, in the order of the changes, one call at
  // a time, with no lock held, on a thread that called into the breaker
  // (possibly just after that call returned, if another thread was already
  // delivering changes). May call into the breaker. Must not throw (an
  // exception is caught and dropped). Use it for metrics and logs.
  std::function<void(const CircuitStateChange&)> on_state_change;
};

// OK, or kInvalidArgument naming the bad field.
JOBPACT_EXPORT Status ValidateCircuitBreakerOptions(const CircuitBreakerOptions& options);

// What a breaker holds right now, for status pages and metrics.
struct CircuitBreakerSnapshot {
  CircuitState state = CircuitState::kClosed;
  // Closed: outcomes in the window. Half-open: trial outcomes recorded.
  // Open: the outcomes that opened it.
  int calls = 0;
  int failures = 0;
  double failure_rate = 0;  // failures / calls; 0 when calls == 0.
  // Half-open: trial permits handed out (including those recorded).
  int trial_permits_taken = 0;
  // Open: when it turns half-open. Otherwise the epoch (TimePoint{}).
  TimePoint open_until;
  std::int64_t rejected_total = 0;  // Refused Acquire/TryAcquire calls.
  std::int64_t opened_total = 0;    // Times it opened.
};

// The breaker of one dependency. Thread-safe.
class JOBPACT_EXPORT CircuitBreaker final {
 public:
  using State = CircuitState;

  // Permission for one call. Pass it back to RecordSuccess/RecordFailure
  // (or Release if the call is not made): an outcome whose permit predates
  // the breaker's last state change is ignored, so a slow call started while
  // closed cannot decide a half-open trial. Treat the fields as opaque.
  struct Permit {
    std::uint64_t generation = 0;
    bool trial = false;  // Taken while half-open.
  };

  // kInvalidArgument for bad options. A null clock means SystemClock::Default().
  static Result<std::unique_ptr<CircuitBreaker>> Create(std::string dependency,
                                                        CircuitBreakerOptions options = {},
                                                        std::shared_ptr<Clock> clock = nullptr);

  CircuitBreaker(const CircuitBreaker&) = delete;
  CircuitBreaker& operator=(const CircuitBreaker&) = delete;
  ~CircuitBreaker();

  const std::string& dependency() const { return dependency_; }

  // A permit, or kUnavailable "circuit open for <dependency>, retry after
  // <RFC 3339 time>" while open, or while half-open with every trial permit
  // taken ("circuit half_open for <dependency>, ..."). A refused job should
  // be delayed until retry_after(), not counted as a failed attempt.
  Result<Permit> Acquire();
  // Acquire().ok(), dropping the permit (and without formatting a message):
  // pair it with the permit-less RecordSuccess()/RecordFailure().
  [[nodiscard]] bool TryAcquire();

  // Outcomes of permitted calls. The permit-less forms count toward
  // whatever state the breaker is in now (resilience4j's behaviour).
  void RecordSuccess(const Permit& permit);
  void RecordFailure(const Permit& permit);
  void RecordSuccess();
  void RecordFailure();
  // Gives back a permit whose call was not made (job cancelled, shut down),
  // so a half-open trial slot is not lost. Does nothing otherwise.
  void Release(const Permit& permit);

  // The current state (half_open once the open period is over).
  State state() const;
  // When a refused caller should try again: the end of the open period
  // while open; now + half_open_busy_delay while half-open with every trial
  // permit taken (or sooner, when lost permits are due to be reclaimed);
  // now otherwise (calls are permitted).
  TimePoint retry_after() const;
  CircuitBreakerSnapshot Snapshot() const;
  const CircuitBreakerOptions& options() const { return options_; }

 private:
  CircuitBreaker(std::string dependency, CircuitBreakerOptions options,
                 std::shared_ptr<Clock> clock);
  friend class CircuitBreakers;

  // The breaker's state and the locks over it (circuit_breaker.cc), out
  // of this header so that the locks are the library's annotated ones,
  // which clang's thread safety analysis checks, and no private header
  // leaks in here.
  class Impl;

  // Immutable after construction.
  const std::string dependency_;
  const CircuitBreakerOptions options_;
  const std::unique_ptr<Impl> impl_;
};

// Circuit breakers keyed by dependency name, created on first use with the
// default options or the dependency's override. Breakers are never removed:
// keep dependency names to a fixed set (services, not URLs). Thread-safe.
class JOBPACT_EXPORT CircuitBreakers final {
 public:
  // kInvalidArgument for bad default options. A null clock means
  // SystemClock::Default(). defaults.on_state_change is given to every
  // breaker whose override has none.
  static Result<std::unique_ptr<CircuitBreakers>> Create(CircuitBreakerOptions defaults = {},
                                                         std::shared_ptr<Clock> clock = nullptr);

  CircuitBreakers(const CircuitBreakers&) = delete;
  CircuitBreakers& operator=(const CircuitBreakers&) = delete;
  ~CircuitBreakers();

  // Gives `dependency` its own options (SPEC 11: every override documented).
  // kInvalidArgument for bad options or an empty reason; kFailedPrecondition
  // if the dependency's breaker is already in use (configure at startup).
  Status Override(std::string_view dependency, CircuitBreakerOptions options, std::string reason);

  // The breaker of `dependency`, created if needed. The reference stays
  // valid for the registry's lifetime.
  CircuitBreaker& Get(std::string_view dependency);

  // A snapshot of every breaker created so far, by dependency.
  std::map<std::string, CircuitBreakerSnapshot> Snapshots() const;
  // The overrides and their reasons, one per line.
  std::string DescribeOverrides() const;

 private:
  // The breakers, the overrides and their lock (circuit_breaker.cc).
  struct Registry;

  CircuitBreakers(CircuitBreakerOptions defaults, std::shared_ptr<Clock> clock);

  // Immutable after construction.
  const CircuitBreakerOptions defaults_;
  const std::shared_ptr<Clock> clock_;
  const std::unique_ptr<Registry> registry_;
};

}  // namespace jobpact

#endif  // JOBPACT_CIRCUIT_BREAKER_H_
