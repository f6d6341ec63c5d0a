// A testing::ManualClock that counts the sleeps started on it, so that a
// test moves time exactly when a cache guard waits (polling the store for
// another owner's refill) instead of racing it.
#ifndef JOBPACT_TESTS_CACHE_SLEEP_COUNTING_CLOCK_H_
#define JOBPACT_TESTS_CACHE_SLEEP_COUNTING_CLOCK_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "jobpact/clock.h"
#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace cache_test {

class SleepCountingClock final : public Clock {
 public:
  explicit SleepCountingClock(std::shared_ptr<testing::ManualClock> clock)
      : clock_(std::move(clock)) {}
  TimePoint Now() const override { return clock_->Now(); }
  // Counted before blocking: the deadline is already computed, so an
  // Advance() that comes first makes the sleep return at once.
  void SleepUntil(TimePoint deadline) override {
    ++sleeps_;
    clock_->SleepUntil(deadline);
  }
  void WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 TimePoint deadline) override {
    clock_->WaitUntil(lock, cv, deadline);
  }

  // Until done(): each time sleeps have started since the last step (of
  // this call or an earlier one), advances the clock by `step`, waking
  // them. Called from one thread.
  template <typename Done>
  void AdvanceOnSleeps(Duration step, Done done) {
    while (!done()) {
      const int now = sleeps_;
      if (now > handled_) {
        handled_ = now;
        clock_->Advance(step);
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  std::shared_ptr<testing::ManualClock> clock_;
  std::atomic<int> sleeps_{0};
  int handled_ = 0;  // Sleeps woken by a step; only AdvanceOnSleeps' thread.
};

}  // namespace cache_test
}  // namespace jobpact

#endif  // JOBPACT_TESTS_CACHE_SLEEP_COUNTING_CLOCK_H_
