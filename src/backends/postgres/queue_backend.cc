// The PostgreSQL queue store, worker side (queue_store.h): insert, write,
// lease, renew and lease recovery.
#include "src/backends/postgres/queue_store.h"
#include "src/internal/names.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/transitions.h"
#include "src/internal/backpressure.h"
#include "src/internal/guarded.h"
#include "src/internal/job_row_codec.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using ::jobpact::internal::AuditJson;
using ::jobpact::internal::HistoryEntryJson;
using ::jobpact::internal::HistoryJson;
using ::jobpact::internal::kColJobId;
using ::jobpact::internal::kColJobType;
using ::jobpact::internal::RawRow;
using ::jobpact::internal::ReadJobRow;
using ::jobpact::internal::ToNs;
using internal::Connection;
using internal::Params;
using internal::PgResult;
using internal::PgRow;
using Core = PostgresBackend::Core;

namespace {

// The most bytes of a job id, type, queue or dedup key this store takes.
// Each is a B-tree index key (jobs_ready_by_tenant holds queue, job_type,
// tenant_id and job_id together), and PostgreSQL refuses an index row over about 2700 bytes
// (8 KB pages). jobs_running_type indexes job_type only while the job
// runs, so a longer type used to be inserted fine and then fail the lease
// write of every Dequeue that reached it: one enqueue blocked the queue.
// Refused at enqueue instead, naming the field; far above the 255
// characters ValidationOptions allows producers by default.
constexpr std::size_t kMaxIndexedBytes = 1024;

Status CheckIndexable(const Envelope& env) {
  const std::pair<const char*, const std::string*> fields[] = {{"job_id", &env.job_id},
                                                               {"job_type", &env.job_type},
                                                               {"queue", &env.queue},
                                                               {"dedup_key", &env.dedup_key},
                                                               {"tenant_id", &env.tenant_id}};
  for (const auto& [name, value] : fields) {
    if (value->size() > kMaxIndexedBytes) {
      return Status::InvalidArgument(std::string("the PostgreSQL store takes at most ") +
                                     std::to_string(kMaxIndexedBytes) + " bytes of " + name +
                                     ", got " + std::to_string(value->size()));
    }
  }
  return Status::Ok();
}


// A PostgreSQL text[] literal of `items` (a parameter value, never SQL).
std::string TextArray(const std::vector<std::string>& items) {
  std::string out = "{";
  for (const std::string& s : items) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

// Columns of parameter rows as PostgreSQL array literals (one parameter per
// column, for unnest): rows[r] holds the r-th row's values; a NULL value
// becomes an unquoted NULL element.
std::vector<std::string> ArrayColumns(const std::vector<Params>& rows, int columns) {
  std::vector<std::string> out(static_cast<std::size_t>(columns), "{");
  for (const Params& row : rows) {
    for (int c = 0; c < columns; ++c) {
      std::string& a = out[static_cast<std::size_t>(c)];
      if (a.size() > 1) a += ',';
      if (row.is_null(c)) {
        a += "NULL";
        continue;
      }
      a += '"';
      for (char ch : row.value(c)) {
        if (ch == '"' || ch == '\\') a += '\\';
        a += ch;
      }
      a += '"';
    }
  }
  for (std::string& a : out) a += '}';
  return out;
}

// Appends a record's mutable fields, in the order of kRecordSet / the
// insert's columns (21 parameters).
void AddRecord(Params& p, const JobRecord& r) {
  p.Add(JobStatusName(r.status))
      .Add(r.envelope.attempt)
      .Add(r.envelope.max_attempts)
      .Add(ToNs(r.ready_at))
      .Add(ToNs(r.updated_at));
  if (r.finished_at) {
    p.Add(ToNs(*r.finished_at));
  } else {
    p.Null();
  }
  p.Add(r.epoch).Add(r.lease_recoveries).Add(r.lock_waits).Add(ToNs(r.previous_delay));
  p.Add(r.checkpoint);
  if (r.last_failure) {
    p.Add(FailureClassName(r.last_failure->failure_class))
        .Add(r.last_failure->code)
        .Add(r.last_failure->message);
  } else {
    p.Null().Null().Null();
  }
  p.Add(r.reason).Add(r.result).AddOrNull(r.lease_token);
  if (r.lease_token.empty()) {
    p.Null();
  } else {
    p.Add(ToNs(r.lease_expires_at));
  }
  if (r.status == JobStatus::kDeadLettered && r.finished_at) {
    p.Add(ToNs(*r.finished_at));
  } else {
    p.Null();
  }
  p.Add(AuditJson(r.audit)).Add(r.cancel_requested ? 1 : 0);
}

// The columns a change writes ($5..$25 after the four of the condition):
// every field the engine may change. An empty checkpoint keeps the stored
// one, and a change of a running job keeps the audit and a cancel request an
// operator stored meanwhile (JobChange).
#define JOBPACT_PG_RECORD_SET                                                                  \
  "status = $5, attempt = $6, max_attempts = $7, ready_at_ns = $8, updated_at_ns = $9, "      \
  "finished_at_ns = $10, epoch = $11, lease_recoveries = $12, lock_waits = $13, "             \
  "previous_delay_ns = $14, checkpoint = CASE WHEN $15::text = '' THEN checkpoint ELSE $15 "  \
  "END, failure_class = $16, failure_code = $17, failure_message = $18, reason = $19, "       \
  "result = $20, lease_token = $21, lease_expires_at_ns = $22, dead_lettered_at_ns = $23, "   \
  "audit = CASE WHEN $2::text = 'running' THEN audit ELSE $24::jsonb END, cancel_requested = " \
  "CASE WHEN $2::text = 'running' THEN greatest(cancel_requested, $25::integer) ELSE "        \
  "$25::integer END"

#define JOBPACT_PG_MATCH \
  " WHERE job_id = $1 AND status = $2 AND epoch = $3 AND coalesce(lease_token, '') = $4"

// Several conditional writes in ONE statement: each row of the unnest is
// one change (the condition, the record's fields in JOBPACT_PG_RECORD_SET's
// order, and its history entry or NULL); a change whose row no longer
// matches its condition writes nothing, and RETURNING says which did. A
// write that matches no row cannot fail the others, so no savepoint is
// needed for writes without an effect.
std::string BatchUpdateSql() {
  return std::string(
             "UPDATE {t}jobs j SET status = v.status, attempt = v.attempt, max_attempts = "
             "v.max_attempts, ready_at_ns = v.ready_at_ns, updated_at_ns = v.updated_at_ns, "
             "finished_at_ns = v.finished_at_ns, epoch = v.epoch, lease_recoveries = "
             "v.lease_recoveries, lock_waits = v.lock_waits, previous_delay_ns = "
             "v.previous_delay_ns, checkpoint = CASE WHEN v.checkpoint = '' THEN j.checkpoint "
             "ELSE v.checkpoint END, failure_class = v.failure_class, failure_code = "
             "v.failure_code, failure_message = v.failure_message, reason = v.reason, result = "
             "v.result, lease_token = v.lease_token, lease_expires_at_ns = v.lease_expires_at_ns, "
             "dead_lettered_at_ns = v.dead_lettered_at_ns, audit = CASE WHEN v.exp_status = "
             "'running' THEN j.audit ELSE v.audit::jsonb END, cancel_requested = CASE WHEN "
             "v.exp_status = 'running' THEN greatest(j.cancel_requested, v.cancel) ELSE v.cancel "
             "END, history = CASE WHEN v.entry IS NULL THEN j.history WHEN "
             "jsonb_array_length(j.history) >= ") +
         std::to_string(kMaxHistory) +
         " THEN (j.history - 0) || v.entry::jsonb ELSE j.history || v.entry::jsonb END FROM "
         "unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::integer[], "
         "$7::integer[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], "
         "$12::integer[], $13::integer[], $14::bigint[], $15::text[], $16::text[], $17::text[], "
         "$18::text[], $19::text[], $20::text[], $21::text[], $22::bigint[], $23::bigint[], "
         "$24::text[], $25::integer[], $26::text[]) AS v(job_id, exp_status, exp_epoch, "
         "exp_token, status, attempt, max_attempts, ready_at_ns, updated_at_ns, finished_at_ns, "
         "epoch, lease_recoveries, lock_waits, previous_delay_ns, checkpoint, failure_class, "
         "failure_code, failure_message, reason, result, lease_token, lease_expires_at_ns, "
         "dead_lettered_at_ns, audit, cancel, entry) WHERE j.job_id = v.job_id AND j.status = "
         "v.exp_status AND j.epoch = v.exp_epoch AND coalesce(j.lease_token, '') = v.exp_token "
         "RETURNING j.job_id";
}

// The next jobs a worker may lease, obeying the control state, in turn
// across tenants; locked for this transaction, skipping rows other
// transactions hold. Three steps:
//   units  the (queue, job type, tenant) triples with ready jobs, found by
//          one index seek each on jobs_ready_by_tenant (a loose index scan),
//          however many jobs each holds;
//   cand   every unit the control state does not hold (its type or queue
//          paused, its type at its concurrency limit, its tenant at the
//          queue's tenant cap) offers its first $2 ready jobs in index
//          order, locked there (so that concurrent leases take different
//          jobs), each ranked within its (queue, tenant, priority) by
//          ready order;
//   order  by priority, then rank (each tenant's first job before anyone's
//          second), then the queue's turn (the tenants after the one it
//          served last, tenant_turns, first; in name order, wrapping
//          around), then ready time and id; the first $2.
// So a lease reads at most $2 jobs per unit, never a big tenant's whole
// backlog, and a held unit's backlog costs it nothing. The locking
// subquery returns each row as locked (its newest version), which is what
// the conditional write that follows must match. After the job columns:
// the row's tenant, and the turn of its queue as read.
std::string LeaseSql(bool some_queues) {
  const std::string ready = "x.status IN ('queued', 'retry_scheduled') ";
  const std::string in_queues = some_queues ? "AND x.queue = ANY ($3::text[]) " : "";
  const std::string unit_order = "ORDER BY x.queue, x.job_type, x.tenant_id LIMIT 1";
  return "WITH RECURSIVE units(queue, job_type, tenant_id) AS ((SELECT x.queue, x.job_type, "
         "x.tenant_id FROM {t}jobs x WHERE " +
         ready + in_queues + unit_order +
         ") UNION ALL SELECT n.queue, n.job_type, n.tenant_id FROM units p CROSS JOIN LATERAL "
         "(SELECT x.queue, x.job_type, x.tenant_id FROM {t}jobs x WHERE " +
         ready + in_queues +
         "AND (x.queue, x.job_type, x.tenant_id) > (p.queue, p.job_type, p.tenant_id) " +
         unit_order +
         ") n), cand AS (SELECT j.*, row_number() OVER (PARTITION BY j.queue, j.tenant_id, "
         "j.priority ORDER BY j.ready_at_ns, j.job_id) AS rn FROM units u CROSS JOIN LATERAL "
         "(SELECT " JOBPACT_PG_JOB_COLUMNS ", tenant_id FROM {t}jobs x WHERE " +
         ready +
         "AND x.queue = u.queue AND x.job_type = u.job_type AND x.tenant_id = u.tenant_id AND "
         "x.ready_at_ns <= $1 ORDER BY x.priority DESC, x.ready_at_ns, x.job_id LIMIT $2 FOR "
         "UPDATE SKIP LOCKED) j WHERE NOT EXISTS (SELECT 1 FROM {t}control c WHERE "
         "c.failure_class = '' AND ((c.kind = 'pause_type' AND c.subject = u.job_type) OR "
         "(c.kind = 'pause_queue' AND c.subject = u.queue) OR (c.kind = 'concurrency_limit' AND "
         "c.subject = u.job_type AND c.limit_value <= (SELECT count(*) FROM {t}jobs r WHERE "
         "r.status = 'running' AND r.job_type = c.subject)) OR (c.kind = "
         "'tenant_concurrency_limit' AND c.subject = u.queue AND c.limit_value <= (SELECT "
         "count(*) FROM {t}jobs r WHERE r.status = 'running' AND r.queue = c.subject AND "
         "r.tenant_id = u.tenant_id))))) SELECT " JOBPACT_PG_JOB_COLUMNS
         ", tenant_id, coalesce(t.last_tenant, '') FROM cand LEFT JOIN (SELECT queue AS "
         "turn_queue, last_tenant FROM {t}tenant_turns) t ON t.turn_queue = cand.queue ORDER BY "
         "priority DESC, rn, tenant_id <= coalesce(t.last_tenant, ''), tenant_id, ready_at_ns, "
         "job_id LIMIT $2";
}

// The columns after JOBPACT_PG_JOB_COLUMNS in a row of LeaseSql.
constexpr int kColLeaseTenant = ::jobpact::internal::kColCancelRequested + 1;
constexpr int kColLeaseTurn = kColLeaseTenant + 1;

}  // namespace

PostgresQueueBackend::PostgresQueueBackend(std::shared_ptr<Core> core)
    : StoreBackend(core->clock()),
      core_(std::move(core)),
      lease_any_(core_->SqlOf(LeaseSql(false))),
      lease_some_(core_->SqlOf(LeaseSql(true))),
      batch_update_(core_->SqlOf(BatchUpdateSql())) {}

Status PostgresQueueBackend::StaleError(Connection& conn, const JobChange& c,
                                        std::string_view what) {
  const std::string& id = c.record.envelope.job_id;
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r, conn.Exec(core_->Sql("SELECT status, epoch FROM {t}jobs WHERE job_id = $1"),
                            Params().Add(id), what));
  if (r.rows() == 0) return Status::NotFound(std::string(what) + ": no job " + id);
  return Status::Aborted(std::string(what) + ": stale lease on job " + id + " (lease epoch " +
                         std::to_string(c.expect.epoch) + ", job epoch " + r.Text(0, 1) +
                         ", status " + r.Text(0, 0) + "): the job was taken over or finished");
}

