// The SQLite queue store, operator side (queue_store.h): cancel, load,
// query, the dedup lookup, purges, trims and stats.
#include "src/backends/sqlite/queue_store.h"

namespace jobpact {
namespace sqlite {

Status SqliteQueueBackend::RequestCancel(const JobChange& c) {
  return core_->Write("Cancel", [&](Connection& conn) -> Status {
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("UPDATE jobpact_jobs SET cancel_requested = 1, updated_at_ns = ?5, audit = "
                     "json_insert(audit, '$[#]', ?6) WHERE job_id = ?1 AND status = ?2 AND "
                     "epoch = ?3 AND coalesce(lease_token, '') = ?4"));
    Stmt st(raw);
    st.Bind(1, c.record.envelope.job_id)
        .Bind(2, JobStatusName(c.expect.status))
        .Bind(3, c.expect.epoch)
        .Bind(4, c.expect.lease_token)
        .Bind(5, ToNs(c.record.updated_at))
        .Bind(6, c.record.audit.empty() ? std::string() : c.record.audit.back());
    JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Cancel"));
    if (sqlite3_changes(conn.db()) == 0) return StaleError(conn, c, "Cancel");
    return Status::Ok();
  });
}

Result<std::optional<JobRecord>> SqliteQueueBackend::LoadJob(std::string_view job_id) {
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
    Result<JobRecord> r = ReadJobRow(st);
    if (r.ok()) {
      rec = std::move(*r);
    } else {
      // Shown as it will be quarantined by the next pass that meets it.
      JobChange q = engine::Quarantine(st.Text(kColJobId), RawRow(st), r.status().message(),
                                       core_->Now());
      q.record.history = q.append;
      rec = std::move(q.record);
    }
    return Status::Ok();
  }));
  return rec;
}

