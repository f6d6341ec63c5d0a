// The SQLite queue store, leases (queue_store.h): the lease step with the
// delivery-time dedup check, lease renewal and lease recovery.
#include "src/backends/sqlite/queue_store.h"

namespace jobpact {
namespace sqlite {

Status SqliteQueueBackend::LeaseJobs(const DequeueRequest& request, TimePoint now,
                                     std::vector<Delivery>* deliveries) {
  std::vector<Delivery>& out = *deliveries;
  // The queue filter is a JSON array, so one cached statement serves every
  // list of queues.
  std::string queues_json;
  if (!request.queues.empty()) queues_json = nlohmann::json(request.queues).dump();
  Status s = core_->Write("Dequeue", [&](Connection& conn) -> Status {
    out.clear();  // The write may be retried.
    const std::int64_t now_ns = ToNs(now);
    // The candidates in dequeue order, obeying the control state in the same
    // transaction. Ready jobs are walked per (queue, job type, tenant) with
    // the partial index jobpact_jobs_ready_by_tenant: the units are found
    // by index seeks (one per unit, however many jobs it holds); a unit the
    // control state holds (its type or queue paused, its type at its limit)
    // is passed over whole; every other unit offers its first ?2 jobs in
    // index order. Of those, the next ?2 jobs go by priority, then tenant
    // fairness: each tenant's first job (rn 1) before anyone's second, and
    // among tenants of a queue the one after its last served tenant
    // (jobpact_tenant_turns) first, in name order, wrapping around -- so
    // one tenant's burst cannot starve the others; then ready time and id.
    // So a paused type's backlog costs a lease nothing, and no held job is
    // leased and handed back. A quarantined row takes no slot: ask again
    // for what is missing. Rows come back in that order (`ord`).
    static const std::string kReady = "status IN ('queued', 'retry_scheduled')";
    static const std::string kUnitOrder = " ORDER BY x.queue, x.job_type, x.tenant_id LIMIT 1)";
    static const std::string units =
        "WITH RECURSIVE units(queue, job_type, tenant_id) AS (SELECT * FROM (SELECT queue, "
        "job_type, tenant_id FROM jobpact_jobs x WHERE " + kReady + kUnitOrder +
        " UNION ALL SELECT n.queue, n.job_type, n.tenant_id FROM units p JOIN jobpact_jobs n ON "
        "n.rowid = coalesce((SELECT x.rowid FROM jobpact_jobs x WHERE x." + kReady +
        " AND x.queue = p.queue AND x.job_type = p.job_type AND x.tenant_id > p.tenant_id" +
        kUnitOrder + ", (SELECT x.rowid FROM jobpact_jobs x WHERE x." + kReady +
        " AND x.queue = p.queue AND x.job_type > p.job_type" + kUnitOrder +
        ", (SELECT x.rowid FROM jobpact_jobs x WHERE x." + kReady + " AND x.queue > p.queue" +
        kUnitOrder + ")), ";
    static const std::string candidates =
        "cand AS (SELECT j.rowid AS rid, j.queue AS cq, j.tenant_id AS ct, j.priority AS cp, "
        "j.ready_at_ns AS cr, j.job_id AS cid, row_number() OVER (PARTITION BY j.queue, "
        "j.tenant_id ORDER BY j.priority DESC, j.ready_at_ns, j.job_id) AS rn FROM units p JOIN "
        "jobpact_jobs j ON j.rowid IN (SELECT x.rowid FROM jobpact_jobs x WHERE x.queue = "
        "p.queue AND x.job_type = p.job_type AND x.tenant_id = p.tenant_id AND x." + kReady +
        " AND x.ready_at_ns <= ?1 ORDER BY x.priority DESC, x.ready_at_ns, x.job_id LIMIT ?2) "
        "WHERE NOT EXISTS (SELECT 1 FROM jobpact_control c "
        "WHERE (c.kind = 'pause_type' AND c.subject = p.job_type AND c.failure_class = '') OR "
        "(c.kind = 'pause_queue' AND c.subject = p.queue AND c.failure_class = '') OR (c.kind = "
        "'concurrency_limit' AND c.subject = p.job_type AND c.failure_class = '' AND "
        "c.limit_value <= (SELECT count(*) FROM jobpact_jobs r WHERE r.status = 'running' AND "
        "r.job_type = c.subject)) OR (c.kind = 'tenant_concurrency_limit' AND c.subject = "
        "p.queue AND c.failure_class = '' AND c.limit_value <= (SELECT count(*) FROM "
        "jobpact_jobs r WHERE r.status = 'running' AND r.queue = p.queue AND r.tenant_id = "
        "p.tenant_id))) ";
    static const std::string picked =
        "), picked AS (SELECT cand.rid, row_number() OVER (ORDER BY cp DESC, rn, ct <= "
        "coalesce(t.last_tenant, ''), ct, cr, cid) AS ord FROM cand LEFT JOIN "
        "jobpact_tenant_turns t ON t.queue = cq ORDER BY ord LIMIT ?2) SELECT " +
        std::string(kJobColumns) +
        " FROM picked JOIN jobpact_jobs ON jobpact_jobs.rowid = picked.rid ORDER BY picked.ord";
    static const std::string any_queue = units + candidates + picked;
    static const std::string some_queues =
        units + candidates + "AND p.queue IN (SELECT value FROM json_each(?3)) " + picked;
    // How many more jobs each limited type, and each tenant of a queue with
    // a per-tenant cap, may start: the query above keeps out types and
    // tenants already at their limit; this keeps one batch from taking one
    // past it. One statement, each row tagged: 0, the room of a limited
    // type; 1, the cap of a capped queue; 2, the room of a tenant of a
    // capped queue with jobs running (one with none has the whole cap).
    std::map<std::string, std::int64_t, std::less<>> room;
    std::map<std::string, std::int64_t, std::less<>> caps;
    std::map<std::pair<std::string, std::string>, std::int64_t> tenant_room;
    {
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("SELECT 0, c.subject, '', c.limit_value - (SELECT count(*) FROM "
                       "jobpact_jobs r WHERE r.status = 'running' AND r.job_type = c.subject) "
                       "FROM jobpact_control c WHERE c.kind = 'concurrency_limit' UNION ALL "
                       "SELECT 1, c.subject, '', c.limit_value FROM jobpact_control c WHERE "
                       "c.kind = 'tenant_concurrency_limit' UNION ALL SELECT 2, r.queue, "
                       "r.tenant_id, c.limit_value - count(*) FROM jobpact_control c JOIN "
                       "jobpact_jobs r ON r.status = 'running' AND r.queue = c.subject WHERE "
                       "c.kind = 'tenant_concurrency_limit' GROUP BY r.queue, r.tenant_id"));
      Stmt st(raw);
      while (true) {
        int rc = st.Step();
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) return conn.Error(rc, "Dequeue");
        switch (st.Int(0)) {
          case 0: room[st.Text(1)] = st.Int(3); break;
          case 1: caps[st.Text(1)] = st.Int(3); break;
          default: tenant_room[{st.Text(1), st.Text(2)}] = st.Int(3); break;
        }
      }
    }
    // The room of the envelope's tenant in its queue; null if not capped.
    auto tenant_left = [&](const Envelope& env) -> std::int64_t* {
      auto cap = caps.find(env.queue);
      if (cap == caps.end()) return nullptr;
      return &tenant_room.try_emplace({env.queue, env.tenant_id}, cap->second).first->second;
    };
    for (int round = 0; round < 8 && static_cast<int>(out.size()) < request.max_jobs; ++round) {
      std::vector<CopiedRow> rows;
      {
        JOBPACT_ASSIGN_OR_RETURN(
            sqlite3_stmt * raw,
            conn.Prepare(queues_json.empty() ? any_queue.c_str() : some_queues.c_str()));
        Stmt st(raw);
        st.Bind(1, now_ns).Bind(2, request.max_jobs - static_cast<int>(out.size()));
        if (!queues_json.empty()) st.Bind(3, queues_json);
        while (true) {
          int rc = st.Step();
          if (rc == SQLITE_DONE) break;
          if (rc != SQLITE_ROW) return conn.Error(rc, "Dequeue");
          rows.emplace_back(st);
        }
      }
      if (rows.empty()) break;
      bool ask_again = false;  // A row was quarantined or passed over.
      for (const CopiedRow& row : rows) {
        auto limited = room.find(row.Text(internal::kColJobType));
        if (limited != room.end() && limited->second <= 0) {
          ask_again = true;  // The next query leaves its type out.
          continue;
        }
        bool quarantined = false;
        JOBPACT_ASSIGN_OR_RETURN(
            JobRecord rec, DecodeOrQuarantine(conn, row, now, /*with_history=*/false, &quarantined));
        if (quarantined) {
          ask_again = true;
          continue;
        }
        std::int64_t* tenant = caps.empty() ? nullptr : tenant_left(rec.envelope);
        if (tenant != nullptr && *tenant <= 0) {
          ask_again = true;  // The next query leaves the tenant out.
          continue;
        }
        if (limited != room.end()) --limited->second;
        if (tenant != nullptr) --*tenant;
        // Lease tokens are "<worker>:<epoch>:<nonce>": unique per delivery,
        // since a job's epoch grows with every delivery.
        std::string token =
            request.worker_id + ":" + std::to_string(rec.epoch + 1) + ":" + core_->NewNonce();
        JOBPACT_ASSIGN_OR_RETURN(JobChange c, engine::Deliver(rec, std::move(token), now));
        // The delivery's history entry also names the worker, so that an
        // operator can tell which process held a job whose lease expired.
        JOBPACT_RETURN_IF_ERROR(UpdateRow(conn, c, request.worker_id));
        Delivery d;
        d.lease = Lease{c.record.envelope.job_id, c.record.lease_token, c.record.epoch,
                        c.record.lease_expires_at, c.record.cancel_requested};
        // The delivery-time dedup check in this transaction, after this
        // job's lease and before the next one's (as in the in-memory store):
        // a read transaction per job fewer for the worker.
        if (request.dedup_window.has_value()) {
          d.dedup_checked = true;
          if (!c.record.envelope.dedup_key.empty()) {
            JOBPACT_ASSIGN_OR_RETURN(
                std::optional<std::string> dup,
                FindDuplicateOn(conn, c.record.envelope.dedup_key, c.record.envelope.job_id,
                                now - *request.dedup_window));
            if (dup.has_value()) d.duplicate_of = std::move(*dup);
          }
        }
        // Steps 5 and 6 in this transaction too, for a job that goes on
        // to them: a write transaction per keyed job fewer.
        const Envelope& env = c.record.envelope;
        if (request.take_guards && d.duplicate_of.empty() &&
            (!env.lock_key.empty() || !env.idempotency_key.empty())) {
          JOBPACT_ASSIGN_OR_RETURN(
              d.guards_taken,
              internal::TakeGuardRows(conn, env.lock_key, env.idempotency_key, d.lease.token,
                                      now_ns, ToNs(d.lease.expires_at),
                                      &d.fencing_token, "Dequeue"));
        }
        d.job = std::move(c.record);
        d.job.history = std::move(c.append);
        out.push_back(std::move(d));
      }
      if (!ask_again) break;
    }
    // Whose turn it is next: the tenant each queue served last (rows come in
    // turn order), written only where it changed.
    std::map<std::string_view, std::string_view> last;
    for (const Delivery& d : out) last[d.job.envelope.queue] = d.job.envelope.tenant_id;
    for (const auto& [queue, tenant] : last) {
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("INSERT INTO jobpact_tenant_turns (queue, last_tenant) VALUES (?1, ?2) ON "
                       "CONFLICT (queue) DO UPDATE SET last_tenant = excluded.last_tenant WHERE "
                       "last_tenant <> excluded.last_tenant"));
      Stmt st(raw);
      st.Bind(1, queue).Bind(2, tenant);
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Dequeue"));
    }
    return Status::Ok();
  });
  if (!s.ok()) out.clear();
  return s;
}

