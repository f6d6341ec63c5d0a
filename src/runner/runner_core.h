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
//   - maintenance: RunMaintenance() every maintenance_interval;
//   - the completion writer (CompletionWrites::kGrouped only): writes the
//     outcomes workers hand over, in groups (src/runner/completion_queue.h).
// Every wait goes through the injected Clock, so ManualClock drives them.
//
// Every status transition is reported once, through Emit(), to the
// observers (src/runner/transition_observers.h): the metrics, the log line
// and the user's.
//
// The implementation, by concern:
//   runner_core.cc          the handler registry, pause, renewals, give-back, Emit
//   enqueue.cc              Enqueue, EnqueueBatch, EnqueueJson
//   pipeline.cc             the delivery pipeline, one function per step
//                           (docs/pipeline.md), on a DeliveryRun (pipeline.h)
//   dead_letters.cc         ReplayDeadLetters, DiscardDeadLetter
//   job_runner_workers.cc   workers, watchdog, maintenance, shutdown
//   job_context.cc          what a handler sees, and the handler boundary
//   job_runner.cc           JobRunner::Create and the public object
//
// Thread-safe.
#ifndef JOBPACT_SRC_RUNNER_RUNNER_CORE_H_
#define JOBPACT_SRC_RUNNER_RUNNER_CORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/transition_event.h"
#include "src/internal/mutex.h"
#include "src/runner/completion_queue.h"
#include "src/runner/control_cache.h"
#include "src/runner/job_logger.h"
#include "src/runner/transition_observers.h"

namespace jobpact {
namespace internal {

struct DeliveryRun;  // src/runner/pipeline.h

// "a: msg; b: msg" for a list of field problems.
std::string JoinProblems(const std::vector<FieldError>& problems);
// True if `s` is empty or only white space.
bool IsBlank(std::string_view s);

// Cancellation signals of one running job, set by the watchdog or
// Shutdown() and read by JobContext::cancelled() on the handler's thread.
struct CancelFlags {
  std::atomic<bool> lost{false};      // Lease, lock or claim lost; or hung.
  std::atomic<bool> shutdown{false};  // Shutdown gave the lease back.
  // An operator cancelled the job (QueueAdmin::Cancel), seen at a renewal.
  std::atomic<bool> operator_cancel{false};
};

// A registered handler and its classifier. Immutable once registered.
struct HandlerEntry {
  std::string job_type;
  Handler handler;
  Classifier classifier;
  std::string dependency;  // Empty: no circuit breaker.
  // Rate limits (HandlerOptions): shared across processes, and local.
  std::optional<RateLimit> rate_limit;
  std::optional<RateLimit> local_rate_limit;
  // HandlerOptions::local_max_concurrency, and how many of the type's
  // handlers run now in this process (counted only with a limit).
  std::optional<int> local_max_concurrency;
  mutable std::atomic<int> local_running{0};
};
using HandlerMap = std::map<std::string, std::shared_ptr<const HandlerEntry>, std::less<>>;

// A worker's copy of the handler map, refreshed only when the registry's
// version moves, so the hot path takes no shared lock.
struct HandlerCache {
  std::uint64_t version = ~std::uint64_t{0};
  std::shared_ptr<const HandlerMap> map;
  // The retry budget of the job type this worker ran last (budgets live as
  // long as the runner), so that a run of one type takes no shared lock.
  std::string budget_type;
  RetryBudget* budget = nullptr;
  // CompletionWrites::kPerWorker: the job type of the outcomes the worker
  // keeps (a job of another type may not be quick: they are written first).
  std::string acks_type;
};

// The job a worker is running, as the watchdog sees it.
struct RunningJob {
  const Delivery* delivery = nullptr;  // Owned by the worker; immutable while running.
  CancelFlags* cancel = nullptr;       // Owned by the worker.
  TimePoint deadline;
  TimePoint next_renew;
  bool lock_held = false;
  bool claim_held = false;
  std::string dependency_slot;  // The dependency slot's lock key, if one is held.
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

