// Fixture helpers shared by the contract suites, and the link anchor.
#include "jobpact/testing/backend_contract.h"

#include <utility>

#include "jobpact/testing/matchers.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

void BackendContractTest::SetUp() {
  // A fixed, round start time so failures are easy to read.
  clock_ = std::make_shared<ManualClock>();
  ASSERT_TRUE(GetParam().make) << "factory " << GetParam().name << " has no make()";
  set_ = GetParam().make(clock_);
  queue_ = set_.queue.get();
  admin_ = set_.admin ? set_.admin.get() : dynamic_cast<QueueAdmin*>(queue_);
  locks_ = set_.locks.get();
  idem_ = set_.idempotency.get();
  rates_ = set_.rate_limits.get();
  if (!queue_ && !locks_ && !idem_) GTEST_SKIP() << GetParam().name << ": backend unavailable";
  ASSERT_TRUE(queue_ == nullptr || admin_ != nullptr)
      << GetParam().name << ": the queue has no operator side (QueueAdmin); derive it from "
      << "StoreBackend or give BackendSet::admin";
}

void QueueBackendContract::SetUp() {
  BackendContractTest::SetUp();
  if (!IsSkipped() && queue_ == nullptr) GTEST_SKIP() << "no QueueBackend";
}
void FinishedRetentionContract::SetUp() {
  BackendContractTest::SetUp();
  if (IsSkipped()) return;
  if (queue_ == nullptr || admin_ == nullptr) GTEST_SKIP() << "no QueueBackend with a QueueAdmin";
  FinishedRetention keep;
  keep.succeeded = 1000000;  // Deletes nothing: asks whether the store can trim.
  if (admin_->TrimFinished(keep).status().code() == StatusCode::kUnimplemented) {
    GTEST_SKIP() << "this store retains finished jobs by age only (no DeleteSurplusJobs)";
  }
}
void DeadLetterContract::SetUp() {
  BackendContractTest::SetUp();
  if (!IsSkipped() && queue_ == nullptr) GTEST_SKIP() << "no QueueBackend";
}
void QueueAdminContract::SetUp() {
  BackendContractTest::SetUp();
  if (!IsSkipped() && queue_ == nullptr) GTEST_SKIP() << "no QueueBackend";
}
void LockStoreContract::SetUp() {
  BackendContractTest::SetUp();
  if (!IsSkipped() && locks_ == nullptr) GTEST_SKIP() << "no LockStore";
}
void RateLimitStoreContract::SetUp() {
  BackendContractTest::SetUp();
  if (!IsSkipped() && rates_ == nullptr) GTEST_SKIP() << "no RateLimitStore";
}
void IdempotencyStoreContract::SetUp() {
  BackendContractTest::SetUp();
  if (!IsSkipped() && idem_ == nullptr) GTEST_SKIP() << "no IdempotencyStore";
}
void CompletionGuardsContract::SetUp() {
  BackendContractTest::SetUp();
  if (!IsSkipped() && (queue_ == nullptr || locks_ == nullptr || idem_ == nullptr)) {
    GTEST_SKIP() << "needs the QueueBackend, LockStore and IdempotencyStore";
  }
}

Envelope BackendContractTest::MakeJob(std::string id, std::string type, int priority,
                                      std::string queue) const {
  Envelope env;
  env.job_id = std::move(id);
  env.job_type = std::move(type);
  env.payload = R"({"n":1})";
  env.created_at = clock_->Now();
  env.trace_id = "trc_" + env.job_id;
  env.timeout = Seconds(30);
  env.visibility_timeout = Seconds(45);
  env.priority = priority;
  env.queue = std::move(queue);
  return env;
}

std::string BackendContractTest::Put(const Envelope& env) {
  Result<EnqueueResult> r = queue_->Enqueue(env, EnqueueOptions{});
  EXPECT_THAT(r.status(), IsOk()) << "Enqueue(" << env.job_id << ")";
  if (!r.ok()) return {};
  EXPECT_FALSE(r->duplicate) << env.job_id;
  return r->job_id;
}

std::vector<Delivery> BackendContractTest::Take(int max_jobs, std::vector<std::string> queues,
                                                std::string worker) {
  DequeueRequest req;
  req.max_jobs = max_jobs;
  req.queues = std::move(queues);
  req.worker_id = std::move(worker);
  Result<std::vector<Delivery>> r = queue_->Dequeue(req);
  EXPECT_THAT(r.status(), IsOk()) << "Dequeue";
  if (!r.ok()) return {};
  return std::move(*r);
}

Delivery BackendContractTest::TakeOne(const std::string& job_id, std::string worker,
                                      std::vector<std::string> queues) {
  std::vector<Delivery> got = Take(1, std::move(queues), std::move(worker));
  EXPECT_EQ(got.size(), 1u) << "expected to deliver " << job_id;
  if (got.empty()) return {};
  EXPECT_EQ(got[0].job.envelope.job_id, job_id);
  return std::move(got[0]);
}

JobRecord BackendContractTest::MustGet(const std::string& job_id) {
  Result<JobRecord> r = admin_->Get(job_id);
  EXPECT_THAT(r.status(), IsOk()) << "Get(" << job_id << ")";
  if (!r.ok()) return {};
  return std::move(*r);
}

void BackendContractTest::PutInDlq(const Envelope& env, std::string why, Failure failure) {
  Put(env);
  Delivery d = TakeOne(env.job_id);
  Completion c;
  c.to = JobStatus::kDeadLettered;
  c.reason = std::move(why);
  c.failure = std::move(failure);
  Status s = queue_->Complete(d, c);
  EXPECT_THAT(s, IsOk());
}

Completion BackendContractTest::Outcome(JobStatus to, std::string reason) {
  Completion c;
  c.to = to;
  c.reason = std::move(reason);
  return c;
}

int contract_internal::LinkAllSuites() {
  return QueueContractAnchor() + DeadLetterContractAnchor() + LockStoreContractAnchor() +
         IdempotencyStoreContractAnchor() + ConcurrencyContractAnchor() + LeaseContractAnchor() +
         AdminContractAnchor() + HostileInputContractAnchor() + RateLimitContractAnchor() +
         FairnessContractAnchor() + GuardsContractAnchor() + RetentionContractAnchor();
}

}  // namespace testing
}  // namespace jobpact
