// The SQLite QueueBackend: jobs, leases, history and the DLQ in the
// jobpact_jobs table (layout in schema.cc). Every method that changes state
// is one write transaction (Core::Write).
#include "jobpact/queue_backend.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/retry_policy.h"
#include "jobpact/transitions.h"
#include "src/backends/sqlite/connection.h"
#include "src/backends/sqlite/core.h"

namespace jobpact {
namespace sqlite {

using internal::Connection;
using internal::DurationFromNs;
using internal::Stmt;
using internal::TimeFromNs;
using internal::ToNs;
using Core = SqliteBackend::Core;

namespace {

// The columns every job read selects, in this order (see ReadJobRow).
constexpr const char* kJobColumns =
    "job_id, status, attempt, max_attempts, ready_at_ns, enqueued_at_ns, updated_at_ns, "
    "finished_at_ns, epoch, lease_recoveries, lock_waits, previous_delay_ns, checkpoint, "
    "failure_class, failure_code, failure_message, reason, result, envelope, history, "
    "lease_token, lease_expires_at_ns, dead_lettered_at_ns, raw_envelope, audit, job_type, "
    "queue, priority";
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
};

// SQL that appends one history entry (from the row's current status to
// `to_expr`) and drops the oldest beyond kMaxHistory. Inside an UPDATE's SET
// list every expression sees the row's old values, so `status` here is the
// status before the update wherever the assignment is placed.
// `extra` adds key/value pairs to the entry (e.g. ", 'worker', ?4").
std::string AppendHistorySql(const std::string& to_expr, const std::string& at_expr,
                             const std::string& reason_expr, const std::string& extra = "") {
  return "history = json_insert(CASE WHEN json_array_length(history) >= " +
         std::to_string(kMaxHistory) +
         " THEN json_remove(history, '$[0]') ELSE history END, '$[#]', json_object('from', "
         "status, 'to', " +
         to_expr + ", 'at_ns', " + at_expr + ", 'reason', " + reason_expr + extra + "))";
}

// Appends `entry` to a JSON array column.
std::string AppendAuditSql(const std::string& entry_expr) {
  return "audit = json_insert(audit, '$[#]', " + entry_expr + ")";
}

// Job ids read from invalid input are kept only if they are safe names.
bool IsSafeName(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ParseEnvelope validates; stored envelopes were valid when enqueued, but
// possibly under the producer's own (looser) ValidationOptions, so reading
// them back must not apply the defaults' bounds again.
const ValidationOptions& LenientValidation() {
  static const ValidationOptions options = [] {
    ValidationOptions o;
    o.visibility_buffer = -std::chrono::hours(24 * 365 * 100);
    o.max_payload_bytes = static_cast<std::size_t>(-1);
    o.max_name_length = static_cast<std::size_t>(-1);
    return o;
  }();
  return options;
}

Result<std::vector<Transition>> ParseHistory(const std::string& text) {
  std::vector<Transition> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return Status::Internal("stored job history is not a JSON array");
  out.reserve(j.size());
  for (const auto& e : j) {
    Transition t;
    auto from = ParseJobStatus(e.value("from", std::string()));
    auto to = ParseJobStatus(e.value("to", std::string()));
    if (!from.ok()) return from.status();
    if (!to.ok()) return to.status();
    t.from = *from;
    t.to = *to;
    t.at = TimeFromNs(e.value("at_ns", std::int64_t{0}));
    t.reason = e.value("reason", std::string());
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> ParseStringArray(const std::string& text) {
  std::vector<std::string> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const auto& e : j) {
    if (e.is_string()) out.push_back(e.get<std::string>());
  }
  return out;
}

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

// Builds a JobRecord from a row selected with kJobColumns.
template <typename Row>
Result<JobRecord> ReadJobRow(const Row& st) {
  JobRecord rec;
  Result<Envelope> env = ParseEnvelope(st.Text(kColEnvelope), LenientValidation());
  if (env.ok()) {
    rec.envelope = std::move(*env);
  } else if (!st.IsNull(kColRawEnvelope)) {
    // An invalid envelope kept in the DLQ: what could be read of it.
    rec.envelope.job_id = st.Text(kColJobId);
    rec.envelope.job_type = st.Text(kColJobType);
    rec.envelope.queue = st.Text(kColQueue);
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
  JOBPACT_ASSIGN_OR_RETURN(rec.history, ParseHistory(st.Text(kColHistory)));
  return rec;
}

template <typename Row>
Result<DlqEntry> ReadDlqRow(const Row& st) {
  JOBPACT_ASSIGN_OR_RETURN(JobRecord rec, ReadJobRow(st));
  DlqEntry e;
  e.job_id = rec.envelope.job_id;
  e.job_type = rec.envelope.job_type;
  if (!st.IsNull(kColRawEnvelope)) {
    e.raw_envelope = st.Text(kColRawEnvelope);
    e.payload = e.raw_envelope;
  } else {
    e.payload = rec.envelope.payload;
  }
  e.created_at = rec.envelope.created_at.value_or(rec.enqueued_at);
  e.attempts = rec.envelope.attempt;
  e.reason = rec.reason;
  e.last_failure = rec.last_failure;
  e.trace_id = rec.envelope.trace_id;
  e.dead_lettered_at =
      st.IsNull(kColDeadLetteredAt) ? rec.updated_at : TimeFromNs(st.Int(kColDeadLetteredAt));
  e.history = std::move(rec.history);
  e.audit = ParseStringArray(st.Text(kColAudit));
  return e;
}

// Steps a statement that returns no rows.
Status StepDone(Connection& conn, Stmt& st, std::string_view what) {
  int rc = st.Step();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return conn.Error(rc, what);
  return Status::Ok();
}

// Wraps a method body: converts escaping exceptions (std::bad_alloc, a
// nlohmann error) into kInternal, since backends never throw.
template <typename T, typename F>
Result<T> Catching(std::string_view what, F&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + ": unexpected exception: " + e.what());
  } catch (...) {
    return Status::Internal(std::string(what) + ": unexpected non-standard exception");
  }
}

template <typename F>
Status CatchingStatus(std::string_view what, F&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + ": unexpected exception: " + e.what());
  } catch (...) {
    return Status::Internal(std::string(what) + ": unexpected non-standard exception");
  }
}

class SqliteQueueBackend final : public QueueBackend {
 public:
  explicit SqliteQueueBackend(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  std::string_view Name() const override { return "sqlite"; }

  Result<EnqueueResult> Enqueue(const Envelope& env, const EnqueueOptions& options) override {
    return Catching<EnqueueResult>("Enqueue", [&]() -> Result<EnqueueResult> {
      std::vector<EnqueueResult> results;
      JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("Enqueue", [&](Connection& conn) -> Status {
        JOBPACT_ASSIGN_OR_RETURN(results, core_->EnqueueOn(conn, {&env}, options));
        return Status::Ok();
      }));
      return std::move(results.front());
    });
  }