  // Touched only by Start()/Shutdown()/the watchdog under RunnerCore::mu_
  // (another object's mutex, which GUARDED_BY cannot name from here).
  std::thread thread;

  PlainMutex mu;
  // The leased batch; entries [next, size) wait to start.
  std::vector<Delivery> batch JOBPACT_GUARDED_BY(mu);
  std::vector<TimePoint> batch_lease_expires JOBPACT_GUARDED_BY(mu);
  std::size_t next JOBPACT_GUARDED_BY(mu) = 0;
  bool running JOBPACT_GUARDED_BY(mu) = false;
  RunningJob job JOBPACT_GUARDED_BY(mu);  // Meaningful while `running`.
  bool hung JOBPACT_GUARDED_BY(mu) = false;
  // Shutdown gave this worker's leases back: its late outcome is not written.
  bool given_back JOBPACT_GUARDED_BY(mu) = false;
  // CompletionWrites::kPerWorker: the outcomes of finished jobs of the
  // batch not written yet (RunnerCore::FlushAcks), with what follows each
  // write and the index in `batch` their delivery came from.
  std::vector<CompletionRequest> acks JOBPACT_GUARDED_BY(mu);
  std::vector<AfterAck> acks_after JOBPACT_GUARDED_BY(mu);
  std::vector<std::size_t> acks_at JOBPACT_GUARDED_BY(mu);
  TimePoint acks_since JOBPACT_GUARDED_BY(mu);  // When the first of `acks` was kept.

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
  Result<EnqueueResult> Enqueue(Envelope&& envelope);
  Result<std::vector<EnqueueResult>> EnqueueBatch(std::vector<Envelope> envelopes);
  Result<EnqueueResult> EnqueueJson(std::string_view raw);
  Status Start();
  Status Shutdown(Duration grace);
  Result<int> RunUntilIdle();
  Status RunMaintenance();
  Status Pause(std::string_view job_type);
  Status Resume(std::string_view job_type);
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
  // held, its lock, idempotency claim and dependency slot (a lock key;
  // empty: none). kAborted if the lease, lock or claim was lost (a lost
  // slot is logged: it guards a limit, not the work). Sets
  // cancel->operator_cancel when the store reports an operator's cancel.
  Status RenewDelivery(const Delivery& d, bool lock_held, bool claim_held,
                       std::string_view dependency_slot, std::string_view checkpoint,
                       CancelFlags* cancel);
  // The lock and idempotency claim part of it: kAborted naming the one
  // lost, else the first other error.
  Status RenewGuards(const Delivery& d, bool lock_held, bool claim_held);

 private:
  enum class State { kCreated, kRunning, kStopping, kStopped };

  // Reports one transition to every observer (metrics, log line, the
  // user's). Never throws.
  void Emit(const TransitionEvent& e) const { observers_.Emit(e); }

  // --- Enqueue (enqueue.cc) ---
  // Validates `env` and, if valid, fills it as Enqueue stores it: the
  // policy's max_attempts if none was given, then PrepareForEnqueue. Returns
  // the problems (empty: ready to store; otherwise `env` is left as given).
  std::vector<FieldError> PrepareEnvelope(Envelope& env, TimePoint now) const;
  // The event of one stored job (or the dedup hit of a duplicate).
  void ReportEnqueued(const Envelope& env, const EnqueueResult& r);
  // Counts the `n` envelopes of a refused enqueue in metric::kEnqueueRefused
  // if `s` is backpressure's refusal (kResourceExhausted).
  void ReportRefused(const Envelope* envs, std::size_t n, const Status& s);

