// Private: how a job record is laid out in a row of the SQL stores' jobs
// table (SQLite's jobpact_jobs, PostgreSQL's <schema>.jobs: the same
// columns, times as integer nanoseconds, history and audit as JSON arrays):
// the columns every read selects and decoding such a row into a JobRecord.
// A Row is anything with IsNull(col), Int(col) and Text(col) over the
// columns of kJobColumns; each store has its own (a copied SQLite row, a
// libpq result row). Defined in src/core/job_row_codec.cc.
#ifndef JOBPACT_SRC_INTERNAL_JOB_ROW_CODEC_H_
#define JOBPACT_SRC_INTERNAL_JOB_ROW_CODEC_H_

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/queue_backend.h"
#include "src/internal/history_json.h"
#include "src/internal/stored_validation.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace internal {

// The columns every job read selects, in this order (see ReadJobRow).
inline constexpr const char* kJobColumns =
    "job_id, status, attempt, max_attempts, ready_at_ns, enqueued_at_ns, updated_at_ns, "
    "finished_at_ns, epoch, lease_recoveries, lock_waits, previous_delay_ns, checkpoint, "
    "failure_class, failure_code, failure_message, reason, result, envelope, history, "
    "lease_token, lease_expires_at_ns, dead_lettered_at_ns, raw_envelope, audit, job_type, "
    "queue, priority, cancel_requested";
namespace job_col {
enum JobCol {
  kColJobId,
  kColStatus,
  kColAttempt,
  kColMaxAttempts,
  kColReadyAt,
  kColEnqueuedAt,
  kColUpdatedAt,
  kColFinishedAt,
  kColEpoch,
  kColLeaseRecoveries,
  kColLockWaits,
  kColPreviousDelay,
  kColCheckpoint,
  kColFailureClass,
  kColFailureCode,
  kColFailureMessage,
  kColReason,
  kColResult,
  kColEnvelope,
  kColHistory,
  kColLeaseToken,
  kColLeaseExpiresAt,
  kColDeadLetteredAt,
  kColRawEnvelope,
  kColAudit,
  kColJobType,
  kColQueue,
  kColPriority,
  kColCancelRequested,
};
}  // namespace job_col
using namespace job_col;  // NOLINT: kCol* read as internal::kCol*


Result<std::vector<Transition>> ParseHistory(const std::string& text);

std::vector<std::string> ParseStringArray(const std::string& text);

template <typename Row>
std::optional<Failure> ReadFailure(const Row& st) {
  if (st.IsNull(kColFailureClass)) return std::nullopt;
  Failure f;
  auto c = ParseFailureClass(st.Text(kColFailureClass));
  f.failure_class = c.ok() ? *c : FailureClass::kUnknown;
  f.code = st.Text(kColFailureCode);
  f.message = st.Text(kColFailureMessage);
  return f;
}

