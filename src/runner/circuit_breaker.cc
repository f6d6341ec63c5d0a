#include "jobpact/circuit_breaker.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <utility>
#include <vector>

#include "jobpact/job.h"  // FormatRfc3339
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

bool RateAtLeast(int failures, int calls, double threshold) {
  // Integer division result correctly rounded, so 3/10 >= 0.3 holds exactly.
  return calls > 0 && static_cast<double>(failures) / calls >= threshold;
}

double Rate(int failures, int calls) {
  return calls > 0 ? static_cast<double>(failures) / calls : 0.0;
}

}  // namespace

std::string_view CircuitStateName(CircuitState state) {
  switch (state) {
    case CircuitState::kClosed:
      return "closed";
    case CircuitState::kOpen:
      return "open";
    case CircuitState::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

Status ValidateCircuitBreakerOptions(const CircuitBreakerOptions& o) {
  if (o.window_size < 1) {
    return Status::InvalidArgument(
        fmt::format("circuit breaker: window_size must be >= 1, got {}", o.window_size));
  }
  if (o.minimum_calls < 1) {
    return Status::InvalidArgument(
        fmt::format("circuit breaker: minimum_calls must be >= 1, got {}", o.minimum_calls));
  }
  if (!std::isfinite(o.failure_rate_threshold) || o.failure_rate_threshold <= 0 ||
      o.failure_rate_threshold > 1) {
    return Status::InvalidArgument(
        fmt::format("circuit breaker: failure_rate_threshold must be in (0, 1], got {}",
                    o.failure_rate_threshold));
  }
  if (o.open_duration <= Duration::zero()) {
    return Status::InvalidArgument(fmt::format(
        "circuit breaker: open_duration must be positive, got {}s", ToSeconds(o.open_duration)));
  }
  if (o.half_open_calls < 1) {
    return Status::InvalidArgument(
        fmt::format("circuit breaker: half_open_calls must be >= 1, got {}", o.half_open_calls));
  }
  if (o.half_open_trial_timeout <= Duration::zero()) {
    return Status::InvalidArgument(
        fmt::format("circuit breaker: half_open_trial_timeout must be positive, got {}s",
                    ToSeconds(o.half_open_trial_timeout)));
  }
  if (o.half_open_busy_delay <= Duration::zero()) {
    return Status::InvalidArgument(
        fmt::format("circuit breaker: half_open_busy_delay must be positive, got {}s",
                    ToSeconds(o.half_open_busy_delay)));
  }
  return Status::Ok();
}

// --- CircuitBreaker --------------------------------------------------------------

class CircuitBreaker::Impl {
 public:
  using State = CircuitState;

  // `dependency` and `options` are the breaker's, which outlives this.
  Impl(const std::string& dependency, const CircuitBreakerOptions& options,
       std::shared_ptr<Clock> clock);

  // Takes a permit; returns kClosed on success, else the state that refused
  // it, with *retry_at set.
  State AcquireImpl(Permit* permit, TimePoint* retry_at) JOBPACT_EXCLUDES(mu_, changes_mu_);
  // Records an outcome for `permit` (or for the current state if null).
  void Record(const Permit* permit, bool failure) JOBPACT_EXCLUDES(mu_, changes_mu_);
  void Release(const Permit& permit) JOBPACT_EXCLUDES(mu_);
  State state() JOBPACT_EXCLUDES(mu_);
  TimePoint retry_after() JOBPACT_EXCLUDES(mu_);
  CircuitBreakerSnapshot Snapshot() JOBPACT_EXCLUDES(mu_);

 private:
  // Open -> half_open once the open period is over.
  void MaybeHalfOpenLocked(TimePoint now) JOBPACT_REQUIRES(mu_);
  // The state as of `now`, without changing anything.
  State EffectiveStateLocked(TimePoint now) const JOBPACT_REQUIRES(mu_);
  void RecordLocked(bool failure, TimePoint now) JOBPACT_REQUIRES(mu_);
  void TransitionLocked(State to, TimePoint now, int calls, int failures) JOBPACT_REQUIRES(mu_);
  void ResetWindowLocked() JOBPACT_REQUIRES(mu_);
  // retry_after() while half-open with every trial permit taken.
  TimePoint HalfOpenBusyRetryAtLocked(TimePoint now) const JOBPACT_REQUIRES(mu_);
  // Delivers queued state changes, unless another thread is doing so.
  void DeliverChanges() JOBPACT_EXCLUDES(mu_, changes_mu_);

  // Immutable after construction.
  const std::string& dependency_;
  const CircuitBreakerOptions& options_;
  const std::shared_ptr<Clock> clock_;
  const int minimum_calls_;  // min(minimum_calls, window_size)

  // Held while reading the Clock (so changes carry non-decreasing times).
  internal::PlainMutex mu_;
  State state_ JOBPACT_GUARDED_BY(mu_) = State::kClosed;
  // Grows with every state change.
  std::uint64_t generation_ JOBPACT_GUARDED_BY(mu_) = 0;
  // Ring of the closed window, 1 = failure.
  std::vector<std::uint8_t> outcomes_ JOBPACT_GUARDED_BY(mu_);
  int next_ JOBPACT_GUARDED_BY(mu_) = 0;   // Next slot to write in outcomes_.
  int calls_ JOBPACT_GUARDED_BY(mu_) = 0;  // Outcomes in the window / trial outcomes.
  int failures_ JOBPACT_GUARDED_BY(mu_) = 0;
  int trial_permits_ JOBPACT_GUARDED_BY(mu_) = 0;  // Half-open permits handed out.
  // Half-open: last permit, outcome or release.
  TimePoint last_trial_activity_ JOBPACT_GUARDED_BY(mu_){};
  TimePoint open_until_ JOBPACT_GUARDED_BY(mu_){};
  std::int64_t rejected_total_ JOBPACT_GUARDED_BY(mu_) = 0;
  std::int64_t opened_total_ JOBPACT_GUARDED_BY(mu_) = 0;

  // State changes waiting for on_state_change, in order. Lock order: mu_
  // before changes_mu_; the callback runs with neither held.
  internal::PlainMutex changes_mu_;
  std::deque<CircuitStateChange> changes_ JOBPACT_GUARDED_BY(changes_mu_);
  bool delivering_ JOBPACT_GUARDED_BY(changes_mu_) = false;
};

Result<std::unique_ptr<CircuitBreaker>> CircuitBreaker::Create(std::string dependency,
                                                               CircuitBreakerOptions options,
                                                               std::shared_ptr<Clock> clock) {
  JOBPACT_RETURN_IF_ERROR(ValidateCircuitBreakerOptions(options));
  if (clock == nullptr) clock = SystemClock::Default();
  return std::unique_ptr<CircuitBreaker>(
      new CircuitBreaker(std::move(dependency), std::move(options), std::move(clock)));
}

CircuitBreaker::CircuitBreaker(std::string dependency, CircuitBreakerOptions options,
                               std::shared_ptr<Clock> clock)
    : dependency_(std::move(dependency)),
      options_(std::move(options)),
      impl_(std::make_unique<Impl>(dependency_, options_, std::move(clock))) {}

CircuitBreaker::Impl::Impl(const std::string& dependency, const CircuitBreakerOptions& options,
                           std::shared_ptr<Clock> clock)
    : dependency_(dependency),
      options_(options),
      clock_(std::move(clock)),
      minimum_calls_(std::min(options_.minimum_calls, options_.window_size)) {
  // Not shared yet: the lock only keeps the analysis' rule simple.
  internal::MutexLock lock(mu_);
  outcomes_.assign(static_cast<std::size_t>(options_.window_size), 0);
}

CircuitBreaker::~CircuitBreaker() = default;

void CircuitBreaker::RecordSuccess(const Permit& permit) { impl_->Record(&permit, false); }
void CircuitBreaker::RecordFailure(const Permit& permit) { impl_->Record(&permit, true); }
void CircuitBreaker::RecordSuccess() { impl_->Record(nullptr, false); }
void CircuitBreaker::RecordFailure() { impl_->Record(nullptr, true); }
void CircuitBreaker::Release(const Permit& permit) { impl_->Release(permit); }
CircuitState CircuitBreaker::state() const { return impl_->state(); }
TimePoint CircuitBreaker::retry_after() const { return impl_->retry_after(); }
CircuitBreakerSnapshot CircuitBreaker::Snapshot() const { return impl_->Snapshot(); }

CircuitState CircuitBreaker::Impl::EffectiveStateLocked(TimePoint now) const {
  if (state_ == State::kOpen && now >= open_until_) return State::kHalfOpen;
  return state_;
}

void CircuitBreaker::Impl::MaybeHalfOpenLocked(TimePoint now) {
  if (state_ == State::kOpen && now >= open_until_) TransitionLocked(State::kHalfOpen, now, 0, 0);
}

TimePoint CircuitBreaker::Impl::HalfOpenBusyRetryAtLocked(TimePoint now) const {
  // The busy delay, or sooner if lost trial slots are reclaimed sooner.
  const TimePoint reclaim = last_trial_activity_ + options_.half_open_trial_timeout;
  return std::max(now, std::min(now + options_.half_open_busy_delay, reclaim));
}

void CircuitBreaker::Impl::ResetWindowLocked() {
  std::fill(outcomes_.begin(), outcomes_.end(), 0);
  next_ = 0;
  calls_ = 0;
  failures_ = 0;
  trial_permits_ = 0;
}

void CircuitBreaker::Impl::TransitionLocked(State to, TimePoint now, int calls, int failures) {
  const State from = state_;
  state_ = to;
  ++generation_;
  switch (to) {
    case State::kOpen:
      // calls_/failures_ keep the outcomes that opened it, for Snapshot().
      open_until_ = now + options_.open_duration;
      ++opened_total_;
      trial_permits_ = 0;
      break;
    case State::kHalfOpen:
    case State::kClosed:
      ResetWindowLocked();
      open_until_ = TimePoint{};
      last_trial_activity_ = now;
      break;
  }
  if (!options_.on_state_change) return;
  CircuitStateChange change;
  change.dependency = dependency_;
  change.from = from;
  change.to = to;
  change.at = now;
  change.calls = calls;
  change.failures = failures;
  change.failure_rate = Rate(failures, calls);
  internal::MutexLock lock(changes_mu_);
  changes_.push_back(std::move(change));
}

void CircuitBreaker::Impl::DeliverChanges() {
  internal::MutexLock lock(changes_mu_);
  if (delivering_) return;  // That thread delivers ours too, in order.
  delivering_ = true;
  while (!changes_.empty()) {
    CircuitStateChange change = std::move(changes_.front());
    changes_.pop_front();
    internal::MutexUnlock unlocked(changes_mu_);
    try {
      options_.on_state_change(change);
    } catch (...) {
      // A callback must not throw; dropping the exception keeps the breaker
      // usable.
    }
  }
  delivering_ = false;
}

CircuitState CircuitBreaker::Impl::AcquireImpl(Permit* permit, TimePoint* retry_at) {
  State refused_in = State::kClosed;
  bool changed = false;
  {
    internal::MutexLock lock(mu_);
    // Read under mu_, so that changes carry non-decreasing times.
    const TimePoint now = clock_->Now();
    const std::uint64_t before = generation_;
    MaybeHalfOpenLocked(now);
    changed = generation_ != before;
    switch (state_) {
      case State::kClosed:
        *permit = Permit{generation_, false};
        break;
      case State::kHalfOpen:
        if (trial_permits_ >= options_.half_open_calls &&
            now - last_trial_activity_ >= options_.half_open_trial_timeout) {
          trial_permits_ = std::min(calls_, trial_permits_);  // Reclaim the lost ones.
        }
        if (trial_permits_ < options_.half_open_calls) {
          ++trial_permits_;
          last_trial_activity_ = now;
          *permit = Permit{generation_, true};
          break;
        }
        refused_in = State::kHalfOpen;
        *retry_at = HalfOpenBusyRetryAtLocked(now);
        ++rejected_total_;
        break;
      case State::kOpen:
        refused_in = State::kOpen;
        *retry_at = open_until_;
        ++rejected_total_;
        break;
    }
  }
  if (changed && options_.on_state_change) DeliverChanges();
  return refused_in;
}

Result<CircuitBreaker::Permit> CircuitBreaker::Acquire() {
  Permit permit;
  TimePoint retry_at;
  switch (impl_->AcquireImpl(&permit, &retry_at)) {
    case State::kClosed:
      return permit;
    case State::kOpen:
      return Status::Unavailable(
          fmt::format("circuit open for {}, retry after {}", dependency_, FormatRfc3339(retry_at)));
    case State::kHalfOpen:
      return Status::Unavailable(
          fmt::format("circuit half_open for {}: all {} trial calls taken, retry after {}",
                      dependency_, options_.half_open_calls, FormatRfc3339(retry_at)));
  }
  return Status::Internal("unreachable");
}

bool CircuitBreaker::TryAcquire() {
  Permit permit;
  TimePoint retry_at;
  return impl_->AcquireImpl(&permit, &retry_at) == State::kClosed;
}

void CircuitBreaker::Impl::RecordLocked(bool failure, TimePoint now) {
  switch (state_) {
    case State::kClosed: {
      const int n = options_.window_size;
      if (calls_ == n) {
        failures_ -= outcomes_[static_cast<std::size_t>(next_)];
      } else {
        ++calls_;
      }
      outcomes_[static_cast<std::size_t>(next_)] = failure ? 1 : 0;
      failures_ += failure ? 1 : 0;
      next_ = next_ + 1 == n ? 0 : next_ + 1;
      if (calls_ >= minimum_calls_ &&
          RateAtLeast(failures_, calls_, options_.failure_rate_threshold)) {
        TransitionLocked(State::kOpen, now, calls_, failures_);
      }
      break;
    }
    case State::kHalfOpen:
      ++calls_;
      failures_ += failure ? 1 : 0;
      last_trial_activity_ = now;
      if (calls_ >= options_.half_open_calls) {
        const int calls = calls_;
        const int failures = failures_;
        TransitionLocked(RateAtLeast(failures, calls, options_.failure_rate_threshold)
                             ? State::kOpen
                             : State::kClosed,
                         now, calls, failures);
      }
      break;
    case State::kOpen:
      break;  // Outcomes of calls started before it opened change nothing.
  }
}

void CircuitBreaker::Impl::Record(const Permit* permit, bool failure) {
  bool changed = false;
  {
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();  // Under mu_: see Acquire.
    const std::uint64_t before = generation_;
    MaybeHalfOpenLocked(now);
    if (permit == nullptr || permit->generation == generation_) RecordLocked(failure, now);
    changed = generation_ != before;
  }
  if (changed && options_.on_state_change) DeliverChanges();
}


void CircuitBreaker::Impl::Release(const Permit& permit) {
  internal::MutexLock lock(mu_);
  if (permit.trial && permit.generation == generation_ && state_ == State::kHalfOpen &&
      trial_permits_ > calls_) {
    --trial_permits_;
    last_trial_activity_ = clock_->Now();
  }
}

CircuitState CircuitBreaker::Impl::state() {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  return EffectiveStateLocked(now);
}

TimePoint CircuitBreaker::Impl::retry_after() {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  switch (EffectiveStateLocked(now)) {
    case State::kOpen:
      return open_until_;
    case State::kHalfOpen:
      if (state_ == State::kHalfOpen && trial_permits_ >= options_.half_open_calls) {
        return HalfOpenBusyRetryAtLocked(now);
      }
      return now;
    case State::kClosed:
      return now;
  }
  return now;
}

CircuitBreakerSnapshot CircuitBreaker::Impl::Snapshot() {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  CircuitBreakerSnapshot s;
  s.state = EffectiveStateLocked(now);
  s.rejected_total = rejected_total_;
  s.opened_total = opened_total_;
  if (s.state == state_) {  // Not an open period that has just ended.
    s.calls = calls_;
    s.failures = failures_;
    s.failure_rate = Rate(failures_, calls_);
    s.trial_permits_taken = state_ == State::kHalfOpen ? trial_permits_ : 0;
    s.open_until = state_ == State::kOpen ? open_until_ : TimePoint{};
  }
  return s;
}

// --- CircuitBreakers -------------------------------------------------------------

Result<std::unique_ptr<CircuitBreakers>> CircuitBreakers::Create(CircuitBreakerOptions defaults,
                                                                 std::shared_ptr<Clock> clock) {
  JOBPACT_RETURN_IF_ERROR(ValidateCircuitBreakerOptions(defaults));
  if (clock == nullptr) clock = SystemClock::Default();
  return std::unique_ptr<CircuitBreakers>(
      new CircuitBreakers(std::move(defaults), std::move(clock)));
}

struct CircuitBreakers::Registry {
  struct OverrideEntry {
    CircuitBreakerOptions options;
    std::string reason;
  };

  // Shared on the hot path (a job finding its dependency's breaker),
  // exclusive to add a breaker or an override.
  mutable internal::SharedMutex mu;
  std::map<std::string, std::unique_ptr<CircuitBreaker>, std::less<>> breakers
      JOBPACT_GUARDED_BY(mu);
  std::map<std::string, OverrideEntry, std::less<>> overrides JOBPACT_GUARDED_BY(mu);
};

CircuitBreakers::CircuitBreakers(CircuitBreakerOptions defaults, std::shared_ptr<Clock> clock)
    : defaults_(std::move(defaults)),
      clock_(std::move(clock)),
      registry_(std::make_unique<Registry>()) {}

CircuitBreakers::~CircuitBreakers() = default;

Status CircuitBreakers::Override(std::string_view dependency, CircuitBreakerOptions options,
                                 std::string reason) {
  Status valid = ValidateCircuitBreakerOptions(options);
  if (!valid.ok()) {
    return Status::InvalidArgument(fmt::format("override of {}: {}", dependency, valid.message()));
  }
  if (reason.empty()) {
    return Status::InvalidArgument(
        fmt::format("override of {}: a reason is required (SPEC 11: every override is documented)",
                    dependency));
  }
  if (!options.on_state_change) options.on_state_change = defaults_.on_state_change;
  Registry& r = *registry_;
  internal::MutexLock lock(r.mu);
  if (r.breakers.find(dependency) != r.breakers.end()) {
    return Status::FailedPrecondition(fmt::format(
        "the circuit breaker of {} is already in use; override it before the first call",
        dependency));
  }
  r.overrides.insert_or_assign(std::string(dependency),
                              Registry::OverrideEntry{std::move(options), std::move(reason)});
  return Status::Ok();
}

CircuitBreaker& CircuitBreakers::Get(std::string_view dependency) {
  Registry& r = *registry_;
  {
    internal::ReaderMutexLock lock(r.mu);
    auto it = r.breakers.find(dependency);
    if (it != r.breakers.end()) return *it->second;
  }
  internal::MutexLock lock(r.mu);
  auto it = r.breakers.find(dependency);
  if (it != r.breakers.end()) return *it->second;  // Another thread made it first.
  auto o = r.overrides.find(dependency);
  const CircuitBreakerOptions& options = o != r.overrides.end() ? o->second.options : defaults_;
  auto breaker =
      std::unique_ptr<CircuitBreaker>(new CircuitBreaker(std::string(dependency), options, clock_));
  return *r.breakers.emplace(std::string(dependency), std::move(breaker)).first->second;
}

std::map<std::string, CircuitBreakerSnapshot> CircuitBreakers::Snapshots() const {
  std::map<std::string, CircuitBreakerSnapshot> out;
  const Registry& r = *registry_;
  internal::ReaderMutexLock lock(r.mu);
  for (const auto& [dependency, breaker] : r.breakers) {
    out.emplace(dependency, breaker->Snapshot());
  }
  return out;
}

std::string CircuitBreakers::DescribeOverrides() const {
  std::string out;
  const Registry& r = *registry_;
  internal::ReaderMutexLock lock(r.mu);
  for (const auto& [dependency, entry] : r.overrides) {
    const CircuitBreakerOptions& o = entry.options;
    out += fmt::format(
        "{}: window_size={} minimum_calls={} failure_rate_threshold={} open_duration={}s "
        "half_open_calls={} ({})\n",
        dependency, o.window_size, o.minimum_calls, o.failure_rate_threshold,
        ToSeconds(o.open_duration), o.half_open_calls, entry.reason);
  }
  return out;
}

}  // namespace jobpact
