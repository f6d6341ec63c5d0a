// File: jobpact/job_runner.h
//
// JobRunner enforces the execution contract (SPEC 2-8) on every job: it
// validates the envelope, applies TTL and deadlines, the attempt budget,
// dedup, the lock, idempotency, runs the handler under its timeout while
// renewing the lease, classifies the outcome, makes exactly one transition,
// and reports each transition as one TransitionEvent, from which its metrics
// and its one structured log line are made (jobpact/transition_event.h; add
// observers of your own in JobRunnerOptions::transition_observers). All state
// lives behind the four interfaces in JobRunnerOptions.
//
// Example (a service):
//   jobpact::JobRunnerOptions opts;
//   opts.backend = jobpact::InMemoryBackend(clock);  // or OpenBackend("sqlite:///...")
//   auto runner = jobpact::JobRunner::Create(opts).value();
//   runner->Handle("invoice.generate", [](jobpact::JobContext& ctx) -> jobpact::Status {
//     // ctx.payload() is the JSON payload; throw or return a Status to fail.
//     return jobpact::Status::Ok();
//   });
//   jobpact::Envelope job;
//   job.job_type = "invoice.generate";
//   job.payload = R"({"order_id":"ord_987"})";
//   job.idempotency_key = "invoice.generate:ord_987";
//   auto id = runner->Enqueue(job);
//   runner->Start();              // worker threads
//   ...
//   runner->Shutdown(jobpact::Seconds(30));
//
// In tests, skip Start() and drive the runner by hand with RunUntilIdle()
// and a testing::ManualClock (see jobpact/testing/harness.h).
#ifndef JOBPACT_JOB_RUNNER_H_
#define JOBPACT_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/circuit_breaker.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/failure.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/job.h"
#include "jobpact/lock_store.h"
#include "jobpact/metrics_sink.h"
#include "jobpact/operations.h"
#include "jobpact/queue_backend.h"
#include "jobpact/random.h"
#include "jobpact/rate_limit_store.h"
#include "jobpact/result.h"
#include "jobpact/retry_budget.h"
#include "jobpact/retry_policy.h"
#include "jobpact/status.h"
#include "jobpact/transition_event.h"

namespace jobpact {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Passed to a hook when a worker is declared hung (SPEC 5).
struct HungWorkerInfo {
  std::string worker_id;
  std::string job_id;
  std::string job_type;
  int attempt = 0;
  TimePoint deadline;  // The execution deadline it overran.
};

struct JobRunnerOptions {
  // --- Backends (shared_ptr: producers, runners and tests share them) ---
  // The preferred way: the queue, lock store and idempotency store of ONE
  // backend, from OpenBackend(url), InMemoryBackend(clock) or
  // SqliteBackend::bundle() (jobpact/backend.h). Set either this or the
  // three fields below, not both (kInvalidArgument). After Create,
  // options().backend and the three fields hold the stores in use.
  BackendBundle backend;
  // Or each store by hand. A queue is required (here or in `backend`).
  std::shared_ptr<QueueBackend> queue;
  // Null: an InMemoryLockStore / InMemoryIdempotencyStore on `clock`, but
  // only with the in-memory queue (Name() "in_memory"), as everything is in
  // one process then. Any other queue is taken to be shared with other
  // processes, where in-memory locks and claims would hold in this process
  // only: Create refuses it (kInvalidArgument) unless both are given (use
  // `backend`).
  std::shared_ptr<LockStore> locks;
  std::shared_ptr<IdempotencyStore> idempotency;
  // Null: NullMetricsSink.
  std::shared_ptr<MetricsSink> metrics;
  // Observers of every status transition (jobpact/transition_event.h), each
  // called with the one event of each transition, after the runner's own
  // metrics and log line, in this order. No null entries (kInvalidArgument).
  std::vector<std::shared_ptr<TransitionObserver>> transition_observers;
  // Null: SystemClock::Default().
  std::shared_ptr<Clock> clock;
  // Null: MakeSeededRandomSource(random_seed).
  std::shared_ptr<RandomSource> random;
  std::uint64_t random_seed = 0x6a6f6270616374;  // "jobpact"

  // Null: a registry with the SPEC 11 defaults.
  std::shared_ptr<PolicyRegistry> policies;