  Result<std::vector<EnqueueResult>> EnqueueBatch(const std::vector<Envelope>& envs,
                                                  const EnqueueOptions& options) override {
    using Out = std::vector<EnqueueResult>;
    return Catching<Out>("EnqueueBatch", [&]() -> Result<Out> {
      std::vector<const Envelope*> ptrs;
      ptrs.reserve(envs.size());
      for (const Envelope& e : envs) ptrs.push_back(&e);
      Out results;
      if (envs.empty()) return results;
      JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("EnqueueBatch", [&](Connection& conn) -> Status {
        JOBPACT_ASSIGN_OR_RETURN(results, core_->EnqueueOn(conn, ptrs, options));
        return Status::Ok();
      }));
      return results;
    });
  }

  Result<std::string> DeadLetterInvalid(std::string_view raw,
                                        const std::vector<FieldError>& problems) override {
    return Catching<std::string>("DeadLetterInvalid", [&]() -> Result<std::string> {
      return DeadLetterInvalidImpl(raw, problems);
    });
  }

  Result<std::vector<Delivery>> Dequeue(const DequeueRequest& request) override {
    using Out = std::vector<Delivery>;
    return Catching<Out>("Dequeue", [&]() -> Result<Out> { return DequeueImpl(request); });
  }

  Result<Lease> Renew(const Lease& lease, Duration extension,
                      std::string_view checkpoint) override {
    return Catching<Lease>(
        "Renew", [&]() -> Result<Lease> { return RenewImpl(lease, extension, checkpoint); });
  }

  Status Complete(const Delivery& delivery, const Completion& completion) override {
    return CatchingStatus("Complete", [&] { return CompleteImpl(delivery.lease, completion); });
  }

  Result<std::vector<LeaseRecovery>> RecoverExpiredLeases(int max_recoveries) override {
    using Out = std::vector<LeaseRecovery>;
    return Catching<Out>("RecoverExpiredLeases",
                         [&]() -> Result<Out> { return RecoverImpl(max_recoveries); });
  }