Status PostgresQueueBackend::UpdateRow(Connection& conn, const JobChange& c,
                                       std::string_view worker) {
  // Every change of a stored job adds one history entry at most (the
  // engine's); more would be dropped here.
  if (c.append.size() > 1) {
    return Status::Internal("write job: more than one history entry in one change");
  }
  static const std::string with_entry_tmpl =
      std::string("UPDATE {t}jobs SET ") + JOBPACT_PG_RECORD_SET +
      ", history = CASE WHEN jsonb_array_length(history) >= " + std::to_string(kMaxHistory) +
      " THEN (history - 0) || $26::jsonb ELSE history || $26::jsonb END" + JOBPACT_PG_MATCH;
  static const std::string without_entry_tmpl =
      std::string("UPDATE {t}jobs SET ") + JOBPACT_PG_RECORD_SET + JOBPACT_PG_MATCH;
  Params p;
  p.Add(c.record.envelope.job_id)
      .Add(JobStatusName(c.expect.status))
      .Add(c.expect.epoch)
      .Add(c.expect.lease_token);
  AddRecord(p, c.record);
  if (!c.append.empty()) p.Add(HistoryEntryJson(c.append.back(), worker));
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(core_->Sql(c.append.empty() ? without_entry_tmpl.c_str() : with_entry_tmpl.c_str()),
                p, "write job"));
  if (r.affected() == 0) return StaleError(conn, c, "write job");
  return Status::Ok();
}

