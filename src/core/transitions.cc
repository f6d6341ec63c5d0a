// The contract engine: the pure transitions of jobpact/transitions.h.
#include "jobpact/transitions.h"

#include <algorithm>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "src/internal/names.h"
#include "src/internal/stored_validation.h"

namespace jobpact {
namespace {


// What a store must find to write over `r`.
WriteCondition ConditionOf(const JobRecord& r) {
  WriteCondition w;
  w.status = r.status;
  w.epoch = r.epoch;
  w.lease_token = r.lease_token;
  return w;
}

// A change of the stored record `r` starts with the condition the store must
// find, and no entries yet.
void Start(const JobRecord& r, JobChange& ch) {
  // Field by field: a store's reused change keeps its buffers.
  ch.expect.new_job = false;
  ch.expect.status = r.status;
  ch.expect.epoch = r.epoch;
  ch.expect.lease_token = r.lease_token;
  ch.append.clear();
}

// The value form of a change starts as a copy of the record the engine was
// given (or the record itself, moved in), without its history: a change
// never carries the history (see JobChange).
JobChange Begin(const JobRecord& r) {
  JobChange ch;
  Start(r, ch);
  CopyWithoutHistory(r, &ch.record);
  return ch;
}
JobChange Begin(JobRecord&& r) {
  JobChange ch;
  Start(r, ch);
  ch.record = std::move(r);
  ch.record.history.clear();
  return ch;
}

// And ends with its one history entry, the new status of `r` (the change's
// record, or a store's own in the in-place forms) and its placement.
void End(JobRecord& r, JobChange& ch, JobStatus to, std::string_view why, TimePoint now) {
  ch.append.push_back(Transition{ch.expect.status, to, now, std::string(why)});
  r.status = to;
  r.updated_at = now;
  ch.placement = PlacementOf(r, now);
}
void End(JobChange& ch, JobStatus to, std::string_view why, TimePoint now) {
  End(ch.record, ch, to, why, now);
}

void ClearLease(JobRecord& r) {
  r.lease_token.clear();
  r.lease_expires_at = TimePoint{};
}

Status CheckAction(const DlqAction& action, std::string_view what) {
  if (action.actor.empty()) {
    return Status::InvalidArgument(std::string(what) + ": DLQ action needs an actor (who)");
  }
  if (action.reason.empty()) {
    return Status::InvalidArgument(std::string(what) + ": DLQ action needs a reason (why)");
  }
  // Kept in the audit trail, which the durable stores hold as JSON: bytes
  // that are not UTF-8 would be replaced there, so the trail would not say
  // what the operator wrote.
  if (!internal::IsOperatorText(action.actor) || !internal::IsOperatorText(action.reason)) {
    return Status::InvalidArgument(std::string(what) +
                                   ": the actor and the reason must be valid UTF-8 without NUL");
  }
  return Status::Ok();
}

Status CheckInDlq(const JobRecord& r) {
  if (r.status != JobStatus::kDeadLettered) {
    return Status::NotFound("not in the DLQ: " + r.envelope.job_id + " is " +
                            std::string(JobStatusName(r.status)));
  }
  return Status::Ok();
}

Status CheckLease(const JobRecord& r, const Lease& lease) {
  if (r.status != JobStatus::kRunning) {
    return Status::Aborted("stale lease: job " + lease.job_id + " is " +
                           std::string(JobStatusName(r.status)));
  }
  if (r.epoch != lease.epoch || r.lease_token != lease.token ||
      r.envelope.job_id != lease.job_id) {
    return Status::Aborted("stale lease: job " + lease.job_id + " epoch " +
                           std::to_string(lease.epoch) + " was superseded by epoch " +
                           std::to_string(r.epoch));
  }
  return Status::Ok();
}

Status CheckComplete(const Delivery& d, const Completion& c) {
  JOBPACT_RETURN_IF_ERROR(CheckLease(d.job, d.lease));
  return CheckTransition(JobStatus::kRunning, c.to);
}

// How ApplyComplete treats what a store keeps of the running record.
enum class CompleteOn {
  // A copy of the delivered record: the change carries the completion's
  // checkpoint and clears the cancel request; the store then keeps its own
  // where JobChange says so.
  kDeliveredCopy,
  // The stored record itself: what the store would have kept stays.
  kStoredRecord,
};

// REQUIRES: CheckComplete passed, Start(r, ch) done.
void ApplyComplete(JobRecord& r, const Completion& c, TimePoint now, JobChange& ch,
                   CompleteOn on = CompleteOn::kDeliveredCopy) {
  if (!c.spend_attempt && r.envelope.attempt > 0) --r.envelope.attempt;
  if (c.lock_wait) ++r.lock_waits;
  if (c.failure) {
    // A handler's error text may hold any bytes (an exception quoting
    // binary input); as a diagnostic it is kept as text every store can
    // hold, where a store that cannot take NUL refused the whole outcome.
    r.last_failure = c.failure;
    r.last_failure->code = internal::StorableText(std::move(r.last_failure->code));
    r.last_failure->message = internal::StorableText(std::move(r.last_failure->message));
  }
  // The delivered record's checkpoint may be older than the one a heartbeat
  // stored since: only a checkpoint the outcome carries is written.
  if (on == CompleteOn::kDeliveredCopy || !c.checkpoint.empty()) r.checkpoint = c.checkpoint;
  r.reason = c.reason;
  if (c.to == JobStatus::kSucceeded) r.result = c.result;
  switch (c.to) {
    case JobStatus::kRetryScheduled:
      r.previous_delay = c.delay;
      [[fallthrough]];
    case JobStatus::kQueued:
      // Never before the enqueue (the ready order is by ready_at).
      r.ready_at = std::max(c.ready_at.value_or(now), r.enqueued_at);
      break;
    default:  // The DLQ or a final status.
      r.finished_at = now;
      break;
  }
  ClearLease(r);
  if (on == CompleteOn::kDeliveredCopy) r.cancel_requested = false;
  End(r, ch, c.to, c.reason, now);
}

}  // namespace

std::string_view JobPlacementName(JobPlacement p) {
  switch (p) {
    case JobPlacement::kReady:
      return "ready";
    case JobPlacement::kScheduled:
      return "scheduled";
    case JobPlacement::kLeased:
      return "leased";
    case JobPlacement::kDeadLettered:
      return "dead_lettered";
    case JobPlacement::kFinal:
      return "final";
  }
  return "unknown";
}

JobPlacement PlacementOf(const JobRecord& r, TimePoint now) {
  switch (r.status) {
    case JobStatus::kQueued:
    case JobStatus::kRetryScheduled:
      return r.ready_at <= now ? JobPlacement::kReady : JobPlacement::kScheduled;
    case JobStatus::kRunning:
      return JobPlacement::kLeased;
    case JobStatus::kDeadLettered:
      return JobPlacement::kDeadLettered;
    default:
      return JobPlacement::kFinal;
  }
}

namespace {
void TrimHistory(std::vector<Transition>& history) {
  if (history.size() > kMaxHistory) {
    history.erase(history.begin(),
                  history.begin() + static_cast<std::ptrdiff_t>(history.size() - kMaxHistory));
  }
}
}  // namespace

void AppendHistory(std::vector<Transition>& history, const std::vector<Transition>& entries) {
  history.insert(history.end(), entries.begin(), entries.end());
  TrimHistory(history);
}

void AppendHistory(std::vector<Transition>& history, std::vector<Transition>&& entries) {
  if (history.empty()) {
    history = std::move(entries);  // A new job's first entry: no copy.
  } else {
    // A job that runs once has three entries (enqueued, delivered, its
    // outcome): grow once to room for them and one more, not twice.
    if (history.capacity() < history.size() + entries.size()) {
      history.reserve(std::max<std::size_t>(history.size() + entries.size(), 4));
    }
    history.insert(history.end(), std::make_move_iterator(entries.begin()),
                   std::make_move_iterator(entries.end()));
  }
  TrimHistory(history);
}

void CopyWithoutHistory(const JobRecord& from, JobRecord* to) {
  // Every member of JobRecord but `history`, in declaration order.
  to->envelope = from.envelope;
  to->status = from.status;
  to->enqueued_at = from.enqueued_at;
  to->ready_at = from.ready_at;
  to->updated_at = from.updated_at;
  to->finished_at = from.finished_at;
  to->epoch = from.epoch;
  to->lease_recoveries = from.lease_recoveries;
  to->lock_waits = from.lock_waits;
  to->previous_delay = from.previous_delay;
  to->checkpoint = from.checkpoint;
  to->last_failure = from.last_failure;
  to->reason = from.reason;
  to->result = from.result;
  to->history.clear();
  to->lease_token = from.lease_token;
  to->lease_expires_at = from.lease_expires_at;
  to->raw_input = from.raw_input;
  to->audit = from.audit;
  to->cancel_requested = from.cancel_requested;
}

bool IsQuarantined(const JobRecord& r) { return r.raw_input.has_value(); }

namespace engine {

Status CheckStorable(const Envelope& env) {
  if (env.job_id.empty()) {
    return Status::InvalidArgument("job_id is empty (pass the envelope through PrepareForEnqueue)");
  }
  if (env.queue.empty()) return Status::InvalidArgument("queue is empty");
  std::vector<FieldError> problems = ValidateEnvelope(env, internal::StoredEnvelopeValidation());
  if (problems.empty()) return Status::Ok();
  std::string message = "envelope of job " + env.job_id + " cannot be stored:";
  for (const FieldError& p : problems) {
    message += ' ';
    message += p.field;
    message += ": ";
    message += p.message;
    message += ';';
  }
  return Status::InvalidArgument(std::move(message));
}

Status NewJob(const Envelope& env, TimePoint now, JobChange* out) {
  JOBPACT_RETURN_IF_ERROR(CheckStorable(env));
  JobChange& c = *out;
  c.expect = WriteCondition();
  c.expect.new_job = true;
  JobRecord& r = c.record;
  r.envelope = env;
  r.envelope.attempt = 0;  // A producer's value is never trusted.
  r.envelope.ttl.reset();
  if (!r.envelope.created_at) r.envelope.created_at = now;
  r.status = JobStatus::kQueued;
  r.enqueued_at = r.updated_at = now;
  // Never before the enqueue: a job scheduled in the past is ready from now,
  // in arrival order.
  r.ready_at = std::max(env.scheduled_at.value_or(now), now);
  c.append.clear();
  c.append.push_back(
      Transition{JobStatus::kQueued, JobStatus::kQueued, now, std::string(reason::kEnqueued)});
  c.placement = PlacementOf(r, now);
  return Status::Ok();
}

Result<JobChange> NewJob(const Envelope& env, TimePoint now) {
  JobChange c;
  JOBPACT_RETURN_IF_ERROR(NewJob(env, now, &c));
  return c;
}

std::string InvalidEnvelopeId(std::string_view raw) {
  nlohmann::json doc = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return {};
  auto it = doc.find("job_id");
  if (it == doc.end() || !it->is_string()) return {};
  std::string id = it->get<std::string>();
  return internal::IsSafeName(id) ? id : std::string();
}

JobChange InvalidEnvelope(std::string_view raw, const std::vector<FieldError>& problems,
                          std::string job_id, TimePoint now) {
  std::string job_type, trace_id;
  nlohmann::json doc = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object()) {
    auto read = [&doc](const char* field, std::string& out) {
      auto it = doc.find(field);
      if (it != doc.end() && it->is_string()) out = it->get<std::string>();
    };
    read("job_type", job_type);
    read("trace_id", trace_id);
  }
  if (job_type.size() > internal::kMaxNameLength) job_type.resize(internal::kMaxNameLength);
  if (trace_id.size() > internal::kMaxNameLength) trace_id.resize(internal::kMaxNameLength);
  // Only text every store can hold (the raw input keeps the rest whole):
  // "nul\u0000byte" as job_type put a NUL byte into PostgreSQL's job_type
  // column, which refused the whole input; a cut at 255 bytes may also
  // split a UTF-8 sequence.
  if (!internal::IsOperatorText(job_type)) job_type.clear();
  if (!internal::IsOperatorText(trace_id)) trace_id.clear();
  std::string message = "invalid envelope:";
  for (const FieldError& p : problems) {
    message += ' ';
    message += p.field;
    message += ": ";
    message += p.message;
    message += ';';
  }
  if (problems.empty()) message += " (no problems given)";
  // A problem may quote the input, NUL bytes and all; the input itself is
  // kept whole below, so the message keeps such bytes as \xNN text.
  message = internal::StorableText(std::move(message));