  // --- The pipeline (pipeline.cc), SPEC 3 and docs/pipeline.md ---
  // Runs the steps below for one delivery; `slot` is null under RunUntilIdle.
  // Each step either lets the delivery go on (nullopt) or ends it with its
  // one Completion, which Finish() writes.
  void ProcessDelivery(Delivery& d, WorkerSlot* slot, HandlerCache& cache);
  // Makes sure the lease of a delivery that waited in a batch is still ours,
  // renewing it if a renewal is due. False: skip it (it runs elsewhere); the
  // guards its lease step took are given back.
  bool EnsureLease(Delivery& d);
  // Renews the lease of a delivery that has not started, with the guards
  // its lease step took (Delivery::guards_taken): they were taken with the
  // lease, for as long, so they are renewed with it. Guards that cannot be
  // renewed are given back and the pipeline takes them the usual way.
  Result<Lease> RenewWaiting(Delivery& d);
  // Releases the guards the lease step took for `d` (owner only; a guard
  // no longer held is left alone) and clears d.guards_taken.
  void ReleaseLeasedGuards(Delivery& d);
  // The -> running transition of a delivery.
  void ReportDelivered(const DeliveryRun& run) const;
  // 1. Validate.
  std::optional<Completion> Validate(const DeliveryRun& run) const;
  // 2. TTL and deadlines.
  std::optional<Completion> CheckTtlAndDeadlines(const DeliveryRun& run) const;
  // 3. Attempt budget.
  std::optional<Completion> CheckAttemptBudget(const DeliveryRun& run) const;
  // Cancel (SPEC 10): a job an operator cancelled is discarded unrun.
  std::optional<Completion> CheckCancelled(const DeliveryRun& run) const;
  // Pause (SPEC 10): a job of a type paused after it was leased is given
  // back (the store's lease step leases no paused type).
  std::optional<Completion> CheckPaused(const DeliveryRun& run) const;
  // 4. Dedup at delivery.
  std::optional<Completion> CheckDedup(const DeliveryRun& run);
  // 5. Lock.
  std::optional<Completion> AcquireLock(DeliveryRun& run);
  // 6. Idempotency.
  std::optional<Completion> ClaimIdempotency(DeliveryRun& run);
  // 7. Run the handler: find it, pass its circuit breaker, call it under its
  // execution timeout, record the breaker's outcome.
  std::optional<Completion> RunHandler(DeliveryRun& run);
  std::optional<Completion> AcquireCircuitPermit(DeliveryRun& run);
  // The rate limiters of the job (rate_limits.cc): its type's, local and
  // shared, and its dependency's. Refused: rescheduled to the limiter's
  // time with reason "rate_limited", no attempt spent.
  std::optional<Completion> AcquireRatePermits(DeliveryRun& run);
  // The concurrency slots of the job (concurrency_slots.cc): its type's in
  // this process, then its dependency's across runners. Refused: nothing
  // held, rescheduled shortly with reason "concurrency_limited", no
  // attempt spent. ReleaseConcurrencySlots gives back what was taken.
  std::optional<Completion> AcquireConcurrencySlots(DeliveryRun& run);
  void ReleaseConcurrencySlots(DeliveryRun& run);
  // A handler's RateLimited: holds the job's limiter until now + `for_`,
  // here and (for a dependency, or a type with a shared rate) everywhere.
  void BackOffLimiter(const DeliveryRun& run, Duration for_);
  void InvokeUnderDeadline(DeliveryRun& run);
  void RecordCircuitOutcome(const DeliveryRun& run) const;
  // 8. Classify and decide: exactly one transition.
  Completion ClassifyAndDecide(DeliveryRun& run);
  // Step 8 for a failed attempt: the retry policy, the total deadline and
  // the retry budget decide retry_scheduled (after the backoff, or deferred
  // to the time the budget allows), dead_lettered or failed.
  Completion DecideFailure(const Delivery& d, Failure failure, TimePoint finished,
                           bool timed_out);
  Completion ScheduleRetry(const Envelope& env, const RetryDecision& decision,
                           TimePoint finished, bool timed_out);
  // The retry budget's say on a retry due at `ready_at` (which it may move
  // later). False: the retry is refused and `c` dead-letters the job.
  bool ApplyRetryBudget(const Envelope& env, Completion& c, TimePoint& ready_at);
  // 9. Record, ack, release, report: writes the outcome (or hands it to the
  // completion writer, which writes it in a group) and then AfterWrite.
  void Finish(DeliveryRun& run, Completion completion);
  // Writes a group of outcomes in one CompleteBatch, then does what
  // follows each write (AfterWrite).
  void WriteGroup(const std::vector<CompletionRequest>& group, const std::vector<AfterAck>& after);
  // Writes the outcomes `slot` keeps (WorkerSlot::acks) in one
  // CompleteBatch, then reports each. From its worker, the written
  // deliveries go back to their places in the batch (their buffers serve
  // the next lease); from the watchdog or Shutdown they are dropped.
  void FlushAcks(WorkerSlot& slot, bool from_worker);
  // 9 after the outcome's write: the idempotent result of a transactional
  // effect, the lock if still held, the report.
  void AfterWrite(const Delivery& d, const Completion& c, const AfterAck& after,
                  const Status& acked);
  // 9.1: records the idempotent result before the ack or releases the
  // claim; a failed record turns `c` into a failed attempt. True: a
  // transactional effect commits with the ack, so the result is recorded
  // after it (RecordAfterAck).
  bool RecordOrReleaseClaim(const DeliveryRun& run, Completion& c);
  // With a transactional effect: extends the claim so that it is certainly
  // held when the effect commits. False: lost, and `c` is a failed attempt.
  bool ConfirmClaim(const DeliveryRun& run, Completion& c);
  // Records the result before the ack; a failure turns `c` into a failed
  // attempt (the claim is kept).
  void RecordResult(const DeliveryRun& run, Completion& c);
  // Drops the delivery's claim so that a retry can claim the key again.
  void ReleaseClaim(const Delivery& d);
  // True if the key's record is completed by `owner`.
  bool ClaimRecordedBy(const std::string& key, const std::string& owner);
  // After a completion with guards (Completion::guards) came back not OK:
  // does what of them the store may not have done. True if the claim to
  // record was lost: it then wrote and reported the failed attempt itself.
  bool RecoverGuards(const Delivery& d, const Completion& c, const AfterAck& after,
                     const Status& acked);
  // Step 9 with a transactional effect: records the idempotent result after
  // the ack committed the effect (a claim the backend already completed for
  // this delivery counts as recorded); a failure is logged, never retried.
  // RecoverGuards calls it too, after a completion whose write failed
  // (`acked` false): the handler's effect happened all the same.
  void RecordAfterAck(const Delivery& d, const Completion& c, bool acked = true);
  void ReleaseLock(const Delivery& d);
  // 9.4-9.6: the transition's event if the ack was stored; otherwise the
  // stale-completion or completion-failed report.
  void ReportCompletion(const Delivery& d, const Completion& c, const AfterAck& after,
                        const Status& acked);
  // The completion writer's thread (CompletionWrites::kGrouped): writes what
  // the workers hand over, in groups, until Shutdown closes the queue.
  void CompletionWriterLoop();
  // Helpers of the steps.
  Completion Requeue(const DeliveryRun& run, std::string_view why, Duration delay,
                     bool lock_wait, std::optional<Failure> failure) const;
  Completion BackendTrouble(const DeliveryRun& run, std::string_view what,
                            const Status& s) const;
  Duration LockBusyDelay() const;

