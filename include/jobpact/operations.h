// File: jobpact/operations.h
//
// Operations is what an on-call engineer needs from a backend, with no
// JobRunner and no worker (SPEC 7, 10): the command-line tool, a dashboard
// or an admin endpoint is built on it. It sits on one BackendBundle -- the
// queue's operator side (QueueAdmin) and the lock store, and the cache
// store where the backend has one -- so it works the same against memory:,
// sqlite:, and every later backend, from any process.
//
// Every change names who made it and why; the store keeps the audit (the
// job's audit trail for job and DLQ actions, the control audit for pause,
// limits and routes), and the control state it writes is obeyed by every
// process sharing the store at its next lease.
//
// Example:
//   auto backend = jobpact::OpenBackend("sqlite:///var/lib/orders/jobs.db");
//   if (!backend.ok()) return backend.status();
//   auto ops = jobpact::Operations::Open(*backend);
//   // Runbook "retry storm": stop the type everywhere, then look at the DLQ.
//   ops->PauseType("payment.charge", "alice", "INC-42: PSP returns 500s");
//   jobpact::DlqFilter charges;
//   charges.job_type = "payment.charge";
//   auto entries = ops->ListDeadLetters(charges);
//
// Thread-safe; never throws.
#ifndef JOBPACT_OPERATIONS_H_
#define JOBPACT_OPERATIONS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/cache_store.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/job_status.h"
#include "jobpact/lock_store.h"
#include "jobpact/metrics_sink.h"
#include "jobpact/queue_admin.h"
#include "jobpact/result.h"

