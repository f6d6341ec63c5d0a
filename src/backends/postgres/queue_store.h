// File: src/backends/postgres/queue_store.h
//
// The PostgreSQL QueueBackend: the storage primitives of StoreBackend over
// the jobs table (layout in schema.cc). Every primitive that changes state
// is one transaction (Core::Tx); what a change does to a job is the
// engine's (jobpact/transitions.h), never SQL's: a job row is written from
// the record the engine computed, conditional on (job id, status, epoch,
// lease token). Every value is a statement parameter.
//
// By side:
//   the worker side:
//     queue_enqueue.cc    insert (dedup, maximum depths, index key sizes)
//     queue_write.cc      conditional writes, WriteJobs (completion groups,
//                         savepoints for transactional effects)
//     queue_lease.cc      lease, renew, lease recovery (and quarantine)
//     queue_backend.cc    what those share: record and array parameters,
//                         the constructor, raw input as text
//   queue_store_admin.cc  the operator side: cancel, load, query, dedup
//                         lookup, purges, stats
#ifndef JOBPACT_SRC_BACKENDS_POSTGRES_QUEUE_STORE_H_
#define JOBPACT_SRC_BACKENDS_POSTGRES_QUEUE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/store_backend.h"
#include "src/backends/postgres/connection.h"
#include "src/backends/postgres/control_store.h"
#include "src/backends/postgres/core.h"

// The columns every job read selects (the shared codec's order).
#define JOBPACT_PG_JOB_COLUMNS                                                             \
  "job_id, status, attempt, max_attempts, ready_at_ns, enqueued_at_ns, updated_at_ns, "    \
  "finished_at_ns, epoch, lease_recoveries, lock_waits, previous_delay_ns, checkpoint, "   \
  "failure_class, failure_code, failure_message, reason, result, envelope, history, "      \
  "lease_token, lease_expires_at_ns, dead_lettered_at_ns, raw_envelope, audit, job_type, " \
  "queue, priority, cancel_requested"

// The columns a change writes ($5..$25 after the four of the condition):
// every field the engine may change. An empty checkpoint keeps the stored
// one, and a change of a running job keeps the audit and a cancel request an
// operator stored meanwhile (JobChange).
#define JOBPACT_PG_RECORD_SET                                                                  \
  "status = $5, attempt = $6, max_attempts = $7, ready_at_ns = $8, updated_at_ns = $9, "       \
  "finished_at_ns = $10, epoch = $11, lease_recoveries = $12, lock_waits = $13, "              \
  "previous_delay_ns = $14, checkpoint = CASE WHEN $15::text = '' THEN checkpoint ELSE $15 "   \
  "END, failure_class = $16, failure_code = $17, failure_message = $18, reason = $19, "        \
  "result = $20, lease_token = $21, lease_expires_at_ns = $22, dead_lettered_at_ns = $23, "    \
  "audit = CASE WHEN $2::text = 'running' THEN audit ELSE $24::jsonb END, cancel_requested = " \
  "CASE WHEN $2::text = 'running' THEN greatest(cancel_requested, $25::integer) ELSE "         \
  "$25::integer END"

// A job that makes another of its dedup key a duplicate (FindDuplicate):
// running, or succeeded since $3. A CASE, not an OR of the statuses, so
// that the planner reads the few rows of the key from the dedup index and
// never joins in an index of every running or finished job (a bitmap of
// every job succeeded within the window, per lookup: O(jobs)). PREFIX: ""
// or the table's alias with its dot.
#define JOBPACT_PG_DEDUP_LIVE(PREFIX)                                                   \
  "CASE " PREFIX "status WHEN 'running' THEN true WHEN 'succeeded' THEN " PREFIX        \
  "finished_at_ns >= $3 ELSE false END"

namespace jobpact {
namespace postgres {

// Shared by the queue store's files, defined (and described) in
// queue_backend.cc: a text[] parameter value, parameter rows as array
// columns (for unnest), a record's mutable fields as parameters.
std::string TextArray(const std::vector<std::string>& items);
std::vector<std::string> ArrayColumns(const std::vector<internal::Params>& rows, int columns);
void AddRecord(internal::Params& p, const JobRecord& r);
// The SQL of the lease query (queue_lease.cc) and of the batch update
// (queue_write.cc), which the constructor prepares (Core::SqlOf).
std::string LeaseSql(bool some_queues);
std::string BatchUpdateSql();

// Raw input as the raw_envelope column holds it. PostgreSQL text takes
// neither NUL bytes nor invalid UTF-8, yet quarantined input is kept whole
// (SPEC 1: never dropped, never changed). Such input -- and input that
// starts with the marker itself, so that reading back is unambiguous -- is
// stored as kHexRawMarker followed by its bytes in hex; anything else as
// it is.
inline constexpr std::string_view kHexRawMarker = "\x1bjobpact-hex:";
std::string RawInputToText(std::string_view raw);
// The inverse; text without the marker is returned as it is.
std::string RawInputFromText(std::string text);
// internal::ReadJobRow, with the raw input read back by RawInputFromText.
Result<JobRecord> ReadPgJobRow(const internal::PgRow& row, bool with_history = true);

class PostgresQueueBackend final : public StoreBackend {
 public:
  using Core = PostgresBackend::Core;

  explicit PostgresQueueBackend(std::shared_ptr<Core> core);

  std::string_view Name() const override { return "postgres"; }

