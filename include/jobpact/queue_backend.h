// File: jobpact/queue_backend.h
//
// QueueBackend stores jobs: their records, status and bounded history,
// scheduled and retrying jobs, delivery leases, and the dead-letter queue
// (SPEC 2, 5, 7, 9): the worker side. The JobRunner is its main caller;
// producers call Enqueue. Operators use the other side of the same store,
// QueueAdmin (jobpact/queue_admin.h): lookup, listing, stats, cancel, the
// DLQ and the control state.
//
// Contract for every implementation:
//   - All methods may be called concurrently from many threads (and, for
//     shared stores, many processes) with no external synchronization.
//   - Methods must not throw. Failures are returned as Status: kUnavailable
//     for a store that cannot be reached (retryable), kAborted for a stale
//     lease, kNotFound for an unknown job, kFailedPrecondition for an illegal
//     status transition, kInvalidArgument for bad input.
//   - Every state change is one atomic operation on the store (one
//     transaction, one Lua script): a crash leaves the job either before or
//     after the change, never between.
//   - Time comes from the Clock injected into the implementation, never from
//     the caller's idea of "now", except where a method takes a TimePoint.
//   - Every status change is checked against the SPEC 2 table
//     (CheckTransition) and appended to the job's history with its time and
//     reason; history keeps the most recent `kMaxHistory` entries.
#ifndef JOBPACT_QUEUE_BACKEND_H_
#define JOBPACT_QUEUE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/failure.h"
#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

class IdempotencyStore;  // jobpact/idempotency_store.h
class LockStore;         // jobpact/lock_store.h
struct ClaimOutcome;     // jobpact/idempotency_store.h
struct LockLease;        // jobpact/lock_store.h

// History entries kept per job; older entries are dropped first.
inline constexpr std::size_t kMaxHistory = 64;

// Everything the backend knows about one job.
struct JobRecord {
  Envelope envelope;  // envelope.attempt = deliveries that spent an attempt.
  JobStatus status = JobStatus::kQueued;
  TimePoint enqueued_at;
  // When the job may next be delivered (scheduled_at, or the retry time).
  TimePoint ready_at;
  TimePoint updated_at;
  // Set when the job reaches a final status or the DLQ.
  std::optional<TimePoint> finished_at;
  // The current delivery number (lease epoch); grows with every delivery,
  // including deliveries that do not spend an attempt.
  std::int64_t epoch = 0;
  // Crash recoveries: deliveries whose lease expired (SPEC 5), counted apart
  // from failed attempts.
  int lease_recoveries = 0;
  // Lock-busy requeues so far (bounded by the runner's lock wait cap).
  int lock_waits = 0;
  // The previous retry delay, for decorrelated backoff.
  Duration previous_delay{};
  // The last heartbeat checkpoint; the next attempt can read it.
  std::string checkpoint;
  // The last classified failure, if any.
  std::optional<Failure> last_failure;
  // The final reason (e.g. "duplicate", "expired", "max_attempts_exceeded").
  std::string reason;
  // The result a handler stored on success (free text, often JSON).
  std::string result;
  // The most recent transitions, oldest first (at most kMaxHistory).
  std::vector<Transition> history;
  // While running: the live lease's token and expiry (empty / epoch time
  // otherwise). The token identifies the worker that holds the job.
  std::string lease_token;
  TimePoint lease_expires_at;
  // Set for input that never was a runnable job, kept whole: an envelope
  // that failed validation (reason "invalid_envelope") or a stored record
  // that could no longer be decoded ("undecodable_record"). Such a record
  // can be inspected and discarded, never replayed.
  std::optional<std::string> raw_input;
  // Operator actions on this job (replay, discard, cancel), oldest first:
  // "<time> <verb> by <actor>: <reason>".
  std::vector<std::string> audit;
  // An operator asked to cancel the job while it ran: its handler sees
  // JobContext::cancelled() at its next heartbeat.
  bool cancel_requested = false;
};