namespace jobpact {

// A controlled replay of dead letters (SPEC 7): a selection, a rate limit,
// a dry run, the attempt counter reset, and an audit record of who and why
// (the backend stamps when).
struct ReplayRequest {
  // Which entries: those matching `selection` (oldest dead-lettered first),
  // or, when `job_ids` is not empty, exactly those ids, each of which must
  // also match `selection` (the default selection matches everything).
  DlqFilter selection;
  std::vector<std::string> job_ids;
  // Who and why: required (kInvalidArgument if blank).
  std::string actor;
  std::string reason;
  // List what would be replayed (would_replay) and change nothing.
  bool dry_run = false;
  // Rate limit: replayed jobs become ready 1/max_per_second apart (the
  // first now), by their ready_at: nothing sleeps, and the limit holds
  // whichever runners take them. 0: all ready now. REQUIRES: >= 0.
  double max_per_second = 0;
  // Start again from attempt 0; otherwise the attempts spent still count,
  // and max_attempts grows by extra_attempts (REQUIRES: >= 0).
  bool reset_attempts = true;
  int extra_attempts = 0;
  // At most this many entries are replayed in one call. REQUIRES: >= 1.
  std::size_t max_jobs = 1000;
};

struct ReplayReport {
  // Replayed (in order, each ready 1/max_per_second after the previous).
  std::vector<std::string> replayed;
  // Dry run: what would be replayed.
  std::vector<std::string> would_replay;
  // Entries that were selected but could not be (or, in a dry run, could
  // not be) replayed: kFailedPrecondition for an invalid envelope (fix it
  // and enqueue it again) or an id that does not match `selection`;
  // kNotFound for an id not in the DLQ; the backend's error otherwise.
  std::vector<std::pair<std::string, Status>> failed;
};

// What Operations::ReleaseLock verified and did.
struct LockReleaseReport {
  // The lock as it was held when released.
  LockLease lock;
  // The job whose delivery held the lock: the running job whose lease token
  // is the owner (its lease expired), or, when no delivery holds that token
  // any more, a job with the lock's key (its status says where it went).
  std::string job_id;
  JobStatus job_status = JobStatus::kQueued;
  // Why the owner is gone, in words, e.g. "job job_01... is running but its
  // lease expired at 2026-12-03T10:00:00Z (45 s ago)".
  std::string verdict;
};

// What Operations::InvalidateCacheKey / InvalidateCachePrefix removed.
struct CacheInvalidation {
  // The key, or the prefix (by_prefix).
  std::string what;
  bool by_prefix = false;
  // Live entries removed (0 or 1 for a key).
  std::size_t removed = 0;
};

// How many job records ReleaseLock reads, at most, looking for the job of a
// lock's key when no running job holds the owner's token. Beyond it the
// release is refused as unverifiable.
inline constexpr std::size_t kLockReleaseScanLimit = 100000;

// Called once per DLQ entry an operator action changed or failed to change
// (the JobRunner logs and counts through it). Must not throw.
class JOBPACT_EXPORT OperationsListener {
 public:
  virtual ~OperationsListener();
  // `entry` was replayed, ready at `ready_at`.
  virtual void OnReplayed(const DlqEntry& entry, const ReplayRequest& request,
                          TimePoint ready_at) = 0;
  virtual void OnReplayFailed(const DlqEntry& entry, const ReplayRequest& request,
                              const Status& error) = 0;
  // A dry run finished.
  virtual void OnDryRun(const ReplayRequest& request, const ReplayReport& report) = 0;
  // `entry` of the job's `queue` was discarded by `actor` for `reason`.
  virtual void OnDiscarded(const DlqEntry& entry, std::string_view queue, std::string_view actor,
                           std::string_view reason) = 0;
  // A lock was released by hand (Operations::ReleaseLock) by `actor` for
  // `reason`. Default: nothing.
  virtual void OnLockReleased(const LockReleaseReport& report, std::string_view actor,
                              std::string_view reason);
  // Cache entries were invalidated by hand (Operations::InvalidateCacheKey
  // or InvalidateCachePrefix): `removed` entries of the key or prefix
  // `what`, by `actor` for `reason`. Default: nothing.
  virtual void OnCacheInvalidated(const CacheInvalidation& invalidation, std::string_view actor,
                                  std::string_view reason);
};

struct OperationsOptions {
  // For the replay rate limit's ready times. Null: SystemClock::Default().
  std::shared_ptr<Clock> clock;
  // Replays count in jobpact_dlq_replayed_total and discards in
  // jobpact_jobs_discarded_total{reason="operator_discard"}. Null: none.
  std::shared_ptr<MetricsSink> metrics;
  // Told of every replay and discard. Null: none.
  std::shared_ptr<OperationsListener> listener;
};

class JOBPACT_EXPORT Operations {
 public:
  // kInvalidArgument if the bundle has no operator side (admin) or no lock
  // store.
  static Result<std::unique_ptr<Operations>> Open(BackendBundle backend,
                                                  OperationsOptions options = {});

  const BackendBundle& backend() const { return backend_; }

  // --- Jobs ---
  Result<QueueStats> Stats();
  // The record with its full history and audit trail.
  Result<JobRecord> GetJob(std::string_view job_id);
  Result<std::vector<JobRecord>> ListJobs(const JobFilter& filter);
  // A queued job is discarded; a running one sees cancelled() at its next
  // heartbeat (QueueAdmin::Cancel).
  Result<CancelOutcome> CancelJob(std::string_view job_id, std::string_view actor,
                                  std::string_view reason);

  // --- Dead-letter queue (SPEC 7) ---
  Result<std::vector<DlqEntry>> ListDeadLetters(const DlqFilter& filter);
  Result<DlqEntry> GetDeadLetter(std::string_view job_id);
  // The controlled replay (see ReplayRequest). kInvalidArgument for a blank
  // actor or reason, or a bad rate, max_jobs or extra_attempts; the
  // backend's error if the selection cannot be listed. Per-entry failures
  // go to ReplayReport::failed.
  Result<ReplayReport> ReplayDeadLetters(const ReplayRequest& request);
  // dead_lettered -> discarded ("operator_discard") with the audit record.
  // kInvalidArgument for a blank actor or reason; kNotFound if the job is
  // not in the DLQ.
  Status DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                           std::string_view reason);
  // Deletes DLQ entries dead-lettered before `older_than`; how many.
  Result<int> PurgeDeadLetters(TimePoint older_than);
  // Deletes finished jobs (succeeded, failed, discarded) that finished
  // before `older_than`; how many (QueueAdmin::PurgeFinished).
  Result<int> PurgeFinished(TimePoint older_than);
  // Keeps the newest finished jobs per job type and final status as `keep`
  // says and deletes the rest; how many (QueueAdmin::TrimFinished,
  // kUnimplemented from a store without count retention).
  Result<int> TrimFinished(const FinishedRetention& keep);