  // --- Workers ---
  // Queues this runner takes from; empty: every queue.
  std::vector<std::string> queues;
  int workers = 2;
  // Jobs a worker takes at a time. One lease (backend call) is in flight
  // per runner; it asks for dequeue_batch jobs for its worker and for each
  // worker waiting for it, and each takes dequeue_batch of them.
  int dequeue_batch = 16;
  // Longest idle wait before polling the backend again (an Enqueue on this
  // runner wakes idle workers at once). With a backend that wakes idle
  // workers (QueueBackend::WaitForWork: SQLite, PostgreSQL, Redis), one idle
  // worker of the runner waits there and the others sleep: a wake-up brings
  // one worker, and a lease that came back with all it asked for wakes
  // the next.
  Duration poll_interval = Millis(100);
  // How a started runner writes its jobs' outcomes (the ack, SPEC 3 step 9).
  //   kAuto: grouped if the queue says grouping pays
  //          (QueueBackend::GroupsCompletions: SQLite, Redis), else per
  //          worker (in memory).
  //   kGrouped: a worker hands its finished job to the runner's completion
  //          writer and goes on to the next one; the writer stores whatever
  //          accumulated meanwhile in one QueueBackend::CompleteBatch (one
  //          transaction, one round trip). Nothing waits for a group to fill:
  //          a lone outcome is written at once. A refused outcome (stale
  //          lease, failed transactional effect) is refused alone.
  //   kPerWorker: a worker keeps the outcomes of its batch's quick jobs
  //          (handler under 1 ms) and writes them together in one
  //          CompleteBatch: when its batch is done, before a job of another
  //          type, at once after a job that was not quick, and at the
  //          watchdog's next tick (250 ms) if a job predicted quick runs
  //          long. An outcome waits at most for the rest of its batch's
  //          quick jobs; one with a transactional effect is written at once.
  //   kOneByOne: each worker writes its job's outcome before its next job.
  // Either way the outcome is reported (event, metrics, log line) once it is
  // stored; the lock is released before a kept or handed-over outcome is
  // written unless it carries a transactional effect, which commits inside
  // the lock. Shutdown returns after every kept or handed-over outcome is
  // written. RunUntilIdle writes one by one.
  enum class CompletionWrites { kAuto, kGrouped, kPerWorker, kOneByOne };
  CompletionWrites completion_writes = CompletionWrites::kAuto;
  // Identifies this runner in lease tokens, lock and claim owners.
  // Empty: "<hostname>-<pid>-<n>".
  std::string runner_id;

  // --- Contract settings (SPEC 11 defaults) ---
  ValidationOptions validation;
  Duration dedup_window = std::chrono::minutes(5);
  Duration idempotency_retention = std::chrono::hours(24);
  // Lock busy: requeue after a jittered delay in [min, max], at most
  // max_lock_waits times, no attempt spent.
  Duration lock_busy_min_delay = Millis(100);
  Duration lock_busy_max_delay = Millis(1000);
  int max_lock_waits = 50;
  // Crash recoveries (expired leases) before "lease_expired_repeatedly".
  int max_lease_recoveries = 3;
  // A handler running this long past its deadline marks its worker hung.
  Duration hung_grace = Seconds(10);
  // Replacement workers started for hung ones, at most, over the runner's life.
  int max_replacement_workers = 4;
  // Called (on the watchdog thread, no lock held) when a worker is declared
  // hung; e.g. to fail fast so the supervisor restarts the process.
  std::function<void(const HungWorkerInfo&)> on_hung_worker;
  // How often the maintenance pass runs under Start(): lease recovery,
  // retention purges, gauges.
  Duration maintenance_interval = Seconds(1);
  Duration dlq_retention = std::chrono::hours(24 * 14);
  Duration final_status_retention = std::chrono::hours(24);
  // Count retention of finished jobs, on top of final_status_retention's
  // age (like BullMQ's removeOnComplete / removeOnFail {age, count}): each
  // maintenance pass keeps the newest N jobs per job type in each final
  // status and deletes the rest (QueueAdmin::TrimFinished). Age alone does
  // not bound a store: at 100k jobs/s, 24 h is billions of records.
  // Defaults: 100,000 per type for each of succeeded, failed and
  // discarded -- enough for an operator to look back over the recent work
  // of a type (Get, ListJobs), while a type's finished records cost at most
  // 300,000 records whatever its rate (docs/operations.md, "Retention",
  // has the bytes per record of each store). Failed and discarded keep as
  // many as succeeded: they are the evidence an operator reads, but a storm
  // of expiries or permanent failures must not grow the store either.
  // nullopt: no count limit for that status (age only); 0: none kept past
  // the next pass. A job that succeeded within dedup_window is kept
  // whatever the count (FinishedRetention::keep_succeeded_since): dedup at
  // enqueue and at delivery still finds it, so a type finishing more than
  // succeeded / dedup_window jobs per second (100,000 / 5 min = 333/s by
  // default) keeps its last dedup_window of succeeded jobs instead. Dead-lettered jobs are not trimmed by count:
  // the DLQ is quarantine awaiting an operator (SPEC 7), retained by age
  // (dlq_retention) and watched by its alerts. A store without count
  // retention (a user-written one without DeleteSurplusJobs) is retained by
  // age only, which the first pass logs once. max_jobs caps what one pass
  // deletes (0: every surplus job), in chunks each its own atomic step.
  FinishedRetention finished_retention{100000, 100000, 100000, 0, std::nullopt};