  JobChange c;
  c.expect.new_job = true;
  JobRecord& r = c.record;
  r.envelope.job_id = std::move(job_id);
  r.envelope.job_type = std::move(job_type);
  r.envelope.trace_id = std::move(trace_id);
  r.envelope.queue.clear();  // Belongs to no queue: it can never run.
  r.envelope.created_at = now;
  r.status = JobStatus::kDeadLettered;
  r.enqueued_at = r.ready_at = r.updated_at = now;
  r.finished_at = now;
  r.raw_input = std::string(raw);
  r.reason = std::string(reason::kInvalidEnvelope);
  r.last_failure =
      Failure{FailureClass::kPermanent, std::string(reason::kInvalidEnvelope), std::move(message)};
  c.append.push_back(Transition{JobStatus::kDeadLettered, JobStatus::kDeadLettered, now,
                                std::string(reason::kInvalidEnvelope)});
  c.placement = JobPlacement::kDeadLettered;
  return c;
}

JobChange Quarantine(std::string job_id, std::string raw, std::string_view error, TimePoint now) {
  JobChange c;
  JobRecord& r = c.record;
  r.envelope.job_id = std::move(job_id);
  r.envelope.job_type.clear();
  r.envelope.queue.clear();
  r.envelope.created_at = now;
  r.status = JobStatus::kDeadLettered;
  r.enqueued_at = r.ready_at = r.updated_at = now;
  r.finished_at = now;
  r.raw_input = std::move(raw);
  r.reason = std::string(kUndecodableRecord);
  r.last_failure = Failure{FailureClass::kPermanent, std::string(kUndecodableRecord),
                           internal::StorableText("the stored record could not be decoded: " +
                                                  std::string(error))};
  c.append.push_back(Transition{JobStatus::kDeadLettered, JobStatus::kDeadLettered, now,
                                std::string(kUndecodableRecord)});
  c.placement = JobPlacement::kDeadLettered;
  return c;
}

namespace {

Status CheckDeliver(const JobRecord& record, const std::string& lease_token, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckTransition(record.status, JobStatus::kRunning));
  if (record.ready_at > now) {
    return Status::FailedPrecondition("job " + record.envelope.job_id + " is not ready until " +
                                      FormatRfc3339(record.ready_at));
  }
  if (lease_token.empty()) return Status::InvalidArgument("Deliver: empty lease token");
  return Status::Ok();
}

// REQUIRES: CheckDeliver passed, Start(r, ch) done.
void ApplyDeliver(JobRecord& r, std::string lease_token, TimePoint now, JobChange& ch) {
  ++r.epoch;
  ++r.envelope.attempt;
  r.lease_token = std::move(lease_token);
  r.lease_expires_at = now + r.envelope.visibility_timeout;
  End(r, ch, JobStatus::kRunning, reason::kDelivered, now);
}

template <typename Record>
Result<JobChange> RecoverLeaseImpl(Record&& record, int max_recoveries, TimePoint now) {
  if (record.status != JobStatus::kRunning) {
    return Status::FailedPrecondition("job " + record.envelope.job_id + " is not running");
  }
  if (now < record.lease_expires_at) {
    return Status::FailedPrecondition("the lease of job " + record.envelope.job_id +
                                      " has not expired");
  }
  JobChange ch = Begin(std::forward<Record>(record));
  JobRecord& r = ch.record;
  ++r.lease_recoveries;
  ClearLease(r);
  r.cancel_requested = false;
  if (r.lease_recoveries > max_recoveries) {
    r.reason = std::string(reason::kLeaseExpiredRepeatedly);
    r.last_failure =
        Failure{FailureClass::kUnknown, std::string(reason::kLeaseExpiredRepeatedly),
                "lease expired " + std::to_string(r.lease_recoveries) + " times (max_recoveries " +
                    std::to_string(max_recoveries) +
                    "): the job keeps killing or hanging its worker"};
    r.finished_at = now;
    End(ch, JobStatus::kDeadLettered, reason::kLeaseExpiredRepeatedly, now);
    return ch;
  }
  r.reason = std::string(reason::kLeaseExpired);
  r.ready_at = std::max(now, r.enqueued_at);
  End(ch, JobStatus::kQueued, reason::kLeaseExpired, now);
  return ch;
}

}  // namespace

