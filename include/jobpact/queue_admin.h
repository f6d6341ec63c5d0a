// File: jobpact/queue_admin.h
//
// QueueAdmin is the operator side of a backend (SPEC 7, 10): what an on-call
// engineer, the `jobpact` command-line tool or a dashboard needs, with no
// JobRunner and no worker. QueueBackend (jobpact/queue_backend.h) keeps what
// workers call; this interface holds the rest:
//   - job lookup, listing by status / type / queue, stats;
//   - cancelling a job: a job that has not started is discarded; a running
//     one sees JobContext::cancelled() at its next heartbeat, in whatever
//     process runs it;
//   - the dead-letter queue: list, inspect, replay, discard, purge;
//   - the control state every process sharing the store obeys: pause and
//     resume per job type and per queue, a concurrency limit per job type
//     counted across all processes, a maximum depth per queue (backpressure
//     at enqueue), and rules that route a failure class of a type straight
//     to the DLQ. The store's lease step skips paused types, paused queues
//     and types at their limit, so a paused job is never leased and handed
//     back; its enqueue step refuses jobs past a queue's maximum depth;
//   - the retry policies the runners use, each override with its written
//     reason, published to the store so that a tool can show them.
//
// Every StoreBackend implements it (BackendBundle::admin). The Operations
// facade (jobpact/operations.h) adds the controlled replay, lock listing and
// the audit of control changes on top.
//
// Contract: as QueueBackend's (thread-safe, never throws, one atomic step
// per change, time from the store's clock). Every change names who made it
// and why (actor and reason are required: kInvalidArgument without them).
#ifndef JOBPACT_QUEUE_ADMIN_H_
#define JOBPACT_QUEUE_ADMIN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/job_status.h"
#include "jobpact/queue_backend.h"
#include "jobpact/result.h"
#include "jobpact/retry_policy.h"
#include "jobpact/status.h"

namespace jobpact {

// Which jobs ListJobs returns.
struct JobFilter {
  std::optional<JobStatus> status;
  std::optional<std::string> job_type;
  std::optional<std::string> queue;
  // Only jobs whose id sorts after this one (the next page: pass the last id
  // of the previous page). Ids are ULIDs, so this is enqueue order.
  std::optional<std::string> after_job_id;
  // At most this many, by job id. REQUIRES: 1..10000.
  std::size_t limit = 100;
};

// What Cancel did.
enum class CancelOutcome {
  kDiscarded,        // The job had not started: it is discarded ("cancelled").
  kCancelRequested,  // The job is running: its handler sees cancelled() at its
                     // next heartbeat; its outcome is then written as usual.
};
// "discarded", "cancel_requested".
JOBPACT_EXPORT std::string_view CancelOutcomeName(CancelOutcome o);

// One rule of the control state (SPEC 10 safe actions).
enum class ControlKind {
  kPauseType,         // subject: a job type. Its jobs are not leased.
  kPauseQueue,        // subject: a queue. Its jobs are not leased.
  kConcurrencyLimit,  // subject: a job type. At most `limit` of its jobs run
                      // at once, counted over every process of the store.
  kRouteToDlq,        // subject: a job type. A failure of `failure_class`
                      // dead-letters the job at once ("routed_to_dlq").
  kMaxQueueDepth,     // subject: a queue. An enqueue that would take the
                      // queue's depth (ready plus scheduled jobs, not
                      // running ones) past `limit` is refused with
                      // kResourceExhausted naming the queue, its depth and
                      // the limit, and stores nothing (a batch: none of
                      // it). Jobs an enqueue finds to be dedup duplicates
                      // count too. Checked in the enqueue's atomic step,
                      // so processes enqueueing at once cannot overshoot.
  kTenantConcurrencyLimit,  // subject: a queue. At most `limit` jobs of any
                            // one tenant of the queue run at once, counted
                            // over every process of the store; jobs without
                            // a tenant_id count as one tenant. A tenant at
                            // its cap is passed over in the lease step (its
                            // jobs wait, the other tenants' go ahead); a
                            // crashed worker's job stops counting when its
                            // lease expires.
  kDependencyConcurrencyLimit,  // subject: a dependency
                                // (HandlerOptions::dependency). At most
                                // `limit` handlers calling it run at once
                                // across every runner sharing the LockStore,
                                // in place of the runners'
                                // JobRunnerOptions::dependency_concurrency;
                                // runners see a change within their
                                // poll_interval.
};
// "pause_type", "pause_queue", "concurrency_limit", "route_to_dlq",
// "max_queue_depth", "tenant_concurrency_limit",
// "dependency_concurrency_limit".
JOBPACT_EXPORT std::string_view ControlKindName(ControlKind k);
JOBPACT_EXPORT Result<ControlKind> ParseControlKind(std::string_view name);
// True for the kinds whose rule carries a limit (ControlRule::limit).
JOBPACT_EXPORT bool ControlKindHasLimit(ControlKind k);

struct ControlRule {
  ControlKind kind = ControlKind::kPauseType;
  std::string subject;  // The job type or queue (a safe name).
  // kConcurrencyLimit: the most jobs of the type running at once, >= 0 (0
  // holds the type like a pause, but lets running jobs finish as usual).
  // kMaxQueueDepth: the most jobs waiting in the queue, >= 0 (0 refuses
  // every enqueue to it).
  // kTenantConcurrencyLimit: the most jobs of one tenant of the queue
  // running at once, >= 0 (0 holds the queue like a pause).
  // kDependencyConcurrencyLimit: the most handlers calling the dependency
  // at once, >= 0 (0 holds every job calling it).
  int limit = 0;
  // kRouteToDlq: the failure class routed.
  FailureClass failure_class = FailureClass::kUnknown;
  // Who set the rule and why (required), and when (set by the store).
  std::string actor;
  std::string reason;
  TimePoint set_at;
};

// The rules in force. A rule is identified by (kind, subject) and, for
// kRouteToDlq, its failure class: setting it again replaces it.
struct ControlState {
  std::vector<ControlRule> rules;  // By kind, subject, failure class.