  Result<JobRecord> Get(std::string_view job_id) override {
    return Catching<JobRecord>("Get", [&]() -> Result<JobRecord> {
      std::optional<JobRecord> rec;
      JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Read("Get", false, [&](Connection& conn) -> Status {
        static const std::string sql =
            std::string("SELECT ") + kJobColumns + " FROM jobpact_jobs WHERE job_id = ?1";
        JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
        Stmt st(raw);
        st.Bind(1, job_id);
        int rc = st.Step();
        if (rc == SQLITE_DONE) return Status::Ok();
        if (rc != SQLITE_ROW) return conn.Error(rc, "Get");
        JOBPACT_ASSIGN_OR_RETURN(rec, ReadJobRow(st));
        return Status::Ok();
      }));
      if (!rec) return Status::NotFound("job " + std::string(job_id) + " not found");
      return std::move(*rec);
    });
  }

  Result<std::optional<std::string>> FindDuplicate(std::string_view dedup_key,
                                                   std::string_view self_job_id,
                                                   TimePoint since) override {
    using Out = std::optional<std::string>;
    return Catching<Out>("FindDuplicate", [&]() -> Result<Out> {
      Out found;
      if (dedup_key.empty()) return found;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("FindDuplicate", false, [&](Connection& conn) -> Status {
            JOBPACT_ASSIGN_OR_RETURN(
                sqlite3_stmt * raw,
                conn.Prepare("SELECT job_id FROM jobpact_jobs WHERE dedup_key = ?1 AND "
                             "job_id != ?2 AND (status = 'running' OR (status = 'succeeded' "
                             "AND finished_at_ns >= ?3)) ORDER BY enqueued_at_ns, job_id "
                             "LIMIT 1"));
            Stmt st(raw);
            st.Bind(1, dedup_key).Bind(2, self_job_id).Bind(3, ToNs(since));
            int rc = st.Step();
            if (rc == SQLITE_ROW) {
              found = st.Text(0);
              return Status::Ok();
            }
            if (rc != SQLITE_DONE) return conn.Error(rc, "FindDuplicate");
            return Status::Ok();
          }));
      return found;
    });
  }

  Result<std::vector<DlqEntry>> ListDeadLetters(const DlqFilter& filter) override {
    using Out = std::vector<DlqEntry>;
    return Catching<Out>("ListDeadLetters", [&]() -> Result<Out> {
      Out out;
      std::string sql = std::string("SELECT ") + kJobColumns +
                        " FROM jobpact_jobs WHERE status = 'dead_lettered'";
      if (filter.job_type) sql += " AND job_type = ?1";
      if (filter.reason) sql += " AND reason = ?2";
      if (filter.failure_class) sql += " AND failure_class = ?3";
      if (filter.dead_lettered_after) sql += " AND dead_lettered_at_ns >= ?4";
      if (filter.dead_lettered_before) sql += " AND dead_lettered_at_ns < ?5";
      sql += " ORDER BY dead_lettered_at_ns, job_id LIMIT ?6";
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("ListDeadLetters", false, [&](Connection& conn) -> Status {
            JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.PrepareDynamic(sql));
            Stmt st(raw);
            if (filter.job_type) st.Bind(1, *filter.job_type);
            if (filter.reason) st.Bind(2, *filter.reason);
            if (filter.failure_class) st.Bind(3, FailureClassName(*filter.failure_class));
            if (filter.dead_lettered_after) st.Bind(4, ToNs(*filter.dead_lettered_after));
            if (filter.dead_lettered_before) st.Bind(5, ToNs(*filter.dead_lettered_before));
            st.Bind(6, static_cast<std::int64_t>(std::min<std::size_t>(
                           filter.limit, static_cast<std::size_t>(INT64_MAX))));
            while (true) {
              int rc = st.Step();
              if (rc == SQLITE_DONE) break;
              if (rc != SQLITE_ROW) return conn.Error(rc, "ListDeadLetters");
              JOBPACT_ASSIGN_OR_RETURN(DlqEntry e, ReadDlqRow(st));
              out.push_back(std::move(e));
            }
            return Status::Ok();
          }));
      return out;
    });
  }

  Result<DlqEntry> GetDeadLetter(std::string_view job_id) override {
    return Catching<DlqEntry>("GetDeadLetter", [&]() -> Result<DlqEntry> {
      std::optional<DlqEntry> entry;
      JOBPACT_SQLITE_RETURN_IF_ERROR(
          core_->Read("GetDeadLetter", false, [&](Connection& conn) -> Status {
            static const std::string sql =
                std::string("SELECT ") + kJobColumns +
                " FROM jobpact_jobs WHERE job_id = ?1 AND status = 'dead_lettered'";
            JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
            Stmt st(raw);
            st.Bind(1, job_id);
            int rc = st.Step();
            if (rc == SQLITE_DONE) return Status::Ok();
            if (rc != SQLITE_ROW) return conn.Error(rc, "GetDeadLetter");
            JOBPACT_ASSIGN_OR_RETURN(entry, ReadDlqRow(st));
            return Status::Ok();
          }));
      if (!entry) {
        return Status::NotFound("job " + std::string(job_id) + " is not in the dead-letter queue");
      }
      return std::move(*entry);
    });
  }

  Status Replay(std::string_view job_id, const DlqAction& action) override {
    return CatchingStatus("Replay", [&] { return DlqActionImpl(job_id, action, true); });
  }

  Status Discard(std::string_view job_id, const DlqAction& action) override {
    return CatchingStatus("Discard", [&] { return DlqActionImpl(job_id, action, false); });
  }

  Result<int> PurgeDeadLetters(TimePoint older_than) override {
    return Catching<int>("PurgeDeadLetters", [&]() -> Result<int> {
      return PurgeInChunks("PurgeDeadLetters",
                           "DELETE FROM jobpact_jobs WHERE rowid IN (SELECT rowid FROM "
                           "jobpact_jobs WHERE status = 'dead_lettered' AND "
                           "dead_lettered_at_ns < ?1 LIMIT 1000)",
                           older_than);
    });
  }

  Result<int> PurgeFinished(TimePoint older_than) override {
    return Catching<int>("PurgeFinished", [&]() -> Result<int> {
      return PurgeInChunks(
          "PurgeFinished",
          "DELETE FROM jobpact_jobs WHERE rowid IN (SELECT rowid FROM jobpact_jobs WHERE "
          "status IN ('succeeded', 'failed', 'discarded') AND finished_at_ns < ?1 LIMIT 1000)",
          older_than);
    });
  }

  Result<QueueStats> Stats() override {
    return Catching<QueueStats>("Stats", [&]() -> Result<QueueStats> { return StatsImpl(); });
  }

 private:
  Result<std::string> DeadLetterInvalidImpl(std::string_view raw,
                                            const std::vector<FieldError>& problems);
  Result<std::vector<Delivery>> DequeueImpl(const DequeueRequest& request);
  Result<Lease> RenewImpl(const Lease& lease, Duration extension, std::string_view checkpoint);
  Status CompleteImpl(const Lease& lease, const Completion& completion);
  Result<std::vector<LeaseRecovery>> RecoverImpl(int max_recoveries);
  Status DlqActionImpl(std::string_view job_id, const DlqAction& action, bool replay);
  Result<int> PurgeInChunks(std::string_view what, const char* sql, TimePoint older_than);
  Result<QueueStats> StatsImpl();

  // Why a fenced write matched no row: kNotFound or kAborted.
  // With `check_live`, OK when the lease is in fact live.
  Status StaleLeaseError(Connection& conn, const Lease& lease, std::string_view what,
                         bool check_live = false);

  const std::shared_ptr<Core> core_;
};

Status SqliteQueueBackend::StaleLeaseError(Connection& conn, const Lease& lease,
                                           std::string_view what, bool check_live) {
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT status, epoch, lease_token FROM jobpact_jobs WHERE job_id = ?1"));
  Stmt st(raw);
  st.Bind(1, lease.job_id);
  int rc = st.Step();
  if (rc == SQLITE_DONE) return Status::NotFound("job " + lease.job_id + " not found");
  if (rc != SQLITE_ROW) return conn.Error(rc, what);
  if (check_live && st.Text(0) == "running" && st.Int(1) == lease.epoch &&
      st.Text(2) == lease.token) {
    return Status::Ok();
  }
  return Status::Aborted(std::string(what) + ": stale lease on job " + lease.job_id +
                         " (lease epoch " + std::to_string(lease.epoch) + ", job epoch " +
                         std::to_string(st.Int(1)) + ", status " + st.Text(0) +
                         "): the job was taken over or finished");
}