// A delivery: the right, until `expires_at`, to finish one job.
struct Lease {
  std::string job_id;
  // Unique per delivery; identifies the worker that holds the lease.
  std::string token;
  // The job's epoch at delivery. Any write with an older epoch is refused.
  std::int64_t epoch = 0;
  TimePoint expires_at;
  // Set by Renew when an operator asked to cancel the job
  // (QueueAdmin::Cancel): the holder should stop and report it cancelled.
  bool cancel_requested = false;
};

struct Delivery {
  // status is kRunning. job.history may hold only the latest entries (at
  // least this delivery's transition); Get() returns the full history.
  JobRecord job;
  Lease lease;
  // Set by a store that checks the delivery-time dedup (SPEC 3 step 4) in
  // its lease step, when asked to (DequeueRequest::dedup_window): true if it
  // did, and then `duplicate_of` is what FindDuplicate(job's dedup_key, job
  // id, lease time - window) would have answered in that same atomic step
  // (empty: no duplicate). False: the caller asks FindDuplicate itself.
  bool dedup_checked = false;
  std::string duplicate_of{};
  // Set by a store that took the delivery's guards in its lease step, when
  // asked to (DequeueRequest::take_guards): the lock on envelope.lock_key
  // and the claim on envelope.idempotency_key, whichever the job has, are
  // held by lease.token until the lease time + envelope.visibility_timeout,
  // as LockStore::Acquire and an IdempotencyStore::Claim answered kClaimed
  // would have left them (fencing_token: the lock's). The store takes both
  // or neither: false when it was not asked, the job has no key, a
  // duplicate was found, the lock is busy or the key completed or claimed;
  // the caller then takes them itself, the usual way.
  bool guards_taken = false;
  std::uint64_t fencing_token = 0;
  // The leasing store's own note of where it keeps the job, so that it can
  // find the record again at completion without a lookup by id (the in-memory
  // store sets it). Opaque to everyone else and copied with the delivery; a
  // store checks that the note still holds before it uses it.
  struct StoreNote {
    std::uint64_t store = 0;    // Which store wrote it; 0: none.
    void* record = nullptr;     // Where that store keeps the job.
    std::uint64_t version = 0;  // That store's own check that `record` still holds.
  };
  StoreNote store_note{};
};

struct EnqueueOptions {
  // A job whose dedup_key matches one enqueued within this window, and which
  // is not discarded, failed or dead-lettered, is a duplicate (SPEC 6, 11).
  Duration dedup_window = std::chrono::minutes(5);
};

struct EnqueueResult {
  std::string job_id;      // The new job, or the existing one for a duplicate.
  bool duplicate = false;  // True: nothing was stored.
  JobStatus status = JobStatus::kQueued;  // Of the returned job.
};

// Every member has an initializer, so that a brace-initialization naming only
// the first ones ({{"q"}, 16, "w1"}) draws no -Wmissing-field-initializers.
struct DequeueRequest {
  // Queues to take from; empty means every queue.
  std::vector<std::string> queues;
  // Take at most this many jobs (batch dequeue). REQUIRES: >= 1.
  int max_jobs = 1;
  // Identifies the worker; kept in the lease token for diagnosis.
  std::string worker_id;
  // If set, a store may check each leased job that has a dedup_key for a
  // duplicate inside the lease step, with this window, and report it in
  // Delivery::dedup_checked / duplicate_of: the caller is then spared one
  // FindDuplicate call (a lock or a round trip) per job, and two jobs with
  // one key leased in one step cannot both find the other.
  std::optional<Duration> dedup_window = std::nullopt;
  // If true, a store that keeps the locks and claims beside its jobs
  // (CompletesGuards) may take each leased job's lock and idempotency claim
  // inside the lease step, owned by the lease token, and report it in
  // Delivery::guards_taken: the caller is then spared a write of their own
  // per job (steps 5 and 6 of SPEC 3 ride with the lease, as step 9 rides
  // with the completion). Ask only where CompletesGuards() is true for the
  // caller's own stores; the caller must then give them back with the
  // delivery's completion (Completion::guards), whatever its outcome, and
  // renew them with the lease while the delivery waits to start.
  bool take_guards = false;
};

