// File: src/runner/runner_core.h
//
// RunnerCore is the JobRunner's machinery: the handler registry, the
// delivery pipeline (SPEC 3), the worker pool, the watchdog that renews
// leases and detects hung handlers (SPEC 5), the maintenance pass and
// graceful shutdown. JobRunnerImpl (the public object) owns it through a
// shared_ptr, and so does every thread it starts: a hung handler's thread is
// detached at shutdown and may return long after the JobRunner is gone; it
// then finds the core still alive, and its late completion is refused by the
// lease fence instead of touching freed memory.
//
// Threads:
//   - workers (options.workers, plus bounded replacements for hung ones):
//     Dequeue a batch, run it one job at a time;
//   - the watchdog: renews the lease, lock and claim of running jobs (and the
//     leases of jobs waiting in a batch) every third of the visibility
//     timeout, and declares a worker hung past deadline + hung_grace;
//   - maintenance: RunMaintenance() every maintenance_interval.
// Every wait goes through the injected Clock, so ManualClock drives them.
//
// Thread-safe.
#ifndef JOBPACT_SRC_RUNNER_RUNNER_CORE_H_
#define JOBPACT_SRC_RUNNER_RUNNER_CORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jobpact/job_runner.h"
#include "src/runner/job_logger.h"

namespace jobpact {
namespace internal {

// Cancellation signals of one running job, set by the watchdog or
// Shutdown() and read by JobContext::cancelled() on the handler's thread.
struct CancelFlags {
  std::atomic<bool> lost{false};      // Lease, lock or claim lost; or hung.
  std::atomic<bool> shutdown{false};  // Shutdown gave the lease back.
};

// A registered handler and its classifier. Immutable once registered.
struct HandlerEntry {
  std::string job_type;
  Handler handler;
  Classifier classifier;
  std::string dependency;  // Empty: no circuit breaker.
};
using HandlerMap = std::map<std::string, std::shared_ptr<const HandlerEntry>, std::less<>>;

// A worker's copy of the handler map, refreshed only when the registry's
// version moves, so the hot path takes no shared lock.
struct HandlerCache {
  std::uint64_t version = ~std::uint64_t{0};
  std::shared_ptr<const HandlerMap> map;
};

// The job a worker is running, as the watchdog sees it.
struct RunningJob {
  const Delivery* delivery = nullptr;  // Owned by the worker; immutable while running.
  CancelFlags* cancel = nullptr;       // Owned by the worker.
  TimePoint deadline;
  TimePoint next_renew;
  bool lock_held = false;
  bool claim_held = false;
  bool renewing = true;  // False once the lease was lost or the worker hung.
};

// One worker thread and what it holds. The fields under `mu` are shared with
// the watchdog and Shutdown().
struct WorkerSlot {
  WorkerSlot(std::string worker_id, bool is_replacement)
      : id(std::move(worker_id)), replacement(is_replacement) {}

  // Immutable after construction.
  const std::string id;
  const bool replacement;

  // Touched only by Start()/Shutdown()/the watchdog under RunnerCore::mu_.
  std::thread thread;

  std::mutex mu;
  // Guarded by mu: the leased batch; entries [next, size) wait to start.
  std::vector<Delivery> batch;
  std::vector<TimePoint> batch_lease_expires;
  std::size_t next = 0;
  bool running = false;
  RunningJob job;  // Meaningful while `running`.
  bool hung = false;
  // Shutdown gave this worker's leases back: its late outcome is not written.
  bool given_back = false;

  std::atomic<bool> exited{false};
};

class RunnerCore : public std::enable_shared_from_this<RunnerCore> {
 public:
  // REQUIRES: `options` validated and defaulted (see Create).
  explicit RunnerCore(JobRunnerOptions options);
  ~RunnerCore();

  RunnerCore(const RunnerCore&) = delete;
  RunnerCore& operator=(const RunnerCore&) = delete;

  // The JobRunner API (see job_runner.h).
  Status Handle(std::string_view job_type, Handler handler, HandlerOptions options);
  Result<EnqueueResult> Enqueue(Envelope envelope);
  Result<std::vector<EnqueueResult>> EnqueueBatch(std::vector<Envelope> envelopes);
  Result<EnqueueResult> EnqueueJson(std::string_view raw);
  Status Start();
  Status Shutdown(Duration grace);
  Result<int> RunUntilIdle();
  Status RunMaintenance();
  void Pause(std::string_view job_type);
  void Resume(std::string_view job_type);
  Result<ReplayReport> ReplayDeadLetters(const ReplayRequest& request);
  Status DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                           std::string_view reason);
  RunnerStats Stats() const;
  PolicyRegistry& policies() { return *options_.policies; }
  const JobRunnerOptions& options() const { return options_; }

  // Metrics and a log line for a circuit breaker's state change; installed
  // as on_state_change of the breakers Create() makes.
  void OnCircuitChange(const CircuitStateChange& change);

  // --- Used by ContextImpl ---
  Clock& clock() const { return *options_.clock; }
  const JobLogger& logger() const { return logger_; }
  // Renews a delivery's lease (storing `checkpoint` if not empty) and, if
  // held, its lock and idempotency claim. kAborted if any of them was lost.
  Status RenewDelivery(const Delivery& d, bool lock_held, bool claim_held,
                       std::string_view checkpoint);

