// Private: the control state (jobpact/queue_admin.h) as a runner last read it
// from its store. The store's lease step obeys pauses and concurrency limits
// itself; the runner needs the rules for what it decides on its own: a route
// of a failure class to the DLQ, and a delivery leased just before a pause
// (given back, no attempt spent). Read again at most once per refresh
// interval, at once after this runner changed the state, and whenever a
// caller forces it (RunUntilIdle does, so tests see a change at once).
// Thread-safe.
#ifndef JOBPACT_SRC_RUNNER_CONTROL_CACHE_H_
#define JOBPACT_SRC_RUNNER_CONTROL_CACHE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/queue_admin.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace internal {

class ControlCache {
 public:
  // REQUIRES: admin and clock outlive the cache; refresh > 0.
  ControlCache(QueueAdmin& admin, const Clock& clock, Duration refresh);

  // The state, read again first if it is older than the refresh interval or
  // was invalidated. A failed read keeps the last state (fail static: a
  // store that cannot be read does not lift a pause) and returns the error
  // in *error if given. Never null.
  std::shared_ptr<const ControlState> Get(Status* error = nullptr);
  // Reads the state now.
  Status Refresh();
  // The next Get reads the state again.
  void Invalidate() { stale_.store(true, std::memory_order_release); }

  // Shortcuts for the pipeline; false while no rule of the kind is set.
  // `now` is the caller's reading of the clock (the pipeline has one), so
  // that the common case, no rule set and the state not due, is two atomic
  // loads and no clock read.
  bool TypePaused(std::string_view job_type, TimePoint now);
  bool RoutesToDlq(std::string_view job_type, FailureClass c, TimePoint now);
  std::optional<int> DependencyConcurrencyLimit(std::string_view dependency, TimePoint now);

 private:
  QueueAdmin& admin_;
  const Clock& clock_;
  const Duration refresh_;
  // Reads the state again if it is due at `now`.
  Status RefreshIfDue(TimePoint now);

  std::atomic<bool> stale_{true};
  // When the state is due again (clock ticks since the epoch).
  std::atomic<Duration::rep> due_at_{0};
  // Set while the last state read holds no rule at all: the common case
  // costs two atomic loads per delivery, no lock.
  std::atomic<bool> empty_{true};
  PlainMutex mu_;
  std::shared_ptr<const ControlState> state_ JOBPACT_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_RUNNER_CONTROL_CACHE_H_
