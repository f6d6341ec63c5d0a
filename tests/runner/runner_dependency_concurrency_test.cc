// A dependency's concurrency limit across runners (issue 11):
// JobRunnerOptions::dependency_concurrency, held as slots in the shared
// LockStore, and an operator's ControlKind::kDependencyConcurrencyLimit
// replacing it at run time. Two runners on one in-memory backend stand for
// two processes; a handler of one runs the other (RunUntilIdle) while it
// holds its slot, so "at once" needs no threads. ManualClock, no sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "jobpact/backend.h"
#include "jobpact/in_memory/metrics_sink.h"
#include "jobpact/job_runner.h"
#include "jobpact/operations.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using test_util::MakeJob;
using testing::IsOk;
using testing::ManualClock;
using testing::StatusIs;

class RunnerDependencyConcurrencyTest : public ::testing::Test {
 protected:
  // A runner taking `queue`, its code limiting payments-api to `limit`
  // handlers at once (none: no limit of its own).
  std::unique_ptr<JobRunner> MakeRunner(std::string id, std::string queue,
                                        std::optional<int> limit) {
    JobRunnerOptions o;
    o.backend = shared_;
    o.clock = clock_;
    o.metrics = metrics_;
    o.runner_id = std::move(id);
    o.queues = {std::move(queue)};
    o.log_level = LogLevel::kOff;
    if (limit) o.dependency_concurrency["payments-api"] = *limit;
    Result<std::unique_ptr<JobRunner>> r = JobRunner::Create(o);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? std::move(*r) : nullptr;
  }

  // Registers `type` on `runner`, calling payments-api; `during` runs inside
  // the handler (while it holds its slot).
  void Handle(JobRunner& runner, const std::string& type, std::function<void(JobContext&)> during,
              int* runs) {
    HandlerOptions o;
    o.dependency = "payments-api";
    ASSERT_THAT(runner.Handle(type,
                              [during, runs](JobContext& ctx) {
                                ++*runs;
                                if (during) during(ctx);
                                return Status::Ok();
                              },
                              o),
                IsOk());
  }

  std::string Put(JobRunner& runner, const std::string& type, const std::string& queue) {
    Envelope e = MakeJob(type);
    e.queue = queue;
    Result<EnqueueResult> r = runner.Enqueue(e);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? r->job_id : "";
  }

  JobRecord Get(const std::string& id) {
    Result<JobRecord> r = shared_.admin->Get(id);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : JobRecord{};
  }

  void ExpectHeld(const std::string& id) {
    const JobRecord r = Get(id);
    EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
    ASSERT_FALSE(r.history.empty());
    EXPECT_EQ(r.history.back().reason, reason::kConcurrencyLimited);
    EXPECT_EQ(r.envelope.attempt, 0) << "a held delivery spends no attempt";
    ASSERT_TRUE(r.last_failure.has_value());
    EXPECT_THAT(r.last_failure->message, HasSubstr("dependency payments-api"));
  }

