// The SQLite QueueBackend: the storage primitives of StoreBackend over the
// jobpact_jobs table (layout in schema.cc). Every primitive that changes
// state is one write transaction (Core::Write); what a change does to a job
// is the engine's (jobpact/transitions.h), never SQL's: a job row is written
// from the record the engine computed, conditional on (job id, status,
// epoch, lease token).
#include "jobpact/store_backend.h"

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
#include "src/backends/sqlite/control_store.h"
#include "src/backends/sqlite/core.h"
#include "src/backends/sqlite/guard_rows.h"
#include "src/backends/sqlite/job_row.h"
#include "src/internal/backpressure.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace sqlite {

using internal::AuditJson;
using internal::BindRecord;
using internal::Connection;
using internal::CopiedRow;
using internal::HistoryEntryJson;
using internal::HistoryJson;
using internal::kColJobId;
using internal::kJobColumns;
using internal::kUpdateSet;
using internal::RawRow;
using internal::ReadJobRow;
using internal::StepDone;
using internal::DurationFromNs;
using internal::Stmt;
using internal::TimeFromNs;
using internal::ToNs;
using Core = SqliteBackend::Core;

namespace {

// FindDuplicateJob's query, through `conn` (inside a transaction).
Result<std::optional<std::string>> FindDuplicateOn(Connection& conn, std::string_view dedup_key,
                                                   std::string_view self_job_id,
                                                   TimePoint since) {
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

class SqliteQueueBackend final : public StoreBackend {
 public:
  explicit SqliteQueueBackend(std::shared_ptr<Core> core)
      : StoreBackend(core->clock()), core_(std::move(core)) {}

  std::string_view Name() const override { return "sqlite"; }

  // Inserts prepared jobs through `conn` (inside a write transaction).
  // Backpressure (ControlKind::kMaxQueueDepth): OK if `jobs` fit in their
  // queues' maximum depths, read and counted on `conn` (in its transaction).
  static Status CheckDepthLimitsOn(Connection& conn, const std::vector<JobChange>& jobs);
  static Result<std::vector<EnqueueResult>> InsertOn(Connection& conn,
                                                     std::vector<JobChange>& jobs,
                                                     const EnqueueOptions& options,
                                                     TimePoint now);

 protected:
  Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                const EnqueueOptions& options,
                                                TimePoint now) override {
    std::vector<EnqueueResult> results;
    JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write("Enqueue", [&](Connection& conn) -> Status {
      JOBPACT_ASSIGN_OR_RETURN(results, InsertOn(conn, jobs, options, now));
      return Status::Ok();
    }));
    return results;
  }

  std::vector<Status> WriteJobs(std::vector<JobWrite>& writes) override;
  Status LeaseJobs(const DequeueRequest& request, TimePoint now,
                   std::vector<Delivery>* deliveries) override;
  Result<Lease> RenewLease(const Lease& lease, TimePoint expires_at, std::string_view checkpoint,
                           TimePoint now) override;
  Result<std::vector<JobChange>> RecoverJobs(int max_recoveries, TimePoint now) override;
  Result<std::optional<JobRecord>> LoadJob(std::string_view job_id) override;
  Result<std::vector<JobRecord>> QueryJobs(const JobQuery& query) override;
  Result<std::optional<std::string>> FindDuplicateJob(std::string_view dedup_key,
                                                      std::string_view self_job_id,
                                                      TimePoint since) override;
  Result<int> DeleteJobs(JobPlacement placement, TimePoint older_than) override;
  Result<int> DeleteSurplusJobs(JobStatus status, std::int64_t keep, TimePoint dedup_floor,
                                int limit) override;
  Result<QueueStats> ReadStats(TimePoint now) override;
  Status RequestCancel(const JobChange& change) override;
  Result<ControlState> LoadControl() override { return internal::LoadControl(*core_); }
  Status WriteControl(const ControlWrite& write) override {
    return internal::WriteControl(*core_, write);
  }
  Result<std::vector<std::string>> LoadControlAudit(std::size_t limit) override {
    return internal::LoadControlAudit(*core_, limit);
  }
  Status StorePolicies(const std::vector<PublishedPolicy>& policies) override {
    return internal::StorePolicies(*core_, policies);
  }
  Result<std::vector<PublishedPolicy>> LoadPolicies() override {
    return internal::LoadPolicies(*core_);
  }
  Result<bool> WaitForWork(Duration timeout) override { return core_->WaitForChange(timeout); }
  bool CompletesGuards(const LockStore& locks, const IdempotencyStore& idempotency) const override {
    return &locks == core_->own_locks && &idempotency == core_->own_idempotency;
  }
  bool AppliesGuards() const override { return true; }
  Result<LockLease> AcquireLockAndClaim(std::string_view lock_key, std::string_view idempotency_key,
                                        std::string_view owner, Duration ttl,
                                        ClaimOutcome* claim) override;

