#include "jobpact/clock.h"

#include <set>
#include <thread>

#include "jobpact/testing/manual_clock.h"
#include "src/internal/mutex.h"

namespace jobpact {

Clock::~Clock() = default;

std::shared_ptr<Clock> SystemClock::Default() {
  static const std::shared_ptr<Clock> clock = std::make_shared<SystemClock>();
  return clock;
}

TimePoint SystemClock::Now() const { return std::chrono::system_clock::now(); }

namespace {
// Waits are measured on the steady clock so that a wall-clock jump cannot
// stretch or skip them; the deadline is a wall-clock time, converted once.
std::chrono::steady_clock::time_point ToSteady(TimePoint deadline) {
  const auto remaining = deadline - std::chrono::system_clock::now();
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(remaining);
}
}  // namespace

void SystemClock::SleepUntil(TimePoint deadline) {
  std::this_thread::sleep_until(ToSteady(deadline));
}

void SystemClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                            TimePoint deadline) {
  cv.wait_until(lock, ToSteady(deadline));
}

namespace testing {

namespace {
constexpr auto kDefaultStart = std::chrono::seconds(1767225600);  // 2026-01-01T00:00:00Z
// A thread in WaitUntil re-checks at least this often in real time, which
// closes the window between registering for a wake-up and starting to wait.
constexpr auto kWaiterPoll = std::chrono::milliseconds(2);
}  // namespace

struct ManualClock::State {
  explicit State(TimePoint start) {
    internal::MutexLock l(mu);  // Not shared yet: for the analysis only.
    now = start;
  }

  // Wakes every thread in SleepUntil or WaitUntil, to re-check the time.
  void WakeAll() JOBPACT_EXCLUDES(mu) {
    internal::MutexLock l(mu);
    sleepers.NotifyAll();
    for (auto* cv : waiters) cv->notify_all();
  }

  mutable internal::PlainMutex mu;
  internal::CondVar sleepers;  // Threads in SleepUntil.
  TimePoint now JOBPACT_GUARDED_BY(mu);
  // The condition variables of the threads in WaitUntil (the callers').
  std::set<std::condition_variable*> waiters JOBPACT_GUARDED_BY(mu);
};

ManualClock::ManualClock() : ManualClock(TimePoint(kDefaultStart)) {}
ManualClock::ManualClock(TimePoint start) : state_(std::make_unique<State>(start)) {}
ManualClock::~ManualClock() = default;

TimePoint ManualClock::Now() const {
  internal::MutexLock l(state_->mu);
  return state_->now;
}

void ManualClock::SleepUntil(TimePoint deadline) {
  State& s = *state_;
  internal::MutexLock l(s.mu);
  while (s.now < deadline) s.sleepers.Wait(s.mu);
}

void ManualClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                            TimePoint deadline) {
  State& s = *state_;
  {
    internal::MutexLock l(s.mu);
    if (s.now >= deadline) return;
    s.waiters.insert(&cv);
  }
  // The caller's lock and condition variable: not ours to annotate.
  cv.wait_for(lock, kWaiterPoll);
  internal::MutexLock l(s.mu);
  s.waiters.erase(&cv);
}

void ManualClock::Advance(Duration d) {
  if (d <= Duration::zero()) return;
  {
    internal::MutexLock l(state_->mu);
    state_->now += d;
  }
  state_->WakeAll();
}

void ManualClock::SetTime(TimePoint t) {
  {
    internal::MutexLock l(state_->mu);
    state_->now = t;
  }
  state_->WakeAll();
}

}  // namespace testing
}  // namespace jobpact