// The one outcome of a delivery, written atomically by Complete().
// The lock (envelope.lock_key) and idempotency claim (envelope.idempotency_key)
// a delivery holds, both owned by its lease token, released or recorded in
// the completion's own atomic step instead of in steps of their own (SPEC 3
// step 9), by a backend that keeps them in the same store
// (QueueBackend::CompletesGuards). They apply whether or not the completion
// itself does, as separate calls made before it would, except where said.
struct CompletionGuards {
  enum class Claim {
    kKeep,     // Untouched.
    // Marked completed with Completion::result, kept `retention`. Without a
    // transactional effect it is written first, so a completion refused as
    // stale (kAborted) still leaves it recorded (the effect happened); if
    // the delivery no longer holds the claim, the completion is not applied
    // (kAborted naming the key). With a transactional effect, only if the
    // completion commits.
    kRecord,
    kRelease,  // Dropped (a retry may claim it again).
  };
  bool release_lock = false;  // Released (owner only).
  Claim claim = Claim::kKeep;
  Duration retention{};  // For kRecord.

  bool any() const { return release_lock || claim != Claim::kKeep; }
};

struct Completion {
  // kSucceeded, kRetryScheduled, kQueued (requeue with no attempt spent),
  // kFailed, kDeadLettered or kDiscarded.
  JobStatus to = JobStatus::kSucceeded;
  std::string reason;  // A reason:: name.
  // For kRetryScheduled / kQueued: when the job becomes ready again.
  std::optional<TimePoint> ready_at;
  // False for lock-busy requeues and snoozes: the delivery's attempt is
  // given back (envelope.attempt decremented).
  bool spend_attempt = true;
  // For kRetryScheduled: the delay chosen, kept for decorrelated backoff.
  Duration delay{};
  // For lock-busy requeues: counted in JobRecord::lock_waits.
  bool lock_wait = false;
  std::optional<Failure> failure;
  std::string result;      // For kSucceeded.
  std::string checkpoint;  // Kept as the job's checkpoint if not empty.
  // Transactional completion: runs inside the backend's completion
  // transaction, before it commits, so a business write kept in the same
  // store commits if and only if the job completes. `native` is the
  // backend's handle (sqlite3* for SQLite, PGconn* for PostgreSQL, nullptr
  // in memory). A non-OK status aborts the whole completion. Backends that
  // cannot run it return kUnimplemented.
  std::function<Status(void* native)> transactional_effect;
  // What the same atomic step does with the delivery's lock and idempotency
  // claim (see CompletionGuards). Set only for a backend whose
  // CompletesGuards() is true for the caller's stores.
  CompletionGuards guards;
};

// One completion of CompleteBatch.
struct CompletionRequest {
  Delivery delivery;
  Completion completion;
};

// One job moved by RecoverExpiredLeases (SPEC 5): what happened to it, with
// its envelope for the runner's metrics and transition log line (SPEC 8).
struct LeaseRecovery {
  std::string job_id;
  // kQueued (reason "lease_expired") or kDeadLettered
  // ("lease_expired_repeatedly").
  JobStatus to = JobStatus::kQueued;
  std::string reason;
  // The job's lease recoveries, this one included.
  int lease_recoveries = 0;
  // The job's envelope (envelope.attempt = attempts spent so far).
  Envelope envelope;
};

// A dead-letter entry (SPEC 7).
struct DlqEntry {
  std::string job_id;
  std::string job_type;
  // The job's queue; empty for input that never parsed as an envelope.
  std::string queue;
  std::string payload;  // The payload, or the whole raw input for invalid envelopes.
  // For an envelope that failed validation: the raw input as received.
  std::string raw_envelope;
  TimePoint created_at;
  int attempts = 0;
  std::string reason;  // e.g. "max_attempts_exceeded", "invalid_envelope".
  std::optional<Failure> last_failure;
  std::string trace_id;
  TimePoint dead_lettered_at;
  std::vector<Transition> history;
  // Replay audit records, oldest first.
  std::vector<std::string> audit;
};