 private:
  // Writes `c` over its row if the row matches c.expect (and appends its
  // history entry, naming `worker` in it if given). kAborted or kNotFound
  // when it does not.
  Status UpdateRow(Connection& conn, const JobChange& c, std::string_view worker = {});
  // Marks the delivery's idempotency claim completed in the completion's
  // transaction (see WriteJobs), kept `retention`; kAborted if another
  // owner holds or completed the key (this delivery lost its claim).
  Status CompleteClaimOn(Connection& conn, const JobChange& c, std::int64_t now_ns,
                         Duration retention);
  // The part of `w.guards` applied whatever becomes of the completion: the
  // lock released and, on kRelease, the claim dropped (a stale or refused
  // owner is no error: there is nothing of its own left to give back).
  static Status ReleaseGuards(Connection& conn, const JobWrite& w, std::int64_t now_ns);
  // Why a conditional write matched no row: kNotFound or kAborted.
  Status StaleError(Connection& conn, const JobChange& c, std::string_view what);
  // The record of a row, or -- for a row that no longer decodes -- the row
  // quarantined (engine::Quarantine) in its place, with `quarantined` set.
  // In a write transaction only (the quarantine is a write).
  template <typename Row>
  Result<JobRecord> DecodeOrQuarantine(Connection& conn, const Row& row, TimePoint now,
                                       bool with_history, bool* quarantined);
  Status WriteQuarantine(Connection& conn, const JobChange& q);
  // Runs `sql` (a DELETE of at most 1000 rows, ?1 = the cutoff) until it
  // deletes fewer, each chunk its own transaction.
  Result<int> PurgeInChunks(std::string_view what, const char* sql, TimePoint older_than);

  const std::shared_ptr<Core> core_;
};

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
  static const std::string with_entry =
      std::string("UPDATE jobpact_jobs SET ") + kUpdateSet +
      ", history = json_insert(CASE WHEN json_array_length(history) >= " +
      std::to_string(kMaxHistory) +
      " THEN json_remove(history, '$[0]') ELSE history END, '$[#]', json(?25)) "
      "WHERE job_id = ?1 AND status = ?2 AND epoch = ?3 AND coalesce(lease_token, '') = ?4";
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

template <typename Row>
Result<JobRecord> SqliteQueueBackend::DecodeOrQuarantine(Connection& conn, const Row& row,
                                                         TimePoint now, bool with_history,
                                                         bool* quarantined) {
  *quarantined = false;
  Result<JobRecord> rec = ReadJobRow(row, with_history);
  if (rec.ok()) return rec;
  // A record nobody can read must not block the others: it leaves the state
  // machine as a DLQ entry with the whole row kept (SPEC 1: never dropped).
  JobChange q = engine::Quarantine(row.Text(kColJobId), RawRow(row), rec.status().message(), now);
  JOBPACT_RETURN_IF_ERROR(WriteQuarantine(conn, q));
  *quarantined = true;
  q.record.history = q.append;
  return std::move(q.record);
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
      // The most recent live job with this key within the window.
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("SELECT job_id, status FROM jobpact_jobs WHERE dedup_key = ?1 AND "
                       "enqueued_at_ns > ?2 AND status NOT IN ('discarded', 'failed', "
                       "'dead_lettered') ORDER BY enqueued_at_ns DESC, job_id DESC LIMIT 1"));
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

