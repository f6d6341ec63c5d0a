#include "jobpact/clock.h"

#include <thread>

#include "jobpact/testing/manual_clock.h"

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

ManualClock::ManualClock() : now_(TimePoint(kDefaultStart)) {}
ManualClock::ManualClock(TimePoint start) : now_(start) {}

TimePoint ManualClock::Now() const {
  std::lock_guard<std::mutex> l(mu_);
  return now_;
}

void ManualClock::SleepUntil(TimePoint deadline) {
  std::unique_lock<std::mutex> l(mu_);
  sleepers_.wait(l, [&] { return now_ >= deadline; });
}

void ManualClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                            TimePoint deadline) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (now_ >= deadline) return;
    waiters_.insert(&cv);
  }
  cv.wait_for(lock, kWaiterPoll);
  std::lock_guard<std::mutex> l(mu_);
  waiters_.erase(&cv);
}

void ManualClock::Advance(Duration d) {
  if (d <= Duration::zero()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    now_ += d;
  }
  WakeAll();
}

void ManualClock::SetTime(TimePoint t) {
  {
    std::lock_guard<std::mutex> l(mu_);
    now_ = t;
  }
  WakeAll();
}

void ManualClock::WakeAll() {
  std::lock_guard<std::mutex> l(mu_);
  sleepers_.notify_all();
  for (auto* cv : waiters_) cv->notify_all();
}

}  // namespace testing
}  // namespace jobpact