Result<std::string> SqliteQueueBackend::DeadLetterInvalidImpl(
    std::string_view raw, const std::vector<FieldError>& problems) {
  std::string id;
  std::string job_type;
  std::string trace_id;
  // Not in any queue: an invalid envelope can never run.
  const std::string queue;
  {
    nlohmann::json j = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      auto str = [&](const char* key) -> std::string {
        auto it = j.find(key);
        return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      id = str("job_id");
      job_type = str("job_type");
      trace_id = str("trace_id");
    }
  }
  if (!IsSafeName(id)) id.clear();
  if (job_type.size() > 255) job_type.resize(255);
  if (trace_id.size() > 255) trace_id.resize(255);
  std::string message = "invalid envelope:";
  for (const FieldError& p : problems) {
    message += ' ';
    message += p.field;
    message += ": ";
    message += p.message;
    message += ';';
  }
  if (problems.empty()) message += " (no problems given)";
  std::string stored_id;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("DeadLetterInvalid", [&](Connection& conn) -> Status {
    const TimePoint now = core_->Now();
    stored_id = id;
    if (!stored_id.empty()) {
      // A readable id that is already taken (e.g. a bad resend of a stored
      // job) must not drop the input: it gets a fresh id instead.
      JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw_st,
                               conn.Prepare("SELECT 1 FROM jobpact_jobs WHERE job_id = ?1"));
      Stmt st(raw_st);
      st.Bind(1, stored_id);
      int rc = st.Step();
      if (rc == SQLITE_ROW)
        stored_id.clear();
      else if (rc != SQLITE_DONE)
        return conn.Error(rc, "DeadLetterInvalid");
    }
    if (stored_id.empty()) stored_id = NewJobId(now);
    Envelope env;
    env.job_id = stored_id;
    env.job_type = job_type;
    env.trace_id = trace_id;
    env.created_at = now;
    const std::int64_t now_ns = ToNs(now);
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw_ins,
        conn.Prepare(
            "INSERT INTO jobpact_jobs (job_id, job_type, queue, priority, status, attempt, "
            "max_attempts, ready_at_ns, enqueued_at_ns, updated_at_ns, finished_at_ns, "
            "visibility_timeout_ns, failure_class, failure_code, failure_message, reason, "
            "envelope, history, dead_lettered_at_ns, raw_envelope) VALUES (?1, ?2, ?3, 0, "
            "'dead_lettered', 0, ?4, ?5, ?5, ?5, ?5, 0, 'permanent', 'invalid_envelope', ?6, "
            "'invalid_envelope', ?7, json_array(json_object('from', 'dead_lettered', "
            "'to', 'dead_lettered', 'at_ns', ?5, 'reason', 'invalid_envelope')), ?5, ?8)"));
    Stmt ins(raw_ins);
    ins.Bind(1, stored_id)
        .Bind(2, job_type)
        .Bind(3, queue)
        .Bind(4, env.max_attempts)
        .Bind(5, now_ns)
        .Bind(6, message)
        .Bind(7, SerializeEnvelope(env))
        .Bind(8, raw);
    return StepDone(conn, ins, "DeadLetterInvalid");
  }));
  return stored_id;
}

Result<std::vector<Delivery>> SqliteQueueBackend::DequeueImpl(const DequeueRequest& request) {
  if (request.max_jobs < 1) {
    return Status::InvalidArgument("Dequeue: max_jobs must be >= 1, got " +
                                   std::to_string(request.max_jobs));
  }
  std::vector<Delivery> out;
  // The queue filter is a JSON array, so one cached statement serves every
  // list of queues.
  std::string queues_json;
  if (!request.queues.empty()) queues_json = nlohmann::json(request.queues).dump();
  std::vector<CopiedRow> rows;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("Dequeue", [&](Connection& conn) -> Status {
    rows.clear();
    const std::int64_t now_ns = ToNs(core_->Now());
    // One statement leases the whole batch. The subquery's ORDER BY matches
    // the partial index jobpact_jobs_ready, so SQLite walks it in order and
    // stops after max_jobs ready rows; its result is materialized before the
    // UPDATE changes those rows. Lease tokens are "<worker>:<epoch>:<nonce>":
    // unique per delivery, since a job's epoch grows with every delivery.
    // The delivery's history entry also names the worker (not part of
    // Transition; visible in the stored JSON), so that an operator can tell
    // which process held a job whose lease expired.
    static const std::string head =
        "UPDATE jobpact_jobs SET " +
        AppendHistorySql("'running'", "?1", "'delivered'", ", 'worker', ?4") +
        ", status = 'running', epoch = epoch + 1, attempt = attempt + 1, "
        "lease_token = ?4 || ':' || (epoch + 1) || ':' || ?5, "
        "lease_expires_at_ns = ?1 + visibility_timeout_ns, updated_at_ns = ?1 "
        "WHERE job_id IN (SELECT job_id FROM jobpact_jobs WHERE status IN ('queued', "
        "'retry_scheduled') AND ready_at_ns <= ?1 ";
    static const std::string tail =
        std::string("ORDER BY priority DESC, ready_at_ns, job_id LIMIT ?2) RETURNING ") +
        kJobColumns;
    static const std::string any_queue = head + tail;
    static const std::string some_queues =
        head + "AND queue IN (SELECT value FROM json_each(?3)) " + tail;
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare(queues_json.empty() ? any_queue.c_str() : some_queues.c_str()));
    Stmt st(raw);
    st.Bind(1, now_ns)
        .Bind(2, request.max_jobs)
        .Bind(4, request.worker_id)
        .Bind(5, core_->NewNonce());
    if (!queues_json.empty()) st.Bind(3, queues_json);
    while (true) {
      int rc = st.Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return conn.Error(rc, "Dequeue");
      rows.emplace_back(st);
    }
    return Status::Ok();
  }));
  // Parsed after the commit, outside the write lock: the next writer (a
  // thread of this process or another process) need not wait for it. A row
  // that does not parse is a damaged store; its lease is left to expire.
  out.reserve(rows.size());
  for (const CopiedRow& row : rows) {
    Delivery d;
    JOBPACT_ASSIGN_OR_RETURN(d.job, ReadJobRow(row));
    d.lease.job_id = d.job.envelope.job_id;
    d.lease.token = row.Text(kColLeaseToken);
    d.lease.epoch = d.job.epoch;
    d.lease.expires_at = TimeFromNs(row.Int(kColLeaseExpiresAt));
    out.push_back(std::move(d));
  }
  // RETURNING gives no order: restore the dequeue order.
  std::sort(out.begin(), out.end(), [](const Delivery& a, const Delivery& b) {
    if (a.job.envelope.priority != b.job.envelope.priority) {
      return a.job.envelope.priority > b.job.envelope.priority;
    }
    if (a.job.ready_at != b.job.ready_at) return a.job.ready_at < b.job.ready_at;
    return a.lease.job_id < b.lease.job_id;
  });
  return out;
}