Result<Lease> SqliteQueueBackend::RenewLease(const Lease& lease, TimePoint expires_at,
                                             std::string_view checkpoint, TimePoint now) {
  Lease renewed = lease;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("Renew", [&](Connection& conn) -> Status {
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("UPDATE jobpact_jobs SET lease_expires_at_ns = ?4, updated_at_ns = ?5, "
                     "checkpoint = coalesce(?6, checkpoint) WHERE job_id = ?1 AND status = "
                     "'running' AND epoch = ?2 AND lease_token = ?3 RETURNING cancel_requested"));
    Stmt st(raw);
    st.Bind(1, lease.job_id)
        .Bind(2, lease.epoch)
        .Bind(3, lease.token)
        .Bind(4, ToNs(expires_at))
        .Bind(5, ToNs(now))
        .BindOrNull(6, checkpoint);
    int rc = st.Step();
    if (rc == SQLITE_DONE) {
      JobChange probe;
      probe.record.envelope.job_id = lease.job_id;
      probe.expect.epoch = lease.epoch;
      return StaleError(conn, probe, "Renew");
    }
    if (rc != SQLITE_ROW) return conn.Error(rc, "Renew");
    renewed.cancel_requested = st.Int(0) != 0;
    JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Renew"));
    renewed.expires_at = expires_at;
    return Status::Ok();
  }));
  return renewed;
}