// Builds a JobRecord from a row selected with kJobColumns (history parsed
// only `with_history`). kInternal naming the problem if the row cannot be
// decoded: the caller quarantines it.
template <typename Row>
Result<JobRecord> ReadJobRow(const Row& st, bool with_history = true) {
  JobRecord rec;
  // Stored under the producer's bounds, which may be looser than ours.
  Result<Envelope> env =
      ParseEnvelope(st.Text(kColEnvelope), ::jobpact::internal::StoredEnvelopeValidation());
  if (env.ok()) {
    rec.envelope = std::move(*env);
  } else if (!st.IsNull(kColRawEnvelope)) {
    // Quarantined input kept in the DLQ: what could be read of it.
    rec.envelope.job_id = st.Text(kColJobId);
    rec.envelope.job_type = st.Text(kColJobType);
    rec.envelope.queue = st.Text(kColQueue);
    nlohmann::json stored =
        nlohmann::json::parse(st.Text(kColEnvelope), nullptr, /*allow_exceptions=*/false);
    if (stored.is_object()) {
      auto trace = stored.find("trace_id");
      if (trace != stored.end() && trace->is_string()) rec.envelope.trace_id = trace->get<std::string>();
      auto created = stored.find("created_at");
      if (created != stored.end() && created->is_string()) {
        Result<TimePoint> t = ParseRfc3339(created->get<std::string>());
        if (t.ok()) rec.envelope.created_at = *t;
      }
    }
  } else {
    return Status::Internal("stored envelope of job " + st.Text(kColJobId) +
                            " does not parse: " + env.status().message());
  }
  rec.envelope.job_id = st.Text(kColJobId);
  rec.envelope.attempt = static_cast<int>(st.Int(kColAttempt));
  rec.envelope.max_attempts = static_cast<int>(st.Int(kColMaxAttempts));
  auto status = ParseJobStatus(st.Text(kColStatus));
  if (!status.ok()) {
    // kInternal as documented, not the parser's kInvalidArgument: the
    // stored row is at fault, not the caller's input.
    return Status::Internal("stored status of job " + st.Text(kColJobId) +
                            " does not parse: " + status.status().message());
  }
  rec.status = *status;
  rec.enqueued_at = TimeFromNs(st.Int(kColEnqueuedAt));
  rec.ready_at = TimeFromNs(st.Int(kColReadyAt));
  rec.updated_at = TimeFromNs(st.Int(kColUpdatedAt));
  if (!st.IsNull(kColFinishedAt)) rec.finished_at = TimeFromNs(st.Int(kColFinishedAt));
  rec.epoch = st.Int(kColEpoch);
  rec.lease_recoveries = static_cast<int>(st.Int(kColLeaseRecoveries));
  rec.lock_waits = static_cast<int>(st.Int(kColLockWaits));
  rec.previous_delay = DurationFromNs(st.Int(kColPreviousDelay));
  rec.checkpoint = st.Text(kColCheckpoint);
  rec.last_failure = ReadFailure(st);
  rec.reason = st.Text(kColReason);
  rec.result = st.Text(kColResult);
  if (!st.IsNull(kColLeaseToken)) rec.lease_token = st.Text(kColLeaseToken);
  if (!st.IsNull(kColLeaseExpiresAt)) rec.lease_expires_at = TimeFromNs(st.Int(kColLeaseExpiresAt));
  if (!st.IsNull(kColRawEnvelope)) rec.raw_input = st.Text(kColRawEnvelope);
  rec.audit = ParseStringArray(st.Text(kColAudit));
  rec.cancel_requested = st.Int(kColCancelRequested) != 0;
  if (rec.status == JobStatus::kDeadLettered && !st.IsNull(kColDeadLetteredAt)) {
    rec.finished_at = TimeFromNs(st.Int(kColDeadLetteredAt));
  }
  if (with_history) {
    JOBPACT_ASSIGN_OR_RETURN(rec.history, ParseHistory(st.Text(kColHistory)));
  }
  return rec;
}

// The stored history (a JSON array of entries) and audit trail (a JSON
// array of strings) of a record.
std::string HistoryJson(const std::vector<Transition>& entries);

std::string AuditJson(const std::vector<std::string>& audit);

// A row that no longer decodes, as text: every column by name, so that the
// quarantined DLQ entry keeps all of it.
template <typename Row>
std::string RawRow(const Row& st) {
  static const char* const kNames[] = {
      "job_id",        "status",          "attempt",       "max_attempts",  "ready_at_ns",
      "enqueued_at_ns", "updated_at_ns",  "finished_at_ns", "epoch",        "lease_recoveries",
      "lock_waits",    "previous_delay_ns", "checkpoint",  "failure_class", "failure_code",
      "failure_message", "reason",        "result",        "envelope",      "history",
      "lease_token",   "lease_expires_at_ns", "dead_lettered_at_ns", "raw_envelope", "audit",
      "job_type",      "queue",           "priority",      "cancel_requested"};
  nlohmann::json row = nlohmann::json::object();
  for (int i = 0; i < static_cast<int>(std::size(kNames)); ++i) {
    if (st.IsNull(i)) {
      row[kNames[i]] = nullptr;
    } else if (i == kColStatus || i == kColCheckpoint || i == kColFailureClass ||
               i == kColFailureCode || i == kColFailureMessage || i == kColReason ||
               i == kColResult || i == kColEnvelope || i == kColHistory || i == kColLeaseToken ||
               i == kColRawEnvelope || i == kColAudit || i == kColJobType || i == kColQueue ||
               i == kColJobId) {
      row[kNames[i]] = st.Text(i);
    } else {
      row[kNames[i]] = st.Int(i);
    }
  }
  return row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Count retention (DeleteSurplusJobs) in the SQL stores: per job type of a
// final status, the newest job past the kept ones; it and the older jobs of
// the type go, in (finished_at_ns, job_id) order.
struct RetentionCutoff {
  std::string job_type;
  std::int64_t finished_at_ns = 0;
  std::string job_id;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_JOB_ROW_CODEC_H_
