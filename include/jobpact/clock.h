// File: jobpact/clock.h
//
// Clock is the only source of time in jobpact. Every timestamp, deadline,
// lease expiry and blocking wait goes through an injected Clock, so tests can
// use testing::ManualClock and move time by hand instead of sleeping.
//
// TimePoint is a std::chrono::system_clock time point because job times are
// shared across processes and hosts (Redis, PostgreSQL) and written in RFC 3339.
//
// Implementations must be safe for concurrent use. Thread-safe.
#ifndef JOBPACT_CLOCK_H_
#define JOBPACT_CLOCK_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "jobpact/export.h"

namespace jobpact {

using TimePoint = std::chrono::system_clock::time_point;
using Duration = std::chrono::system_clock::duration;

class JOBPACT_EXPORT Clock {
 public:
  Clock() = default;
  Clock(const Clock&) = delete;
  Clock& operator=(const Clock&) = delete;
  virtual ~Clock();

  // The current time.
  virtual TimePoint Now() const = 0;

  // Blocks the calling thread until Now() >= deadline.
  virtual void SleepUntil(TimePoint deadline) = 0;

  // Blocks on `cv` until it is notified or Now() >= deadline. `lock` must be
  // held on entry and is held again on return. May return early (spuriously):
  // callers re-check their condition in a loop, as with any condition variable.
  virtual void WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                         TimePoint deadline) = 0;
};

// The process's real clock. Thread-safe.
class JOBPACT_EXPORT SystemClock final : public Clock {
 public:
  // The shared process-wide instance.
  static std::shared_ptr<Clock> Default();

  TimePoint Now() const override;
  void SleepUntil(TimePoint deadline) override;
  void WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 TimePoint deadline) override;
};

// Whole seconds / milliseconds as a Duration.
constexpr Duration Seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}
constexpr Duration Millis(long long ms) {
  return std::chrono::duration_cast<Duration>(std::chrono::milliseconds(ms));
}
// A Duration as fractional seconds.
constexpr double ToSeconds(Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace jobpact

#endif  // JOBPACT_CLOCK_H_