Result<std::vector<JobRecord>> SqliteQueueBackend::QueryJobs(const JobQuery& q) {
  std::vector<JobRecord> out;
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobpact_jobs WHERE 1";
  // The DLQ listing filters and orders on dead_lettered_at_ns (its partial
  // index); other listings on finished_at_ns.
  const bool dlq = q.status == JobStatus::kDeadLettered;
  const char* finished = dlq ? "dead_lettered_at_ns" : "finished_at_ns";
  if (q.status) sql += " AND status = ?1";
  if (q.job_type) sql += " AND job_type = ?2";
  if (q.queue) sql += " AND queue = ?3";
  if (q.after_job_id) sql += " AND job_id > ?9";
  if (q.reason) sql += " AND reason = ?4";
  if (q.failure_class) sql += " AND failure_class = ?5";
  if (q.finished_after) sql += std::string(" AND ") + finished + " >= ?6";
  if (q.finished_before) sql += std::string(" AND ") + finished + " < ?7";
  sql += q.by_finished_at ? std::string(" ORDER BY ") + finished + ", job_id" : " ORDER BY job_id";
  sql += " LIMIT ?8";
  JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Read("QueryJobs", false, [&](Connection& conn) -> Status {
    out.clear();
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.PrepareDynamic(sql));
    Stmt st(raw);
    if (q.status) st.Bind(1, JobStatusName(*q.status));
    if (q.job_type) st.Bind(2, *q.job_type);
    if (q.queue) st.Bind(3, *q.queue);
    if (q.after_job_id) st.Bind(9, *q.after_job_id);
    if (q.reason) st.Bind(4, *q.reason);
    if (q.failure_class) st.Bind(5, FailureClassName(*q.failure_class));
    if (q.finished_after) st.Bind(6, ToNs(*q.finished_after));
    if (q.finished_before) st.Bind(7, ToNs(*q.finished_before));
    st.Bind(8, static_cast<std::int64_t>(
                   std::min<std::size_t>(q.limit, static_cast<std::size_t>(INT64_MAX))));
    while (true) {
      int rc = st.Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return conn.Error(rc, "QueryJobs");
      Result<JobRecord> r = ReadJobRow(st);
      if (r.ok()) {
        out.push_back(std::move(*r));
      } else {
        JobChange quarantined = engine::Quarantine(st.Text(kColJobId), RawRow(st),
                                                   r.status().message(), core_->Now());
        quarantined.record.history = quarantined.append;
        out.push_back(std::move(quarantined.record));
      }
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<std::string>> SqliteQueueBackend::FindDuplicateJob(
    std::string_view dedup_key, std::string_view self_job_id, TimePoint since) {
  std::optional<std::string> found;
  JOBPACT_SQLITE_RETURN_IF_ERROR(
      core_->Read("FindDuplicate", false, [&](Connection& conn) -> Status {
        JOBPACT_ASSIGN_OR_RETURN(found, FindDuplicateOn(conn, dedup_key, self_job_id, since));
        return Status::Ok();
      }));
  return found;
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

Result<int> SqliteQueueBackend::DeleteJobs(JobPlacement placement, TimePoint older_than) {
  if (placement == JobPlacement::kDeadLettered) {
    return PurgeInChunks("PurgeDeadLetters",
                         "DELETE FROM jobpact_jobs WHERE rowid IN (SELECT rowid FROM "
                         "jobpact_jobs WHERE status = 'dead_lettered' AND "
                         "dead_lettered_at_ns < ?1 LIMIT 1000)",
                         older_than);
  }
  if (placement == JobPlacement::kFinal) {
    return PurgeInChunks(
        "PurgeFinished",
        "DELETE FROM jobpact_jobs WHERE rowid IN (SELECT rowid FROM jobpact_jobs WHERE "
        "(" JOBPACT_SQLITE_FINAL_JOB ") AND finished_at_ns < ?1 LIMIT 1000)",
        older_than);
  }
  return Status::InvalidArgument("DeleteJobs: only DLQ entries and final jobs are purged");
}

Result<int> SqliteQueueBackend::DeleteSurplusJobs(JobStatus status, std::int64_t keep,
                                                  TimePoint dedup_floor, int limit) {
  // Read first, outside the write lock: per job type of `status`, its
  // newest job past the `keep` newest (one index seek per type, then an
  // index walk of `keep` entries). Then one write transaction deletes, per
  // type, the oldest jobs up to that one. The cutoff stays right however
  // the store changed in between: jobs finishing since are newer (the kept
  // ones only grow), and a purge by age removes the oldest first.
  constexpr const char* kFinal = "(" JOBPACT_SQLITE_FINAL_JOB ")";
  const std::string st(JobStatusName(status));
  std::vector<jobpact::internal::RetentionCutoff> cutoffs;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Read("TrimFinished", true, [&](Connection& conn) -> Status {
    static const std::string next_type = std::string("SELECT job_type FROM jobpact_jobs WHERE ") +
                                         kFinal +
                                         " AND status = ?1 AND job_type > ?2 "
                                         "ORDER BY status, job_type LIMIT 1";
    static const std::string cutoff =
        std::string("SELECT finished_at_ns, job_id FROM jobpact_jobs WHERE ") + kFinal +
        " AND status = ?1 AND job_type = ?2 "
        "ORDER BY status DESC, job_type DESC, finished_at_ns DESC, job_id DESC "
        "LIMIT 1 OFFSET ?3";
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw_type, conn.Prepare(next_type.c_str()));
    Stmt types(raw_type);
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw_cut, conn.Prepare(cutoff.c_str()));
    Stmt cut(raw_cut);
    std::string type;
    while (true) {
      types.Bind(1, st).Bind(2, type);
      const int rc = types.Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return conn.Error(rc, "TrimFinished");
      type = types.Text(0);
      sqlite3_reset(types.get());
      cut.Bind(1, st).Bind(2, type).Bind(3, keep);
      const int crc = cut.Step();
      if (crc == SQLITE_ROW) {
        cutoffs.push_back(jobpact::internal::RetentionCutoff{type, cut.Int(0), cut.Text(1)});
      } else if (crc != SQLITE_DONE) {
        return conn.Error(crc, "TrimFinished");
      }
      sqlite3_reset(cut.get());
    }
    return Status::Ok();
  }));
  if (cutoffs.empty()) return 0;
  int deleted = 0;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("TrimFinished", [&](Connection& conn) -> Status {
    static const std::string del =
        std::string(
            "DELETE FROM jobpact_jobs WHERE rowid IN (SELECT rowid FROM (SELECT rowid, "
            "finished_at_ns, dedup_key FROM jobpact_jobs WHERE ") +
        kFinal +
        " AND status = ?1 AND job_type = ?2 AND (finished_at_ns < ?3 OR (finished_at_ns = ?3 "
        "AND job_id <= ?4)) ORDER BY status, job_type, finished_at_ns, job_id LIMIT ?5) WHERE "
        "finished_at_ns < ?6 OR dedup_key IS NULL)";
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(del.c_str()));
    Stmt st_del(raw);
    deleted = 0;
    for (const jobpact::internal::RetentionCutoff& c : cutoffs) {
      if (deleted >= limit) break;
      st_del.Bind(1, st).Bind(2, c.job_type).Bind(3, c.finished_at_ns).Bind(4, c.job_id);
      st_del.Bind(5, limit - deleted).Bind(6, ToNs(dedup_floor));
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st_del, "TrimFinished"));
      deleted += sqlite3_changes(conn.db());
      sqlite3_reset(st_del.get());
    }
    return Status::Ok();
  }));
  return deleted;
}

Result<QueueStats> SqliteQueueBackend::ReadStats(TimePoint now) {
  QueueStats stats;
  for (JobStatus s : kAllJobStatuses) stats.by_status[s] = 0;
  JOBPACT_SQLITE_RETURN_IF_ERROR(
      core_->Read("Stats", /*snapshot=*/true, [&](Connection& conn) -> Status {
        const std::int64_t now_ns = ToNs(now);
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


}  // namespace sqlite
}  // namespace jobpact
