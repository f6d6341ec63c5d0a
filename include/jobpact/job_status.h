// File: jobpact/job_status.h
//
// The seven job statuses, the one table of legal transitions between them
// (SPEC 2), and the transition record kept in every job's history.
//
//   queued          -> running | discarded
//   running         -> succeeded | retry_scheduled | failed | dead_lettered
//                      | discarded | queued (lease expired)
//   retry_scheduled -> running | discarded
//   dead_lettered   -> queued (replay) | discarded (operator discard)
//
// succeeded, failed and discarded are final. Any other transition is a bug
// and is refused with kFailedPrecondition.
#ifndef JOBPACT_JOB_STATUS_H_
#define JOBPACT_JOB_STATUS_H_

#include <string>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

enum class JobStatus {
  kQueued,
  kRunning,
  kSucceeded,
  kRetryScheduled,
  kFailed,
  kDeadLettered,
  kDiscarded,
};

inline constexpr JobStatus kAllJobStatuses[] = {
    JobStatus::kQueued, JobStatus::kRunning,      JobStatus::kSucceeded, JobStatus::kRetryScheduled,
    JobStatus::kFailed, JobStatus::kDeadLettered, JobStatus::kDiscarded};

// The SPEC's name: "queued", "running", "succeeded", "retry_scheduled",
// "failed", "dead_lettered", "discarded".
JOBPACT_EXPORT std::string_view JobStatusName(JobStatus s);
// Inverse of JobStatusName; kInvalidArgument naming the bad value otherwise.
JOBPACT_EXPORT Result<JobStatus> ParseJobStatus(std::string_view name);

// True for succeeded, failed and discarded.
JOBPACT_EXPORT bool IsFinal(JobStatus s);
// True iff `from -> to` is in the table above.
JOBPACT_EXPORT bool IsLegalTransition(JobStatus from, JobStatus to);
// OK for a legal transition; kFailedPrecondition naming both statuses otherwise.
JOBPACT_EXPORT Status CheckTransition(JobStatus from, JobStatus to);

// One entry of a job's history.
struct Transition {
  JobStatus from = JobStatus::kQueued;
  JobStatus to = JobStatus::kQueued;
  TimePoint at;
  std::string reason;  // One of the reason:: names below, or a handler's own.
};

// The reasons jobpact records on transitions and DLQ entries. Stable strings:
// dashboards and alerts match on them.
namespace reason {
inline constexpr std::string_view kEnqueued = "enqueued";
inline constexpr std::string_view kDelivered = "delivered";
inline constexpr std::string_view kSucceeded = "succeeded";
inline constexpr std::string_view kInvalidEnvelope = "invalid_envelope";
inline constexpr std::string_view kExpired = "expired";
inline constexpr std::string_view kStartByPassed = "start_by_passed";
inline constexpr std::string_view kTotalDeadlinePassed = "total_deadline_passed";
inline constexpr std::string_view kMaxAttemptsExceeded = "max_attempts_exceeded";
inline constexpr std::string_view kDuplicate = "duplicate";
inline constexpr std::string_view kLockBusy = "lock_busy";
inline constexpr std::string_view kLockWaitsExhausted = "lock_waits_exhausted";
inline constexpr std::string_view kIdempotentSkip = "idempotent_skip";
inline constexpr std::string_view kIdempotencyInProgress = "idempotency_in_progress";
inline constexpr std::string_view kTransientError = "transient_error";
inline constexpr std::string_view kPermanentError = "permanent_error";
inline constexpr std::string_view kUnknownError = "unknown_error";
inline constexpr std::string_view kUnknownNonRetryable = "unknown_non_retryable";
inline constexpr std::string_view kTimeout = "timeout";
inline constexpr std::string_view kLeaseExpired = "lease_expired";
inline constexpr std::string_view kLeaseExpiredRepeatedly = "lease_expired_repeatedly";
inline constexpr std::string_view kSnoozed = "snoozed";
inline constexpr std::string_view kHandlerDiscarded = "handler_discarded";
inline constexpr std::string_view kNoHandler = "no_handler";
inline constexpr std::string_view kReplay = "replay";
inline constexpr std::string_view kOperatorDiscard = "operator_discard";
// An operator cancelled the job (QueueAdmin::Cancel): discarded, before it
// started or when its handler stopped on JobContext::cancelled().
inline constexpr std::string_view kCancelled = "cancelled";
// A failure of a class that an operator routes straight to the DLQ for the
// job's type (ControlKind::kRouteToDlq).
inline constexpr std::string_view kRoutedToDlq = "routed_to_dlq";
inline constexpr std::string_view kRetryBudgetExhausted = "retry_budget_exhausted";
inline constexpr std::string_view kShutdown = "shutdown";
// A delivery of a paused job type, requeued without spending an attempt
// (JobRunner::Pause, SPEC 10).
inline constexpr std::string_view kPaused = "paused";
// A delivery whose handler's dependency has an open circuit breaker,
// rescheduled to the breaker's retry_after() without spending an attempt.
inline constexpr std::string_view kCircuitOpen = "circuit_open";
// A delivery a rate limiter refused (HandlerOptions::rate_limit,
// local_rate_limit, JobRunnerOptions::dependency_rate_limits, or a
// handler's RateLimited backoff), rescheduled to the limiter's time
// without spending an attempt.
inline constexpr std::string_view kRateLimited = "rate_limited";
// A delivery past its type's limit of handlers running at once in this
// process (HandlerOptions::local_max_concurrency), rescheduled a short
// while later without spending an attempt.
inline constexpr std::string_view kConcurrencyLimited = "concurrency_limited";
// The handler succeeded but its idempotency record could not be written
// (SPEC 3 step 9): the job is not acked as succeeded; the attempt counts as
// a transient failure with this code and is retried.
inline constexpr std::string_view kIdempotencyRecordFailed = "idempotency_record_failed";
// The handler succeeded with a transactional effect, but the delivery's
// idempotency claim was lost before the effect could commit (it expired
// and another delivery took the key): the effect is not committed, the
// attempt counts as a transient failure, and the retry finds the key done
// (idempotent_skip) or still claimed (idempotency_in_progress).
inline constexpr std::string_view kIdempotencyClaimLost = "idempotency_claim_lost";
// An enqueue refused because the queue was at its maximum depth
// (ControlKind::kMaxQueueDepth); the label of metric::kEnqueueRefused.
inline constexpr std::string_view kMaxQueueDepth = "max_queue_depth";
}  // namespace reason

}  // namespace jobpact

#endif  // JOBPACT_JOB_STATUS_H_
