// File: jobpact/testing/manual_clock.h
//
// ManualClock never ticks on its own: time moves only when a test calls
// Advance() or SetTime(), which also wakes every thread blocked in
// SleepUntil() or WaitUntil() whose deadline has come. Part of the core
// target so that users' own tests can use it.
//
// Example:
//   auto clock = std::make_shared<jobpact::testing::ManualClock>();
//   ... enqueue, run, fail attempt 1 ...
//   clock->Advance(jobpact::Seconds(5));   // reach the retry
//
// Thread-safe.
#ifndef JOBPACT_TESTING_MANUAL_CLOCK_H_
#define JOBPACT_TESTING_MANUAL_CLOCK_H_

#include <condition_variable>
#include <memory>
#include <mutex>

#include "jobpact/clock.h"
#include "jobpact/export.h"

namespace jobpact {
namespace testing {

class JOBPACT_EXPORT ManualClock final : public Clock {
 public:
  // Starts at 2026-01-01T00:00:00Z unless told otherwise.
  ManualClock();
  explicit ManualClock(TimePoint start);
  ~ManualClock() override;

  TimePoint Now() const override;
  void SleepUntil(TimePoint deadline) override;
  void WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 TimePoint deadline) override;

  // Moves time forward by `d` (negative values are ignored) and wakes sleepers.
  void Advance(Duration d);
  // Sets the time; moving backwards is allowed (to test clock skew).
  void SetTime(TimePoint t);

 private:
  // The time, the waiting threads and their lock (clock.cc), out of this
  // header so that the lock is the library's annotated one, which clang's
  // thread safety analysis checks.
  struct State;
  const std::unique_ptr<State> state_;
};

}  // namespace testing
}  // namespace jobpact

#endif  // JOBPACT_TESTING_MANUAL_CLOCK_H_
