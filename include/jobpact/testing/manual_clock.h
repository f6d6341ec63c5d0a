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
#include <mutex>
#include <set>

#include "jobpact/clock.h"
#include "jobpact/export.h"

namespace jobpact {
namespace testing {

class JOBPACT_EXPORT ManualClock final : public Clock {
 public:
  // Starts at 2026-01-01T00:00:00Z unless told otherwise.
  ManualClock();
  explicit ManualClock(TimePoint start);

  TimePoint Now() const override;
  void SleepUntil(TimePoint deadline) override;
  void WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 TimePoint deadline) override;

  // Moves time forward by `d` (negative values are ignored) and wakes sleepers.
  void Advance(Duration d);
  // Sets the time; moving backwards is allowed (to test clock skew).
  void SetTime(TimePoint t);

 private:
  void WakeAll();

  mutable std::mutex mu_;
  std::condition_variable sleepers_;
  TimePoint now_;                           // Guarded by mu_.
  std::set<std::condition_variable*> waiters_;  // Guarded by mu_.
};

}  // namespace testing
}  // namespace jobpact

#endif  // JOBPACT_TESTING_MANUAL_CLOCK_H_