Result<JobChange> Deliver(const JobRecord& record, std::string lease_token, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckDeliver(record, lease_token, now));
  JobChange ch = Begin(record);
  ApplyDeliver(ch.record, std::move(lease_token), now, ch);
  return ch;
}

Result<JobChange> Deliver(JobRecord&& record, std::string lease_token, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckDeliver(record, lease_token, now));
  JobChange ch = Begin(std::move(record));
  ApplyDeliver(ch.record, std::move(lease_token), now, ch);
  return ch;
}

Status DeliverInPlace(JobRecord& record, std::string lease_token, TimePoint now,
                      JobChange* rest) {
  JOBPACT_RETURN_IF_ERROR(CheckDeliver(record, lease_token, now));
  Start(record, *rest);
  ApplyDeliver(record, std::move(lease_token), now, *rest);
  return Status::Ok();
}

Result<JobChange> Complete(const Delivery& d, const Completion& c, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckComplete(d, c));
  JobChange ch = Begin(d.job);
  ApplyComplete(ch.record, c, now, ch);
  return ch;
}

Result<JobChange> Complete(Delivery&& d, const Completion& c, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckComplete(d, c));
  JobChange ch = Begin(std::move(d.job));
  ApplyComplete(ch.record, c, now, ch);
  return ch;
}