  // --- DLQ actions (dead_letters.cc) ---
  // The entries a replay selects; ids that cannot be selected go to
  // report.failed. The backend's error if the selection cannot be listed.
  // --- DLQ actions (dead_letters.cc) ---
  // Reports the facade's replays and discards as events and log lines.
  std::shared_ptr<OperationsListener> NewDlqListener();

  // --- Shared (runner_core.cc) ---
  // The circuit state gauge of one dependency.
  void SetCircuitGauge(std::string_view dependency, CircuitState state);
  // Gives a lease back (running -> queued, no attempt spent). A delivery
  // that has not started gives back the guards its lease step took in the
  // same write (`started`: it has, and its handler may still be writing, so
  // they are left to expire with their TTL).
  void GiveBack(const Delivery& d, std::string_view why, bool started);
  // Valid while `cache` holds its map (the worker's whole delivery).
  const HandlerEntry* FindHandler(std::string_view job_type, HandlerCache& cache);
  // options_.retry_budgets->ForJobType(job_type), through the cache.
  RetryBudget& BudgetFor(std::string_view job_type, HandlerCache& cache);
  // Publishes the retry policies to the store (QueueAdmin::PublishPolicies)
  // when they changed since the last time, for operator tools.
  Status PublishPoliciesIfChanged();
  Duration JitteredDelay(Duration lo, Duration hi) const;
  // The event of one lease recovery (SPEC 5, 8).
  void ReportLeaseRecovery(const LeaseRecovery& r);
  void WakeOneWorker();
  // Wakes enough idle workers for `jobs` new jobs (one per dequeue batch).
  void WakeWorkers(std::size_t jobs);