  // --- Guards (SPEC 10, 11) ---
  // Retry budget: per job type, retries of transient and unknown failures
  // may not exceed retry_budget.percent of first attempts over
  // retry_budget.window, plus a floor (defaults: 20%, 10 s, 10 retries/s).
  // A retry the budget refuses is deferred: retry_scheduled with reason
  // "retry_budget_deferred" at the time the budget allows it (at least
  // min_deferral away, after the backoff too), the attempt spent as usual;
  // if that time is past the job's total deadline, the job is dead-lettered
  // with "total_deadline_passed". Refusals count in
  // jobpact_retry_budget_exhausted_total, deferrals also in
  // jobpact_retry_budget_deferred_total. A job type whose budget has
  // on_exhausted = kDeadLetter (RetryBudgets::Override, with a reason) is
  // dead-lettered with "retry_budget_exhausted" instead.
  bool retry_budget_enabled = true;
  RetryBudgetOptions retry_budget;
  // The budgets used; null (and enabled): created from `retry_budget` on
  // `clock`. Pass one to share it or to set per-type overrides.
  std::shared_ptr<RetryBudgets> retry_budgets;
  // Circuit breakers, one per dependency named in HandlerOptions::dependency
  // (defaults: opens at 50% failures over the last 100 calls, at least 20;
  // open 60 s; 10 trial calls). circuit_breaker.on_state_change, if set, is
  // called after the runner's own gauge and log line.
  CircuitBreakerOptions circuit_breaker;
  // The breakers used; null: created from `circuit_breaker` on `clock`.
  // A breakers object passed here keeps its own on_state_change (the runner
  // still refreshes the state gauge at every maintenance pass).
  std::shared_ptr<CircuitBreakers> circuit_breakers;
  // Rate limits per dependency (HandlerOptions::dependency), counted across
  // every process sharing the backend's RateLimitStore
  // (BackendBundle::rate_limits). See HandlerOptions::rate_limit for what
  // a limited delivery does. A dependency not listed has no rate, but a
  // handler's RateLimited backoff still holds it in every process.
  std::map<std::string, RateLimit, std::less<>> dependency_rate_limits;
  // Concurrency limits per dependency (HandlerOptions::dependency): at most
  // this many (>= 1) handlers calling it run at once across every runner
  // sharing the LockStore. Each running handler holds one of the N slots,
  // a lock "dependency:<name>:slot:<i>" renewed with its lease, so a
  // crashed runner's slot frees when its visibility timeout passes. A
  // delivery that finds no free slot is rescheduled a short while later
  // (lock_busy_min_delay .. lock_busy_max_delay) with reason
  // "concurrency_limited" and no attempt spent. An operator's
  // ControlKind::kDependencyConcurrencyLimit (`jobpact concurrency DEP N
  // --dependency`) replaces the number here in every runner within
  // poll_interval, and can limit a dependency not listed.
  std::map<std::string, int, std::less<>> dependency_concurrency;