std::vector<Status> SqliteQueueBackend::WriteJobs(std::vector<JobWrite>& writes) {
  std::vector<Status> out(writes.size());
  Status batch = core_->Write("Complete", [&](Connection& conn) -> Status {
    // The transaction may be retried (a busy file): start each try afresh.
    std::fill(out.begin(), out.end(), Status::Ok());
    const std::int64_t now_ns = ToNs(core_->Now());
    for (std::size_t i = 0; i < writes.size(); ++i) {
      const JobWrite& w = writes[i];
      const JobChange& c = w.change;
      const Duration retention =
          w.guards != nullptr ? w.guards->retention : core_->options().idempotency_retention;
      // Without an effect, the result is recorded before the ack, so a stale
      // ack leaves it recorded; a claim no longer held stops the ack.
      Status s;
      if (w.guards != nullptr && w.guards->claim == CompletionGuards::Claim::kRecord &&
          w.effect == nullptr) {
        s = internal::CompleteClaimRow(conn, c.record.envelope.idempotency_key,
                                       c.expect.lease_token, c.record.result, now_ns,
                                       now_ns + ToNs(retention), "Complete");
        if (s.code() == StatusCode::kAborted) {
          s = Status::Aborted(s.message() + "; job " + c.record.envelope.job_id +
                              " was not completed");
        } else {
          JOBPACT_RETURN_IF_ERROR(s);
        }
      }
      // Each write commits or rolls back alone (a stale lease or a failed
      // effect), inside the one transaction of the batch.
      JOBPACT_RETURN_IF_ERROR(conn.Exec("SAVEPOINT jobpact_write", "Complete"));
      if (s.ok()) s = UpdateRow(conn, c);
      if (s.ok() && w.effect != nullptr) {
        // Inside the completion transaction, after the fence: the effect
        // commits iff this delivery's completion does.
        Status effect = ::jobpact::internal::Guarded("transactional_effect", [&] {
          return (*w.effect)(static_cast<void*>(conn.db()));
        });
        if (!effect.ok()) {
          s = Status(effect.code(), "Complete: the transactional effect failed, the completion of job " +
                                        c.record.envelope.job_id +
                                        " was rolled back: " + effect.message());
        } else if (c.record.status == JobStatus::kSucceeded &&
                   !c.record.envelope.idempotency_key.empty()) {
          s = CompleteClaimOn(conn, c, now_ns, retention);
        }
      }
      if (sqlite3_get_autocommit(conn.db()) != 0) {
        // SQLite rolled the whole transaction back (a full disk, an I/O
        // error): nothing of the batch is written.
        return s.ok() ? Status::Internal("Complete: the transaction was rolled back") : s;
      }
      if (s.ok()) {
        JOBPACT_RETURN_IF_ERROR(conn.Exec("RELEASE jobpact_write", "Complete"));
      } else {
        JOBPACT_RETURN_IF_ERROR(conn.Exec("ROLLBACK TO jobpact_write; RELEASE jobpact_write", "Complete"));
        const StatusCode code = s.code();
        // The store's own failures fail the batch; a refused write fails
        // alone.
        if (code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted) {
          return s;
        }
      }
      if (w.guards != nullptr) JOBPACT_RETURN_IF_ERROR(ReleaseGuards(conn, w, now_ns));
      out[i] = std::move(s);
    }
    return Status::Ok();
  });
  if (!batch.ok()) std::fill(out.begin(), out.end(), batch);
  return out;
}

