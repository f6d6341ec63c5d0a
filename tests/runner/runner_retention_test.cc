// The maintenance pass retains finished jobs by age and by count
// (JobRunnerOptions::final_status_retention, finished_retention; issue 12).
// ManualClock, no threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/queue_backend_wrapper.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using testing::Harness;
using testing::IsOk;
using testing::StatusIs;

// Runs `n` jobs of `type` (whatever its handler makes of them),
// one per second of the clock; returns their ids, oldest first.
std::vector<std::string> RunJobs(Harness& h, const std::string& type, int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    ids.push_back(h.Enqueue(type)->job_id);
    EXPECT_THAT(h.RunUntilIdle().status(), IsOk());
    h.clock().Advance(Seconds(1));
  }
  return ids;
}

// A job that succeeded within the dedup window stays whatever the count:
// dedup (SPEC 3 step 4) must still find it.
TEST(RunnerRetentionTest, SucceededJobsWithinTheDedupWindowOutliveTheCount) {
  Harness h([](JobRunnerOptions& o) {
    o.finished_retention.succeeded = 1;
    o.dedup_window = std::chrono::minutes(5);
  });
  ASSERT_THAT(h.Handle("ok.a", [](JobContext&) { return Status::Ok(); }), IsOk());
  std::vector<std::string> a;
  for (int i = 0; i < 3; ++i) {
    Envelope env;
    env.job_type = "ok.a";
    env.payload = "{}";
    env.dedup_key = "order:" + std::to_string(i);
    a.push_back(h.Enqueue(env)->job_id);
    ASSERT_THAT(h.RunUntilIdle().status(), IsOk());
    h.clock().Advance(Seconds(1));
  }
  // Without a dedup key nothing holds a job back.
  const std::vector<std::string> plain = RunJobs(h, "ok.a", 2);
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());
  for (const std::string& id : a) EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded) << id;
  EXPECT_EQ(h.StatusOf(plain[0]), std::nullopt);
  EXPECT_EQ(h.StatusOf(plain[1]), JobStatus::kSucceeded);  // The newest: the count's.
  h.clock().Advance(std::chrono::minutes(5));
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());
  for (const std::string& id : a) EXPECT_EQ(h.StatusOf(id), std::nullopt) << id;
  EXPECT_EQ(h.StatusOf(plain[1]), JobStatus::kSucceeded);
}

TEST(RunnerRetentionTest, MaintenanceKeepsTheNewestFinishedJobsPerTypeAndStatus) {
  Harness h([](JobRunnerOptions& o) {
    o.finished_retention.succeeded = 2;
    o.finished_retention.failed = 1;
    o.finished_retention.discarded = std::nullopt;
  });
  ASSERT_THAT(h.Handle("ok.a", [](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.Handle("ok.b", [](JobContext&) { return Status::Ok(); }), IsOk());
  RetryPolicy fail_policy;
  fail_policy.on_permanent = FailureAction::kFail;  // Ends in `failed`, not the DLQ.
  HandlerOptions fails;
  fails.policy = fail_policy;
  fails.policy_reason = "test: permanent failures end as failed";
  ASSERT_THAT(h.Handle(
                  "bad", [](JobContext&) { return Status::InvalidArgument("bad payload"); }, fails),
              IsOk());
  const std::vector<std::string> a = RunJobs(h, "ok.a", 4);
  const std::vector<std::string> b = RunJobs(h, "ok.b", 2);
  const std::vector<std::string> bad = RunJobs(h, "bad", 3);
  // Every RunUntilIdle starts with a maintenance pass, so the older jobs may
  // be gone already; this pass trims what the last run finished.
  ASSERT_EQ(h.StatusOf(bad[1]), JobStatus::kFailed);
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());
  EXPECT_EQ(h.StatusOf(a[0]), std::nullopt);
  EXPECT_EQ(h.StatusOf(a[1]), std::nullopt);
  EXPECT_EQ(h.StatusOf(a[2]), JobStatus::kSucceeded);
  EXPECT_EQ(h.StatusOf(a[3]), JobStatus::kSucceeded);
  EXPECT_EQ(h.StatusOf(b[0]), JobStatus::kSucceeded);  // Its own type: 2 kept.
  EXPECT_EQ(h.StatusOf(b[1]), JobStatus::kSucceeded);
  EXPECT_EQ(h.StatusOf(bad[0]), std::nullopt);
  EXPECT_EQ(h.StatusOf(bad[1]), std::nullopt);
  EXPECT_EQ(h.StatusOf(bad[2]), JobStatus::kFailed);

  // The age limit still applies to what the count keeps.
  h.clock().Advance(std::chrono::hours(25));
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());
  for (const std::string& id : {a[3], b[1], bad[2]}) EXPECT_EQ(h.StatusOf(id), std::nullopt);
}

TEST(RunnerRetentionTest, AStoreWithoutCountRetentionIsAskedOnceThenRetainedByAge) {
  Harness h([](JobRunnerOptions& o) { o.finished_retention.succeeded = 1; });
  ASSERT_THAT(h.Handle("ok", [](JobContext&) { return Status::Ok(); }), IsOk());
  h.faults().FailNext(testing::QueueMethod::kTrimFinished,
                      Status::Unimplemented("TrimFinished: this store trims by age only"), 100);
  const std::vector<std::string> ids = RunJobs(h, "ok", 3);
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());  // Not an error: logged once.
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());
  EXPECT_EQ(h.faults().Calls(testing::QueueMethod::kTrimFinished), 1);
  for (const std::string& id : ids) EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  h.clock().Advance(std::chrono::hours(25));
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());
  for (const std::string& id : ids) EXPECT_EQ(h.StatusOf(id), std::nullopt);
}

TEST(RunnerRetentionTest, AFailingTrimIsReportedByThePass) {
  Harness h([](JobRunnerOptions& o) { o.finished_retention.succeeded = 1; });
  h.faults().FailNext(testing::QueueMethod::kTrimFinished, Status::Unavailable("store down"));
  EXPECT_THAT(h.runner().RunMaintenance(),
              StatusIs(StatusCode::kUnavailable, ::testing::HasSubstr("trim finished jobs")));
  EXPECT_THAT(h.runner().RunMaintenance(), IsOk());  // Asked again at the next pass.
  EXPECT_EQ(h.faults().Calls(testing::QueueMethod::kTrimFinished), 2);
}

TEST(RunnerRetentionTest, NegativeCountsAreRefusedAtCreate) {
  Harness h([](JobRunnerOptions& o) { o.finished_retention.failed = -3; });
  EXPECT_THAT(h.init_status(), StatusIs(StatusCode::kInvalidArgument,
                                        ::testing::HasSubstr("finished_retention.failed")));
}

}  // namespace
}  // namespace jobpact