  // --- Logs: one structured spdlog line per transition ---
  // The spdlog logger used (created with a stderr sink if not registered).
  std::string logger_name = "jobpact";
  LogLevel log_level = LogLevel::kInfo;
  // One JSON object per line instead of logfmt-style text. The object
  // carries its own "ts" (from `clock`) and "level", and the logger's pattern
  // is set to "%v" so that each line is exactly that object.
  bool json_logs = false;
};

// What a handler sees of its job. Valid only during the handler call.
// Not thread-safe, except cancelled(), which may be polled from any thread.
class JOBPACT_EXPORT JobContext {
 public:
  virtual ~JobContext();

  virtual const Envelope& envelope() const = 0;
  // The business payload (JSON text).
  const std::string& payload() const { return envelope().payload; }
  // 1 on the first attempt.
  int attempt() const { return envelope().attempt; }
  // The execution deadline of this attempt.
  virtual TimePoint deadline() const = 0;
  // True once the deadline has passed, the lease (or lock, or idempotency
  // claim) was lost, or a shutdown's grace period ended and the lease was
  // given back. Long handlers poll it and return early.
  virtual bool cancelled() const = 0;
  // The lock's fencing token (0 without lock_key): pass it to the resource
  // so it can refuse writes from a stale owner.
  virtual std::uint64_t fencing_token() const = 0;
  // The checkpoint stored by the last heartbeat of a previous attempt.
  virtual const std::string& checkpoint() const = 0;

  // Renews the lease (and lock and claim) now, storing `checkpoint` if not
  // empty. kAborted if the lease was lost: stop, the job runs elsewhere.
  virtual Status Heartbeat(std::string_view checkpoint = {}) = 0;

  // The result stored with the idempotency record on success.
  virtual void SetResult(std::string result) = 0;

  // Transactional completion (see Completion::transactional_effect): on
  // success, `effect` runs inside the backend transaction that marks the job
  // succeeded, so an effect kept in the same store happens exactly once.
  virtual void SetTransactionalEffect(std::function<Status(void* native)> effect) = 0;

  // Ends the job without failure: `return ctx.Snooze(d);` reschedules it
  // after `d` without spending an attempt; `return ctx.Discard("why");`
  // moves it to discarded with reason "why" (e.g. superseded by a newer
  // event). The last request made during the call decides the outcome,
  // whatever the handler returns, unless it throws. Snooze: kInvalidArgument
  // for a negative delay (and nothing is requested).
  virtual Status Snooze(Duration delay) = 0;
  virtual Status Discard(std::string reason) = 0;
  // The upstream said "rate limited, retry after `retry_after`" (an HTTP
  // 429 with Retry-After): `return ctx.RateLimited(d, "429 from psp");`
  // fails the attempt as transient (code "rate_limited"), schedules the
  // retry no earlier than `retry_after` from now (later if the backoff
  // says so), and backs the limiter off for everyone: with a
  // HandlerOptions::dependency, that dependency's limiter in every process
  // sharing the backend (every job that calls it waits); without one, the
  // job type's in this process (and in every process if the type has a
  // shared rate_limit). Returns the kResourceExhausted status to return.
  // Throwing RateLimitedError (jobpact/failure.h) does the same.
  virtual Status RateLimited(Duration retry_after, std::string message) = 0;

