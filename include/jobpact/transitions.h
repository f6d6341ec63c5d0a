// File: jobpact/transitions.h
//
// The contract engine: every change of a job's record as a pure function
// (SPEC 2, 3, 5, 7, 9). Given a record, a lease, an outcome and `now`, each
// function returns the record after the change, the history entries to
// append, where the job now sits among a store's indexes, and the condition
// the store must find when it writes (the status, epoch and lease token the
// engine saw). A backend stores that result atomically; it never decides what
// a completion, a recovery or a replay means, so there is one state machine,
// here, whatever the store (in memory, SQLite, Redis, PostgreSQL).
//
// Every function checks the SPEC 2 table (CheckTransition) and returns
// kFailedPrecondition for an illegal change, kAborted for a stale lease,
// kInvalidArgument for bad input. None reads a clock, allocates ids on its
// own or touches a store: the same inputs give the same JobChange.
//
// Backend authors: StoreBackend (jobpact/store_backend.h) calls these for
// every change computed outside the store. The two steps that run inside the
// store (leasing the next ready jobs, recovering expired leases) must give
// what Deliver() and RecoverLease() give; the conformance suite checks that.
//
// Example:
//   Result<JobChange> c = jobpact::engine::NewJob(env, now);
//   // ... the store inserts c->record, appends c->append, indexes it by
//   // c->placement ...
//   Result<JobChange> done = jobpact::engine::Complete(delivery, completion, now);
#ifndef JOBPACT_TRANSITIONS_H_
#define JOBPACT_TRANSITIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/queue_backend.h"
#include "jobpact/result.h"

