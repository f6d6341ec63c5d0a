// The PostgreSQL queue store, operator side (queue_store.h): cancel, load,
// query, the dedup lookup, purges and stats.
#include "src/backends/postgres/queue_store.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/transitions.h"
#include "src/internal/job_row_codec.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using ::jobpact::internal::DurationFromNs;
using ::jobpact::internal::kColJobId;
using ::jobpact::internal::RawRow;
using ::jobpact::internal::ReadJobRow;
using ::jobpact::internal::ToNs;
using internal::Connection;
using internal::Params;
using internal::PgResult;
using internal::PgRow;
using Core = PostgresBackend::Core;

Status PostgresQueueBackend::RequestCancel(const JobChange& c) {
  return core_->Tx("Cancel", [&](Connection& conn) -> Status {
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core_->Sql("UPDATE {t}jobs SET cancel_requested = 1, updated_at_ns = $5, audit "
                             "= audit || to_jsonb($6::text) WHERE job_id = $1 AND status = $2 "
                             "AND epoch = $3 AND coalesce(lease_token, '') = $4"),
                  Params()
                      .Add(c.record.envelope.job_id)
                      .Add(JobStatusName(c.expect.status))
                      .Add(c.expect.epoch)
                      .Add(c.expect.lease_token)
                      .Add(ToNs(c.record.updated_at))
                      .Add(c.record.audit.empty() ? std::string() : c.record.audit.back()),
                  "Cancel"));
    if (r.affected() == 0) return StaleError(conn, c, "Cancel");
    return Status::Ok();
  });
}

Result<std::optional<JobRecord>> PostgresQueueBackend::LoadJob(std::string_view job_id) {
  std::optional<JobRecord> rec;
  JOBPACT_PG_RETURN_IF_ERROR(core_->Read("Get", [&](Connection& conn) -> Status {
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core_->Sql("SELECT " JOBPACT_PG_JOB_COLUMNS " FROM {t}jobs WHERE job_id = $1"),
                  Params().Add(job_id), "Get"));
    if (r.rows() == 0) return Status::Ok();
    const PgRow row(r, 0);
    Result<JobRecord> decoded = ReadPgJobRow(row);
    if (decoded.ok()) {
      rec = std::move(*decoded);
    } else {
      // Shown as it will be quarantined by the next pass that meets it.
      JobChange q = engine::Quarantine(row.Text(kColJobId), RawRow(row),
                                       decoded.status().message(), core_->Now());
      q.record.history = q.append;
      rec = std::move(q.record);
    }
    return Status::Ok();
  }));
  return rec;
}