  // Logs through the runner's logger with the job's fields attached.
  virtual void Log(LogLevel level, std::string_view message) const = 0;
};

// A handler returns OK for success or a Status whose code is classified
// (see failure.h); it may also throw: every exception, of any type, is caught
// at one boundary and classified by the type's Classifier. A failure that
// comes after the execution deadline is a transient "timeout"; a success
// after the deadline stands (the effect is done; retrying would repeat it).
// Runs on a worker thread (or the RunUntilIdle caller), no jobpact lock held.
using Handler = std::function<Status(JobContext&)>;

struct HandlerOptions {
  // Rules that classify this type's exceptions (first match wins).
  Classifier classifier;
  // Per-type policy override; requires a non-empty policy_reason.
  std::optional<RetryPolicy> policy;
  std::string policy_reason;
  // The dependency this handler calls ("payments-api"); empty: none. Its
  // circuit breaker (JobRunnerOptions::circuit_breakers) guards every call:
  // while open, deliveries are rescheduled to the breaker's retry_after()
  // with reason "circuit_open" and no attempt spent. Outcomes: transient and
  // unknown failures and timeouts count as failures; success and permanent
  // errors as successes (the dependency answered); a snooze, a discard or a
  // shutdown give the permit back without an outcome.
  std::string dependency;
  // At most this many starts of the type per second (with this burst)
  // across every process sharing the backend's RateLimitStore
  // (BackendBundle::rate_limits; Create's Handle refuses it on a backend
  // without one). Checked after the lease, before the handler: a delivery
  // over the rate is rescheduled to the time the limiter gives (refused
  // ones come back one interval apart), with reason "rate_limited" and no
  // attempt spent, counted in jobpact_rate_limited_total. An operator can
  // override the rate at run time (`jobpact ratelimit`).
  std::optional<RateLimit> rate_limit;
  // The same, counted in this process only (no store call).
  std::optional<RateLimit> local_rate_limit;
  // At most this many of the type's handlers run at once in this process
  // (>= 1; unset: as many as there are workers). A delivery past it is
  // rescheduled a short while later (JobRunnerOptions::lock_busy_min_delay
  // .. lock_busy_max_delay) with reason "concurrency_limited" and no
  // attempt spent, counted in jobpact_concurrency_limited_total. The limit
  // across every process is the store's (`jobpact concurrency TYPE N`); a
  // dependency's is JobRunnerOptions::dependency_concurrency.
  std::optional<int> local_max_concurrency;
};

// Counters of what a runner has done, for status pages and tests.
struct RunnerStats {
  std::int64_t deliveries = 0;
  int busy_workers = 0;
  // Workers hung right now: declared hung and their handler has not
  // returned yet (a hung worker's thread exits when it does).
  int hung_workers = 0;
  // Workers ever declared hung (the jobpact_hung_workers_total counter).
  int hung_workers_total = 0;
  int replacement_workers = 0;
};

class JOBPACT_EXPORT JobRunner {
 public:
  // kInvalidArgument naming the bad option (no queue backend, both
  // `backend` and `queue`/`locks`/`idempotency` set, a queue other than the
  // in-memory one without its locks or idempotency store, workers < 1,
  // batch < 1, ...). Registers every handler declared with
  // JOBPACT_REGISTER_HANDLER.
  static Result<std::unique_ptr<JobRunner>> Create(JobRunnerOptions options);

  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;
  // Calls Shutdown(0) if still running.
  virtual ~JobRunner();

  // Registers the handler of `job_type`. kAlreadyExists if one is
  // registered; kInvalidArgument for a bad name, or a policy override
  // without a reason. Thread-safe; handlers added after Start() apply to
  // later deliveries.
  virtual Status Handle(std::string_view job_type, Handler handler,
                        HandlerOptions options = {}) = 0;

  // Validates, prepares (job id, created_at, ttl -> expires_at, attempt 0)
  // and stores a job. kInvalidArgument listing every problem of an invalid
  // envelope (nothing stored: the caller still holds it). A duplicate within
  // the dedup window returns the existing job with duplicate = true.
  virtual Result<EnqueueResult> Enqueue(Envelope envelope) = 0;

  // Enqueues many jobs with one QueueBackend::EnqueueBatch call: atomic
  // where the backend's batch is (see its header), per job otherwise.
  // Every envelope is validated and prepared exactly as Enqueue does (job
  // id, created_at, ttl -> expires_at, attempt 0, the policy's max_attempts
  // if none is given). If any is invalid, nothing is stored and
  // kInvalidArgument names each bad envelope by its index with every
  // problem ("index 2 (job_type: ...; max_attempts: ...)"). Results are in
  // input order; a duplicate within the dedup window (of an earlier job or
  // of an earlier envelope of the batch) returns the existing job with
  // duplicate = true. Otherwise the backend's error (nothing counted). An
  // empty batch returns no results and calls nothing. Wakes idle workers.
  // Thread-safe. Prefer it to QueueBackend::EnqueueBatch, which skips the
  // validation and the defaults.
  virtual Result<std::vector<EnqueueResult>> EnqueueBatch(std::vector<Envelope> envelopes);