Result<LockLease> SqliteQueueBackend::AcquireLockAndClaim(std::string_view lock_key,
                                                          std::string_view idempotency_key,
                                                          std::string_view owner, Duration ttl,
                                                          ClaimOutcome* claim) {
  constexpr std::string_view kWhat = "AcquireLockAndClaim";
  return ::jobpact::internal::Guarded(kWhat, [&]() -> Result<LockLease> {
    JOBPACT_RETURN_IF_ERROR(
        ::jobpact::internal::CheckLockAndClaim(kWhat, lock_key, idempotency_key, owner, ttl));
    LockLease lease;
    JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write(kWhat, [&](Connection& conn) -> Status {
      const std::int64_t now_ns = ToNs(core_->Now());
      const std::int64_t expires_ns = now_ns + ToNs(ttl);
      JOBPACT_ASSIGN_OR_RETURN(
          lease, internal::AcquireLockRow(conn, lock_key, owner, now_ns, expires_ns, kWhat));
      JOBPACT_ASSIGN_OR_RETURN(
          *claim, internal::ClaimRow(conn, idempotency_key, owner, now_ns, expires_ns, kWhat));
      return Status::Ok();
    }));
    return lease;
  });
}

Status SqliteQueueBackend::ReleaseGuards(Connection& conn, const JobWrite& w,
                                         std::int64_t now_ns) {
  const Envelope& env = w.change.record.envelope;
  const std::string& owner = w.change.expect.lease_token;
  auto own_gone = [](const Status& s) {
    return s.ok() || s.code() == StatusCode::kAborted || s.code() == StatusCode::kNotFound;
  };
  if (w.guards->release_lock) {
    Status s = internal::ReleaseLockRow(conn, env.lock_key, owner, now_ns, "Complete");
    if (!own_gone(s)) return s;
  }
  if (w.guards->claim == CompletionGuards::Claim::kRelease) {
    Status s = internal::ReleaseClaimRow(conn, env.idempotency_key, owner, "Complete");
    if (!own_gone(s)) return s;
  }
  return Status::Ok();
}

Status SqliteQueueBackend::CompleteClaimOn(Connection& conn, const JobChange& c,
                                           std::int64_t now_ns, Duration retention) {
  // Same-store exactly-once also for the idempotency record: the claim this
  // delivery holds (the runner's claim owner is the lease token) is marked
  // completed in the same transaction as the effect, so no crash can
  // separate "effect committed" from "key recorded". A key claimed or
  // completed by another owner means this delivery lost its claim: the
  // effect must not commit a second time for the key.
  const std::string& key = c.record.envelope.idempotency_key;
  const std::string& owner = c.expect.lease_token;
  {
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("UPDATE jobpact_idempotency SET state = 'completed', result = ?3, "
                     "expires_at_ns = ?4 WHERE key = ?1 AND owner = ?2 AND state = "
                     "'in_progress'"));
    Stmt st(raw);
    st.Bind(1, key).Bind(2, owner).Bind(3, c.record.result).Bind(4, now_ns + ToNs(retention));
    JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Complete"));
    if (sqlite3_changes(conn.db()) > 0) return Status::Ok();
  }
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT owner, state FROM jobpact_idempotency WHERE key = ?1 AND owner != ?2"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, owner);
  const int rc = st.Step();
  if (rc == SQLITE_ROW) {
    return Status::Aborted("Complete: the idempotency claim on key '" + key +
                           "' is no longer held by this delivery (" + st.Text(1) + " by " +
                           st.Text(0) + "): the completion of job " + c.record.envelope.job_id +
                           " and its transactional effect were rolled back");
  }
  if (rc != SQLITE_DONE) return conn.Error(rc, "Complete");
  return Status::Ok();
}

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
        "status IN ('succeeded', 'failed', 'discarded') AND finished_at_ns < ?1 LIMIT 1000)",
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
  constexpr const char* kFinal = "status IN ('succeeded', 'failed', 'discarded')";
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

}  // namespace

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