Result<Lease> SqliteQueueBackend::RenewImpl(const Lease& lease, Duration extension,
                                            std::string_view checkpoint) {
  if (extension <= Duration::zero()) {
    return Status::InvalidArgument("Renew: extension must be > 0");
  }
  Lease renewed = lease;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("Renew", [&](Connection& conn) -> Status {
    const std::int64_t now_ns = ToNs(core_->Now());
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("UPDATE jobpact_jobs SET lease_expires_at_ns = ?4, updated_at_ns = ?5, "
                     "checkpoint = coalesce(?6, checkpoint) WHERE job_id = ?1 AND status = "
                     "'running' AND epoch = ?2 AND lease_token = ?3"));
    Stmt st(raw);
    const std::int64_t expires_ns = now_ns + ToNs(extension);
    st.Bind(1, lease.job_id)
        .Bind(2, lease.epoch)
        .Bind(3, lease.token)
        .Bind(4, expires_ns)
        .Bind(5, now_ns)
        .BindOrNull(6, checkpoint);
    JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Renew"));
    if (sqlite3_changes(conn.db()) == 0) return StaleLeaseError(conn, lease, "Renew");
    renewed.expires_at = TimeFromNs(expires_ns);
    return Status::Ok();
  }));
  return renewed;
}

Status SqliteQueueBackend::CompleteImpl(const Lease& lease, const Completion& c) {
  // The source status of a completion is always running. An illegal target
  // is reported after the lease check (a stale lease says more), without
  // writing anything.
  const Status legal = CheckTransition(JobStatus::kRunning, c.to);
  return core_->Write("Complete", [&](Connection& conn) -> Status {
    if (!legal.ok()) {
      Status stale = StaleLeaseError(conn, lease, "Complete", /*check_live=*/true);
      return stale.ok() ? legal : stale;
    }
    const std::int64_t now_ns = ToNs(core_->Now());
    static const std::string sql =
        "UPDATE jobpact_jobs SET " + AppendHistorySql("?4", "?5", "?6") +
        ", status = ?4, reason = ?6, updated_at_ns = ?5, lease_token = NULL, "
        "lease_expires_at_ns = NULL, attempt = max(0, attempt - ?7), "
        "ready_at_ns = coalesce(max(?8, enqueued_at_ns), ready_at_ns), "
        "previous_delay_ns = coalesce(?9, previous_delay_ns), lock_waits = lock_waits + ?10, "
        "failure_class = CASE WHEN ?11 IS NULL THEN failure_class ELSE ?11 END, "
        "failure_code = CASE WHEN ?11 IS NULL THEN failure_code ELSE ?12 END, "
        "failure_message = CASE WHEN ?11 IS NULL THEN failure_message ELSE ?13 END, "
        "result = coalesce(?14, result), checkpoint = coalesce(?15, checkpoint), "
        "finished_at_ns = coalesce(?16, finished_at_ns), "
        "dead_lettered_at_ns = coalesce(?17, dead_lettered_at_ns) "
        "WHERE job_id = ?1 AND status = 'running' AND epoch = ?2 AND lease_token = ?3";
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
    {
      Stmt st(raw);
      const bool requeue = c.to == JobStatus::kRetryScheduled || c.to == JobStatus::kQueued;
      const bool final_or_dlq = IsFinal(c.to) || c.to == JobStatus::kDeadLettered;
      st.Bind(1, lease.job_id)
          .Bind(2, lease.epoch)
          .Bind(3, lease.token)
          .Bind(4, JobStatusName(c.to))
          .Bind(5, now_ns)
          .Bind(6, c.reason)
          .Bind(7, c.spend_attempt ? 0 : 1);
      if (requeue) st.Bind(8, c.ready_at ? ToNs(*c.ready_at) : now_ns);
      if (c.to == JobStatus::kRetryScheduled) st.Bind(9, ToNs(c.delay));
      st.Bind(10, c.lock_wait ? 1 : 0);
      if (c.failure) {
        st.Bind(11, FailureClassName(c.failure->failure_class))
            .Bind(12, c.failure->code)
            .Bind(13, c.failure->message);
      }
      if (c.to == JobStatus::kSucceeded) st.Bind(14, c.result);
      st.BindOrNull(15, c.checkpoint);
      if (final_or_dlq) st.Bind(16, now_ns);
      if (c.to == JobStatus::kDeadLettered) st.Bind(17, now_ns);
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Complete"));
    }
    if (sqlite3_changes(conn.db()) == 0) return StaleLeaseError(conn, lease, "Complete");
    if (c.transactional_effect) {
      // Inside the completion transaction, after the fence: the effect
      // commits iff this delivery's completion does.
      Status effect = c.transactional_effect(static_cast<void*>(conn.db()));
      if (!effect.ok()) {
        return Status(effect.code(),
                      "Complete: the transactional effect failed, the completion of job " +
                          lease.job_id + " was rolled back: " + effect.message());
      }
      if (c.to == JobStatus::kSucceeded) {
        // Same-store exactly-once also for the idempotency record: the claim
        // this delivery holds on the job's idempotency key (the runner's
        // claim owner is the lease token) is marked completed in the same
        // transaction as the effect, so no crash can separate "effect
        // committed" from "key recorded". A key claimed or completed by
        // another owner means this delivery lost its claim: the effect must
        // not commit a second time for the key, so everything rolls back.
        static const std::string complete_claim =
            "UPDATE jobpact_idempotency SET state = 'completed', result = ?3, expires_at_ns = ?4 "
            "WHERE key = (SELECT json_extract(envelope, '$.idempotency_key') FROM jobpact_jobs "
            "WHERE job_id = ?1) AND owner = ?2 AND state = 'in_progress'";
        JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw_claim, conn.Prepare(complete_claim.c_str()));
        Stmt st(raw_claim);
        st.Bind(1, lease.job_id)
            .Bind(2, lease.token)
            .Bind(3, c.result)
            .Bind(4, now_ns + ToNs(core_->options().idempotency_retention));
        JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Complete"));
        if (sqlite3_changes(conn.db()) == 0) {
          static const std::string other_owner =
              "SELECT i.key, i.owner, i.state FROM jobpact_idempotency i WHERE i.key = (SELECT "
              "json_extract(envelope, '$.idempotency_key') FROM jobpact_jobs WHERE job_id = ?1) "
              "AND i.owner != ?2";
          JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw_other, conn.Prepare(other_owner.c_str()));
          Stmt other(raw_other);
          other.Bind(1, lease.job_id).Bind(2, lease.token);
          const int rc = other.Step();
          if (rc == SQLITE_ROW) {
            return Status::Aborted(
                "Complete: the idempotency claim on key '" + other.Text(0) + "' is no longer " +
                "held by this delivery (" + other.Text(2) + " by " + other.Text(1) +
                "): the completion of job " + lease.job_id +
                " and its transactional effect were rolled back");
          }
          if (rc != SQLITE_DONE) return conn.Error(rc, "Complete");
        }
      }
    }
    return Status::Ok();
  });
}