  // --- Control state, obeyed by every process (SPEC 10) ---
  // Resume* and Clear* return kNotFound, naming the rule, if it is not set.
  Status PauseType(std::string_view job_type, std::string_view actor, std::string_view reason);
  Status ResumeType(std::string_view job_type, std::string_view actor, std::string_view reason);
  Status PauseQueue(std::string_view queue, std::string_view actor, std::string_view reason);
  Status ResumeQueue(std::string_view queue, std::string_view actor, std::string_view reason);
  // At most `limit` (>= 0) jobs of the type run at once across processes.
  Status SetConcurrencyLimit(std::string_view job_type, int limit, std::string_view actor,
                             std::string_view reason);
  Status ClearConcurrencyLimit(std::string_view job_type, std::string_view actor,
                               std::string_view reason);
  // At most `limit` (>= 0) jobs of any one tenant of `queue` run at once
  // across processes (ControlKind::kTenantConcurrencyLimit).
  Status SetTenantConcurrencyLimit(std::string_view queue, int limit, std::string_view actor,
                                   std::string_view reason);
  Status ClearTenantConcurrencyLimit(std::string_view queue, std::string_view actor,
                                     std::string_view reason);
  // At most `limit` (>= 0) handlers calling `dependency` run at once across
  // every runner, in place of their JobRunnerOptions::dependency_concurrency
  // (ControlKind::kDependencyConcurrencyLimit); cleared, the runners go
  // back to their own.
  Status SetDependencyConcurrencyLimit(std::string_view dependency, int limit,
                                       std::string_view actor, std::string_view reason);
  Status ClearDependencyConcurrencyLimit(std::string_view dependency, std::string_view actor,
                                         std::string_view reason);
  // Backpressure: an enqueue that would take `queue` past `max_depth` (>=
  // 0) waiting jobs is refused with kResourceExhausted, in every process
  // (ControlKind::kMaxQueueDepth).
  Status SetMaxQueueDepth(std::string_view queue, int max_depth, std::string_view actor,
                          std::string_view reason);
  Status ClearMaxQueueDepth(std::string_view queue, std::string_view actor,
                            std::string_view reason);
  // Failures of `failure_class` of the type go straight to the DLQ
  // (reason "routed_to_dlq"), whatever the retry policy says.
  Status RouteToDlq(std::string_view job_type, FailureClass failure_class,
                    std::string_view actor, std::string_view reason);
  Status ClearRoute(std::string_view job_type, FailureClass failure_class,
                    std::string_view actor, std::string_view reason);
  Result<ControlState> Control();
  // The newest control changes, oldest first, at most `limit`.
  Result<std::vector<std::string>> ControlAudit(std::size_t limit = 100);

