// A QueueBackend written outside jobpact, against its installed headers
// only: what "adding a backend" means. It derives from jobpact::StoreBackend,
// which implements the QueueBackend methods (checks, the contract engine's
// transitions, the exception boundary), and implements the storage
// primitives over one std::map under one mutex, with linear scans: small
// rather than fast. map_queue_backend_contract_test.cc runs the conformance
// suite on it with one line.
//
// Thread-safe.
#ifndef EXAMPLE_MAP_QUEUE_BACKEND_H_
#define EXAMPLE_MAP_QUEUE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/store_backend.h"

namespace example {

class MapQueueBackend final : public jobpact::StoreBackend {
 public:
  explicit MapQueueBackend(std::shared_ptr<jobpact::Clock> clock)
      : StoreBackend(std::move(clock)) {}

  std::string_view Name() const override { return "map"; }

 protected:
  // The storage primitives (jobpact/store_backend.h states what each must do).
  jobpact::Result<std::vector<jobpact::EnqueueResult>> InsertJobs(
      std::vector<jobpact::JobChange>& jobs, const jobpact::EnqueueOptions& options,
      jobpact::TimePoint now) override;
  std::vector<jobpact::Status> WriteJobs(std::vector<jobpact::JobWrite>& writes) override;
  jobpact::Status LeaseJobs(const jobpact::DequeueRequest& request, jobpact::TimePoint now,
                            std::vector<jobpact::Delivery>* out) override;
  jobpact::Result<jobpact::Lease> RenewLease(const jobpact::Lease& lease,
                                             jobpact::TimePoint expires_at,
                                             std::string_view checkpoint,
                                             jobpact::TimePoint now) override;
  jobpact::Result<std::vector<jobpact::JobChange>> RecoverJobs(int max_recoveries,
                                                               jobpact::TimePoint now) override;
  jobpact::Result<std::optional<jobpact::JobRecord>> LoadJob(std::string_view job_id) override;
  jobpact::Result<std::vector<jobpact::JobRecord>> QueryJobs(
      const jobpact::JobQuery& query) override;
  jobpact::Result<std::optional<std::string>> FindDuplicateJob(std::string_view dedup_key,
                                                               std::string_view self_job_id,
                                                               jobpact::TimePoint since) override;
  jobpact::Result<int> DeleteJobs(jobpact::JobPlacement placement,
                                  jobpact::TimePoint older_than) override;
  jobpact::Result<jobpact::QueueStats> ReadStats(jobpact::TimePoint now) override;
  jobpact::Status RequestCancel(const jobpact::JobChange& change) override;
  jobpact::Result<jobpact::ControlState> LoadControl() override;
  jobpact::Status WriteControl(const jobpact::ControlWrite& write) override;
  jobpact::Result<std::vector<std::string>> LoadControlAudit(std::size_t limit) override;
  jobpact::Status StorePolicies(const std::vector<jobpact::PublishedPolicy>& policies) override;
  jobpact::Result<std::vector<jobpact::PublishedPolicy>> LoadPolicies() override;

 private:
  // One conditional write. REQUIRES: mu_ held.
  jobpact::Status WriteLocked(jobpact::JobWrite& write);
  // Tenant fairness: `sorted` (by priority, then ready order) reordered so
  // that within a priority the tenants take turns, starting after the
  // tenant leased last. REQUIRES: mu_ held.
  std::vector<jobpact::JobRecord*> TakeTurns(const std::vector<jobpact::JobRecord*>& sorted) const;

  std::mutex mu_;
  // Guarded by mu_: every job by id, and every queue ever used (Stats lists
  // a queue once it has had a job, as the reference backend does).
  std::map<std::string, jobpact::JobRecord, std::less<>> jobs_;
  std::set<std::string, std::less<>> queues_;
  jobpact::ControlState control_;
  std::vector<std::string> control_audit_;
  std::map<std::string, jobpact::PublishedPolicy> policies_;
  std::uint64_t deliveries_ = 0;
  std::string last_tenant_;  // The tenant of the job leased last.
};

}  // namespace example

#endif  // EXAMPLE_MAP_QUEUE_BACKEND_H_
