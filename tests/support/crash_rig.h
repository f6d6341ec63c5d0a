// The part every backend's real-process crash test shares: worker
// processes started, killed with SIGKILL at random moments and replaced
// until the store has nothing pending, then stopped cleanly. What each test
// then checks (no job lost, redeliveries traced to the killed, effects) is
// its own, from its store.
#ifndef JOBPACT_TESTS_SUPPORT_CRASH_RIG_H_
#define JOBPACT_TESTS_SUPPORT_CRASH_RIG_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/queue_backend.h"
#include "jobpact/result.h"

namespace jobpact {
namespace crash_testing {

// A fresh directory under the system's temporary one, removed with what it
// holds at destruction unless JOBPACT_KEEP_CRASH_DIR is set. Empty path if
// it could not be made.
class TempDir {
 public:
  explicit TempDir(std::string_view name = "jobpact_crash");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The worker processes' runner id is "crash-worker-<pid>": the pid of
// "crash-worker-<pid>[/anything]", -1 for any other name.
pid_t PidOfWorker(std::string_view worker);

// Jobs not yet at an outcome: queued, running and retry_scheduled.
std::int64_t Pending(const QueueStats& stats);

struct KillLoop {
  std::string binary;              // The worker program,
  std::vector<std::string> args;   // and its arguments.
  std::string dir;                 // Each worker's stderr goes to dir/worker-<n>.stderr.
  int workers = 3;                 // Running at once.
  int max_kills = 12;
  std::chrono::seconds budget{120};
  // The store's pending jobs (see Pending); an error ends the loop.
  std::function<Result<std::int64_t>()> pending;
};

struct KillLoopResult {
  std::string failure;  // Empty unless something went wrong (said here).
  bool done = false;    // Nothing pending at the end (else out of time).
  int kills = 0;
  std::set<pid_t> killed;
  double seconds = 0;
};

// Starts loop.workers processes; then, until nothing is pending or the
// budget is spent, every 50-300 ms kills one at random with SIGKILL (at
// most max_kills) and starts its replacement. A worker that exits by itself
// is a failure. At the end every worker gets SIGTERM and 10 s to exit with
// status 0. No worker outlives the call.
KillLoopResult RunKillLoop(const KillLoop& loop);

}  // namespace crash_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_SUPPORT_CRASH_RIG_H_