  bool TypePaused(std::string_view job_type) const;
  bool QueuePaused(std::string_view queue) const;
  // The concurrency limit of `job_type`, if one is set.
  std::optional<int> ConcurrencyLimit(std::string_view job_type) const;
  // The maximum depth of `queue`, if one is set.
  std::optional<int> MaxQueueDepth(std::string_view queue) const;
  // The per-tenant concurrency cap of `queue`, if one is set.
  std::optional<int> TenantConcurrencyLimit(std::string_view queue) const;
  // The concurrency limit of `dependency`, if an operator set one.
  std::optional<int> DependencyConcurrencyLimit(std::string_view dependency) const;
  // True if failures of `c` of `job_type` go straight to the DLQ.
  bool RoutesToDlq(std::string_view job_type, FailureClass c) const;
};

// Identifies a rule to clear: (kind, subject) and, for kRouteToDlq, the
// failure class. Who and why are kept in the control audit.
struct ControlRuleKey {
  ControlKind kind = ControlKind::kPauseType;
  std::string subject;
  FailureClass failure_class = FailureClass::kUnknown;
};

// A retry policy as a runner uses it, published to the store.
struct PublishedPolicy {
  // The job type, or "*" for the runner's global default.
  std::string job_type;
  RetryPolicy policy;
  // The override's written reason; empty for the default.
  std::string reason;
  // The runner that published it (JobRunnerOptions::runner_id), and when.
  std::string publisher;
  TimePoint published_at;
};

// How many finished jobs TrimFinished keeps, per job type and final status
// (count retention, like BullMQ's removeOnComplete / removeOnFail {count};
// the age limit is PurgeFinished's). Per status: the newest `n` jobs of
// each job type in that status are kept, by finished_at and, for jobs
// finished at the same time, by job id (the greater id is the newer); the
// rest are deleted. nullopt: no count limit for that status. 0: none kept.
struct FinishedRetention {
  std::optional<std::int64_t> succeeded;
  std::optional<std::int64_t> failed;
  std::optional<std::int64_t> discarded;
  // At most this many jobs deleted by one TrimFinished call, 0: no cap
  // (every surplus job). However many, a store deletes them in chunks of
  // at most kTrimChunk, each its own atomic step (one hold of its lock, one
  // transaction, one script), so a trim never stalls the workers for long.
  std::int64_t max_jobs = 0;
  // Succeeded jobs with a dedup key finished at or after this are kept
  // whatever the count: dedup (SPEC 3 step 4) still finds a job that
  // succeeded within its window, and trimming it would let a duplicate
  // run. The runner passes now - dedup_window. nullopt: no such floor.
  std::optional<TimePoint> keep_succeeded_since;