struct DlqFilter {
  std::optional<std::string> job_type;
  std::optional<std::string> reason;
  std::optional<FailureClass> failure_class;
  std::optional<TimePoint> dead_lettered_after;   // Inclusive.
  std::optional<TimePoint> dead_lettered_before;  // Exclusive.
  // At most this many entries, oldest dead-lettered first.
  std::size_t limit = 1000;
};

// An operator's replay or discard of one DLQ entry (SPEC 7). Who, when and
// why are recorded in the entry's audit trail and the job's history.
struct DlqAction {
  std::string actor;   // Who: required.
  std::string reason;  // Why: required.
  // Replay only: start again from attempt 0 (otherwise the attempts already
  // spent count against max_attempts, plus `extra_attempts`).
  bool reset_attempts = true;
  int extra_attempts = 0;
  // Replay only: ready at this time (default: now).
  std::optional<TimePoint> ready_at;
};

struct QueueStats {
  struct PerQueue {
    std::int64_t depth = 0;  // Ready plus scheduled, not running.
    std::int64_t running = 0;
    // Age of the oldest ready job (now - max(ready_at, enqueued_at)); zero
    // when none is ready.
    Duration oldest_ready_age{};
  };
  std::map<std::string, PerQueue> queues;
  std::map<JobStatus, std::int64_t> by_status;
  std::int64_t dead_letters = 0;
};

class JOBPACT_EXPORT QueueBackend {
 public:
  QueueBackend() = default;
  QueueBackend(const QueueBackend&) = delete;
  QueueBackend& operator=(const QueueBackend&) = delete;
  virtual ~QueueBackend();

  // A short name for logs ("in_memory", "sqlite").
  virtual std::string_view Name() const = 0;

  // Stores a new job in status queued, ready at envelope.scheduled_at (or
  // now). REQUIRES: env was passed through PrepareForEnqueue and is valid.
  // A dedup_key match within the window returns the existing job with
  // duplicate = true and stores nothing. kAlreadyExists if job_id is taken.
  virtual Result<EnqueueResult> Enqueue(const Envelope& env, const EnqueueOptions& options) = 0;

  // Enqueue of many jobs in one atomic operation; results in input order.
  // The default calls Enqueue per job (not atomic).
  virtual Result<std::vector<EnqueueResult>> EnqueueBatch(const std::vector<Envelope>& envs,
                                                          const EnqueueOptions& options);

  // Stores input that failed validation straight in the DLQ, reason
  // "invalid_envelope", keeping `raw` whole (SPEC 1: never dropped). The
  // problems are kept as the last failure (class permanent, code
  // "invalid_envelope", message listing them). Returns the DLQ entry's id
  // (the input's job_id if it had a readable one, else a new id).
  virtual Result<std::string> DeadLetterInvalid(std::string_view raw,
                                                const std::vector<FieldError>& problems) = 0;

  // Leases up to request.max_jobs ready jobs (status queued or
  // retry_scheduled, ready_at <= now), highest priority first, then oldest
  // ready_at, then job id. Each moves to running with epoch + 1,
  // envelope.attempt + 1, a new lease token, and lease expiry
  // now + envelope.visibility_timeout. Never returns the same delivery twice.
  // Obeys the control state (QueueAdmin): jobs of a paused type or queue,
  // and jobs of a type at its concurrency limit, are left where they are.
  // Empty when nothing is ready.
  virtual Result<std::vector<Delivery>> Dequeue(const DequeueRequest& request) = 0;
  // Dequeue into `*out`, whose old deliveries are replaced; the caller may
  // keep the vector across calls so that its buffer (a batch of ~1 KB
  // deliveries), and the strings of the spent deliveries in it where the
  // store reuses them, are not allocated again per call, as a worker loop
  // does. Same deliveries and
  // errors as Dequeue; on an error `*out` is empty. The default calls
  // Dequeue and moves its result in.
  virtual Status DequeueInto(const DequeueRequest& request, std::vector<Delivery>* out);

  // For a store several processes share: blocks up to `timeout` until a job
  // may have become ready (an enqueue or a requeue by any process), so an
  // idle worker starts new work at once instead of after its poll interval.
  // True if woken (a Dequeue tells whether the work is still there: another
  // worker may have taken it), false on timeout. kUnimplemented (the
  // default) if the backend cannot wait: a runner then sleeps its poll
  // interval between empty Dequeues, woken early only by its own enqueues.
  virtual Result<bool> WaitForWork(Duration timeout);

