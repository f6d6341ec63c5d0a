// The PostgreSQL queue store, enqueue (queue_store.h): the insert of new
// jobs' rows, with the index size check, dedup and the maximum queue
// depths; and enqueue in the caller's transaction (EnqueueInTransaction).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/transitions.h"
#include "src/backends/postgres/queue_store.h"
#include "src/internal/backpressure.h"
#include "src/internal/job_row_codec.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using internal::Connection;
using internal::Params;
using internal::PgResult;
using ::jobpact::internal::HistoryJson;
using ::jobpact::internal::ToNs;
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

// A new job's row: its id, its record (AddRecord), then the columns fixed
// at enqueue, in the order of JOBPACT_PG_INSERT_COLUMNS.
Params InsertParams(const JobChange& c) {
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

}  // namespace

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
    JOBPACT_ASSIGN_OR_RETURN(PgResult r,
                             conn.Exec(core.Sql("SELECT job_id FROM {t}jobs WHERE job_id = ANY "
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
      JOBPACT_RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))",
                                        Params().Add(core.LockSpace("dedup")).Add(env.dedup_key),
                                        "Enqueue")
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

}  // namespace postgres
}  // namespace jobpact