  // Enqueues a raw JSON envelope. An invalid one is dead-lettered whole
  // with reason "invalid_envelope" and kInvalidArgument is returned, whose
  // message lists every problem and names the DLQ entry.
  virtual Result<EnqueueResult> EnqueueJson(std::string_view raw) = 0;

  // Starts the worker threads, the watchdog and the maintenance pass.
  // kFailedPrecondition if already started or shut down.
  virtual Status Start() = 0;

  // Graceful shutdown: stop taking work, let running jobs finish until
  // now + grace, then give the leases of unfinished jobs back (they return
  // to queued with no attempt spent; a late completion is refused by the
  // fence). Joins every thread it can; a hung handler's thread is detached.
  // Idempotent.
  virtual Status Shutdown(Duration grace) = 0;

  // Runs every job that is ready now on the calling thread, one at a time,
  // until none is ready; also runs the maintenance pass first. Returns the
  // number of deliveries processed. For tests: no threads, no sleeps.
  // Reentrant: a handler may call it to play a second worker taking over
  // while the first is still running. kFailedPrecondition after Start().
  virtual Result<int> RunUntilIdle() = 0;

  // One maintenance pass: recover expired leases (SPEC 5), purge expired
  // DLQ entries and final statuses, refresh the depth and age gauges.
  virtual Status RunMaintenance() = 0;

  // SPEC 10 safe action: pauses a job type in every process sharing the
  // backend (the store's control state, QueueAdmin::SetControl; the audit
  // names this runner's id). The store then leases none of its jobs: they
  // stay queued, spending nothing, until Resume (from any process, or an
  // operator tool: jobpact/operations.h). A job leased just before the pause
  // is given back without spending an attempt. Resume of a type that is not
  // paused is OK. The backend's error if the store cannot be written.
  virtual Status Pause(std::string_view job_type) = 0;
  virtual Status Resume(std::string_view job_type) = 0;

  // SPEC 7 guard-railed action: replays the selected dead letters
  // (dead_lettered -> queued, reason "replay"), each with an audit record
  // "<actor>: <reason>" kept in the DLQ entry (visible again if the job
  // returns to the DLQ). Each replay counts in jobpact_dlq_replayed_total
  // and logs one "dlq_replayed" line with actor and reason; a dry run logs
  // one "dlq_replay_dry_run" line. kInvalidArgument for a blank actor or
  // reason, or a bad rate, max_jobs or extra_attempts; the backend's error
  // if the selection cannot be listed. Per-entry failures go to `failed`.
  // Thread-safe.
  virtual Result<ReplayReport> ReplayDeadLetters(const ReplayRequest& request) = 0;

  // SPEC 7: discards one dead letter (dead_lettered -> discarded, reason
  // "operator_discard") with an audit record; counts it in
  // jobpact_jobs_discarded_total{reason="operator_discard"} and logs one
  // line with actor and reason. kInvalidArgument for a blank actor or
  // reason; kNotFound if the job is not in the DLQ. Thread-safe.
  virtual Status DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                                   std::string_view reason) = 0;

  virtual RunnerStats Stats() const = 0;
  virtual PolicyRegistry& policies() = 0;
  virtual const JobRunnerOptions& options() const = 0;

 protected:
  JobRunner() = default;
};

namespace internal {
// Used by JOBPACT_REGISTER_HANDLER; returns true so it can initialise a static.
JOBPACT_EXPORT bool RegisterStaticHandler(const char* job_type, Handler handler);
}  // namespace internal

}  // namespace jobpact

// Static registration: defines a handler for `job_type` that every
// JobRunner created afterwards registers.
//
//   JOBPACT_REGISTER_HANDLER("email.send", SendEmail);  // Status SendEmail(JobContext&)
#define JOBPACT_REGISTER_HANDLER(job_type, fn)                                \
  static const bool JOBPACT_CONCAT_(jobpact_static_handler_, __LINE__) =     \
      ::jobpact::internal::RegisterStaticHandler(job_type, fn)

#endif  // JOBPACT_JOB_RUNNER_H_