  // Extends a live lease to now + extension and, if not empty, stores the
  // checkpoint (heartbeat). kAborted if the lease is stale (epoch or token
  // differs) or the job is no longer running; kNotFound for an unknown job.
  // The lease returned has cancel_requested set once an operator asked to
  // cancel the job (QueueAdmin::Cancel).
  virtual Result<Lease> Renew(const Lease& lease, Duration extension,
                              std::string_view checkpoint) = 0;

  // Writes the outcome of a delivery in one atomic step: the record the
  // delivery carries, changed as engine::Complete says, stored only if the
  // job still holds the delivery's lease. kAborted if the lease is stale
  // (fenced completion: a worker that lost its lease never overwrites its
  // successor's outcome) -- an expired but not yet recovered lease is still
  // accepted. kFailedPrecondition for an illegal transition.
  virtual Status Complete(const Delivery& delivery, const Completion& completion) = 0;
  // The same, for a caller that no longer needs the delivered record: the
  // backend may take `delivery.job` apart instead of copying it. On return
  // `delivery.lease` and `delivery.job.envelope` are as they were (the
  // caller still names the job, its lock and key); the rest of
  // `delivery.job` is valid but unspecified. The default calls the const&
  // form.
  virtual Status Complete(Delivery&& delivery, const Completion& completion);

  // Several completions in one write (one transaction, one round trip)
  // where the store allows it; results in input order. Each commits or is
  // refused alone: a stale lease or a failed transactional effect rolls back
  // that completion only. The default calls Complete per request.
  virtual std::vector<Status> CompleteBatch(const std::vector<CompletionRequest>& requests);
  // True if CompleteBatch of several completions costs about what one
  // Complete costs (one transaction, one round trip): the runner then hands
  // finished jobs to one writer that stores whatever accumulated in one
  // CompleteBatch (JobRunnerOptions::completion_writes). Default false.
  virtual bool GroupsCompletions() const { return false; }
  // True if Complete and CompleteBatch apply Completion::guards for locks
  // of `locks` and claims of `idempotency` (stores kept in the same place
  // as the jobs: the runner then releases and records them with the
  // completion instead of in writes of their own). Default false, and the
  // runner then sets none (a StoreBackend that does not apply them refuses a
  // completion that sets them, kFailedPrecondition).
  virtual bool CompletesGuards(const LockStore& locks, const IdempotencyStore& idempotency) const;
  // For such a backend: LockStore::Acquire(lock_key, owner, ttl) and, only
  // if the lock was taken, IdempotencyStore::Claim(idempotency_key, owner,
  // ttl) into `*claim`, in one atomic step (SPEC 3 steps 5 and 6 in one
  // write). Same results as the two calls. The default returns
  // kUnimplemented.
  virtual Result<LockLease> AcquireLockAndClaim(std::string_view lock_key,
                                                std::string_view idempotency_key,
                                                std::string_view owner, Duration ttl,
                                                ClaimOutcome* claim);

  // Finds running jobs whose lease has expired and, in one atomic step per
  // job, moves each back to queued (reason "lease_expired", ready now,
  // lease_recoveries + 1), or, if lease_recoveries would exceed
  // `max_recoveries`, to dead_lettered ("lease_expired_repeatedly").
  // Returns one entry per job recovered or dead-lettered (order
  // unspecified; empty when no lease had expired).
  virtual Result<std::vector<LeaseRecovery>> RecoverExpiredLeases(int max_recoveries) = 0;

  // Another job than `self_job_id` with this dedup key that is running, or
  // succeeded at or after `since` (SPEC 3 step 4). Empty if none.
  virtual Result<std::optional<std::string>> FindDuplicate(std::string_view dedup_key,
                                                           std::string_view self_job_id,
                                                           TimePoint since) = 0;
};

}  // namespace jobpact

#endif  // JOBPACT_QUEUE_BACKEND_H_
