// The part every backend's real-process crash test shares: worker
// processes killed while they open a fresh store; then workers and a
// producer started, killed with SIGKILL at random moments (one at a time,
// and once all at once) and replaced until the store has nothing pending,
// then stopped cleanly; and the checks every store answers the same way
// (the producers' batches, each job's redeliveries traced to the killed).
// What each test checks of its effects is its own, from its store.
#ifndef JOBPACT_TESTS_SUPPORT_CRASH_RIG_H_
#define JOBPACT_TESTS_SUPPORT_CRASH_RIG_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/queue_admin.h"
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
  std::string binary;             // The worker program,
  std::vector<std::string> args;  // and its arguments.
  std::string dir;                // Each process's stderr goes to dir/worker-<n>.stderr.
  int workers = 3;                // Running at once.
  int max_rounds = 12;            // Kill rounds, at most.
  std::chrono::seconds budget{120};
  // The pause before each kill round, drawn from [min_pause, max_pause].
  std::chrono::milliseconds min_pause{50};
  std::chrono::milliseconds max_pause{300};
  // The first `spared` workers are never killed (the soak test reads the
  // memory log of a worker that lives through the whole run).
  int spared = 0;
  // The kill round (counted from 0) that kills every worker at once and
  // then starts them all again; -1 for none.
  int kill_all_round = 3;
  // Non-empty: the arguments of `binary` as a producer (RunProducer in
  // crash_worker.h). One producer runs beside the workers from the start;
  // the first `producer_kills` rounds that find one running kill it while
  // it is inside an EnqueueBatch call (its log's last line is "sent") and
  // start a new one. A producer that exits with status 0 is done; the loop
  // then waits for the workers to drain what it enqueued.
  std::vector<std::string> producer_args;
  int producer_kills = 2;
  // The store's pending jobs (see Pending); an error ends the loop.
  std::function<Result<std::int64_t>()> pending;
};

struct KillLoopResult {
  std::string failure;  // Empty unless something went wrong (said here).
  bool done = false;    // Nothing pending and no producer left (else out of time).
  int rounds = 0;
  int kills = 0;  // Processes killed, workers and producers.
  int producer_kills = 0;
  bool killed_all_at_once = false;
  std::set<pid_t> killed;
  double seconds = 0;
};

// Starts loop.workers processes (and a producer, see KillLoop); then, until
// nothing is pending or the budget is spent, every min_pause-max_pause runs
// a kill round (at most max_rounds): SIGKILL to the producer while it may
// still be killed, to every worker not spared in round kill_all_round, else
// to one of them at random, and replacements for all it killed. A worker that exits by
// itself, or a producer that exits with an error, is a failure. At the end
// every worker gets SIGTERM and 10 s to exit with status 0. No process
// outlives the call.
KillLoopResult RunKillLoop(const KillLoop& loop);

// Kills during the opening of a fresh store: processes of `binary` (a
// crash worker that brackets its Open with OpenLog, see crash_worker.h)
// started one after another and each killed with SIGKILL a moment after
// its start, until `inside_open` kills landed inside Open or `max_rounds`
// processes were killed. The moment adapts: later when the last kill came
// before "opening", earlier when it came after "opened", so that the kills
// gather inside Open, where a fresh store runs its migrations.
struct StartupKills {
  std::string binary;
  std::vector<std::string> args;
  std::string dir;  // The workers' log_dir, where OpenLog writes.
  int inside_open = 5;
  int max_rounds = 60;
};

struct StartupKillsResult {
  std::string failure;
  int kills = 0;
  int inside_open = 0;  // Kills that landed between "opening" and "opened".
  std::set<pid_t> killed;
};

StartupKillsResult KillDuringStartup(const StartupKills& startup);

// KillDuringStartup of `binary` with `args` (log_dir `dir`) and the
// defaults, its result in *result; what went wrong ("" if nothing): a
// failure, or no kill that landed inside Open.
std::string KillWhileOpening(const std::string& binary, const std::vector<std::string>& args,
                             const std::string& dir, StartupKillsResult* result);

// Enqueues `count` jobs (CrashJob of type_of(n)) in batches of 500 and
// returns their ids in order.
Result<std::vector<std::string>> EnqueueJobs(QueueBackend& queue, Clock& clock, int count,
                                             const std::function<std::string(int)>& type_of);

// The stored history of a job as the store keeps it: JSON entries in
// order, "to" and "worker" on deliveries, "reason" on every entry.
using RawHistory = std::function<Result<std::vector<nlohmann::json>>(const std::string& id)>;

// A kill loop run and what every store must show after it.
struct CrashOutcome {
  KillLoopResult run;
  // Empty unless a check failed: each names the job and what is wrong.
  std::vector<std::string> problems;
  // The jobs the store must hold: those enqueued before the loop, then
  // those of the producers' acknowledged batches and of cut batches that
  // are stored (whole).
  std::vector<std::string> ids;
  std::set<std::string> succeeded;
  std::map<std::string, pid_t> last_deliverer;  // Per job (the completer of a succeeded one).
  int dead_lettered = 0;
  int redelivered_jobs = 0;  // Jobs delivered more than once.
  int redeliveries = 0;      // Deliveries beyond the first, over all jobs.
  int claim_waits = 0;       // Redeliveries waiting for a lost worker's claim.
  int cut_stored = 0;        // Producer batches cut by a kill, found stored whole,
  int cut_absent = 0;        // and found absent.

  std::string Summary() const;  // One line of figures, for the test's output.
};

// Runs `loop`, then checks, from `admin` and each job's raw history:
//   - the producers' batches: every job of an acknowledged batch is
//     stored, and a batch whose call a kill cut short is stored whole or
//     not at all (EnqueueBatch is one atomic step);
//   - every job is in a final status or the DLQ (none lost, none stuck);
//   - every redelivery is explained by a lease lost by a worker the loop
//     killed, or by the idempotency claim such a worker left behind;
//   - a dead-lettered job is there only for "lease_expired_repeatedly",
//     after max_recoveries + 1 lost leases held by as many distinct killed
//     workers (the runner's default cap, which the workers keep).
// With `leases_lost_to_kills` false (the soak test, whose workers also
// stall and meet backend faults), the last two are not asked: a lease may
// then be lost by a live worker, and a job dead-lettered for it.
CrashOutcome RunKillLoopAndCheck(const KillLoop& loop, QueueAdmin& admin,
                                 std::vector<std::string> ids, const RawHistory& history,
                                 int max_recoveries, bool leases_lost_to_kills = true);

}  // namespace crash_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_SUPPORT_CRASH_RIG_H_