  // Inserts prepared jobs through `conn` (inside a transaction), and
  // notifies idle workers (delivered when that transaction commits).
  // Backpressure (ControlKind::kMaxQueueDepth): OK if `jobs` fit in their
  // queues' maximum depths, checked on `conn` in its transaction.
  static Status CheckDepthLimitsOn(Core& core, internal::Connection& conn,
                                   const std::vector<JobChange>& jobs);
  static Result<std::vector<EnqueueResult>> InsertOn(Core& core, internal::Connection& conn,
                                                     std::vector<JobChange>& jobs,
                                                     const EnqueueOptions& options, TimePoint now);
  // Inserts new jobs' rows in one statement (see queue_enqueue.cc).
  static Status InsertRows(Core& core, internal::Connection& conn,
                           const std::vector<internal::Params>& rows);

  Result<bool> WaitForWork(Duration timeout) override { return core_->WaitForNotify(timeout); }
  // The bundle's lock and idempotency rows live beside its jobs: the
  // completion releases and records them in its own transaction, and a job
  // with both keys takes them in one statement (guard_rows.h).
  bool CompletesGuards(const LockStore& locks, const IdempotencyStore& idempotency) const override {
    return &locks == core_->own_locks && &idempotency == core_->own_idempotency;
  }
  bool AppliesGuards() const override { return true; }
  Result<LockLease> AcquireLockAndClaim(std::string_view lock_key, std::string_view idempotency_key,
                                        std::string_view owner, Duration ttl,
                                        ClaimOutcome* claim) override;

 protected:
  Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                const EnqueueOptions& options,
                                                TimePoint now) override {
    std::vector<EnqueueResult> results;
    JOBPACT_PG_RETURN_IF_ERROR(core_->Tx("Enqueue", [&](internal::Connection& conn) -> Status {
      JOBPACT_ASSIGN_OR_RETURN(results, InsertOn(*core_, conn, jobs, options, now));
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

 private:
  // What the concurrency limits and tenant caps leave for this lease.
  struct LeaseLimits {
    // Per limited job type: how many more may start.
    std::map<std::string, std::int64_t, std::less<>> type_room;
    // Per capped queue: its tenant cap; per (queue, tenant) of those
    // queues: its running jobs.
    std::map<std::string, std::int64_t, std::less<>> tenant_cap;
    std::map<std::pair<std::string, std::string>, std::int64_t> tenant_running;

    // True if a job of `job_type` and `tenant` in `queue` may start.
    bool Fits(const std::string& job_type, const std::string& queue,
              const std::string& tenant) const;
    // Counts such a job as started.
    void Take(const std::string& job_type, const std::string& queue, const std::string& tenant);
  };
  // Reads the limits into *limits; while any is set, first takes the lock
  // that serializes limited leases (to the end of the transaction).
  Status LoadLeaseLimits(internal::Connection& conn, LeaseLimits* limits);
  // The lease step's dedup check (DequeueRequest::dedup_window) of one
  // round's deliveries, before their rows are written: (*duplicate_of)[k]
  // is what FindDuplicate(key, job id, since) answers for changes[k] once
  // the jobs before it are leased ("" if nothing).
  Status FindDuplicatesOn(internal::Connection& conn, const std::vector<JobChange>& changes,
                          TimePoint since, std::vector<std::string>* duplicate_of);
  // Writes `c` over its row if the row matches c.expect (and appends its
  // history entry, naming `worker` in it if given). kAborted or kNotFound
  // when it does not.
  Status UpdateRow(internal::Connection& conn, const JobChange& c, std::string_view worker = {});
  // Writes every change of `changes` in one statement (BatchUpdateSql),
  // each conditional on its expect; (*matched)[i] tells whether changes[i]
  // was written. Each change has at most one history entry (naming
  // `worker` if given). REQUIRES: distinct job ids.
  Status UpdateRows(internal::Connection& conn, const std::vector<const JobChange*>& changes,
                    std::string_view worker, std::vector<bool>* matched);
  // Marks the delivery's idempotency claim completed in the completion's
  // transaction, kept `retention`; kAborted if another owner holds or
  // completed the key.
  Status CompleteClaimOn(internal::Connection& conn, const JobChange& c, std::int64_t now_ns,
                         Duration retention);
  // Of `writes[i]` for i in `which`: records the claims of those whose
  // guards say kRecord and that run no effect (before their job rows are
  // written, so a stale write still leaves the key recorded); sets out[i]
  // to kAborted for each whose claim is no longer held (its job is then not
  // written).
  Status RecordGuardClaims(internal::Connection& conn, const std::vector<JobWrite>& writes,
                           const std::vector<std::size_t>& which, std::int64_t now_ns,
                           std::vector<Status>* out);
  // Of `writes[i]` for i in `which`: releases the locks and drops the claims
  // their guards give back, whatever became of their completions.
  Status ReleaseGuards(internal::Connection& conn, const std::vector<JobWrite>& writes,
                       const std::vector<std::size_t>& which);
  // Why a conditional write matched no row: kNotFound or kAborted.
  Status StaleError(internal::Connection& conn, const JobChange& c, std::string_view what);
  // The record of a row, or -- for a row that no longer decodes -- the row
  // quarantined (engine::Quarantine) in its place, with `quarantined` set.
  Result<JobRecord> DecodeOrQuarantine(internal::Connection& conn, const internal::PgRow& row,
                                       TimePoint now, bool with_history, bool* quarantined);
  // Notifies idle workers when the current transaction commits.
  Status Notify(internal::Connection& conn) { return NotifyOn(*core_, conn); }
  static Status NotifyOn(Core& core, internal::Connection& conn) {
    return conn.Exec("SELECT pg_notify($1, '')", internal::Params().Add(core.channel()), "notify")
        .status();
  }
  Result<int> PurgeInChunks(std::string_view what, const char* sql, TimePoint older_than);

  const std::shared_ptr<Core> core_;
  // Immutable after construction.
  const std::string lease_any_;
  const std::string lease_some_;
  const std::string batch_update_;
};

}  // namespace postgres
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_POSTGRES_QUEUE_STORE_H_