Result<std::vector<JobRecord>> PostgresQueueBackend::QueryJobs(const JobQuery& q) {
  std::vector<JobRecord> out;
  // The DLQ listing filters and orders on dead_lettered_at_ns (its partial
  // index); other listings on finished_at_ns.
  const bool dlq = q.status == JobStatus::kDeadLettered;
  const std::string finished = dlq ? "dead_lettered_at_ns" : "finished_at_ns";
  std::string sql = "SELECT " JOBPACT_PG_JOB_COLUMNS " FROM {t}jobs WHERE true";
  Params p;
  auto param = [&](auto value) {
    p.Add(value);
    return "$" + std::to_string(p.size());
  };
  if (q.status) sql += " AND status = " + param(JobStatusName(*q.status));
  if (q.job_type) sql += " AND job_type = " + param(std::string_view(*q.job_type));
  if (q.queue) sql += " AND queue = " + param(std::string_view(*q.queue));
  if (q.after_job_id) sql += " AND job_id > " + param(std::string_view(*q.after_job_id));
  if (q.reason) sql += " AND reason = " + param(std::string_view(*q.reason));
  if (q.failure_class) sql += " AND failure_class = " + param(FailureClassName(*q.failure_class));
  if (q.finished_after) sql += " AND " + finished + " >= " + param(ToNs(*q.finished_after));
  if (q.finished_before) sql += " AND " + finished + " < " + param(ToNs(*q.finished_before));
  sql += q.by_finished_at ? " ORDER BY " + finished + ", job_id" : " ORDER BY job_id";
  sql += " LIMIT " + param(static_cast<std::int64_t>(
                         std::min<std::size_t>(q.limit, static_cast<std::size_t>(INT64_MAX))));
  const std::string text = core_->SqlOf(sql);
  JOBPACT_PG_RETURN_IF_ERROR(core_->Read("QueryJobs", [&](Connection& conn) -> Status {
    out.clear();
    JOBPACT_ASSIGN_OR_RETURN(PgResult r, conn.Exec(text, p, "QueryJobs"));
    for (int i = 0; i < r.rows(); ++i) {
      const PgRow row(r, i);
      Result<JobRecord> decoded = ReadPgJobRow(row);
      if (decoded.ok()) {
        out.push_back(std::move(*decoded));
      } else {
        JobChange quarantined = engine::Quarantine(row.Text(kColJobId), RawRow(row),
                                                   decoded.status().message(), core_->Now());
        quarantined.record.history = quarantined.append;
        out.push_back(std::move(quarantined.record));
      }
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<std::string>> PostgresQueueBackend::FindDuplicateJob(
    std::string_view dedup_key, std::string_view self_job_id, TimePoint since) {
  std::optional<std::string> found;
  JOBPACT_PG_RETURN_IF_ERROR(core_->Read("FindDuplicate", [&](Connection& conn) -> Status {
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core_->Sql("SELECT job_id FROM {t}jobs WHERE dedup_key = $1 AND job_id <> $2 "
                             "AND " JOBPACT_PG_DEDUP_LIVE("") " ORDER BY enqueued_at_ns, job_id "
                             "LIMIT 1"),
                  Params().Add(dedup_key).Add(self_job_id).Add(ToNs(since)), "FindDuplicate"));
    if (r.rows() > 0) found = r.Text(0, 0);
    return Status::Ok();
  }));
  return found;
}

Result<int> PostgresQueueBackend::PurgeInChunks(std::string_view what, const char* sql,
                                                TimePoint older_than) {
  // Chunks of 1000 rows, each its own transaction, so a large purge never
  // holds many row locks for long.
  int total = 0;
  while (true) {
    int deleted = 0;
    JOBPACT_PG_RETURN_IF_ERROR(core_->Tx(what, [&](Connection& conn) -> Status {
      JOBPACT_ASSIGN_OR_RETURN(PgResult r,
                               conn.Exec(core_->Sql(sql), Params().Add(ToNs(older_than)), what));
      deleted = static_cast<int>(r.affected());
      return Status::Ok();
    }));
    total += deleted;
    if (deleted < 1000) return total;
  }
}

Result<int> PostgresQueueBackend::DeleteJobs(JobPlacement placement, TimePoint older_than) {
  if (placement == JobPlacement::kDeadLettered) {
    return PurgeInChunks("PurgeDeadLetters",
                         "DELETE FROM {t}jobs WHERE job_id IN (SELECT job_id FROM {t}jobs WHERE "
                         "status = 'dead_lettered' AND dead_lettered_at_ns < $1 LIMIT 1000 FOR "
                         "UPDATE SKIP LOCKED)",
                         older_than);
  }
  if (placement == JobPlacement::kFinal) {
    return PurgeInChunks("PurgeFinished",
                         "DELETE FROM {t}jobs WHERE job_id IN (SELECT job_id FROM {t}jobs WHERE "
                         "status IN ('succeeded', 'failed', 'discarded') AND finished_at_ns < $1 "
                         "LIMIT 1000 FOR UPDATE SKIP LOCKED)",
                         older_than);
  }
  return Status::InvalidArgument("DeleteJobs: only DLQ entries and final jobs are purged");
}

Result<int> PostgresQueueBackend::DeleteSurplusJobs(JobStatus status, std::int64_t keep,
                                                    TimePoint dedup_floor, int limit) {
  // As the SQLite store's: per job type of `status`, its newest job past
  // the `keep` newest, read first (an index seek per type, then a walk of
  // `keep` index entries), then one transaction deletes per type the oldest
  // up to it. Jobs finishing meanwhile are newer, and an age purge takes the
  // oldest first, so the cutoff read stays right. Rows another transaction
  // holds are skipped (SKIP LOCKED), like the purges'.
  const std::string st(JobStatusName(status));
  std::vector<jobpact::internal::RetentionCutoff> cutoffs;
  JOBPACT_PG_RETURN_IF_ERROR(core_->Read("TrimFinished", [&](Connection& conn) -> Status {
    const std::string next_type = core_->Sql(
        "SELECT job_type FROM {t}jobs WHERE status IN ('succeeded', 'failed', 'discarded') AND "
        "status = $1 AND job_type > $2 ORDER BY status, job_type LIMIT 1");
    const std::string cutoff = core_->Sql(
        "SELECT finished_at_ns, job_id FROM {t}jobs WHERE status IN ('succeeded', 'failed', "
        "'discarded') AND status = $1 AND job_type = $2 ORDER BY status DESC, job_type DESC, "
        "finished_at_ns DESC, job_id DESC LIMIT 1 OFFSET $3");
    cutoffs.clear();
    std::string type;
    while (true) {
      JOBPACT_ASSIGN_OR_RETURN(PgResult t,
                               conn.Exec(next_type, Params().Add(st).Add(type), "TrimFinished"));
      if (t.rows() == 0) break;
      type = t.Text(0, 0);
      JOBPACT_ASSIGN_OR_RETURN(
          PgResult c, conn.Exec(cutoff, Params().Add(st).Add(type).Add(keep), "TrimFinished"));
      if (c.rows() > 0)
        cutoffs.push_back(jobpact::internal::RetentionCutoff{type, c.Int(0, 0), c.Text(0, 1)});
    }
    return Status::Ok();
  }));
  if (cutoffs.empty()) return 0;
  int deleted = 0;
  JOBPACT_PG_RETURN_IF_ERROR(core_->Tx("TrimFinished", [&](Connection& conn) -> Status {
    const std::string del = core_->Sql(
        "WITH c AS (SELECT job_id, finished_at_ns, dedup_key FROM {t}jobs WHERE status IN "
        "('succeeded', 'failed', 'discarded') AND status = $1 AND job_type = $2 AND "
        "(finished_at_ns, job_id) <= ($3::bigint, $4::text COLLATE \"C\") ORDER BY status, "
        "job_type, finished_at_ns, job_id LIMIT $5 FOR UPDATE SKIP LOCKED) DELETE FROM {t}jobs "
        "WHERE job_id IN (SELECT job_id FROM c WHERE finished_at_ns < $6::bigint OR dedup_key "
        "IS NULL)");
    deleted = 0;
    for (const jobpact::internal::RetentionCutoff& c : cutoffs) {
      if (deleted >= limit) break;
      JOBPACT_ASSIGN_OR_RETURN(PgResult r, conn.Exec(del,
                                                     Params()
                                                         .Add(st)
                                                         .Add(c.job_type)
                                                         .Add(c.finished_at_ns)
                                                         .Add(c.job_id)
                                                         .Add(limit - deleted)
                                                         .Add(ToNs(dedup_floor)),
                                                     "TrimFinished"));
      deleted += static_cast<int>(r.affected());
    }
    return Status::Ok();
  }));
  return deleted;
}

Result<QueueStats> PostgresQueueBackend::ReadStats(TimePoint now) {
  QueueStats stats;
  for (JobStatus s : kAllJobStatuses) stats.by_status[s] = 0;
  JOBPACT_PG_RETURN_IF_ERROR(core_->Tx("Stats", [&](Connection& conn) -> Status {
    // One snapshot for both statements.
    JOBPACT_RETURN_IF_ERROR(
        conn.Simple("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", "Stats"));
    const std::int64_t now_ns = ToNs(now);
    {
      JOBPACT_ASSIGN_OR_RETURN(
          PgResult r,
          conn.Exec(core_->Sql("SELECT queue, status, count(*) FROM {t}jobs GROUP BY queue, "
                               "status"),
                    Params(), "Stats"));
      for (int i = 0; i < r.rows(); ++i) {
        const std::string queue = r.Text(i, 0);
        auto status = ParseJobStatus(r.Text(i, 1));
        if (!status.ok()) return status.status();
        const std::int64_t n = r.Int(i, 2);
        stats.by_status[*status] += n;
        if (*status == JobStatus::kDeadLettered) stats.dead_letters += n;
        if (queue.empty()) continue;  // Invalid envelopes belong to no queue.
        QueueStats::PerQueue& pq = stats.queues[queue];
        if (*status == JobStatus::kQueued || *status == JobStatus::kRetryScheduled) pq.depth += n;
        if (*status == JobStatus::kRunning) pq.running += n;
      }
    }
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core_->Sql("SELECT queue, min(greatest(ready_at_ns, enqueued_at_ns)) FROM "
                             "{t}jobs WHERE status IN ('queued', 'retry_scheduled') AND "
                             "ready_at_ns <= $1 GROUP BY queue"),
                  Params().Add(now_ns), "Stats"));
    for (int i = 0; i < r.rows(); ++i) {
      const std::int64_t oldest = r.Int(i, 1);
      stats.queues[r.Text(i, 0)].oldest_ready_age =
          DurationFromNs(std::max<std::int64_t>(0, now_ns - oldest));
    }
    return Status::Ok();
  }));
  return stats;
}

}  // namespace postgres
}  // namespace jobpact
