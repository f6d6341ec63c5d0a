// File: jobpact/in_memory/queue_backend.h
//
// InMemoryQueueBackend is the reference QueueBackend: every rule of
// jobpact/queue_backend.h, held in process memory behind one mutex: the
// storage primitives of StoreBackend over standard maps and sets, with the
// state machine left to the engine (jobpact/transitions.h). It is
// what unit tests run against (with a testing::ManualClock) and what the
// conformance suite (jobpact/testing/backend_contract.h) is first checked
// on. It is also fast enough for a single-process service that can afford
// to lose its queue on a crash: dequeue and complete are O(log n) in the
// backlog (figures in docs/benchmarks.md).
//
// Example:
//   auto clock = std::make_shared<jobpact::testing::ManualClock>();
//   auto queue = std::make_shared<jobpact::InMemoryQueueBackend>(clock);
//   jobpact::Envelope env;
//   env.job_type = "invoice.generate";
//   jobpact::PrepareForEnqueue(env, clock->Now());
//   auto r = queue->Enqueue(env, {});
//   auto batch = queue->Dequeue({.max_jobs = 16});
//
// Semantics the interface leaves to the implementation, chosen here (the
// contract suite checks them, so every backend agrees):
//   - A lease has expired when now >= expires_at; a dedup-window match is
//     now - enqueued_at < window (so a zero window disables dedup).
//   - ready_at is never earlier than enqueued_at: a job scheduled in the
//     past is ready from its enqueue, in arrival order.
//   - The first history entry of a job records its creation with
//     from == to ("enqueued", or "invalid_envelope" for DeadLetterInvalid).
//   - JobRecord::reason is the reason of the latest outcome (Complete,
//     lease recovery, replay, discard); deliveries do not change it.
//   - Completion::transactional_effect runs with native == nullptr while the
//     backend's mutex is held (that is what makes it atomic with the
//     completion), so it must not call back into this backend.
//   - A std::bad_alloc inside a method is returned as kResourceExhausted.
//
// Thread-safe.
#ifndef JOBPACT_IN_MEMORY_QUEUE_BACKEND_H_
#define JOBPACT_IN_MEMORY_QUEUE_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/store_backend.h"

namespace jobpact {

class JOBPACT_EXPORT InMemoryQueueBackend final : public StoreBackend {
 public:
  explicit InMemoryQueueBackend(std::shared_ptr<Clock> clock = SystemClock::Default());
  ~InMemoryQueueBackend() override;

  std::string_view Name() const override { return "in_memory"; }
  // Deliveries copy the records Enqueue stored; nothing is decoded.
  bool DeliversStoredEnvelopes() const override { return true; }

  // --- Inspection and fault injection, for tests and demos ---

  // Jobs stored, in any status (DLQ entries included, purged ones not).
  std::size_t Size() const;
  // Jobs that a Dequeue at the current time could deliver (ready_at <= now).
  std::size_t ReadyCount();
  // Makes the live lease of a running job look expired (its expiry moves to
  // the past), as if its worker had died, so the next RecoverExpiredLeases
  // takes it back. kNotFound for an unknown job; kFailedPrecondition if it
  // is not running.
  Status ForceExpireLease(std::string_view job_id);

 protected:
  // Storage primitives (jobpact/store_backend.h).
  Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                const EnqueueOptions& options,
                                                TimePoint now) override;
  std::vector<Status> WriteJobs(std::vector<JobWrite>& writes) override;
  // Completions apply the engine to the stored record (no copy of it).
  bool CompletesInPlace() const override { return true; }
  void CompleteInPlace(InPlaceCompletion* items, std::size_t n, TimePoint now) override;
  // Deliveries are copied over the caller's spent ones (no allocation per
  // job while the store's mutex is held).
  bool ReusesDeliveries() const override { return true; }
  Status LeaseJobs(const DequeueRequest& request, TimePoint now,
                   std::vector<Delivery>* out) override;
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
  Result<ControlState> LoadControl() override;
  Status WriteControl(const ControlWrite& write) override;
  Result<std::vector<std::string>> LoadControlAudit(std::size_t limit) override;
  Status StorePolicies(const std::vector<PublishedPolicy>& policies) override;
  Result<std::vector<PublishedPolicy>> LoadPolicies() override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobpact

#endif  // JOBPACT_IN_MEMORY_QUEUE_BACKEND_H_