Result<std::vector<LeaseRecovery>> SqliteQueueBackend::RecoverImpl(int max_recoveries) {
  std::vector<LeaseRecovery> recovered;
  JOBPACT_SQLITE_RETURN_IF_ERROR(
      core_->Write("RecoverExpiredLeases", [&](Connection& conn) -> Status {
        recovered.clear();  // The write may be retried.
        const std::int64_t now_ns = ToNs(core_->Now());
        // The jobs about to move, read in the same write transaction as the
        // updates below, for the per-job results (the runner's metrics and
        // transition log lines).
        static const std::string select_expired =
            std::string("SELECT ") + kJobColumns +
            " FROM jobpact_jobs WHERE status = 'running' AND lease_expires_at_ns <= ?1 "
            "ORDER BY lease_expires_at_ns, job_id";
        // Jobs whose next recovery would exceed the cap go to the DLQ first;
        // the second statement then requeues the rest. Both use the partial
        // index on running leases.
        static const std::string to_dlq =
            "UPDATE jobpact_jobs SET " +
            AppendHistorySql("'dead_lettered'", "?1", "'lease_expired_repeatedly'") +
            ", status = 'dead_lettered', reason = 'lease_expired_repeatedly', "
            "lease_recoveries = lease_recoveries + 1, lease_token = NULL, lease_expires_at_ns = "
            "NULL, updated_at_ns = ?1, finished_at_ns = ?1, dead_lettered_at_ns = ?1, "
            "failure_class = 'unknown', failure_code = 'lease_expired_repeatedly', "
            "failure_message = 'lease expired ' || (lease_recoveries + 1) || ' times "
            "(max_recoveries ' "
            "|| ?2 || '): the job keeps killing or hanging its worker' "
            "WHERE status = 'running' AND lease_expires_at_ns <= ?1 AND lease_recoveries + 1 > ?2";
        static const std::string to_queue =
            "UPDATE jobpact_jobs SET " + AppendHistorySql("'queued'", "?1", "'lease_expired'") +
            ", status = 'queued', reason = 'lease_expired', lease_recoveries = lease_recoveries + "
            "1, lease_token = NULL, lease_expires_at_ns = NULL, updated_at_ns = ?1, ready_at_ns = "
            "?1 WHERE status = 'running' AND lease_expires_at_ns <= ?1";
        {
          JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(select_expired.c_str()));
          Stmt st(raw);
          st.Bind(1, now_ns);
          while (true) {
            int rc = st.Step();
            if (rc == SQLITE_DONE) break;
            if (rc != SQLITE_ROW) return conn.Error(rc, "RecoverExpiredLeases");
            JOBPACT_ASSIGN_OR_RETURN(JobRecord rec, ReadJobRow(st));
            LeaseRecovery r;
            r.job_id = rec.envelope.job_id;
            r.lease_recoveries = rec.lease_recoveries + 1;
            const bool dlq = r.lease_recoveries > max_recoveries;
            r.to = dlq ? JobStatus::kDeadLettered : JobStatus::kQueued;
            r.reason = std::string(dlq ? reason::kLeaseExpiredRepeatedly : reason::kLeaseExpired);
            r.envelope = std::move(rec.envelope);
            recovered.push_back(std::move(r));
          }
        }
        if (recovered.empty()) return Status::Ok();
        std::size_t changed = 0;
        {
          JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(to_dlq.c_str()));
          Stmt st(raw);
          st.Bind(1, now_ns).Bind(2, max_recoveries);
          JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "RecoverExpiredLeases"));
          changed += static_cast<std::size_t>(sqlite3_changes(conn.db()));
        }
        {
          JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(to_queue.c_str()));
          Stmt st(raw);
          st.Bind(1, now_ns);
          JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "RecoverExpiredLeases"));
          changed += static_cast<std::size_t>(sqlite3_changes(conn.db()));
        }
        if (changed != recovered.size()) {
          return Status::Internal("RecoverExpiredLeases: read " +
                                  std::to_string(recovered.size()) + " expired leases but moved " +
                                  std::to_string(changed) + " jobs");
        }
        return Status::Ok();
      }));
  return recovered;
}