  std::int64_t Held() const {
    MetricLabels l;
    l.job_type = "payment.refund";
    l.queue = "refunds";
    l.reason = "dependency:payments-api";
    return metrics_->Counter(metric::kConcurrencyLimited, l);
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  BackendBundle shared_ = InMemoryBackend(clock_);
  std::shared_ptr<InMemoryMetricsSink> metrics_ = std::make_shared<InMemoryMetricsSink>();
};

TEST_F(RunnerDependencyConcurrencyTest, ALimitHoldsTheHandlersOfEveryRunnerCallingIt) {
  auto a = MakeRunner("runner-a", "captures", 1);
  auto b = MakeRunner("runner-b", "refunds", 1);
  int captures = 0;
  int refunds = 0;
  std::string refund;
  // While A's capture holds the one slot, B leases its refund.
  Handle(*a, "payment.capture",
         [&](JobContext&) { ASSERT_THAT(b->RunUntilIdle().status(), IsOk()); }, &captures);
  Handle(*b, "payment.refund", nullptr, &refunds);
  refund = Put(*b, "payment.refund", "refunds");
  Put(*a, "payment.capture", "captures");

  ASSERT_THAT(a->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(refunds, 0) << "B's handler did not start while A's held the slot";
  ExpectHeld(refund);
  EXPECT_EQ(Held(), 1);
  EXPECT_LE(Get(refund).ready_at, clock_->Now() + Seconds(1)) << "back shortly";

  // A's handler returned and gave the slot back.
  clock_->Advance(Seconds(1));
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(refunds, 1);
  EXPECT_EQ(Get(refund).status, JobStatus::kSucceeded);
}

TEST_F(RunnerDependencyConcurrencyTest, ASlotIsRenewedWithTheLeaseWhileTheHandlerRuns) {
  auto a = MakeRunner("runner-a", "captures", 1);
  auto b = MakeRunner("runner-b", "refunds", 1);
  int captures = 0;
  int refunds = 0;
  // A long call: 80 s, past the 45 s visibility timeout, with heartbeats.
  Handle(*a, "payment.capture",
         [&](JobContext& ctx) {
           for (int i = 0; i < 2; ++i) {
             clock_->Advance(Seconds(40));
             ASSERT_THAT(ctx.Heartbeat(), IsOk());
           }
           ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
         },
         &captures);
  Handle(*b, "payment.refund", nullptr, &refunds);
  const std::string refund = Put(*b, "payment.refund", "refunds");
  Put(*a, "payment.capture", "captures");
  ASSERT_THAT(a->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(refunds, 0) << "the slot was renewed with the lease";
  ExpectHeld(refund);
}

TEST_F(RunnerDependencyConcurrencyTest, ACrashedRunnersSlotFreesWhenItsTtlRunsOut) {
  auto b = MakeRunner("runner-b", "refunds", 1);
  int refunds = 0;
  Handle(*b, "payment.refund", nullptr, &refunds);
  // A runner died while its handler held the only slot (its lease token
  // as the owner, its visibility timeout as the TTL).
  ASSERT_THAT(shared_.locks->Acquire("dependency:payments-api:slot:0", "runner-a:1:dead",
                                     Seconds(45))
                  .status(),
              IsOk());
  const std::string refund = Put(*b, "payment.refund", "refunds");
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  ExpectHeld(refund);

  clock_->Advance(Seconds(46));
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(refunds, 1);
  EXPECT_EQ(shared_.locks->List(10)->size(), 0u) << "the slot was released after the run";
}

TEST_F(RunnerDependencyConcurrencyTest, AnOperatorsLimitReplacesTheCodesInEveryRunner) {
  auto b = MakeRunner("runner-b", "refunds", std::nullopt);  // No limit in its code.
  int refunds = 0;
  Handle(*b, "payment.refund", nullptr, &refunds);
  OperationsOptions oo;
  oo.clock = clock_;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Operations> ops, Operations::Open(shared_, oo));

  // The runbook: hold every call to a struggling dependency.
  ASSERT_THAT(ops->SetDependencyConcurrencyLimit("payments-api", 0, "alice", "INC-12 psp down"),
              IsOk());
  const std::string refund = Put(*b, "payment.refund", "refunds");
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  ExpectHeld(refund);
  EXPECT_EQ(refunds, 0);

  // Then let one call at a time through, held by someone else: still held.
  ASSERT_THAT(ops->SetDependencyConcurrencyLimit("payments-api", 1, "alice", "INC-12 recovering"),
              IsOk());
  ASSERT_THAT(shared_.locks->Acquire("dependency:payments-api:slot:0", "elsewhere", Seconds(45))
                  .status(),
              IsOk());
  clock_->Advance(Seconds(1));
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(refunds, 0);
  // Raised to two: the second slot is free.
  ASSERT_THAT(ops->SetDependencyConcurrencyLimit("payments-api", 2, "alice", "INC-12 recovered"),
              IsOk());
  clock_->Advance(Seconds(1));
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(refunds, 1);
  ASSERT_THAT(ops->ClearDependencyConcurrencyLimit("payments-api", "alice", "INC-12 closed"),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState state, ops->Control());
  EXPECT_EQ(state.DependencyConcurrencyLimit("payments-api"), std::nullopt);
}

TEST_F(RunnerDependencyConcurrencyTest, ALimitBelowOneInTheCodeIsRefusedByName) {
  JobRunnerOptions o;
  o.backend = shared_;
  o.clock = clock_;
  o.dependency_concurrency["payments-api"] = 0;
  EXPECT_THAT(JobRunner::Create(o).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("dependency_concurrency[payments-api] must be >= 1, not 0")));
}

}  // namespace
}  // namespace jobpact
