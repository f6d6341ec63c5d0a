// The testing kit itself: Harness, FailingQueueBackend and the matchers.
#include "jobpact/testing/harness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobpact/testing/failing_backends.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::FailingQueueBackend;
using testing::Harness;
using testing::HarnessOptions;
using testing::IsOk;
using testing::QueueMethod;
using testing::StatusIs;

TEST(MatchersTest, IsOkAndStatusIsWorkOnStatusAndResult) {
  EXPECT_THAT(Status::Ok(), IsOk());
  EXPECT_THAT(Status::Aborted("lock held by w1"), Not(IsOk()));
  EXPECT_THAT(Status::Aborted("lock held by w1"), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(Status::Aborted("lock held by w1"),
              StatusIs(StatusCode::kAborted, HasSubstr("w1")));
  EXPECT_THAT(Status::Aborted("lock held by w1"),
              Not(StatusIs(StatusCode::kAborted, HasSubstr("w2"))));
  EXPECT_THAT(Status::Aborted("x"), Not(StatusIs(StatusCode::kUnavailable)));
  Result<int> value = 3;
  Result<int> error = Status::NotFound("no job");
  EXPECT_THAT(value, IsOk());
  EXPECT_THAT(error, Not(IsOk()));
  EXPECT_THAT(error, StatusIs(StatusCode::kNotFound, "no job"));
}

TEST(HarnessTest, ConfigureCallbackAndStartTimeApply) {
  const TimePoint start = TimePoint(std::chrono::seconds(1786960800));  // 2026-08-17T10:00:00Z
  HarnessOptions options;
  options.start = start;
  options.configure = [](JobRunnerOptions& o) {
    o.runner_id = "my-runner";
    o.max_lock_waits = 7;
  };
  Harness h(options);
  ASSERT_THAT(h.init_status(), IsOk());
  EXPECT_EQ(h.clock().Now(), start);
  EXPECT_EQ(h.runner().options().runner_id, "my-runner");
  EXPECT_EQ(h.runner().options().max_lock_waits, 7);
}

TEST(HarnessTest, RefusedOptionsAreReportedByInitStatus) {
  Harness h([](JobRunnerOptions& o) { o.workers = 0; });
  EXPECT_THAT(h.init_status(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("workers")));
  EXPECT_THAT(h.Enqueue("t"), StatusIs(StatusCode::kInvalidArgument));
}

TEST(HarnessTest, AdvanceToNextRetryMovesToTheEarliestWaitingJob) {
  Harness h;
  EXPECT_EQ(h.AdvanceToNextRetry(), Duration::zero());  // Nothing waits.
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  Envelope later;
  later.job_type = "t";
  later.scheduled_at = h.clock().Now() + Seconds(90);
  Envelope sooner = later;
  sooner.scheduled_at = h.clock().Now() + Seconds(30);
  ASSERT_THAT(h.Enqueue(later), IsOk());
  ASSERT_THAT(h.Enqueue(sooner), IsOk());
  EXPECT_EQ(h.RunUntilIdle(), 0);
  EXPECT_EQ(h.AdvanceToNextRetry(), Seconds(30));
  EXPECT_EQ(h.RunUntilIdle(), 1);
  EXPECT_EQ(h.AdvanceToNextRetry(), Seconds(60));
  EXPECT_EQ(h.RunUntilIdle(), 1);
  EXPECT_EQ(h.AdvanceToNextRetry(), Duration::zero());
}

TEST(HarnessTest, FailedDequeueIsReportedAndTheNextRunRecovers) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  auto id = h.Enqueue("t")->job_id;
  h.faults().FailNext(QueueMethod::kDequeue, Status::Unavailable("redis down"));
  EXPECT_EQ(h.RunUntilIdle(), 0);
  EXPECT_THAT(h.last_error(), StatusIs(StatusCode::kUnavailable, HasSubstr("redis down")));
  EXPECT_EQ(h.StatusOf(id), JobStatus::kQueued);
  EXPECT_EQ(h.RunUntilIdle(), 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
}

TEST(HarnessTest, FailureAfterApplyingMakesTheChangeButReportsTheError) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  auto id = h.Enqueue("t")->job_id;
  h.faults().FailNextAfterApplying(QueueMethod::kComplete, Status::Unavailable("reply lost"));
  h.RunUntilIdle();
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.faults().Calls(QueueMethod::kComplete), 1);
}

TEST(HarnessTest, ExpireLeaseLetsTheNextMaintenancePassRecoverTheJob) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  auto id = h.Enqueue("t")->job_id;
  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("crash"));
  h.RunUntilIdle();
  ASSERT_EQ(h.StatusOf(id), JobStatus::kRunning);
  ASSERT_THAT(h.ExpireLease(id), IsOk());
  h.RunUntilIdle();
  EXPECT_EQ(calls, 2);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kSucceeded);
  EXPECT_EQ(r.envelope.attempt, 2);
  EXPECT_EQ(r.lease_recoveries, 1);
}

TEST(HarnessTest, HooksRunBeforeTheCallInOrder) {
  Harness h;
  std::vector<std::string> order;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { order.push_back("handler"); return Status::Ok(); }),
              IsOk());
  h.Enqueue("t").status().IgnoreError();
  h.faults().BeforeNext(QueueMethod::kComplete, [&] { order.push_back("hook1"); });
  h.faults().BeforeNext(QueueMethod::kComplete, [&] { order.push_back("hook2"); });
  h.RunUntilIdle();
  EXPECT_EQ(order, (std::vector<std::string>{"handler", "hook1", "hook2"}));
}

TEST(HarnessTest, UnknownJobsGiveAnEmptyRecordAndNoStatus) {
  Harness h;
  EXPECT_EQ(h.Job("job_nope").envelope.job_id, "");
  EXPECT_FALSE(h.StatusOf("job_nope").has_value());
}

TEST(FailingQueueBackendTest, PassesThroughAndCountsCalls) {
  auto clock = std::make_shared<testing::ManualClock>();
  auto base = std::make_shared<InMemoryQueueBackend>(clock);
  FailingQueueBackend q(base);
  Envelope e;
  e.job_type = "t";
  PrepareForEnqueue(e, clock->Now());
  ASSERT_THAT(q.Enqueue(e, {}), IsOk());
  q.FailNext(QueueMethod::kGet, Status::Unavailable("down"), 2);
  EXPECT_THAT(q.Get(e.job_id), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(q.Get(e.job_id), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(q.Get(e.job_id), IsOk());
  EXPECT_EQ(q.Calls(QueueMethod::kGet), 3);
  EXPECT_EQ(q.EnqueuedJobIds(), std::vector<std::string>{e.job_id});
  q.FailNext(QueueMethod::kStats, Status::Unavailable("down"));
  q.Clear();
  EXPECT_THAT(q.Stats(), IsOk());
  EXPECT_EQ(q.Name(), "in_memory");
}

}  // namespace
}  // namespace jobpact