Status SqliteQueueBackend::DlqActionImpl(std::string_view job_id, const DlqAction& action,
                                         bool replay) {
  const char* what = replay ? "Replay" : "Discard";
  if (action.actor.empty()) {
    return Status::InvalidArgument(std::string(what) + ": actor (who) is required");
  }
  if (action.reason.empty()) {
    return Status::InvalidArgument(std::string(what) + ": reason (why) is required");
  }
  if (replay && action.extra_attempts < 0) {
    return Status::InvalidArgument("Replay: extra_attempts must be >= 0");
  }
  return core_->Write(what, [&](Connection& conn) -> Status {
    const TimePoint now = core_->Now();
    const std::int64_t now_ns = ToNs(now);
    bool invalid = false;
    {
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("SELECT raw_envelope IS NOT NULL FROM jobpact_jobs WHERE job_id = ?1 "
                       "AND status = 'dead_lettered'"));
      Stmt st(raw);
      st.Bind(1, job_id);
      int rc = st.Step();
      if (rc == SQLITE_DONE) {
        return Status::NotFound(std::string(what) + ": job " + std::string(job_id) +
                                " is not in the dead-letter queue");
      }
      if (rc != SQLITE_ROW) return conn.Error(rc, what);
      invalid = st.Int(0) != 0;
    }
    if (replay && invalid) {
      return Status::FailedPrecondition(
          "Replay: job " + std::string(job_id) +
          " is an invalid envelope and cannot run; fix it and enqueue it again");
    }
    // "<time> replay by <actor>: <reason> (attempts reset)", the in-memory
    // reference's format.
    std::string audit = FormatRfc3339(now) + (replay ? " replay" : " discard") + " by " +
                        action.actor + ": " + action.reason;
    if (replay) {
      audit += action.reset_attempts
                   ? std::string(" (attempts reset)")
                   : " (extra_attempts " + std::to_string(action.extra_attempts) + ")";
    }
    if (replay) {
      static const std::string sql =
          "UPDATE jobpact_jobs SET " + AppendHistorySql("'queued'", "?2", "'replay'") + ", " +
          AppendAuditSql("?3") +
          ", status = 'queued', reason = 'replay', updated_at_ns = ?2, "
          "ready_at_ns = max(?4, enqueued_at_ns), "
          "attempt = CASE WHEN ?5 THEN 0 ELSE attempt END, "
          "max_attempts = CASE WHEN ?5 THEN max_attempts ELSE max_attempts + ?6 END, "
          // A replay is a fresh chance: crash and lock-wait budgets start again.
          "lease_recoveries = 0, lock_waits = 0, previous_delay_ns = 0, "
          "finished_at_ns = NULL, dead_lettered_at_ns = NULL WHERE job_id = ?1";
      JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
      Stmt st(raw);
      st.Bind(1, job_id)
          .Bind(2, now_ns)
          .Bind(3, audit)
          .Bind(4, action.ready_at ? ToNs(*action.ready_at) : now_ns)
          .Bind(5, action.reset_attempts ? 1 : 0)
          .Bind(6, action.extra_attempts);
      return StepDone(conn, st, what);
    }
    static const std::string sql =
        "UPDATE jobpact_jobs SET " + AppendHistorySql("'discarded'", "?2", "'operator_discard'") +
        ", " + AppendAuditSql("?3") +
        ", status = 'discarded', reason = 'operator_discard', updated_at_ns = ?2, "
        "finished_at_ns = ?2 WHERE job_id = ?1";
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
    Stmt st(raw);
    st.Bind(1, job_id).Bind(2, now_ns).Bind(3, audit);
    return StepDone(conn, st, what);
  });
}

Result<int> SqliteQueueBackend::PurgeInChunks(std::string_view what, const char* sql,
                                              TimePoint older_than) {
  // Chunks of 1000 rows, each its own transaction, so a large purge never
  // holds the write lock long enough to stall other processes' workers.
  int total = 0;
  while (true) {
    int deleted = 0;
    JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write(what, [&](Connection& conn) -> Status {
      JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql));
      Stmt st(raw);
      st.Bind(1, ToNs(older_than));
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, what));
      deleted = sqlite3_changes(conn.db());
      return Status::Ok();
    }));
    total += deleted;
    if (deleted < 1000) return total;
  }
}

Result<QueueStats> SqliteQueueBackend::StatsImpl() {
  QueueStats stats;
  for (JobStatus s : kAllJobStatuses) stats.by_status[s] = 0;
  JOBPACT_SQLITE_RETURN_IF_ERROR(
      core_->Read("Stats", /*snapshot=*/true, [&](Connection& conn) -> Status {
        const std::int64_t now_ns = ToNs(core_->Now());
        {
          JOBPACT_ASSIGN_OR_RETURN(
              sqlite3_stmt * raw,
              conn.Prepare("SELECT queue, status, count(*) FROM jobpact_jobs GROUP BY queue, "
                           "status"));
          Stmt st(raw);
          while (true) {
            int rc = st.Step();
            if (rc == SQLITE_DONE) break;
            if (rc != SQLITE_ROW) return conn.Error(rc, "Stats");
            const std::string queue = st.Text(0);
            auto status = ParseJobStatus(st.Text(1));
            if (!status.ok()) return status.status();
            const std::int64_t n = st.Int(2);
            stats.by_status[*status] += n;
            if (*status == JobStatus::kDeadLettered) stats.dead_letters += n;
            if (queue.empty()) continue;  // Invalid envelopes belong to no queue.
            QueueStats::PerQueue& q = stats.queues[queue];
            if (*status == JobStatus::kQueued || *status == JobStatus::kRetryScheduled)
              q.depth += n;
            if (*status == JobStatus::kRunning) q.running += n;
          }
        }
        {
          JOBPACT_ASSIGN_OR_RETURN(
              sqlite3_stmt * raw,
              conn.Prepare("SELECT queue, min(max(ready_at_ns, enqueued_at_ns)) FROM jobpact_jobs "
                           "WHERE status IN ('queued', 'retry_scheduled') AND ready_at_ns <= ?1 "
                           "GROUP BY queue"));
          Stmt st(raw);
          st.Bind(1, now_ns);
          while (true) {
            int rc = st.Step();
            if (rc == SQLITE_DONE) break;
            if (rc != SQLITE_ROW) return conn.Error(rc, "Stats");
            const std::int64_t oldest = st.Int(1);
            stats.queues[st.Text(0)].oldest_ready_age =
                DurationFromNs(std::max<std::int64_t>(0, now_ns - oldest));
          }
        }
        return Status::Ok();
      }));
  return stats;
}

}  // namespace

