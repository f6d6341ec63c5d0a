// The PostgreSQL queue store, the lease path (queue_store.h): the lease
// query (in turn across tenants, within the concurrency limits and tenant
// caps), the quarantine of rows that no longer decode, lease renewal and
// lease recovery.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/transitions.h"
#include "src/backends/postgres/guard_rows.h"
#include "src/backends/postgres/queue_store.h"
#include "src/internal/job_row_codec.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using internal::Connection;
using internal::Params;
using internal::PgResult;
using internal::PgRow;
using ::jobpact::internal::HistoryJson;
using ::jobpact::internal::kColJobId;
using ::jobpact::internal::kColJobType;
using ::jobpact::internal::RawRow;
using ::jobpact::internal::ToNs;

namespace {

// The columns after JOBPACT_PG_JOB_COLUMNS in a row of LeaseSql.
constexpr int kColLeaseTenant = ::jobpact::internal::kColCancelRequested + 1;
constexpr int kColLeaseTurn = kColLeaseTenant + 1;

}  // namespace

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
      JOBPACT_ASSIGN_OR_RETURN(PgResult rows,
                               conn.Exec(queues.empty() ? lease_any_ : lease_some_, p, "Dequeue"));
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
      // The delivery-time dedup check (SPEC 3 step 4) in this transaction,
      // before the round's rows are written: a read per job fewer for the
      // worker.
      std::vector<std::string> duplicate_of(changes.size());
      if (request.dedup_window.has_value() && !changes.empty()) {
        JOBPACT_RETURN_IF_ERROR(
            FindDuplicatesOn(conn, changes, now - *request.dedup_window, &duplicate_of));
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
      // Steps 5 and 6 in this transaction too (DequeueRequest::take_guards),
      // for the jobs that go on to them: a commit per keyed job fewer.
      std::vector<internal::GuardTake> takes;
      std::vector<std::size_t> take_of;
      if (request.take_guards) {
        // A key once per statement (views into `changes`, which outlive them).
        std::set<std::string_view> locks, claims;
        for (std::size_t k = 0; k < changes.size(); ++k) {
          const Envelope& env = changes[k].record.envelope;
          if (!duplicate_of[k].empty() || (env.lock_key.empty() && env.idempotency_key.empty()) ||
              (!env.lock_key.empty() && !locks.insert(env.lock_key).second) ||
              (!env.idempotency_key.empty() && !claims.insert(env.idempotency_key).second)) {
            continue;
          }
          takes.push_back(internal::GuardTake{env.lock_key, env.idempotency_key,
                                              changes[k].record.lease_token,
                                              ToNs(changes[k].record.lease_expires_at)});
          take_of.push_back(k);
        }
        JOBPACT_RETURN_IF_ERROR(internal::TakeGuardRows(*core_, conn, takes, now_ns, "Dequeue"));
      }
      std::vector<const internal::GuardTake*> taken(changes.size(), nullptr);
      for (std::size_t t = 0; t < takes.size(); ++t) taken[take_of[t]] = &takes[t];
      for (std::size_t k = 0; k < changes.size(); ++k) {
        JobChange& c = changes[k];
        Delivery d;
        if (taken[k] != nullptr && taken[k]->taken) {
          d.guards_taken = true;
          d.fencing_token = taken[k]->fencing;
        }
        d.lease = Lease{c.record.envelope.job_id, c.record.lease_token, c.record.epoch,
                        c.record.lease_expires_at, c.record.cancel_requested};
        d.dedup_checked = request.dedup_window.has_value();
        d.duplicate_of = std::move(duplicate_of[k]);
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

Status PostgresQueueBackend::FindDuplicatesOn(Connection& conn,
                                              const std::vector<JobChange>& changes,
                                              TimePoint since,
                                              std::vector<std::string>* duplicate_of) {
  // What FindDuplicate would answer for each job as it is leased in turn:
  // the oldest running job, or job succeeded since `since`, of its key. The
  // jobs leased in earlier rounds of this lease are already running in this
  // transaction and the query finds them; the round's own are not written
  // yet, so an earlier one of the round with the same key is added here.
  std::vector<Params> items;
  std::vector<std::size_t> of;
  for (std::size_t k = 0; k < changes.size(); ++k) {
    const Envelope& env = changes[k].record.envelope;
    if (env.dedup_key.empty()) continue;
    items.emplace_back();
    items.back().Add(env.job_id).Add(env.dedup_key);
    of.push_back(k);
  }
  if (items.empty()) return Status::Ok();
  Params p;
  for (const std::string& column : ArrayColumns(items, 2)) p.Add(column);
  p.Add(ToNs(since));
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(core_->Sql("SELECT v.i, d.job_id, d.enqueued_at_ns FROM unnest($1::text[], "
                           "$2::text[]) WITH ORDINALITY AS v(job_id, key, i) CROSS JOIN LATERAL "
                           "(SELECT j.job_id, j.enqueued_at_ns FROM {t}jobs j WHERE j.dedup_key = "
                           "v.key AND j.job_id <> v.job_id AND " JOBPACT_PG_DEDUP_LIVE("j.")
                           " ORDER BY j.enqueued_at_ns, j.job_id LIMIT 1) d"),
                p, "Dequeue"));
  // The candidate of each job: (enqueued_at_ns, job id), the smaller wins.
  std::vector<std::pair<std::int64_t, std::string>> best(changes.size());
  std::vector<bool> found(changes.size(), false);
  for (int row = 0; row < r.rows(); ++row) {
    const std::size_t k = of[static_cast<std::size_t>(r.Int(row, 0) - 1)];
    best[k] = {r.Int(row, 2), r.Text(row, 1)};
    found[k] = true;
  }
  for (std::size_t a = 0; a < of.size(); ++a) {
    const std::size_t k = of[a];
    const Envelope& env = changes[k].record.envelope;
    for (std::size_t b = 0; b < a; ++b) {
      const JobRecord& earlier = changes[of[b]].record;
      if (earlier.envelope.dedup_key != env.dedup_key) continue;
      std::pair<std::int64_t, std::string> cand{ToNs(earlier.enqueued_at), earlier.envelope.job_id};
      if (!found[k] || cand < best[k]) {
        best[k] = std::move(cand);
        found[k] = true;
      }
    }
    if (found[k]) (*duplicate_of)[k] = std::move(best[k].second);
  }
  return Status::Ok();
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

}  // namespace postgres
}  // namespace jobpact
