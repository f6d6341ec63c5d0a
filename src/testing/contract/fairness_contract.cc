// Tenant fairness at the lease step (issue 11), on every backend: the
// ready jobs of one queue are handed out in turn across their tenant_ids
// (jobs without one are one tenant of their own), within a priority, and
// in ready order within a tenant; so one tenant's burst cannot starve the
// others. How a backend carries the turn from one lease to the next is its
// own; what the suite pins is that no tenant waits behind another's
// backlog. And the per-tenant concurrency cap
// (ControlKind::kTenantConcurrencyLimit), obeyed in the lease step.
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
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

ControlRule TenantCap(std::string queue, int limit) {
  ControlRule r;
  r.kind = ControlKind::kTenantConcurrencyLimit;
  r.subject = std::move(queue);
  r.limit = limit;
  r.actor = "alice";
  r.reason = "INC-9: one tenant's export flood";
  return r;
}

std::map<std::string, int> ByTenant(const std::vector<Delivery>& ds) {
  std::map<std::string, int> n;
  for (const Delivery& d : ds) ++n[d.job.envelope.tenant_id];
  return n;
}

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

// --- The per-tenant concurrency cap (kTenantConcurrencyLimit) ---

TEST_P(QueueAdminContract, ATenantCapHoldsEachTenantOfTheQueueToItsLimit) {
  auto job = [this](const std::string& id, const std::string& tenant,
                    const std::string& queue = "default") {
    Envelope env = MakeJob(id, "report.build", 0, queue);
    env.tenant_id = tenant;
    return env;
  };
  for (int i = 1; i <= 5; ++i) {
    Put(job("job_a" + std::to_string(i), "acme"));
    Put(job("job_b" + std::to_string(i), "bolt"));
    Advance(Millis(1));
  }
  Put(job("job_n1", ""));
  Put(job("job_o1", "acme", "other"));  // Another queue: not capped, not counted.
  ASSERT_THAT(admin_->SetControl(TenantCap("default", 2)), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState state, admin_->ReadControl());
  EXPECT_EQ(state.TenantConcurrencyLimit("default"), 2);
  EXPECT_EQ(state.TenantConcurrencyLimit("other"), std::nullopt);

  std::vector<Delivery> first = Take(20);
  EXPECT_THAT(ByTenant(first), ElementsAre(std::pair<const std::string, int>("", 1),
                                           std::pair<const std::string, int>("acme", 3),
                                           std::pair<const std::string, int>("bolt", 2)))
      << "two each of the capped queue's tenants; the other queue's acme job besides";
  EXPECT_THAT(Take(20, {}, "w2"), IsEmpty()) << "another worker gets none either";

  const auto acme_in_default = std::find_if(first.begin(), first.end(), [](const Delivery& d) {
    return d.job.envelope.tenant_id == "acme" && d.job.envelope.queue == "default";
  });
  ASSERT_NE(acme_in_default, first.end());
  ASSERT_THAT(queue_->Complete(*acme_in_default, Outcome(JobStatus::kSucceeded, "")), IsOk());
  std::vector<Delivery> next = Take(20);
  ASSERT_THAT(next, SizeIs(1)) << "a finished job frees one slot of its tenant";
  EXPECT_EQ(next[0].job.envelope.tenant_id, "acme");

  ASSERT_THAT(admin_->SetControl(TenantCap("default", 3)), IsOk());
  EXPECT_THAT(ByTenant(Take(20)), ElementsAre(std::pair<const std::string, int>("acme", 1),
                                              std::pair<const std::string, int>("bolt", 1)))
      << "a raised cap applies at the next lease";
  ASSERT_THAT(admin_->ClearControl({ControlKind::kTenantConcurrencyLimit, "default"}, "alice",
                                   "flood over"),
              IsOk());
  EXPECT_THAT(ByTenant(Take(20)), ElementsAre(std::pair<const std::string, int>("acme", 1),
                                              std::pair<const std::string, int>("bolt", 2)))
      << "a cleared cap lets the rest go";
}

TEST_P(QueueAdminContract, AZeroTenantCapHoldsTheQueueAndAnExpiredLeaseFreesItsSlot) {
  for (const char* id : {"job_1", "job_2"}) {
    Envelope env = MakeJob(id, "report.build");
    env.tenant_id = "acme";
    Put(env);
  }
  ASSERT_THAT(admin_->SetControl(TenantCap("default", 0)), IsOk());
  EXPECT_THAT(Take(10), IsEmpty());
  ASSERT_THAT(admin_->SetControl(TenantCap("default", 1)), IsOk());
  Delivery held = TakeOne("job_1");
  EXPECT_THAT(Take(10), IsEmpty());
  // The holder dies: once its lease is recovered the tenant's slot is free.
  Advance(Seconds(46));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> rec, queue_->RecoverExpiredLeases(3));
  ASSERT_THAT(rec, SizeIs(1));
  EXPECT_THAT(Take(1), SizeIs(1));
}

TEST_P(QueueAdminContract, ATenantCapAndATypeLimitBothHold) {
  for (int i = 1; i <= 3; ++i) {
    for (const char* tenant : {"acme", "bolt"}) {
      Envelope env = MakeJob(std::string("job_") + tenant + std::to_string(i), "report.build");
      env.tenant_id = tenant;
      Put(env);
    }
  }
  ASSERT_THAT(admin_->SetControl(TenantCap("default", 2)), IsOk());
  ControlRule type_limit = TenantCap("default", 3);
  type_limit.kind = ControlKind::kConcurrencyLimit;
  type_limit.subject = "report.build";
  ASSERT_THAT(admin_->SetControl(type_limit), IsOk());
  std::vector<Delivery> got = Take(10);
  EXPECT_THAT(got, SizeIs(3)) << "the type's limit";
  for (const auto& [tenant, n] : ByTenant(got)) EXPECT_LE(n, 2) << tenant;
}

TEST_P(QueueAdminContract, ATenantCapOutOfRangeIsRefusedByName) {
  EXPECT_THAT(admin_->SetControl(TenantCap("default", -1)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("concurrency limit")));
  EXPECT_THAT(admin_->SetControl(TenantCap("default", 1000001)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("concurrency limit")));
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState state, admin_->ReadControl());
  EXPECT_EQ(state.TenantConcurrencyLimit("default"), std::nullopt);
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
