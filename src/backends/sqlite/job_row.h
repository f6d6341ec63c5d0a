// Private to the SQLite backend: how a job record is laid out in a row of
// jobpact_jobs (schema.cc) -- the columns every read selects, decoding a row
// into a JobRecord, and binding a record's mutable fields for the one
// conditional UPDATE every change is written with.
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_JOB_ROW_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_JOB_ROW_H_

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
#include "src/backends/sqlite/connection.h"
#include "src/internal/stored_validation.h"

namespace jobpact {
namespace sqlite {
namespace internal {

// The columns every job read selects, in this order (see ReadJobRow).
inline constexpr const char* kJobColumns =
    "job_id, status, attempt, max_attempts, ready_at_ns, enqueued_at_ns, updated_at_ns, "
    "finished_at_ns, epoch, lease_recoveries, lock_waits, previous_delay_ns, checkpoint, "
    "failure_class, failure_code, failure_message, reason, result, envelope, history, "
    "lease_token, lease_expires_at_ns, dead_lettered_at_ns, raw_envelope, audit, job_type, "
    "queue, priority, cancel_requested";
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

Result<std::vector<Transition>> ParseHistory(const std::string& text);

std::vector<std::string> ParseStringArray(const std::string& text);

// A job row copied out of a statement, so that it can be turned into a
// JobRecord (JSON parsing) after the transaction, outside the write lock.
// Same accessors as Stmt.
class CopiedRow {
 public:
  explicit CopiedRow(const Stmt& st) {
    const int n = sqlite3_column_count(st.get());
    cols_.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      Col& c = cols_[static_cast<std::size_t>(i)];
      c.null = st.IsNull(i);
      if (c.null) continue;
      if (sqlite3_column_type(st.get(), i) == SQLITE_INTEGER) {
        c.i = st.Int(i);
      } else {
        c.text = st.Text(i);
      }
    }
  }
  bool IsNull(int col) const { return cols_[static_cast<std::size_t>(col)].null; }
  std::int64_t Int(int col) const { return cols_[static_cast<std::size_t>(col)].i; }
  const std::string& Text(int col) const { return cols_[static_cast<std::size_t>(col)].text; }

 private:
  struct Col {
    bool null = true;
    std::int64_t i = 0;
    std::string text;
  };
  std::vector<Col> cols_;
};

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
  if (!status.ok()) return status.status();
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

// Steps a statement that returns no rows.
Status StepDone(Connection& conn, Stmt& st, std::string_view what);


// One history entry as stored (src/internal/history_json.h, the form the
// Redis store shares).
using ::jobpact::internal::HistoryEntryFromJson;
using ::jobpact::internal::HistoryEntryJson;
using ::jobpact::internal::JsonString;

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

// The columns a change writes: every field the engine may change. The
// envelope, job type, queue, priority, dedup key and visibility timeout are
// written once, at insert. An empty checkpoint keeps the stored one, and a
// change of a running job keeps the audit and a cancel request an operator
// stored meanwhile (JobChange).
inline constexpr const char* kUpdateSet =
    "status = ?5, attempt = ?6, max_attempts = ?7, ready_at_ns = ?8, updated_at_ns = ?9, "
    "finished_at_ns = ?10, epoch = ?11, lease_recoveries = ?12, lock_waits = ?13, "
    "previous_delay_ns = ?14, checkpoint = CASE WHEN ?15 = '' THEN checkpoint ELSE ?15 END, "
    "failure_class = ?16, failure_code = ?17, failure_message = ?18, reason = ?19, "
    "result = ?20, lease_token = ?21, lease_expires_at_ns = ?22, dead_lettered_at_ns = ?23, "
    "audit = CASE WHEN ?2 = 'running' THEN audit ELSE ?24 END, cancel_requested = CASE WHEN "
    "?2 = 'running' THEN max(cancel_requested, ?26) ELSE ?26 END";

// Binds ?5..?24 and ?26 (kUpdateSet) from `r`.
void BindRecord(Stmt& st, const JobRecord& r);

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_JOB_ROW_H_