Status Complete(const Delivery& d, const Completion& c, TimePoint now, JobChange* out) {
  JOBPACT_RETURN_IF_ERROR(CheckComplete(d, c));
  Start(d.job, *out);
  CopyWithoutHistory(d.job, &out->record);
  ApplyComplete(out->record, c, now, *out);
  return Status::Ok();
}

Status Complete(Delivery&& d, const Completion& c, TimePoint now, JobChange* out) {
  JOBPACT_RETURN_IF_ERROR(CheckComplete(d, c));
  // Start(d.job, *out), but the lease token moves to the condition: the
  // completion clears the record's lease anyway (ApplyComplete).
  out->expect = WriteCondition{};
  out->expect.status = d.job.status;
  out->expect.epoch = d.job.epoch;
  out->expect.lease_token = std::move(d.job.lease_token);
  out->append.clear();
  out->record = std::move(d.job);
  out->record.history.clear();
  ApplyComplete(out->record, c, now, *out);
  return Status::Ok();
}

Status CompleteInPlace(JobRecord& record, const Lease& lease, const Completion& c, TimePoint now,
                       JobChange* rest) {
  JOBPACT_RETURN_IF_ERROR(CheckLease(record, lease));
  JOBPACT_RETURN_IF_ERROR(CheckTransition(JobStatus::kRunning, c.to));
  Start(record, *rest);
  ApplyComplete(record, c, now, *rest, CompleteOn::kStoredRecord);
  return Status::Ok();
}