Status PostgresQueueBackend::UpdateRows(Connection& conn,
                                        const std::vector<const JobChange*>& changes,
                                        std::string_view worker, std::vector<bool>* matched) {
  std::vector<Params> rows(changes.size());
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const JobChange& c = *changes[i];
    if (c.append.size() > 1) {
      return Status::Internal("write job: more than one history entry in one change");
    }
    Params& p = rows[i];
    p.Add(c.record.envelope.job_id)
        .Add(JobStatusName(c.expect.status))
        .Add(c.expect.epoch)
        .Add(c.expect.lease_token);
    AddRecord(p, c.record);
    if (c.append.empty()) {
      p.Null();
    } else {
      p.Add(HistoryEntryJson(c.append.back(), worker));
    }
  }
  const std::vector<std::string> columns = ArrayColumns(rows, 26);
  Params p;
  for (const std::string& column : columns) p.Add(column);
  JOBPACT_ASSIGN_OR_RETURN(PgResult r, conn.Exec(batch_update_, p, "write jobs"));
  std::map<std::string, bool, std::less<>> written;
  for (int i = 0; i < r.rows(); ++i) written[r.Text(i, 0)] = true;
  matched->assign(changes.size(), false);
  for (std::size_t i = 0; i < changes.size(); ++i) {
    (*matched)[i] = written.count(changes[i]->record.envelope.job_id) > 0;
  }
  return Status::Ok();
}

Result<JobRecord> PostgresQueueBackend::DecodeOrQuarantine(Connection& conn, const PgRow& row,
                                                           TimePoint now, bool with_history,
                                                           bool* quarantined) {
  *quarantined = false;
  Result<JobRecord> rec = ReadPgJobRow(row, with_history);
  if (rec.ok()) return rec;
  // A record nobody can read must not block the others: it leaves the state
  // machine as a DLQ entry with the whole row kept (SPEC 1: never dropped).
  JobChange q = engine::Quarantine(row.Text(kColJobId), RawRow(row), rec.status().message(), now);
  static const std::string sql = std::string("UPDATE {t}jobs SET ") + JOBPACT_PG_RECORD_SET +
                                 ", queue = '', raw_envelope = $26, history = $27::jsonb "
                                 // Unconditional: $3 and $4 (the condition of the other
                                 // writes) are only typed here, as libpq needs.
                                 "WHERE job_id = $1 AND $3::bigint IS NOT NULL AND $4::text IS "
                                 "NOT NULL";
  Params p;
  p.Add(q.record.envelope.job_id).Add(JobStatusName(q.record.status)).Add(0).Add("");
  AddRecord(p, q.record);
  p.Add(RawInputToText(*q.record.raw_input)).Add(HistoryJson(q.append));
  JOBPACT_RETURN_IF_ERROR(conn.Exec(core_->Sql(sql.c_str()), p, "quarantine").status());
  *quarantined = true;
  q.record.history = q.append;
  return std::move(q.record);
}