  // --- Locks and policies ---
  // Live locks by key (key, owner, expiry, fencing token), at most `limit`.
  Result<std::vector<LockLease>> ListLocks(std::size_t limit = 1000);
  // The guard-railed manual release of a stuck lock (SPEC 10: only after
  // the owner is verified gone). `owner` must be the lock's live holder; a
  // JobRunner names a lock's owner by the lease token of the delivery that
  // took it (Lease::token, JobRecord::lease_token). The owner is gone, and
  // the lock is released, when:
  //   - the running job whose lease token is `owner` has a lease that has
  //     expired (now >= lease_expires_at: its worker stopped renewing), or
  //   - no running job holds that token any more (the delivery is over:
  //     its outcome was written, or its lease expired and was recovered, so
  //     the worker can no longer complete the job) and a job with the lock's
  //     key exists, i.e. the lock is a job's.
  // Errors, none of which changes anything:
  //   kInvalidArgument: blank key, owner, actor or reason.
  //   kNotFound: nobody holds `key` (expired or released already).
  //   kFailedPrecondition (a guard rail refused; the message says why):
  //     `key` is held by another owner; the owner's job is running with a
  //     live lease (its worker is alive: cancel the job, or wait); or no job
  //     can be tied to the owner (not a runner's lease token, or its job was
  //     purged; within kLockReleaseScanLimit records), so jobpact cannot
  //     verify it is gone -- the lock then expires at its TTL.
  //   The backend's error otherwise (kUnavailable, ...).
  // Who and why go to the listener (OnLockReleased); the lock store keeps
  // no audit of its own. Reads the running jobs, and in the second case up
  // to kLockReleaseScanLimit job records: an operator's action, not a
  // worker's.
  Result<LockReleaseReport> ReleaseLock(std::string_view key, std::string_view owner,
                                        std::string_view actor, std::string_view reason);
  // --- Rate limiters (jobpact/rate_limit_store.h) ---
  // kFailedPrecondition, naming the backend, if it has no RateLimitStore.
  // The limiters the store keeps (key, backoff, override), by key.
  Result<std::vector<RateLimiterState>> RateLimiters(std::size_t limit = 1000);
  // Sets the rate of a limiter ("type:<job type>", "dependency:<name>") in
  // every process, in place of the one in the code; nullopt goes back to
  // the code's. The actor and reason are kept with the override.
  Status OverrideRate(std::string_view key, std::optional<RateLimit> limit,
                      std::string_view actor, std::string_view reason);
  // Ends a limiter's backoff now (the upstream is known to be back): new
  // deliveries pass at once; jobs it already rescheduled keep their time.
  // kNotFound for a key with no state.
  Status LiftBackoff(std::string_view key, std::string_view actor, std::string_view reason);

  // The retry policies the runners published, each override with its
  // reason, by job type ("*" = a runner's default).
  Result<std::vector<PublishedPolicy>> Policies();

  // --- The cache guard's shared store (BackendBundle::cache) ---
  // Each is kFailedPrecondition, naming the backend, when the bundle has no
  // cache store (SQLite, PostgreSQL: a cache in each process's memory
  // cannot be reached from here), and the store's error otherwise.
  // How many live entries start with `prefix` (empty: all): the dry run
  // of InvalidateCachePrefix.
  Result<std::size_t> CountCacheEntries(std::string_view prefix);
  // Removes the entry of `key`; the next read of it is a miss, loaded from
  // the origin. kNotFound if no live entry has that key (nothing changed);
  // kInvalidArgument for a blank actor or reason, or a bad key.
  Result<CacheInvalidation> InvalidateCacheKey(std::string_view key, std::string_view actor,
                                               std::string_view reason);
  // Removes every entry whose key starts with `prefix` (a partial rebuild:
  // each becomes a miss, so the origin takes the reloads). kInvalidArgument
  // for an empty prefix (a whole flush is escalate-only) or a blank actor
  // or reason. Who and why go to the listener (OnCacheInvalidated); the
  // cache store keeps no audit of its own.
  Result<CacheInvalidation> InvalidateCachePrefix(std::string_view prefix, std::string_view actor,
                                                  std::string_view reason);

 private:
  Operations(BackendBundle backend, OperationsOptions options);

  Status Set(ControlKind kind, std::string_view subject, int limit, FailureClass c,
             std::string_view actor, std::string_view reason);
  Status Clear(ControlKind kind, std::string_view subject, FailureClass c,
               std::string_view actor, std::string_view reason);
  // The bundle's cache store, or kFailedPrecondition naming the backend.
  Result<CacheStore*> Cache(std::string_view op) const;

  const BackendBundle backend_;
  const OperationsOptions options_;
};

}  // namespace jobpact

#endif  // JOBPACT_OPERATIONS_H_
