// The SQLite queue store (queue_store.h), what its files share: stale
// errors, conditional row writes and quarantine; and enqueue (depth limits,
// dedup, insert), the caller-transaction enqueue and the factory.
#include "src/backends/sqlite/queue_store.h"

namespace jobpact {
namespace sqlite {

// FindDuplicateJob's query, through `conn` (inside a transaction).
Result<std::optional<std::string>> FindDuplicateOn(Connection& conn, std::string_view dedup_key,
                                                   std::string_view self_job_id, TimePoint since) {
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT job_id FROM jobpact_jobs WHERE dedup_key = ?1 AND "
                   "job_id != ?2 AND (status = 'running' OR (status = 'succeeded' "
                   "AND finished_at_ns >= ?3)) ORDER BY enqueued_at_ns, job_id "
                   "LIMIT 1"));
  Stmt st(raw);
  st.Bind(1, dedup_key).Bind(2, self_job_id).Bind(3, ToNs(since));
  const int rc = st.Step();
  if (rc == SQLITE_ROW) return std::optional<std::string>(st.Text(0));
  if (rc != SQLITE_DONE) return conn.Error(rc, "FindDuplicate");
  return std::optional<std::string>();
}

Status SqliteQueueBackend::StaleError(Connection& conn, const JobChange& c,
                                      std::string_view what) {
  const std::string& id = c.record.envelope.job_id;
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT status, epoch, lease_token FROM jobpact_jobs WHERE job_id = ?1"));
  Stmt st(raw);
  st.Bind(1, id);
  int rc = st.Step();
  if (rc == SQLITE_DONE) return Status::NotFound(std::string(what) + ": no job " + id);
  if (rc != SQLITE_ROW) return conn.Error(rc, what);
  return Status::Aborted(std::string(what) + ": stale lease on job " + id + " (lease epoch " +
                         std::to_string(c.expect.epoch) + ", job epoch " +
                         std::to_string(st.Int(1)) + ", status " + st.Text(0) +
                         "): the job was taken over or finished");
}

Status SqliteQueueBackend::UpdateRow(Connection& conn, const JobChange& c,
                                     std::string_view worker) {
  // Every change of a stored job adds one history entry at most (the
  // engine's); more would be dropped here.
  if (c.append.size() > 1) {
    return Status::Internal("write job: more than one history entry in one change");
  }
  // The entry is appended as text: the stored array is compact JSON that
  // only this library writes (HistoryJson, and this), and ?25 one object of
  // HistoryEntryJson, so "[...]" + "," + entry + "]" is the array with the
  // entry appended, without parsing the history (json_insert parsed it,
  // and json_array_length again, at every lease and every completion: most
  // of a SQLite drain's JSON work). Only an array long enough to hold
  // kMaxHistory entries (each at least kMinEntry characters) is counted, and
  // its oldest entry dropped, with the JSON functions.
  constexpr std::size_t kMinEntry = 40;  // {"from":"","to":"","at_ns":0,"reason":""}
  static const std::string with_entry =
      std::string("UPDATE jobpact_jobs SET ") + kUpdateSet + ", history = CASE WHEN length(history) >= " +
      std::to_string(kMaxHistory * kMinEntry) + " AND json_array_length(history) >= " +
      std::to_string(kMaxHistory) +
      " THEN json_insert(json_remove(history, '$[0]'), '$[#]', json(?25)) WHEN history = '[]' "
      "THEN '[' || ?25 || ']' ELSE substr(history, 1, length(history) - 1) || ',' || ?25 || "
      "']' END WHERE job_id = ?1 AND status = ?2 AND epoch = ?3 AND coalesce(lease_token, '') "
      "= ?4";
  static const std::string without_entry =
      std::string("UPDATE jobpact_jobs SET ") + kUpdateSet +
      " WHERE job_id = ?1 AND status = ?2 AND epoch = ?3 AND coalesce(lease_token, '') = ?4";
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare(c.append.empty() ? without_entry.c_str() : with_entry.c_str()));
  {
    Stmt st(raw);
    st.Bind(1, c.record.envelope.job_id)
        .Bind(2, JobStatusName(c.expect.status))
        .Bind(3, c.expect.epoch)
        .Bind(4, c.expect.lease_token);
    BindRecord(st, c.record);
    if (!c.append.empty()) st.Bind(25, HistoryEntryJson(c.append.back(), worker));
    JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "write job"));
  }
  if (sqlite3_changes(conn.db()) == 0) return StaleError(conn, c, "write job");
  return Status::Ok();
}

Status SqliteQueueBackend::WriteQuarantine(Connection& conn, const JobChange& q) {
  // Connection::Prepare caches by the SQL's address: the text must outlive
  // the connection.
  static const std::string sql = std::string("UPDATE jobpact_jobs SET ") + kUpdateSet +
                                 ", queue = '', raw_envelope = ?25, history = ?26 WHERE job_id = ?1";
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql.c_str()));
  Stmt st(raw);
  st.Bind(1, q.record.envelope.job_id);
  BindRecord(st, q.record);
  st.Bind(25, *q.record.raw_input).Bind(26, HistoryJson(q.append));
  return StepDone(conn, st, "quarantine");
}