// A new job's row: its id, its record (AddRecord), then the columns fixed
// at enqueue, in the order of JOBPACT_PG_INSERT_COLUMNS.
static Params InsertParams(const JobChange& c) {
  const JobRecord& rec = c.record;
  const Envelope& env = rec.envelope;
  Params p;
  p.Add(env.job_id);
  AddRecord(p, rec);
  // Quarantined input keeps no envelope of its own beyond what could be
  // read of it (job_id, job_type, trace_id).
  p.Add(env.job_type)
      .Add(env.queue)
      .Add(env.priority)
      .Add(ToNs(env.visibility_timeout))
      .AddOrNull(env.dedup_key)
      .Add(SerializeEnvelope(env));
  if (rec.raw_input) {
    p.Add(RawInputToText(*rec.raw_input));
  } else {
    p.Null();
  }
  p.Add(HistoryJson(c.append)).Add(ToNs(rec.enqueued_at)).Add(env.tenant_id);
  return p;
}

#define JOBPACT_PG_INSERT_COLUMNS                                                              \
  "job_id, status, attempt, max_attempts, ready_at_ns, updated_at_ns, finished_at_ns, epoch, " \
  "lease_recoveries, lock_waits, previous_delay_ns, checkpoint, failure_class, failure_code, " \
  "failure_message, reason, result, lease_token, lease_expires_at_ns, dead_lettered_at_ns, "   \
  "audit, cancel_requested, job_type, queue, priority, visibility_timeout_ns, dedup_key, "     \
  "envelope, raw_envelope, history, enqueued_at_ns, tenant_id"

// Inserts new jobs' rows (InsertParams): one INSERT of one row, or of many
// from one array per column (unnest). A taken id is kAlreadyExists.
Status PostgresQueueBackend::InsertRows(Core& core, Connection& conn,
                                        const std::vector<Params>& rows) {
  static const std::string one =
      "INSERT INTO {t}jobs (" JOBPACT_PG_INSERT_COLUMNS
      ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, "
      "$18, $19, $20, $21::jsonb, $22, $23, $24, $25, $26, $27, $28, $29, $30::jsonb, $31, $32)";
  static const std::string many =
      "INSERT INTO {t}jobs (" JOBPACT_PG_INSERT_COLUMNS
      ") SELECT job_id, status, attempt, max_attempts, ready_at_ns, updated_at_ns, "
      "finished_at_ns, epoch, lease_recoveries, lock_waits, previous_delay_ns, checkpoint, "
      "failure_class, failure_code, failure_message, reason, result, lease_token, "
      "lease_expires_at_ns, dead_lettered_at_ns, audit::jsonb, cancel_requested, job_type, queue, "
      "priority, visibility_timeout_ns, dedup_key, envelope, raw_envelope, history::jsonb, "
      "enqueued_at_ns, tenant_id FROM unnest($1::text[], $2::text[], $3::integer[], $4::integer[], "
      "$5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::integer[], $10::integer[], "
      "$11::bigint[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], "
      "$17::text[], $18::text[], $19::bigint[], $20::bigint[], $21::text[], $22::integer[], "
      "$23::text[], $24::text[], $25::integer[], $26::bigint[], $27::text[], $28::text[], "
      "$29::text[], $30::text[], $31::bigint[], $32::text[]) AS v(" JOBPACT_PG_INSERT_COLUMNS ")";
  auto insert = [&]() -> Result<PgResult> {
    if (rows.size() == 1) return conn.Exec(core.Sql(one.c_str()), rows.front(), "Enqueue");
    Params p;
    for (const std::string& column : ArrayColumns(rows, 32)) p.Add(column);
    return conn.Exec(core.Sql(many.c_str()), p, "EnqueueBatch");
  };
  const Result<PgResult> r = insert();
  if (r.ok()) return Status::Ok();
  if (r.status().code() == StatusCode::kAlreadyExists && rows.size() == 1) {
    return Status::AlreadyExists("Enqueue: job id " + rows.front().value(0) + " already exists");
  }
  return r.status();
}

