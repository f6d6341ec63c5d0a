// Private: the SQLite queue store's class, whose definitions are split by
// side:
//   the worker side:
//     queue_backend.cc    what the others share (stale errors, conditional
//                         row writes, quarantine), enqueue (depth limits,
//                         dedup, insert) and the factory
//     queue_write.cc      WriteJobs (grouped completions, savepoints for
//                         transactional effects) with the completion guards
//                         and AcquireLockAndClaim
//     queue_lease.cc      lease (with the delivery-time dedup check), renew,
//                         lease recovery
//   queue_store_admin.cc  the operator side: cancel, load, query, dedup
//                         lookup, purges, trims, stats
// Every primitive that changes state is one write transaction (Core::Write);
// what a change does to a job is the engine's (jobpact/transitions.h), never
// SQL's: a job row is written from the record the engine computed,
// conditional on (job id, status, epoch, lease token).
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_QUEUE_STORE_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_QUEUE_STORE_H_

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

// The condition of the partial indexes of final jobs (schema version 6),
// repeated verbatim by the queries that use them (SQLite uses a partial
// index only when the query's WHERE implies its condition term by term).
// Comparisons, not an IN list: SQLite builds a temporary b-tree for an IN
// list of three or more values each time a statement runs, and the
// condition is evaluated by every INSERT and status UPDATE.
#define JOBPACT_SQLITE_FINAL_JOB \
  "status = 'succeeded' OR status = 'failed' OR status = 'discarded'"

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

// FindDuplicateJob's query, through `conn` (inside a transaction).
Result<std::optional<std::string>> FindDuplicateOn(internal::Connection& conn,
                                                   std::string_view dedup_key,
                                                   std::string_view self_job_id, TimePoint since);

// Thread-safe.
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


}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_QUEUE_STORE_H_