  static constexpr int kTrimChunk = 1000;
};

// The default policy's job_type in PublishedPolicy.
inline constexpr std::string_view kDefaultPolicyType = "*";

class JOBPACT_EXPORT QueueAdmin {
 public:
  QueueAdmin() = default;
  QueueAdmin(const QueueAdmin&) = delete;
  QueueAdmin& operator=(const QueueAdmin&) = delete;
  virtual ~QueueAdmin();

  // --- Jobs ---

  // The job's record with its full history and audit trail. kNotFound if
  // unknown (or purged).
  virtual Result<JobRecord> Get(std::string_view job_id) = 0;
  // Jobs matching `filter`, by job id, with their history.
  // kInvalidArgument for a limit outside 1..10000.
  virtual Result<std::vector<JobRecord>> ListJobs(const JobFilter& filter) = 0;
  virtual Result<QueueStats> Stats() = 0;
  // Cancels a job (SPEC 10), with the audit record (action.actor and
  // action.reason required; the replay fields are ignored). kNotFound for an
  // unknown job; kFailedPrecondition for a job in the DLQ (discard it) or
  // one already final, naming its status.
  virtual Result<CancelOutcome> Cancel(std::string_view job_id, const DlqAction& action) = 0;

  // --- Dead-letter queue (SPEC 7) ---

  virtual Result<std::vector<DlqEntry>> ListDeadLetters(const DlqFilter& filter) = 0;
  // kNotFound if the job is not in the DLQ.
  virtual Result<DlqEntry> GetDeadLetter(std::string_view job_id) = 0;
  // dead_lettered -> queued (reason "replay"), with the audit record.
  // kInvalidArgument without actor or reason; kNotFound if not in the DLQ;
  // kFailedPrecondition for an invalid envelope (it cannot run; fix and
  // re-enqueue it instead).
  virtual Status Replay(std::string_view job_id, const DlqAction& action) = 0;
  // dead_lettered -> discarded (reason "operator_discard"), with the audit
  // record. Same errors as Replay.
  virtual Status Discard(std::string_view job_id, const DlqAction& action) = 0;
  // Deletes DLQ entries dead-lettered before `older_than`. Returns how many.
  virtual Result<int> PurgeDeadLetters(TimePoint older_than) = 0;
  // Deletes jobs in a final status whose finished_at is before `older_than`
  // (status retention, SPEC 2). Returns how many.
  virtual Result<int> PurgeFinished(TimePoint older_than) = 0;
  // Deletes the jobs in a final status (succeeded, failed, discarded) past
  // `keep`'s count per job type (see FinishedRetention): running, waiting
  // and dead-lettered jobs are never touched. Returns how many. Added after
  // the others: the default returns kUnimplemented. kInvalidArgument for a
  // negative count or max_jobs.
  virtual Result<int> TrimFinished(const FinishedRetention& keep);

  // --- Control state (SPEC 10) ---

  virtual Result<ControlState> ReadControl() = 0;
  // Sets (or replaces) a rule; set_at is the store's now. kInvalidArgument
  // for an unsafe subject, a negative limit, or no actor or reason.
  virtual Status SetControl(const ControlRule& rule) = 0;
  // Clears a rule (resume, lift a limit, drop a route). kNotFound if no such
  // rule is set; kInvalidArgument without actor or reason.
  virtual Status ClearControl(const ControlRuleKey& key, std::string_view actor,
                              std::string_view reason) = 0;
  // The newest control changes, newest last: "<time> <set|clear> <kind>
  // <subject>[ <detail>] by <actor>: <reason>". At most `limit`.
  virtual Result<std::vector<std::string>> ControlAudit(std::size_t limit) = 0;

  // --- Published retry policies ---

  // Stores each policy (by job type, replacing what was published for it).
  // kInvalidArgument for an invalid policy, a bad job type, or an override
  // without a reason.
  virtual Status PublishPolicies(const std::vector<PublishedPolicy>& policies) = 0;
  // Every published policy, by job type ("*" first).
  virtual Result<std::vector<PublishedPolicy>> ReadPolicies() = 0;
};

}  // namespace jobpact

#endif  // JOBPACT_QUEUE_ADMIN_H_