  // --- Threads (job_runner_workers.cc) ---
  void SpawnWorkerLocked(bool replacement) JOBPACT_REQUIRES(mu_);
  void WorkerLoop(const std::shared_ptr<WorkerSlot>& slot);
  // The Dequeue request of every worker (and of RunUntilIdle).
  DequeueRequest MakeDequeueRequest(std::string worker_id) const;
  // A worker's next batch (up to request.max_jobs deliveries, into the
  // emptied `batch`). One lease is in flight per runner: a worker that
  // needs work while another leases waits for that lease, which took a
  // batch for it too (the shared lease). Sets `*full` when the lease came
  // back with all it asked for (more may be ready). Empty: no work now.
  Status TakeBatch(const DequeueRequest& request, std::vector<Delivery>* batch, bool* full);
  // Waits for work after an empty Dequeue: up to poll_interval, or until an
  // enqueue of this runner moves enqueue_seq_ past `seen_enqueues`, or
  // (with a store that can wake it, QueueBackend::WaitForWork: one idle
  // worker at a time waits there) until any process makes a job ready, or
  // until WakeIdleWorker. ~0: after an error, wait the whole interval.
  void IdleWait(std::uint64_t seen_enqueues);
  // Waits in the store; false if it cannot (then IdleWait sleeps instead).
  bool WaitInStore(std::uint64_t seen_enqueues, TimePoint until);
  // Wakes one worker sleeping in IdleWait (not the one watching the store),
  // if any: for a lease that came back full.
  void WakeIdleWorker();
  void WatchdogLoop();
  // Renews the slot's leases and detects a hung handler; true if the slot
  // kept outcomes (WorkerSlot::acks) for a watchdog tick or more.
  bool WatchSlot(const std::shared_ptr<WorkerSlot>& slot, TimePoint now,
                 std::vector<HungWorkerInfo>* hung);
  void MaintenanceLoop();
  // Publishes the busy and hung worker gauges from the counters, under
  // gauges_mu_.
  void SetWorkerGauges();

  // Immutable after construction.
  const JobRunnerOptions options_;
  const JobLogger logger_;
  const TransitionObservers observers_;  // Uses *options_.metrics and logger_.
  std::string worker_prefix_;

  // The handler registry: copy-on-write, versioned.
  mutable PlainMutex handlers_mu_;
  std::shared_ptr<const HandlerMap> handlers_ JOBPACT_GUARDED_BY(handlers_mu_);
  std::atomic<std::uint64_t> handlers_version_{0};

  // The store's control state as last read (pause, routes to the DLQ).
  std::unique_ptr<ControlCache> control_;
  // This process's rate limiters (HandlerOptions::local_rate_limit, and a
  // handler's backoff of a type with no shared rate).
  const std::shared_ptr<RateLimitStore> local_rates_;
  // Set once a backoff was stored in local_rates_: from then on every job
  // asks its local limiters too.
  std::atomic<bool> local_backoffs_{false};
  // Where the next dependency slot search starts (spreads the runners'
  // tries over the slots).
  std::atomic<std::uint32_t> slot_cursor_{0};
  // The queue is a store whose deliveries are the envelopes it checked at
  // enqueue (StoreBackend::DeliversStoredEnvelopes): step 1 then applies
  // only the checks that store could not make for this runner.
  const bool store_checked_envelopes_;
  // The DLQ actions, through the operator facade (dead_letters.cc).
  std::unique_ptr<Operations> ops_;
  PlainMutex published_mu_;
  std::string published_ JOBPACT_GUARDED_BY(published_mu_);  // What was published.