Status SqliteQueueBackend::CheckDepthLimitsOn(Connection& conn, const std::vector<JobChange>& jobs) {
  // One indexed lookup per enqueue while no queue has a maximum depth; a
  // count of the queue's waiting jobs (jobpact_jobs_ready_by_tenant, a range
  // of a covering index) for each queue that has one. Inside the enqueue's
  // write transaction, so concurrent enqueues cannot overshoot.
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT subject, limit_value FROM jobpact_control WHERE kind = "
                   "'max_queue_depth'"));
  std::map<std::string, std::int64_t, std::less<>> limits;
  {
    Stmt st(raw);
    while (true) {
      int rc = st.Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return conn.Error(rc, "Enqueue: read the maximum queue depths");
      limits.emplace(st.Text(0), st.Int(1));
    }
  }
  if (limits.empty()) return Status::Ok();
  for (const auto& [queue, adding] : ::jobpact::internal::JobsPerQueue(jobs)) {
    auto limit = limits.find(queue);
    if (limit == limits.end()) continue;
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * count,
        conn.Prepare("SELECT count(*) FROM jobpact_jobs WHERE queue = ?1 AND status IN "
                     "('queued', 'retry_scheduled')"));
    Stmt st(count);
    st.Bind(1, queue);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return conn.Error(rc, "Enqueue: count the queue's depth");
    JOBPACT_RETURN_IF_ERROR(
        ::jobpact::internal::CheckQueueDepth(queue, st.Int(0), adding, limit->second));
  }
  return Status::Ok();
}

Result<std::vector<EnqueueResult>> SqliteQueueBackend::InsertOn(Connection& conn,
                                                                std::vector<JobChange>& jobs,
                                                                const EnqueueOptions& options,
                                                                TimePoint now) {
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
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw,
                             conn.Prepare("SELECT 1 FROM jobpact_jobs WHERE job_id = ?1"));
    for (const JobChange& c : jobs) {
      Stmt st(raw);
      st.Bind(1, c.record.envelope.job_id);
      int rc = st.Step();
      if (rc == SQLITE_ROW) {
        return Status::AlreadyExists("EnqueueBatch: job id " + c.record.envelope.job_id +
                                     " already exists");
      }
      if (rc != SQLITE_DONE) return conn.Error(rc, "EnqueueBatch");
    }
  }
  JOBPACT_RETURN_IF_ERROR(CheckDepthLimitsOn(conn, jobs));
  for (const JobChange& c : jobs) {
    const JobRecord& r = c.record;
    const Envelope& env = r.envelope;
    if (dedup && !env.dedup_key.empty()) {
      // The most recent live job with this key within the window
      // (comparisons, not NOT IN: see JOBPACT_SQLITE_FINAL_JOB).
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("SELECT job_id, status FROM jobpact_jobs WHERE dedup_key = ?1 AND "
                       "enqueued_at_ns > ?2 AND status <> 'discarded' AND status <> 'failed' AND "
                       "status <> 'dead_lettered' ORDER BY enqueued_at_ns DESC, job_id DESC LIMIT 1"));
      Stmt st(raw);
      st.Bind(1, env.dedup_key).Bind(2, window_start_ns);
      int rc = st.Step();
      if (rc == SQLITE_ROW) {
        EnqueueResult dup;
        dup.job_id = st.Text(0);
        dup.duplicate = true;
        JOBPACT_ASSIGN_OR_RETURN(dup.status, ParseJobStatus(st.Text(1)));
        results.push_back(std::move(dup));
        continue;
      }
      if (rc != SQLITE_DONE) return conn.Error(rc, "Enqueue");
    }
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare(
            "INSERT INTO jobpact_jobs (job_id, job_type, queue, priority, visibility_timeout_ns, "
            "dedup_key, envelope, raw_envelope, history, status, attempt, max_attempts, "
            "ready_at_ns, updated_at_ns, finished_at_ns, epoch, lease_recoveries, lock_waits, "
            "previous_delay_ns, checkpoint, failure_class, failure_code, failure_message, "
            "reason, result, lease_token, lease_expires_at_ns, dead_lettered_at_ns, audit, "
            "enqueued_at_ns) VALUES (?1, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?5, ?6, ?7, "
            "?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, "
            "?24, ?34)"));
    Stmt st(raw);
    st.Bind(1, env.job_id);
    BindRecord(st, r);
    // Quarantined input keeps no envelope of its own beyond what could be
    // read of it (job_id, job_type, trace_id).
    st.Bind(26, env.job_type)
        .Bind(27, env.queue)
        .Bind(28, env.priority)
        .Bind(29, ToNs(env.visibility_timeout))
        .BindOrNull(30, env.dedup_key)
        .Bind(31, SerializeEnvelope(env))
        .Bind(33, HistoryJson(c.append))
        .Bind(34, ToNs(r.enqueued_at));
    if (r.raw_input) {
      st.Bind(32, *r.raw_input);
    } else {
      st.BindNull(32);
    }
    int rc = st.Step();
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      return Status::AlreadyExists("Enqueue: job id " + env.job_id + " already exists");
    }
    if (rc != SQLITE_DONE) return conn.Error(rc, "Enqueue");
    results.push_back(EnqueueResult{env.job_id, false, r.status});
  }
  return results;
}


Result<std::vector<EnqueueResult>> SqliteBackend::Core::EnqueueOn(
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
  return SqliteQueueBackend::InsertOn(conn, jobs, options, now);
}

std::shared_ptr<StoreBackend> SqliteBackend::Core::MakeQueue(std::shared_ptr<Core> core) {
  return std::make_shared<SqliteQueueBackend>(std::move(core));
}

}  // namespace sqlite
}  // namespace jobpact