 private:
  enum class State { kCreated, kRunning, kStopping, kStopped };

  // What the pipeline holds for one delivery, on the worker's stack.
  struct DeliveryRun;

  // --- Enqueue (job_runner.cc) ---
  // Validates `env` and, if valid, fills it as Enqueue stores it: the
  // policy's max_attempts if none was given, then PrepareForEnqueue. Returns
  // the problems (empty: ready to store; otherwise `env` is left as given).
  std::vector<FieldError> PrepareEnvelope(Envelope& env, TimePoint now) const;
  // The metrics and log line of one stored (or duplicate) job.
  void ReportEnqueued(const Envelope& env, const EnqueueResult& r);

  // --- The pipeline (job_runner.cc) ---
  // Runs SPEC 3 steps 1-9 for one delivery; `slot` is null under RunUntilIdle.
  void ProcessDelivery(Delivery& d, WorkerSlot* slot, HandlerCache& cache);
  // Makes sure the lease of a delivery that waited in a batch is still ours,
  // renewing it if a renewal is due. False: skip it (it runs elsewhere).
  bool EnsureLease(Delivery& d);
  // Step 9: idempotency record or release, the one Complete(), lock release,
  // metrics and the log line.
  void Finish(DeliveryRun& run, Completion completion);
  // Step 8 for a failed attempt: the retry policy, the total deadline and
  // the retry budget decide retry_scheduled (after the backoff, or deferred
  // to the time the budget allows), dead_lettered or failed.
  Completion DecideFailure(const DeliveryRun& run, Failure failure, TimePoint finished,
                           bool timed_out);
  // The circuit state gauge of one dependency.
  void SetCircuitGauge(std::string_view dependency, CircuitState state);
  // Gives a lease back (running -> queued, no attempt spent).
  void GiveBack(const Delivery& d, std::string_view why);
  // Valid while `cache` holds its map (the worker's whole delivery).
  const HandlerEntry* FindHandler(std::string_view job_type, HandlerCache& cache);
  bool IsPaused(std::string_view job_type) const;
  Duration JitteredDelay(Duration lo, Duration hi) const;
  // Step 9 with a transactional effect: records the idempotent result after
  // the ack committed the effect (a claim the backend already completed for
  // this delivery counts as recorded); a failure is logged, never retried.
  void RecordAfterAck(const DeliveryRun& run, const Completion& c);
  void EmitTransitionMetrics(const Envelope& env, const Completion& c);
  void LogTransition(const DeliveryRun& run, const Completion& c);
  // The metrics and log line of one lease recovery (SPEC 5, 8).
  void ReportLeaseRecovery(const LeaseRecovery& r);
  void WakeOneWorker();
  // Wakes enough idle workers for `jobs` new jobs (one per dequeue batch).
  void WakeWorkers(std::size_t jobs);

  // --- Threads (job_runner_workers.cc) ---
  void SpawnWorkerLocked(bool replacement);  // REQUIRES: mu_ held.
  void WorkerLoop(const std::shared_ptr<WorkerSlot>& slot);
  void IdleWait(std::uint64_t seen_enqueues);
  void WatchdogLoop();
  void WatchSlot(const std::shared_ptr<WorkerSlot>& slot, TimePoint now,
                 std::vector<HungWorkerInfo>* hung);
  void MaintenanceLoop();
  void SetWorkerGauges();

  // Immutable after construction.
  const JobRunnerOptions options_;
  const JobLogger logger_;
  std::string worker_prefix_;

  // The handler registry: copy-on-write, versioned.
  mutable std::mutex handlers_mu_;
  std::shared_ptr<const HandlerMap> handlers_;  // Guarded by handlers_mu_.
  std::atomic<std::uint64_t> handlers_version_{0};

  mutable std::mutex paused_mu_;
  std::set<std::string, std::less<>> paused_;  // Guarded by paused_mu_.
  std::atomic<int> paused_count_{0};

  // Lifecycle and threads.
  mutable std::mutex mu_;
  State state_ = State::kCreated;                    // Guarded by mu_.
  std::vector<std::shared_ptr<WorkerSlot>> slots_;  // Guarded by mu_.
  std::thread watchdog_;                             // Guarded by mu_.
  std::thread maintenance_;                          // Guarded by mu_.
  int next_worker_index_ = 0;                        // Guarded by mu_.
  std::atomic<bool> stopping_{false};      // Workers stop taking work.
  std::atomic<bool> stop_background_{false};  // Watchdog and maintenance exit.

  // Idle workers wait here; Enqueue wakes one.
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::atomic<std::uint64_t> enqueue_seq_{0};
  std::atomic<int> idle_workers_{0};

  // The watchdog and maintenance threads wait here.
  std::mutex background_mu_;
  std::condition_variable background_cv_;

  // Shutdown waits here for workers to exit.
  std::mutex exit_mu_;
  std::condition_variable exit_cv_;

  // Counters for Stats().
  std::atomic<std::int64_t> deliveries_{0};
  std::atomic<int> busy_workers_{0};
  std::atomic<int> hung_workers_{0};        // Hung now.
  std::atomic<int> hung_workers_total_{0};  // Ever declared hung.
  std::atomic<int> replacement_workers_{0};
  std::atomic<int> live_workers_{0};
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_RUNNER_RUNNER_CORE_H_