  // Lifecycle and threads.
  mutable PlainMutex mu_;
  State state_ JOBPACT_GUARDED_BY(mu_) = State::kCreated;
  std::vector<std::shared_ptr<WorkerSlot>> slots_ JOBPACT_GUARDED_BY(mu_);
  std::thread watchdog_ JOBPACT_GUARDED_BY(mu_);
  std::thread maintenance_ JOBPACT_GUARDED_BY(mu_);
  int next_worker_index_ JOBPACT_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stopping_{false};      // Workers stop taking work.
  std::atomic<bool> stop_background_{false};  // Watchdog and maintenance exit.

  // The shared lease (TakeBatch): one Dequeue in flight per runner, for
  // the leasing worker and for those that came to lease meanwhile; their
  // batches wait in leased_for_others_ until they take them.
  PlainMutex lease_mu_;
  CondVar lease_cv_;  // A lease ended (waiters wait only while one is in flight).
  bool leasing_ JOBPACT_GUARDED_BY(lease_mu_) = false;
  int lease_waiters_ JOBPACT_GUARDED_BY(lease_mu_) = 0;
  // Counts the leases ended; a waiter whose lease came back short (the
  // store had no more ready) leaves empty-handed instead of leasing again.
  std::uint64_t leases_ended_ JOBPACT_GUARDED_BY(lease_mu_) = 0;
  bool last_lease_short_ JOBPACT_GUARDED_BY(lease_mu_) = false;
  std::vector<std::vector<Delivery>> leased_for_others_ JOBPACT_GUARDED_BY(lease_mu_);

  // Idle workers wait here; Enqueue wakes one.
  PlainMutex work_mu_;
  CondVar work_cv_;
  std::atomic<std::uint64_t> enqueue_seq_{0};
  std::atomic<int> idle_workers_{0};
  // An idle worker waits in the store (IdleWait); the others sleep on
  // work_cv_.
  bool store_watched_ JOBPACT_GUARDED_BY(work_mu_) = false;
  // Wake-ups handed to sleepers by WakeIdleWorker, one worker each.
  int wake_tokens_ JOBPACT_GUARDED_BY(work_mu_) = 0;
  // False once the store said it cannot trim finished jobs by count
  // (kUnimplemented; logged once): later passes only purge by age.
  std::atomic<bool> store_trims_{true};
  // False once the queue said it cannot wait for work (WaitForWork).
  std::atomic<bool> store_wakes_{true};

  // Grouped completion writes (JobRunnerOptions::completion_writes); null
  // when a worker writes its own. Opened by Start, closed by Shutdown.
  static constexpr std::size_t kMaxCompletionGroup = 256;
  // CompletionWrites::kPerWorker: a handler that ran this long is not quick;
  // its outcome and the ones kept before it are written at once.
  static constexpr Duration kQuickHandler = std::chrono::milliseconds(1);
  const std::unique_ptr<CompletionQueue> completions_;
  std::thread completion_writer_ JOBPACT_GUARDED_BY(mu_);
  // CompletionWrites::kPerWorker: each worker keeps its quick jobs'
  // outcomes and writes them together (WorkerSlot::acks, FlushAcks).
  const bool per_worker_acks_;
  // The queue releases this runner's locks and records its claims with each
  // completion (QueueBackend::CompletesGuards; not with per-worker acks,
  // whose kept outcomes would hold the keys until the batch ends).
  const bool guards_with_acks_;

  // The watchdog and maintenance threads wait here.
  PlainMutex background_mu_;
  CondVar background_cv_;

  // Held while SetWorkerGauges reads the counters and publishes them, so
  // that the last publication carries the latest counts: without it a
  // thread that read the counters before another's change could publish
  // after it and leave the gauge stale until the next publication.
  PlainMutex gauges_mu_;

  // Shutdown waits here for workers to exit.
  PlainMutex exit_mu_;
  CondVar exit_cv_;

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