std::string RawInputToText(std::string_view raw) {
  if (raw.find('\0') == std::string_view::npos && ::jobpact::internal::IsValidUtf8(raw) &&
      raw.substr(0, kHexRawMarker.size()) != kHexRawMarker) {
    return std::string(raw);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out(kHexRawMarker);
  out.reserve(kHexRawMarker.size() + 2 * raw.size());
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

std::string RawInputFromText(std::string text) {
  if (text.compare(0, kHexRawMarker.size(), kHexRawMarker) != 0) return text;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  const std::size_t n = text.size() - kHexRawMarker.size();
  out.reserve(n / 2);
  for (std::size_t i = kHexRawMarker.size(); i + 1 < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    // Not this store's writing (a hand edit): kept as it was found.
    if (hi < 0 || lo < 0) return text;
    out += static_cast<char>(hi * 16 + lo);
  }
  if (n % 2 != 0) return text;
  return out;
}

Result<JobRecord> ReadPgJobRow(const PgRow& row, bool with_history) {
  Result<JobRecord> rec = ReadJobRow(row, with_history);
  if (rec.ok() && rec->raw_input) rec->raw_input = RawInputFromText(std::move(*rec->raw_input));
  return rec;
}

Status PostgresQueueBackend::CheckDepthLimitsOn(Core& core, Connection& conn,
                                                const std::vector<JobChange>& jobs) {
  const auto per_queue = ::jobpact::internal::JobsPerQueue(jobs);
  if (per_queue.empty()) return Status::Ok();
  std::vector<std::string> queues;
  for (const auto& [queue, adding] : per_queue) queues.emplace_back(queue);
  // One round trip while none of the queues has a maximum depth. For each
  // that has one, an advisory lock per queue held to the end of the
  // transaction serializes its enqueues (READ COMMITTED would let two
  // count the same depth and both insert), then its waiting jobs are
  // counted (jobs_ready_by_queue, a range of a partial index) in a new
  // statement, whose snapshot sees what the lock's last holder committed.
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult limits,
      conn.Exec(core.Sql("SELECT subject, limit_value, pg_advisory_xact_lock(hashtext($2), "
                         "hashtext(subject)) FROM {t}control WHERE kind = 'max_queue_depth' AND "
                         "subject = ANY ($1::text[]) ORDER BY subject"),
                Params().Add(TextArray(queues)).Add(core.LockSpace("depth")), "Enqueue"));
  for (int row = 0; row < limits.rows(); ++row) {
    const std::string queue = limits.Text(row, 0);
    const std::int64_t limit = limits.Int(row, 1);
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult depth,
        conn.Exec(core.Sql("SELECT count(*) FROM {t}jobs WHERE queue = $1 AND status IN "
                           "('queued', 'retry_scheduled')"),
                  Params().Add(queue), "Enqueue"));
    std::int64_t adding = 0;
    for (const auto& [q, n] : per_queue) {
      if (q == queue) adding = n;
    }
    JOBPACT_RETURN_IF_ERROR(
        ::jobpact::internal::CheckQueueDepth(queue, depth.Int(0, 0), adding, limit));
  }
  return Status::Ok();
}

Result<std::vector<EnqueueResult>> PostgresQueueBackend::InsertOn(Core& core, Connection& conn,
                                                                  std::vector<JobChange>& jobs,
                                                                  const EnqueueOptions& options,
                                                                  TimePoint now) {
  for (const JobChange& job : jobs) JOBPACT_RETURN_IF_ERROR(CheckIndexable(job.record.envelope));
  std::vector<EnqueueResult> results;
  results.reserve(jobs.size());
  const std::int64_t now_ns = ToNs(now);
  // A dedup match is now - enqueued_at < window, so a zero window disables
  // dedup (the in-memory reference's rule).
  const bool dedup = options.dedup_window > Duration::zero();
  const std::int64_t window_start_ns = now_ns - ToNs(options.dedup_window);
  if (jobs.size() > 1) {
    // A batch is refused whole when any id is taken, even by a job that
    // would otherwise be a dedup duplicate (checked before any dedup).
    std::vector<std::string> ids;
    ids.reserve(jobs.size());
    for (const JobChange& c : jobs) ids.push_back(c.record.envelope.job_id);
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r, conn.Exec(core.Sql("SELECT job_id FROM {t}jobs WHERE job_id = ANY "
                                       "($1::text[]) ORDER BY job_id LIMIT 1"),
                              Params().Add(TextArray(ids)), "EnqueueBatch"));
    if (r.rows() > 0) {
      return Status::AlreadyExists("EnqueueBatch: job id " + r.Text(0, 0) + " already exists");
    }
  }
  JOBPACT_RETURN_IF_ERROR(CheckDepthLimitsOn(core, conn, jobs));
  // Jobs without a dedup check are inserted together, in one statement at
  // the end (one round trip for a batch, not one per job); a job with one
  // is checked and inserted at once, so a later job of the batch with the
  // same key sees it. Results keep the batch's order.
  results.resize(jobs.size());
  std::vector<Params> rows;
  std::set<std::string_view> batch_ids;
  bool inserted = false;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const JobRecord& rec = jobs[i].record;
    const Envelope& env = rec.envelope;
    if (!batch_ids.insert(env.job_id).second) {
      return Status::AlreadyExists("Enqueue: job id " + env.job_id + " already exists");
    }
    if (dedup && !env.dedup_key.empty()) {
      // Enqueues of one key queue here until this transaction ends, so two
      // concurrent ones cannot both miss each other.
      JOBPACT_RETURN_IF_ERROR(
          conn.Exec("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))",
                    Params().Add(core.LockSpace("dedup")).Add(env.dedup_key), "Enqueue")
              .status());
      // The most recent live job with this key within the window.
      JOBPACT_ASSIGN_OR_RETURN(
          PgResult r,
          conn.Exec(core.Sql("SELECT job_id, status FROM {t}jobs WHERE dedup_key = $1 AND "
                             "enqueued_at_ns > $2 AND status NOT IN ('discarded', 'failed', "
                             "'dead_lettered') ORDER BY enqueued_at_ns DESC, job_id DESC LIMIT 1"),
                    Params().Add(env.dedup_key).Add(window_start_ns), "Enqueue"));
      if (r.rows() > 0) {
        EnqueueResult& dup = results[i];
        dup.job_id = r.Text(0, 0);
        dup.duplicate = true;
        JOBPACT_ASSIGN_OR_RETURN(dup.status, ParseJobStatus(r.Text(0, 1)));
        continue;
      }
      JOBPACT_RETURN_IF_ERROR(InsertRows(core, conn, {InsertParams(jobs[i])}));
    } else {
      rows.push_back(InsertParams(jobs[i]));
    }
    inserted = true;
    results[i] = EnqueueResult{env.job_id, false, rec.status};
  }
  if (!rows.empty()) JOBPACT_RETURN_IF_ERROR(InsertRows(core, conn, rows));
  if (inserted) JOBPACT_RETURN_IF_ERROR(NotifyOn(core, conn));
  return results;
}