namespace jobpact {

// Where a job sits among a store's indexes; always exactly one.
enum class JobPlacement {
  kReady,         // queued or retry_scheduled, ready_at <= now: can be leased.
  kScheduled,     // queued or retry_scheduled, ready_at > now.
  kLeased,        // running, until lease_expires_at.
  kDeadLettered,  // in the DLQ, by finished_at.
  kFinal,         // succeeded, failed or discarded, by finished_at.
};

// "ready", "scheduled", "leased", "dead_lettered", "final".
JOBPACT_EXPORT std::string_view JobPlacementName(JobPlacement p);

// Where `record` belongs at `now`, from its status and ready_at.
JOBPACT_EXPORT JobPlacement PlacementOf(const JobRecord& record, TimePoint now);

// What the store must find before it writes a change.
struct WriteCondition {
  // A new job: its id must be free (kAlreadyExists otherwise).
  bool new_job = false;
  // Otherwise the stored record must have this status, epoch and lease token
  // (empty: no lease); kAborted if it does not (someone else changed it).
  JobStatus status = JobStatus::kQueued;
  std::int64_t epoch = 0;
  std::string lease_token;
};

// One state change of one job, as the engine computed it.
struct JobChange {
  // The whole record after the change, to store in place of the old one,
  // with two exceptions: its `history` is not written (the store appends
  // `append` to the history it has, see AppendHistory), and an empty
  // `checkpoint` keeps the stored one (a heartbeat may have stored a newer
  // checkpoint than the record a completion was computed from), and a change
  // of a running job (expect.status kRunning) keeps the stored audit trail
  // and cancel request: an operator's cancel may have added them since the
  // record was read (QueueAdmin::Cancel), and no such change adds to them.
  // Of a stored job's envelope, no change alters anything but `attempt` and
  // `max_attempts` (identity, payload, keys and queue are fixed at enqueue),
  // so a store need write only those two of it.
  JobRecord record;
  // The transitions this change adds to the history (usually one).
  std::vector<Transition> append;
  JobPlacement placement = JobPlacement::kReady;
  WriteCondition expect;
};

// Appends `entries` to `history` and drops the oldest beyond kMaxHistory.
JOBPACT_EXPORT void AppendHistory(std::vector<Transition>& history,
                                  const std::vector<Transition>& entries);
// The same, moving the entries (a store that keeps them in memory).
JOBPACT_EXPORT void AppendHistory(std::vector<Transition>& history,
                                  std::vector<Transition>&& entries);

// Sets `*to` to `from` without its history (`to->history` is left empty):
// what a change starts from, and what a store copies into a Delivery.
// Cheaper than a copy followed by history.clear(), which would copy up to
// kMaxHistory entries only to drop them.
JOBPACT_EXPORT void CopyWithoutHistory(const JobRecord& from, JobRecord* to);

// True iff `record` holds input that never was a runnable job: an invalid
// envelope or a stored record that could no longer be decoded. Such records
// can be inspected and discarded, never replayed.
JOBPACT_EXPORT bool IsQuarantined(const JobRecord& record);

// DLQ reason of a stored record that can no longer be decoded (quarantined
// with its raw form kept, outside the state machine).
inline constexpr std::string_view kUndecodableRecord = "undecodable_record";

namespace engine {

// The checks every entry point applies before a job is stored: job_id and
// queue set (PrepareForEnqueue), and the envelope decodable again after a
// round trip (ValidateEnvelope with no size or buffer bounds: the producer's
// own ValidationOptions may be looser than the defaults). kInvalidArgument
// naming every problem otherwise.
JOBPACT_EXPORT Status CheckStorable(const Envelope& env);

// Enqueue: a new queued job, ready at max(scheduled_at, now), attempt 0
// (a producer's value is never trusted), created_at = now if unset, and the
// creation entry (queued -> queued, "enqueued") as its first history entry.
JOBPACT_EXPORT Result<JobChange> NewJob(const Envelope& env, TimePoint now);
// The same, written into `*out` (e.g. a slot of the batch a store takes),
// which saves moving a ~1 KB record. On an error `*out` is unspecified.
JOBPACT_EXPORT Status NewJob(const Envelope& env, TimePoint now, JobChange* out);

// Input that failed validation (SPEC 1), born dead-lettered with reason
// invalid_envelope, its raw form kept whole and the problems as its last
// failure (permanent, code invalid_envelope). `job_id` is the id to file it
// under (see InvalidEnvelopeId).
JOBPACT_EXPORT JobChange InvalidEnvelope(std::string_view raw,
                                         const std::vector<FieldError>& problems,
                                         std::string job_id, TimePoint now);

// The job id an invalid input names, if it is a safe one, else empty.
JOBPACT_EXPORT std::string InvalidEnvelopeId(std::string_view raw);

// A stored record that can no longer be decoded: quarantined as a DLQ entry
// (reason undecodable_record), `raw` (the stored form) kept, `error` as its
// last failure. Written over the stored record unconditionally: there is no
// state machine to consult for a record nobody can read.
JOBPACT_EXPORT JobChange Quarantine(std::string job_id, std::string raw, std::string_view error,
                                    TimePoint now);

// Delivery: queued or retry_scheduled -> running with epoch + 1,
// attempt + 1, `lease_token`, and a lease until now + visibility_timeout.
// kFailedPrecondition if the job is not ready (status or ready_at > now).
JOBPACT_EXPORT Result<JobChange> Deliver(const JobRecord& record, std::string lease_token,
                                         TimePoint now);
// The same, consuming the record (a store that holds it in memory need not
// copy it). On an error the record is left as it was.
JOBPACT_EXPORT Result<JobChange> Deliver(JobRecord&& record, std::string lease_token,
                                         TimePoint now);
// The same, applied in place, for a store that holds its records in memory:
// `record` itself becomes the delivered record (its history untouched, the
// new entry is in rest->append), and `*rest` gets the rest of the change
// (append, placement, expect; rest->record is not touched). On an error
// neither is changed.
JOBPACT_EXPORT Status DeliverInPlace(JobRecord& record, std::string lease_token, TimePoint now,
                                     JobChange* rest);

// The outcome of a delivery (see Completion). kAborted if `delivery.lease`
// is not the record's lease; kFailedPrecondition for an illegal target.
JOBPACT_EXPORT Result<JobChange> Complete(const Delivery& delivery, const Completion& completion,
                                          TimePoint now);
// The same, consuming the delivery (no copy of its record).
JOBPACT_EXPORT Result<JobChange> Complete(Delivery&& delivery, const Completion& completion,
                                          TimePoint now);
// The same, written into `*out` (e.g. the write a store is handed). On an
// error `*out` is unspecified.
JOBPACT_EXPORT Status Complete(const Delivery& delivery, const Completion& completion,
                               TimePoint now, JobChange* out);
// The same, consuming the delivery's record (moved into out->record, its
// history dropped). On an error the delivery is left as it was.
JOBPACT_EXPORT Status Complete(Delivery&& delivery, const Completion& completion, TimePoint now,
                               JobChange* out);

// The same, applied in place to the STORED record (a store that holds its
// records in memory, under its own lock): `record` becomes what writing
// Complete(delivery, ...)'s change over it gives (JobChange's rules: an
// empty completion checkpoint keeps the stored one, the stored audit trail
// and cancel request are kept; its history untouched), and `*rest` gets the
// rest of the change (append, placement, expect; rest->record is not
// touched). `lease` is the delivery's. On an error neither is changed.
JOBPACT_EXPORT Status CompleteInPlace(JobRecord& record, const Lease& lease,
                                      const Completion& completion, TimePoint now,
                                      JobChange* rest);

// A heartbeat: the lease extended to now + extension, `checkpoint` kept if
// not empty. No transition. kAborted for a stale lease; kInvalidArgument for
// extension <= 0.
JOBPACT_EXPORT Result<JobChange> Renew(const JobRecord& record, const Lease& lease,
                                       Duration extension, std::string_view checkpoint,
                                       TimePoint now);

// An expired lease (SPEC 5): running -> queued ("lease_expired", ready now,
// lease_recoveries + 1), or to dead_lettered ("lease_expired_repeatedly")
// when the recoveries would exceed `max_recoveries`. kFailedPrecondition if
// the job is not running or its lease has not expired (now < expiry).
JOBPACT_EXPORT Result<JobChange> RecoverLease(const JobRecord& record, int max_recoveries,
                                              TimePoint now);
// The same, consuming the record. On an error the record is left as it was.
JOBPACT_EXPORT Result<JobChange> RecoverLease(JobRecord&& record, int max_recoveries,
                                              TimePoint now);

// The LeaseRecovery report of a change RecoverLease computed.
JOBPACT_EXPORT LeaseRecovery RecoveryReport(const JobChange& change);

// DLQ replay (SPEC 7): dead_lettered -> queued ("replay") with the audit
// record; attempts reset or max_attempts + extra_attempts; crash and
// lock-wait budgets start again. kInvalidArgument without actor or reason;
// kNotFound if the job is not in the DLQ; kFailedPrecondition for a
// quarantined record.
JOBPACT_EXPORT Result<JobChange> Replay(const JobRecord& record, const DlqAction& action,
                                        TimePoint now);

// Operator discard of a DLQ entry: dead_lettered -> discarded
// ("operator_discard") with the audit record. Same errors as Replay, except
// that quarantined records can be discarded.
JOBPACT_EXPORT Result<JobChange> Discard(const JobRecord& record, const DlqAction& action,
                                         TimePoint now);

// An operator's cancel (SPEC 10): a queued or retry_scheduled job ->
// discarded ("cancelled"); a running one keeps running with
// cancel_requested set (no transition), so its handler sees cancelled() at
// its next heartbeat, in whatever process runs it. Both with the audit
// record. kFailedPrecondition for a DLQ entry (discard it instead) or a
// final job; kInvalidArgument without actor or reason.
JOBPACT_EXPORT Result<JobChange> Cancel(const JobRecord& record, const DlqAction& action,
                                        TimePoint now);

// The audit line of an operator action: "<time> <verb> by <actor>: <reason>".
JOBPACT_EXPORT std::string AuditLine(std::string_view verb, TimePoint now,
                                     const DlqAction& action);

}  // namespace engine
}  // namespace jobpact

#endif  // JOBPACT_TRANSITIONS_H_