Result<std::vector<JobChange>> SqliteQueueBackend::RecoverJobs(int max_recoveries, TimePoint now) {
  std::vector<JobChange> recovered;
  JOBPACT_SQLITE_RETURN_IF_ERROR(
      core_->Write("RecoverExpiredLeases", [&](Connection& conn) -> Status {
        recovered.clear();  // The write may be retried.
        // Uses the partial index on running leases.
        static const std::string select_expired =
            std::string("SELECT ") + kJobColumns +
            " FROM jobpact_jobs WHERE status = 'running' AND lease_expires_at_ns <= ?1 "
            "ORDER BY lease_expires_at_ns, job_id";
        std::vector<CopiedRow> rows;
        {
          JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(select_expired.c_str()));
          Stmt st(raw);
          st.Bind(1, ToNs(now));
          while (true) {
            int rc = st.Step();
            if (rc == SQLITE_DONE) break;
            if (rc != SQLITE_ROW) return conn.Error(rc, "RecoverExpiredLeases");
            rows.emplace_back(st);
          }
        }
        for (const CopiedRow& row : rows) {
          bool quarantined = false;
          JOBPACT_ASSIGN_OR_RETURN(
              JobRecord rec,
              DecodeOrQuarantine(conn, row, now, /*with_history=*/false, &quarantined));
          if (quarantined) continue;
          JOBPACT_ASSIGN_OR_RETURN(JobChange c, engine::RecoverLease(rec, max_recoveries, now));
          JOBPACT_RETURN_IF_ERROR(UpdateRow(conn, c));
          recovered.push_back(std::move(c));
        }
        return Status::Ok();
      }));
  return recovered;
}


}  // namespace sqlite
}  // namespace jobpact