std::vector<Status> PostgresQueueBackend::WriteJobs(std::vector<JobWrite>& writes) {
  std::vector<Status> out(writes.size());
  // Writes without an effect cannot fail one another (a stale one matches
  // no row): all of them in one statement. With an effect, a savepoint per
  // write (below).
  bool plain = true;
  {
    std::set<std::string_view> ids;
    for (const JobWrite& w : writes) {
      plain = plain && w.effect == nullptr && ids.insert(w.change.record.envelope.job_id).second;
    }
  }
  if (plain) {
    Status batch = core_->Tx("Complete", [&](Connection& conn) -> Status {
      std::vector<const JobChange*> refs;
      for (const JobWrite& w : writes) refs.push_back(&w.change);
      std::vector<bool> matched;
      JOBPACT_RETURN_IF_ERROR(UpdateRows(conn, refs, {}, &matched));
      bool wake = false;
      for (std::size_t i = 0; i < writes.size(); ++i) {
        const JobChange& c = writes[i].change;
        if (!matched[i]) {
          out[i] = StaleError(conn, c, "write job");
          const StatusCode code = out[i].code();
          if (code != StatusCode::kAborted && code != StatusCode::kNotFound) return out[i];
        } else {
          out[i] = Status::Ok();
          if (c.placement == JobPlacement::kReady || c.placement == JobPlacement::kScheduled) {
            wake = true;
          }
        }
      }
      if (wake) JOBPACT_RETURN_IF_ERROR(Notify(conn));
      return Status::Ok();
    });
    if (!batch.ok()) std::fill(out.begin(), out.end(), batch);
    return out;
  }
  Status batch = core_->Tx("Complete", [&](Connection& conn) -> Status {
    std::fill(out.begin(), out.end(), Status::Ok());
    const std::int64_t now_ns = ToNs(core_->Now());
    bool wake = false;
    for (std::size_t i = 0; i < writes.size(); ++i) {
      const JobWrite& w = writes[i];
      const JobChange& c = w.change;
      // Each write commits or rolls back alone (a stale lease or a failed
      // effect), inside the one transaction of the batch.
      JOBPACT_RETURN_IF_ERROR(conn.Simple("SAVEPOINT jobpact_write", "Complete"));
      Status s = UpdateRow(conn, c);
      if (s.ok() && w.effect != nullptr) {
        // Inside the completion transaction, after the fence: the effect
        // commits iff this delivery's completion does.
        Status effect = ::jobpact::internal::Guarded("transactional_effect", [&] {
          return (*w.effect)(static_cast<void*>(conn.raw()));
        });
        if (effect.ok() && conn.tx_status() == PQTRANS_INERROR) {
          effect = Status::Internal("a statement of the effect failed (its error was not returned)");
        }
        if (!effect.ok()) {
          s = Status(effect.code(),
                     "Complete: the transactional effect failed, the completion of job " +
                         c.record.envelope.job_id + " was rolled back: " + effect.message());
        } else if (c.record.status == JobStatus::kSucceeded &&
                   !c.record.envelope.idempotency_key.empty()) {
          s = CompleteClaimOn(conn, c, now_ns);
        }
      }
      if (conn.broken()) {
        return Status::Unavailable("Complete: postgres " + core_->server() +
                                   ": connection lost; nothing of the batch was written" +
                                   (s.ok() ? std::string() : " (" + s.message() + ")"));
      }
      if (conn.tx_status() != PQTRANS_INTRANS && conn.tx_status() != PQTRANS_INERROR) {
        return Status::Internal("Complete: the transaction was ended inside a transactional effect");
      }
      if (s.ok()) {
        JOBPACT_RETURN_IF_ERROR(conn.Simple("RELEASE SAVEPOINT jobpact_write", "Complete"));
        const JobPlacement pl = c.placement;
        if (pl == JobPlacement::kReady || pl == JobPlacement::kScheduled) wake = true;
      } else {
        JOBPACT_RETURN_IF_ERROR(conn.Simple(
            "ROLLBACK TO SAVEPOINT jobpact_write; RELEASE SAVEPOINT jobpact_write", "Complete"));
        const StatusCode code = s.code();
        // The store's own failures fail the batch; a refused write fails
        // alone.
        if (code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted ||
            code == StatusCode::kDeadlineExceeded) {
          return s;
        }
      }
      out[i] = std::move(s);
    }
    if (wake) JOBPACT_RETURN_IF_ERROR(Notify(conn));
    return Status::Ok();
  });
  if (!batch.ok()) std::fill(out.begin(), out.end(), batch);
  return out;
}

Status PostgresQueueBackend::CompleteClaimOn(Connection& conn, const JobChange& c,
                                             std::int64_t now_ns) {
  // The claim this delivery holds (the runner's claim owner is the lease
  // token) is marked completed in the same transaction as the effect, so no
  // crash can separate "effect committed" from "key recorded". A key
  // claimed or completed by another owner means this delivery lost its
  // claim: the effect must not commit a second time for the key.
  const std::string& key = c.record.envelope.idempotency_key;
  const std::string& owner = c.expect.lease_token;
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult done,
      conn.Exec(core_->Sql("UPDATE {t}idempotency SET state = 'completed', result = $3, "
                           "expires_at_ns = $4 WHERE key = $1 AND owner = $2 AND state = "
                           "'in_progress'"),
                Params().Add(key).Add(owner).Add(c.record.result).Add(
                    now_ns + ToNs(core_->options().idempotency_retention)),
                "Complete"));
  if (done.affected() > 0) return Status::Ok();
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult other,
      conn.Exec(core_->Sql("SELECT owner, state FROM {t}idempotency WHERE key = $1 AND owner <> $2"),
                Params().Add(key).Add(owner), "Complete"));
  if (other.rows() > 0) {
    return Status::Aborted("Complete: the idempotency claim on key '" + key +
                           "' is no longer held by this delivery (" + other.Text(0, 1) + " by " +
                           other.Text(0, 0) + "): the completion of job " +
                           c.record.envelope.job_id +
                           " and its transactional effect were rolled back");
  }
  return Status::Ok();
}

