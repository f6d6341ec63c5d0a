// Private: one wake-up source (a PostgreSQL LISTEN connection, an inotify
// descriptor on a SQLite file's directory) shared by every idle worker of a
// process. One thread at a time waits on the source; the others wait for
// what it reports, so that N idle workers cost one connection or descriptor
// and one blocking call, not N.
#ifndef JOBPACT_SRC_INTERNAL_WAKE_FANOUT_H_
#define JOBPACT_SRC_INTERNAL_WAKE_FANOUT_H_

#include <cstdint>

#include "jobpact/clock.h"
#include "jobpact/result.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace internal {

class WakeFanout {
 public:
  // Waits up to `timeout` for a wake-up. `wait_source(Duration)` blocks on
  // the source up to the time it is given and returns true if woken; it
  // runs on one caller at a time. True if a wake-up was seen after this
  // call began. False on timeout, and also at once when the caller that
  // waited on the source returned without a wake-up (its own timeout, or
  // an error, which goes to that caller only): the next call then waits on
  // the source itself, so the source stays watched while anyone waits.
  // The kernel keeps the time (a condition variable, a poll): nothing here
  // reads a clock.
  template <typename WaitSource>
  Result<bool> Wait(Duration timeout, WaitSource&& wait_source) JOBPACT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const std::uint64_t seen = wakeups_;
    if (waiting_) {
      cv_.WaitFor(mu_, timeout,
                  [&]() JOBPACT_REQUIRES(mu_) { return wakeups_ != seen || !waiting_; });
      return wakeups_ != seen;
    }
    waiting_ = true;
    Result<bool> woken = Result<bool>(false);
    {
      MutexUnlock unlocked(mu_);
      woken = wait_source(timeout);
    }
    waiting_ = false;
    if (woken.ok() && *woken) ++wakeups_;
    cv_.NotifyAll();
    return woken;
  }

 private:
  PlainMutex mu_;
  CondVar cv_;
  bool waiting_ JOBPACT_GUARDED_BY(mu_) = false;  // A caller waits on the source.
  std::uint64_t wakeups_ JOBPACT_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_WAKE_FANOUT_H_