Result<std::vector<EnqueueResult>> SqliteBackend::Core::EnqueueOn(
    Connection& conn, const std::vector<const Envelope*>& envs, const EnqueueOptions& options) {
  std::vector<EnqueueResult> results;
  results.reserve(envs.size());
  const TimePoint now = Now();
  const std::int64_t now_ns = ToNs(now);
  // A dedup match is now - enqueued_at < window, so a zero window disables
  // dedup (the in-memory reference's rule).
  const bool dedup = options.dedup_window > Duration::zero();
  const std::int64_t window_start_ns = now_ns - ToNs(options.dedup_window);
  for (const Envelope* env : envs) {
    // The engine's entry check: what is stored must decode again (a tenant
    // "acme corp" stored here would make every later read of the row fail).
    Status storable = engine::CheckStorable(*env);
    if (!storable.ok()) {
      return Status(storable.code(), "Enqueue: " + storable.message());
    }
  }
  if (envs.size() > 1) {
    // A batch is refused whole when any id is taken, even by a job that
    // would otherwise be a dedup duplicate (checked before any dedup).
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw,
                             conn.Prepare("SELECT 1 FROM jobpact_jobs WHERE job_id = ?1"));
    for (const Envelope* env : envs) {
      Stmt st(raw);
      st.Bind(1, env->job_id);
      int rc = st.Step();
      if (rc == SQLITE_ROW) {
        return Status::AlreadyExists("EnqueueBatch: job id " + env->job_id + " already exists");
      }
      if (rc != SQLITE_DONE) return conn.Error(rc, "EnqueueBatch");
    }
  }
  for (const Envelope* env : envs) {
    if (dedup && !env->dedup_key.empty()) {
      // The most recent live job with this key within the window.
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("SELECT job_id, status FROM jobpact_jobs WHERE dedup_key = ?1 AND "
                       "enqueued_at_ns > ?2 AND status NOT IN ('discarded', 'failed', "
                       "'dead_lettered') ORDER BY enqueued_at_ns DESC, job_id DESC LIMIT 1"));
      Stmt st(raw);
      st.Bind(1, env->dedup_key).Bind(2, window_start_ns);
      int rc = st.Step();
      if (rc == SQLITE_ROW) {
        EnqueueResult r;
        r.job_id = st.Text(0);
        r.duplicate = true;
        auto status = ParseJobStatus(st.Text(1));
        if (!status.ok()) return status.status();
        r.status = *status;
        results.push_back(std::move(r));
        continue;
      }
      if (rc != SQLITE_DONE) return conn.Error(rc, "Enqueue");
    }
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare(
            "INSERT INTO jobpact_jobs (job_id, job_type, queue, priority, status, attempt, "
            "max_attempts, ready_at_ns, enqueued_at_ns, updated_at_ns, visibility_timeout_ns, "
            "dedup_key, reason, envelope, history) VALUES (?1, ?2, ?3, ?4, 'queued', 0, ?5, "
            "?6, ?7, ?7, ?8, ?9, '', ?10, json_array(json_object('from', 'queued', "
            "'to', 'queued', 'at_ns', ?7, 'reason', 'enqueued')))"));
    Stmt st(raw);
    // The stored envelope: attempt is the system's (a producer's value is
    // never trusted) and created_at is set if the producer left it unset.
    std::string json;
    if (env->attempt != 0 || !env->created_at) {
      Envelope copy = *env;
      copy.attempt = 0;
      if (!copy.created_at) copy.created_at = now;
      json = SerializeEnvelope(copy);
    } else {
      json = SerializeEnvelope(*env);
    }
    // Never before the enqueue: a job scheduled in the past is ready from
    // now, in arrival order.
    const std::int64_t ready_ns =
        std::max(now_ns, env->scheduled_at ? ToNs(*env->scheduled_at) : now_ns);
    st.Bind(1, env->job_id)
        .Bind(2, env->job_type)
        .Bind(3, env->queue)
        .Bind(4, env->priority)
        .Bind(5, env->max_attempts)
        .Bind(6, ready_ns)
        .Bind(7, now_ns)
        .Bind(8, ToNs(env->visibility_timeout))
        .BindOrNull(9, env->dedup_key)
        .Bind(10, json);
    int rc = st.Step();
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      return Status::AlreadyExists("Enqueue: job id " + env->job_id + " already exists");
    }
    if (rc != SQLITE_DONE) return conn.Error(rc, "Enqueue");
    EnqueueResult r;
    r.job_id = env->job_id;
    r.status = JobStatus::kQueued;
    results.push_back(std::move(r));
  }
  return results;
}

std::shared_ptr<QueueBackend> SqliteBackend::Core::MakeQueue(std::shared_ptr<Core> core) {
  return std::make_shared<SqliteQueueBackend>(std::move(core));
}

}  // namespace sqlite
}  // namespace jobpact