Result<JobChange> Renew(const JobRecord& record, const Lease& lease, Duration extension,
                        std::string_view checkpoint, TimePoint now) {
  if (extension <= Duration::zero()) return Status::InvalidArgument("extension must be > 0");
  JOBPACT_RETURN_IF_ERROR(CheckLease(record, lease));
  JobChange c;
  c.expect = ConditionOf(record);
  CopyWithoutHistory(record, &c.record);
  c.record.lease_expires_at = now + extension;
  if (!checkpoint.empty()) c.record.checkpoint = std::string(checkpoint);
  c.record.updated_at = now;
  c.placement = JobPlacement::kLeased;
  return c;
}

Result<JobChange> RecoverLease(const JobRecord& record, int max_recoveries, TimePoint now) {
  return RecoverLeaseImpl(record, max_recoveries, now);
}

Result<JobChange> RecoverLease(JobRecord&& record, int max_recoveries, TimePoint now) {
  return RecoverLeaseImpl(std::move(record), max_recoveries, now);
}

LeaseRecovery RecoveryReport(const JobChange& change) {
  LeaseRecovery r;
  r.job_id = change.record.envelope.job_id;
  r.to = change.record.status;
  r.reason = change.record.reason;
  r.lease_recoveries = change.record.lease_recoveries;
  r.envelope = change.record.envelope;
  return r;
}

