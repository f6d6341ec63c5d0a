// Private: one wake-up source (a PostgreSQL LISTEN connection, an inotify
// descriptor on a SQLite file's directory) shared by every idle worker of a
// process. One thread at a time waits on the source; the others wait for
// what it reports, so that N idle workers cost one connection or descriptor
// and one blocking call, not N. When the waiting thread returns without a
// wake-up, the next caller still waiting takes its place, so the source is
// watched for as long as anyone waits.
#ifndef JOBPACT_SRC_INTERNAL_WAKE_FANOUT_H_
#define JOBPACT_SRC_INTERNAL_WAKE_FANOUT_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "jobpact/clock.h"
#include "jobpact/result.h"

namespace jobpact {
namespace internal {

class WakeFanout {
 public:
  // Waits up to `timeout` (real time: the source is a kernel wait) for a
  // wake-up. `wait_source(Duration)` blocks on the source up to the time it
  // is given and returns true if woken; it runs on one caller at a time.
  // True if a wake-up was seen after this call began; an error of the
  // source is returned to the caller that ran it (the others keep waiting).
  template <typename WaitSource>
  Result<bool> Wait(Duration timeout, WaitSource&& wait_source) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    const std::uint64_t seen = wakeups_;
    while (waiting_) {
      cv_.wait_until(lock, deadline, [&] { return wakeups_ != seen || !waiting_; });
      if (wakeups_ != seen) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
    }
    waiting_ = true;
    lock.unlock();
    const auto left = deadline - std::chrono::steady_clock::now();
    Result<bool> woken =
        wait_source(std::chrono::duration_cast<Duration>(std::max(left, decltype(left)::zero())));
    lock.lock();
    waiting_ = false;
    if (woken.ok() && *woken) ++wakeups_;
    cv_.notify_all();
    return woken;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool waiting_ = false;      // Guarded by mu_: a caller waits on the source.
  std::uint64_t wakeups_ = 0;  // Guarded by mu_.
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_WAKE_FANOUT_H_
