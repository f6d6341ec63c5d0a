// Tenant fairness in the in-memory store's lease step (issue 11): the exact
// order of the turns (the conformance suite's fairness cases run on every
// backend; these pin how this store takes turns).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jobpact/in_memory/queue_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "tests/backends/tenant_fairness.h"

namespace jobpact {
namespace {

using test_support::TenantJob;
using testing::IsOk;

std::vector<std::string> LeaseIds(InMemoryQueueBackend& q, int n) {
  DequeueRequest req;
  req.max_jobs = n;
  req.worker_id = "w1";
  Result<std::vector<Delivery>> got = q.Dequeue(req);
  EXPECT_THAT(got.status(), IsOk());
  std::vector<std::string> ids;
  if (got.ok()) {
    for (const Delivery& d : *got) ids.push_back(d.job.envelope.job_id);
  }
  return ids;
}

TEST(InMemoryTenantFairnessTest, TenantsTakeTurnsWithinAPriorityAndInReadyOrderWithinATenant) {
  auto clock = std::make_shared<testing::ManualClock>();
  InMemoryQueueBackend queue(clock);
  for (const char* id : {"job_a1", "job_a2", "job_a3"}) {
    ASSERT_THAT(queue.Enqueue(TenantJob(id, "acme"), {}).status(), IsOk());
    clock->Advance(Millis(1));
  }
  ASSERT_THAT(queue.Enqueue(TenantJob("job_b1", "bolt"), {}).status(), IsOk());
  clock->Advance(Millis(1));
  ASSERT_THAT(queue.Enqueue(TenantJob("job_c1", "corp"), {}).status(), IsOk());
  ASSERT_THAT(queue.Enqueue(TenantJob("job_b2", "bolt"), {}).status(), IsOk());
  // A higher priority still goes first, whoever's it is.
  ASSERT_THAT(queue.Enqueue(TenantJob("job_urgent", "acme", "report.build", 5), {}).status(),
              IsOk());
  EXPECT_THAT(LeaseIds(queue, 7), ::testing::ElementsAre("job_urgent", "job_b1", "job_c1",
                                                         "job_a1", "job_b2", "job_a2", "job_a3"));
}

TEST(InMemoryTenantFairnessTest, TheTurnCarriesOverFromOneLeaseToTheNext) {
  auto clock = std::make_shared<testing::ManualClock>();
  InMemoryQueueBackend queue(clock);
  for (int i = 0; i < 4; ++i) {
    ASSERT_THAT(queue.Enqueue(TenantJob("job_a" + std::to_string(i), "acme"), {}).status(), IsOk());
    ASSERT_THAT(queue.Enqueue(TenantJob("job_b" + std::to_string(i), "bolt"), {}).status(), IsOk());
  }
  std::vector<std::string> order;
  for (int i = 0; i < 8; ++i) {
    for (std::string& id : LeaseIds(queue, 1)) order.push_back(std::move(id));
  }
  EXPECT_THAT(order, ::testing::ElementsAre("job_a0", "job_b0", "job_a1", "job_b1", "job_a2",
                                            "job_b2", "job_a3", "job_b3"));
}

}  // namespace
}  // namespace jobpact