Status PostgresQueueBackend::LoadLeaseLimits(Connection& conn, LeaseLimits* limits) {
  *limits = LeaseLimits();
  // Plans are the server's choice (custom ones, for the lease query):
  // forcing generic plans on this transaction saved the lease query's
  // planning but took 850 ms a lease with 1,000,000 jobs waiting, against
  // about 14 ms (a generic plan cannot know the batch size).
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult any,
      conn.Exec(core_->Sql("SELECT 1 FROM {t}control WHERE kind IN ('concurrency_limit', "
                           "'tenant_concurrency_limit') LIMIT 1"),
                Params(), "Dequeue"));
  if (any.rows() == 0) return Status::Ok();
  // Leases of a schema with concurrency limits or tenant caps are
  // serialized (an advisory lock held to COMMIT), so that two workers
  // cannot both take a type's or a tenant's last slot; what is running is
  // counted under the lock, in statements whose snapshots see what the
  // lock's last holder committed.
  JOBPACT_RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_xact_lock(hashtext($1), 0)",
                                    Params().Add(core_->LockSpace("limits")), "Dequeue")
                              .status());
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(core_->Sql("SELECT c.kind, c.subject, c.limit_value - CASE WHEN c.kind = "
                           "'concurrency_limit' THEN (SELECT count(*) FROM {t}jobs r WHERE "
                           "r.status = 'running' AND r.job_type = c.subject) ELSE 0 END FROM "
                           "{t}control c WHERE c.kind IN ('concurrency_limit', "
                           "'tenant_concurrency_limit')"),
                Params(), "Dequeue"));
  for (int i = 0; i < r.rows(); ++i) {
    if (r.Text(i, 0) == "concurrency_limit") {
      limits->type_room[r.Text(i, 1)] = r.Int(i, 2);
    } else {
      limits->tenant_cap[r.Text(i, 1)] = r.Int(i, 2);
    }
  }
  if (limits->tenant_cap.empty()) return Status::Ok();
  // The running jobs of each tenant of the capped queues
  // (jobs_running_tenant): as many rows as tenants with running jobs.
  std::vector<std::string> capped;
  for (const auto& [queue, cap] : limits->tenant_cap) capped.push_back(queue);
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult running,
      conn.Exec(core_->Sql("SELECT queue, tenant_id, count(*) FROM {t}jobs WHERE status = "
                           "'running' AND queue = ANY ($1::text[]) GROUP BY queue, tenant_id"),
                Params().Add(TextArray(capped)), "Dequeue"));
  for (int i = 0; i < running.rows(); ++i) {
    limits->tenant_running[{running.Text(i, 0), running.Text(i, 1)}] = running.Int(i, 2);
  }
  return Status::Ok();
}

bool PostgresQueueBackend::LeaseLimits::Fits(const std::string& job_type, const std::string& queue,
                                             const std::string& tenant) const {
  const auto type = type_room.find(job_type);
  if (type != type_room.end() && type->second <= 0) return false;
  const auto cap = tenant_cap.find(queue);
  if (cap == tenant_cap.end()) return true;
  const auto running = tenant_running.find({queue, tenant});
  return running == tenant_running.end() || running->second < cap->second;
}

void PostgresQueueBackend::LeaseLimits::Take(const std::string& job_type, const std::string& queue,
                                             const std::string& tenant) {
  const auto type = type_room.find(job_type);
  if (type != type_room.end()) --type->second;
  if (tenant_cap.count(queue) > 0) ++tenant_running[{queue, tenant}];
}

Status PostgresQueueBackend::LeaseJobs(const DequeueRequest& request, TimePoint now,
                                       std::vector<Delivery>* deliveries) {
  std::vector<Delivery>& out = *deliveries;
  const std::string queues = request.queues.empty() ? std::string() : TextArray(request.queues);
  Status s = core_->Tx("Dequeue", [&](Connection& conn) -> Status {
    out.clear();
    const std::int64_t now_ns = ToNs(now);
    // How many more jobs each limited type, and each tenant of a capped
    // queue, may start: the lease query keeps out those already at their
    // limit; this keeps one batch from taking them past it.
    LeaseLimits limits;
    JOBPACT_RETURN_IF_ERROR(LoadLeaseLimits(conn, &limits));
    // Each queue's turn as the lease query read it, and the tenant it
    // served last in this lease (rows come in turn order).
    std::map<std::string, std::string, std::less<>> turn_read;
    std::map<std::string, std::string, std::less<>> served_last;
    for (int round = 0; round < 8 && static_cast<int>(out.size()) < request.max_jobs; ++round) {
      Params p;
      p.Add(now_ns).Add(request.max_jobs - static_cast<int>(out.size()));
      if (!queues.empty()) p.Add(queues);
      JOBPACT_ASSIGN_OR_RETURN(
          PgResult rows, conn.Exec(queues.empty() ? lease_any_ : lease_some_, p, "Dequeue"));
      if (rows.rows() == 0) break;
      bool ask_again = false;  // A row was quarantined or passed over.
      std::vector<JobChange> changes;
      changes.reserve(static_cast<std::size_t>(rows.rows()));
      for (int i = 0; i < rows.rows(); ++i) {
        const PgRow row(rows, i);
        const std::string queue = row.Text(::jobpact::internal::kColQueue);
        const std::string tenant = row.Text(kColLeaseTenant);
        turn_read.emplace(queue, row.Text(kColLeaseTurn));
        const std::string job_type = row.Text(kColJobType);
        if (!limits.Fits(job_type, queue, tenant)) {
          ask_again = true;  // The next query leaves its type or tenant out.
          continue;
        }
        bool quarantined = false;
        JOBPACT_ASSIGN_OR_RETURN(
            JobRecord rec,
            DecodeOrQuarantine(conn, row, now, /*with_history=*/false, &quarantined));
        if (quarantined) {
          ask_again = true;
          continue;
        }
        limits.Take(job_type, queue, tenant);
        served_last[queue] = tenant;
        // Lease tokens are "<worker>:<epoch>:<nonce>": unique per delivery,
        // since a job's epoch grows with every delivery.
        std::string token =
            request.worker_id + ":" + std::to_string(rec.epoch + 1) + ":" + core_->NewNonce();
        JOBPACT_ASSIGN_OR_RETURN(JobChange c, engine::Deliver(rec, std::move(token), now));
        changes.push_back(std::move(c));
      }
      // Every delivery of the round in one statement; the delivery's history
      // entry also names the worker. The rows are locked by this
      // transaction, so each must match.
      if (!changes.empty()) {
        std::vector<const JobChange*> refs;
        for (const JobChange& c : changes) refs.push_back(&c);
        std::vector<bool> matched;
        JOBPACT_RETURN_IF_ERROR(UpdateRows(conn, refs, request.worker_id, &matched));
        for (bool m : matched) {
          if (!m) return Status::Internal("Dequeue: a leased job changed under its row lock");
        }
      }
      for (JobChange& c : changes) {
        Delivery d;
        d.lease = Lease{c.record.envelope.job_id, c.record.lease_token, c.record.epoch,
                        c.record.lease_expires_at, c.record.cancel_requested};
        d.job = std::move(c.record);
        d.job.history = std::move(c.append);
        out.push_back(std::move(d));
      }
      if (!ask_again) break;
    }
    // Whose turn it is next: the tenant each queue served last, written only
    // where it changed (a queue whose jobs have no tenants never writes).
    for (const auto& [queue, tenant] : served_last) {
      const auto read = turn_read.find(queue);
      if (read != turn_read.end() && read->second == tenant) continue;
      JOBPACT_RETURN_IF_ERROR(
          conn.Exec(core_->Sql("INSERT INTO {t}tenant_turns (queue, last_tenant) VALUES ($1, $2) "
                               "ON CONFLICT (queue) DO UPDATE SET last_tenant = "
                               "excluded.last_tenant"),
                    Params().Add(queue).Add(tenant), "Dequeue")
              .status());
    }
    return Status::Ok();
  });
  if (!s.ok()) out.clear();
  return s;
}

