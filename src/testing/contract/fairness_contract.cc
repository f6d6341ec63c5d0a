// Tenant fairness at the lease step (issue 11), on every backend: the
// ready jobs of one queue are handed out in turn across their tenant_ids
// (jobs without one are one tenant of their own), within a priority, and
// in ready order within a tenant; so one tenant's burst cannot starve the
// others. How a backend carries the turn from one lease to the next is its
// own; what the suite pins is that no tenant waits behind another's
// backlog.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::FairnessContractAnchor() { return 0; }

namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

std::vector<std::string> IdsInOrder(const std::vector<Delivery>& ds) {
  std::vector<std::string> out;
  for (const Delivery& d : ds) out.push_back(d.job.envelope.job_id);
  return out;
}

TEST_P(QueueBackendContract, ASmallTenantIsNotStarvedByABigTenantsBurst) {
  // A job of `tenant` (empty: none) in the default queue.
  auto job = [this](const std::string& id, const std::string& tenant, int priority = 0) {
    Envelope env = MakeJob(id, "report.build", priority);
    env.tenant_id = tenant;
    return env;
  };
  // The test: tenant A enqueues 20,000 jobs, tenant B then 20; B's
  // jobs all start before A's backlog is a tenth done. Ids and ready times
  // put every one of A's jobs first in plain priority-then-age order.
  constexpr int kAJobs = 20000;
  std::vector<Envelope> batch;
  for (int i = 0; i < kAJobs; ++i) {
    batch.push_back(job("job_a" + std::to_string(100000 + i), "tenant-a"));
    if (batch.size() == 1000) {
      ASSERT_THAT(queue_->EnqueueBatch(batch, {}).status(), IsOk());
      batch.clear();
    }
  }
  Advance(Millis(1));
  for (int i = 0; i < 20; ++i) batch.push_back(job("job_b" + std::to_string(100 + i), "tenant-b"));
  ASSERT_THAT(queue_->EnqueueBatch(batch, {}).status(), IsOk());

  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  int a_started = 0;
  int b_started = 0;
  while (b_started < 20 && a_started < kAJobs) {
    const std::vector<Delivery> got = Take(16);
    ASSERT_FALSE(got.empty());
    for (const Delivery& d : got) {
      ++(d.job.envelope.tenant_id == "tenant-b" ? b_started : a_started);
      ASSERT_THAT(queue_->Complete(d, done), IsOk());
    }
  }
  EXPECT_EQ(b_started, 20);
  EXPECT_LT(a_started, kAJobs / 10) << "B's 20 jobs must all start before A's backlog is a tenth done";
  EXPECT_LE(a_started, 32) << "in turn: each lease of 16 takes as many of B's jobs as of A's";
}

TEST_P(QueueBackendContract, TenantsTakeTurnsWithinAPriorityInReadyOrderWithinATenant) {
  // A job of `tenant` (empty: none) in the default queue.
  auto job = [this](const std::string& id, const std::string& tenant, int priority = 0) {
    Envelope env = MakeJob(id, "report.build", priority);
    env.tenant_id = tenant;
    return env;
  };
  for (const char* id : {"job_a1", "job_a2", "job_a3"}) {
    Put(job(id, "acme"));
    Advance(Millis(1));
  }
  Put(job("job_b1", "bolt"));
  Advance(Millis(1));
  Put(job("job_c1", "corp"));
  Put(job("job_b2", "bolt"));
  Advance(Millis(1));
  Put(job("job_n1", ""));  // No tenant: a tenant of its own.
  // A higher priority still goes first, whoever's it is.
  Put(job("job_urgent", "acme", 5));

  const std::vector<std::string> order = IdsInOrder(Take(8));
  ASSERT_EQ(order.size(), 8u);
  EXPECT_EQ(order[0], "job_urgent");
  // One turn: every tenant's oldest job before any tenant's second.
  EXPECT_THAT(std::vector<std::string>(order.begin() + 1, order.begin() + 5),
              UnorderedElementsAre("job_a1", "job_b1", "job_c1", "job_n1"));
  EXPECT_THAT(std::vector<std::string>(order.begin() + 5, order.begin() + 7),
              UnorderedElementsAre("job_a2", "job_b2"));
  EXPECT_EQ(order[7], "job_a3");
}

TEST_P(QueueBackendContract, TenantsTakeTurnsAcrossLeasesOfOneJob) {
  // A job of `tenant` (empty: none) in the default queue.
  auto job = [this](const std::string& id, const std::string& tenant, int priority = 0) {
    Envelope env = MakeJob(id, "report.build", priority);
    env.tenant_id = tenant;
    return env;
  };
  // A worker leasing one job at a time still alternates: the turn is the
  // store's, not one lease's.
  for (int i = 0; i < 4; ++i) {
    Put(job("job_a" + std::to_string(i), "acme"));
    Put(job("job_b" + std::to_string(i), "bolt"));
    Advance(Millis(1));
  }
  std::map<std::string, int> taken;
  std::vector<std::string> order;
  for (int i = 0; i < 8; ++i) {
    const std::vector<Delivery> got = Take(1);
    ASSERT_EQ(got.size(), 1u);
    order.push_back(got[0].job.envelope.job_id);
    ++taken[got[0].job.envelope.tenant_id];
    // After every second lease, each tenant has had one more.
    if (i % 2 == 1) {
      EXPECT_EQ(taken["acme"], taken["bolt"]) << "after lease " << i + 1;
    }
  }
  std::vector<std::string> acme;
  std::vector<std::string> bolt;
  for (const std::string& id : order) (id[4] == 'a' ? acme : bolt).push_back(id);
  EXPECT_THAT(acme, ElementsAre("job_a0", "job_a1", "job_a2", "job_a3"));
  EXPECT_THAT(bolt, ElementsAre("job_b0", "job_b1", "job_b2", "job_b3"));
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