std::string AuditLine(std::string_view verb, TimePoint now, const DlqAction& action) {
  std::string out = FormatRfc3339(now);
  out += ' ';
  out += verb;
  out += " by ";
  out += action.actor;
  out += ": ";
  out += action.reason;
  return out;
}

Result<JobChange> Replay(const JobRecord& record, const DlqAction& action, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckAction(action, "Replay"));
  if (action.extra_attempts < 0) {
    return Status::InvalidArgument("Replay: extra_attempts must be >= 0");
  }
  JOBPACT_RETURN_IF_ERROR(CheckInDlq(record));
  if (IsQuarantined(record)) {
    return Status::FailedPrecondition(
        "Replay: job " + record.envelope.job_id + " is " +
        (record.reason == kUndecodableRecord ? "an undecodable record"
                                             : "an invalid envelope") +
        " and cannot run; fix it and enqueue it again");
  }
  JOBPACT_RETURN_IF_ERROR(CheckTransition(record.status, JobStatus::kQueued));
  JobChange ch = Begin(record);
  JobRecord& r = ch.record;
  std::string line = AuditLine(reason::kReplay, now, action);
  line += action.reset_attempts
              ? std::string(" (attempts reset)")
              : " (extra_attempts " + std::to_string(action.extra_attempts) + ")";
  r.audit.push_back(std::move(line));
  r.reason = std::string(reason::kReplay);
  if (action.reset_attempts) {
    r.envelope.attempt = 0;
  } else {
    r.envelope.max_attempts += action.extra_attempts;
  }
  // A replay is a fresh chance: crash and lock-wait budgets start again.
  r.lease_recoveries = 0;
  r.lock_waits = 0;
  r.cancel_requested = false;  // The operator wants it to run again.
  r.previous_delay = Duration::zero();
  r.finished_at.reset();
  r.ready_at = std::max(action.ready_at.value_or(now), r.enqueued_at);
  End(ch, JobStatus::kQueued, reason::kReplay, now);
  return ch;
}

Result<JobChange> Cancel(const JobRecord& record, const DlqAction& action, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckAction(action, "Cancel"));
  const std::string& id = record.envelope.job_id;
  switch (record.status) {
    case JobStatus::kQueued:
    case JobStatus::kRetryScheduled: {
      JobChange ch = Begin(record);
      JobRecord& r = ch.record;
      r.audit.push_back(AuditLine("cancel", now, action));
      r.reason = std::string(reason::kCancelled);
      r.finished_at = now;
      End(ch, JobStatus::kDiscarded, reason::kCancelled, now);
      return ch;
    }
    case JobStatus::kRunning: {
      // Not a transition: the handler sees cancelled() at its next
      // heartbeat and its outcome is then written as usual.
      JobChange c;
      c.expect = ConditionOf(record);
      CopyWithoutHistory(record, &c.record);
      c.record.cancel_requested = true;
      c.record.audit.push_back(AuditLine("cancel", now, action));
      c.record.updated_at = now;
      c.placement = JobPlacement::kLeased;
      return c;
    }
    case JobStatus::kDeadLettered:
      return Status::FailedPrecondition("Cancel: job " + id +
                                        " is in the dead-letter queue; discard it instead");
    default:
      return Status::FailedPrecondition("Cancel: job " + id + " is already " +
                                        std::string(JobStatusName(record.status)));
  }
}

Result<JobChange> Discard(const JobRecord& record, const DlqAction& action, TimePoint now) {
  JOBPACT_RETURN_IF_ERROR(CheckAction(action, "Discard"));
  JOBPACT_RETURN_IF_ERROR(CheckInDlq(record));
  JOBPACT_RETURN_IF_ERROR(CheckTransition(record.status, JobStatus::kDiscarded));
  JobChange ch = Begin(record);
  JobRecord& r = ch.record;
  r.audit.push_back(AuditLine("discard", now, action));
  r.reason = std::string(reason::kOperatorDiscard);
  r.finished_at = now;
  End(ch, JobStatus::kDiscarded, reason::kOperatorDiscard, now);
  return ch;
}

}  // namespace engine
}  // namespace jobpact