Result<Lease> PostgresQueueBackend::RenewLease(const Lease& lease, TimePoint expires_at,
                                               std::string_view checkpoint, TimePoint now) {
  Lease renewed = lease;
  JOBPACT_PG_RETURN_IF_ERROR(core_->Tx("Renew", [&](Connection& conn) -> Status {
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core_->Sql("UPDATE {t}jobs SET lease_expires_at_ns = $4, updated_at_ns = $5, "
                             "checkpoint = coalesce($6, checkpoint) WHERE job_id = $1 AND status "
                             "= 'running' AND epoch = $2 AND lease_token = $3 RETURNING "
                             "cancel_requested"),
                  Params()
                      .Add(lease.job_id)
                      .Add(lease.epoch)
                      .Add(lease.token)
                      .Add(ToNs(expires_at))
                      .Add(ToNs(now))
                      .AddOrNull(checkpoint),
                  "Renew"));
    if (r.rows() == 0) {
      JobChange probe;
      probe.record.envelope.job_id = lease.job_id;
      probe.expect.epoch = lease.epoch;
      return StaleError(conn, probe, "Renew");
    }
    renewed.cancel_requested = r.Int(0, 0) != 0;
    renewed.expires_at = expires_at;
    return Status::Ok();
  }));
  return renewed;
}

Result<std::vector<JobChange>> PostgresQueueBackend::RecoverJobs(int max_recoveries,
                                                                 TimePoint now) {
  std::vector<JobChange> recovered;
  JOBPACT_PG_RETURN_IF_ERROR(core_->Tx("RecoverExpiredLeases", [&](Connection& conn) -> Status {
    recovered.clear();
    // Any worker may reclaim; rows another worker is reclaiming (or
    // completing) right now are skipped, not waited for.
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult rows,
        conn.Exec(core_->Sql("SELECT " JOBPACT_PG_JOB_COLUMNS
                             " FROM {t}jobs WHERE status = 'running' AND lease_expires_at_ns <= "
                             "$1 ORDER BY lease_expires_at_ns, job_id FOR UPDATE SKIP LOCKED"),
                  Params().Add(ToNs(now)), "RecoverExpiredLeases"));
    bool wake = false;
    for (int i = 0; i < rows.rows(); ++i) {
      bool quarantined = false;
      JOBPACT_ASSIGN_OR_RETURN(
          JobRecord rec,
          DecodeOrQuarantine(conn, PgRow(rows, i), now, /*with_history=*/false, &quarantined));
      if (quarantined) continue;
      JOBPACT_ASSIGN_OR_RETURN(JobChange c, engine::RecoverLease(rec, max_recoveries, now));
      JOBPACT_RETURN_IF_ERROR(UpdateRow(conn, c));
      if (c.placement == JobPlacement::kReady) wake = true;
      recovered.push_back(std::move(c));
    }
    if (wake) JOBPACT_RETURN_IF_ERROR(Notify(conn));
    return Status::Ok();
  }));
  return recovered;
}

Result<std::vector<EnqueueResult>> PostgresBackend::Core::EnqueueOn(
    Connection& conn, const std::vector<const Envelope*>& envs, const EnqueueOptions& options) {
  // The caller's own transaction (EnqueueInTransaction): the same engine
  // step and the same insert as StoreBackend::Enqueue.
  const TimePoint now = Now();
  std::vector<JobChange> jobs;
  jobs.reserve(envs.size());
  for (const Envelope* env : envs) {
    Result<JobChange> c = engine::NewJob(*env, now);
    if (!c.ok()) return Status(c.status().code(), "Enqueue: " + c.status().message());
    jobs.push_back(std::move(*c));
  }
  return PostgresQueueBackend::InsertOn(*this, conn, jobs, options, now);
}

std::shared_ptr<StoreBackend> PostgresBackend::Core::MakeQueue(std::shared_ptr<Core> core) {
  return std::make_shared<PostgresQueueBackend>(std::move(core));
}

}  // namespace postgres
}  // namespace jobpact
