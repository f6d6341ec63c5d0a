// Count retention of finished jobs (QueueAdmin::TrimFinished, issue 12), on
// every backend: per final status and job type, the newest N jobs (by
// finished_at, then job id) are kept and the older ones deleted; other
// types, other statuses, and jobs not final (queued, running, retrying,
// dead-lettered) are never touched; a call deletes at most max_jobs; a
// trimmed job no longer counts for dedup, a kept one still does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::RetentionContractAnchor() { return 0; }

void FinishedRetentionContract::Finish(const std::string& id, const std::string& type,
                                       JobStatus status, const std::string& dedup_key) {
  Envelope env = MakeJob(id, type);
  env.dedup_key = dedup_key;
  Put(env);
  const char* why = status == JobStatus::kSucceeded ? "succeeded"
                    : status == JobStatus::kFailed  ? "permanent_error"
                                                    : "expired";
  ASSERT_THAT(queue_->Complete(TakeOne(id), Outcome(status, why)), IsOk());
  Advance(Seconds(1));
}

std::vector<std::string> FinishedRetentionContract::Present(const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  for (const std::string& id : ids) {
    if (admin_->Get(id).ok()) out.push_back(id);
  }
  return out;
}

namespace {

using ::testing::ElementsAre;

TEST_P(FinishedRetentionContract, TrimFinishedKeepsTheNewestPerStatusAndType) {
  Finish("job_as1", "a", JobStatus::kSucceeded, "k_old");
  for (const char* id : {"job_as2", "job_as3", "job_as4"}) Finish(id, "a", JobStatus::kSucceeded);
  Finish("job_as5", "a", JobStatus::kSucceeded, "k_new");
  Finish("job_bs1", "b", JobStatus::kSucceeded);
  Finish("job_bs2", "b", JobStatus::kSucceeded);
  for (const char* id : {"job_af1", "job_af2", "job_af3"}) Finish(id, "a", JobStatus::kFailed);
  Finish("job_ad1", "a", JobStatus::kDiscarded);
  Finish("job_ad2", "a", JobStatus::kDiscarded);
  // Not final: never trimmed, whatever the counts.
  Put(MakeJob("job_running", "a"));
  TakeOne("job_running");
  Put(MakeJob("job_retry", "a"));
  Completion retry = Outcome(JobStatus::kRetryScheduled, "transient_error");
  retry.ready_at = Now() + std::chrono::hours(100);
  ASSERT_THAT(queue_->Complete(TakeOne("job_retry"), retry), IsOk());
  PutInDlq(MakeJob("job_dlq", "a"), "permanent_error",
           Failure{FailureClass::kPermanent, "bad", "bad payload"});
  Put(MakeJob("job_queued", "a", -1));

  FinishedRetention keep;
  keep.succeeded = 2;
  keep.failed = 1;  // discarded: no count limit.
  JOBPACT_ASSERT_OK_AND_ASSIGN(int n, admin_->TrimFinished(keep));
  EXPECT_EQ(n, 5);  // job_as1..3, job_af1..2.
  EXPECT_THAT(Present({"job_as1", "job_as2", "job_as3", "job_as4", "job_as5"}),
              ElementsAre("job_as4", "job_as5"));
  EXPECT_THAT(Present({"job_bs1", "job_bs2"}), ElementsAre("job_bs1", "job_bs2"));
  EXPECT_THAT(Present({"job_af1", "job_af2", "job_af3"}), ElementsAre("job_af3"));
  EXPECT_THAT(Present({"job_ad1", "job_ad2"}), ElementsAre("job_ad1", "job_ad2"));
  EXPECT_EQ(MustGet("job_running").status, JobStatus::kRunning);
  EXPECT_EQ(MustGet("job_retry").status, JobStatus::kRetryScheduled);
  EXPECT_EQ(MustGet("job_dlq").status, JobStatus::kDeadLettered);
  EXPECT_EQ(MustGet("job_queued").status, JobStatus::kQueued);
  // A trimmed job no longer counts for dedup; a kept one still does.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> old_dup,
                               queue_->FindDuplicate("k_old", "job_x", TimePoint{}));
  EXPECT_FALSE(old_dup.has_value());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> new_dup,
                               queue_->FindDuplicate("k_new", "job_x", TimePoint{}));
  EXPECT_EQ(new_dup, std::optional<std::string>("job_as5"));
  Envelope reuse = MakeJob("job_again", "a");
  reuse.dedup_key = "k_old";
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult fresh, queue_->Enqueue(reuse, {}));
  EXPECT_FALSE(fresh.duplicate);
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats stats, admin_->Stats());
  EXPECT_EQ(stats.by_status[JobStatus::kSucceeded], 4);
  EXPECT_EQ(stats.by_status[JobStatus::kFailed], 1);

  // Nothing left over: a second trim deletes nothing; 0 keeps none.
  JOBPACT_ASSERT_OK_AND_ASSIGN(int again, admin_->TrimFinished(keep));
  EXPECT_EQ(again, 0);
  FinishedRetention none;
  none.discarded = 0;
  JOBPACT_ASSERT_OK_AND_ASSIGN(int discarded, admin_->TrimFinished(none));
  EXPECT_EQ(discarded, 2);
  EXPECT_THAT(Present({"job_ad1", "job_ad2", "job_as4", "job_af3"}),
              ElementsAre("job_as4", "job_af3"));
}

TEST_P(FinishedRetentionContract, JobsFinishedAtTheSameTimeKeepTheGreaterIds) {
  for (const char* id : {"job_t1", "job_t2", "job_t3", "job_t4"}) Put(MakeJob(id, "a"));
  std::vector<Delivery> ds = Take(4);
  ASSERT_EQ(ds.size(), 4u);
  for (const Delivery& d : ds) {  // No clock move: one finished_at for all.
    ASSERT_THAT(queue_->Complete(d, Outcome(JobStatus::kSucceeded, "succeeded")), IsOk());
  }
  FinishedRetention keep;
  keep.succeeded = 2;
  JOBPACT_ASSERT_OK_AND_ASSIGN(int n, admin_->TrimFinished(keep));
  EXPECT_EQ(n, 2);
  EXPECT_THAT(Present({"job_t1", "job_t2", "job_t3", "job_t4"}), ElementsAre("job_t3", "job_t4"));
}

TEST_P(FinishedRetentionContract, OneCallDeletesAtMostMaxJobsOldestFirst) {
  std::vector<std::string> ids;
  for (int i = 1; i <= 7; ++i) {
    ids.push_back("job_m" + std::to_string(i));
    Finish(ids.back(), "a", JobStatus::kSucceeded);
  }
  FinishedRetention keep;
  keep.succeeded = 2;
  keep.max_jobs = 3;
  JOBPACT_ASSERT_OK_AND_ASSIGN(int first, admin_->TrimFinished(keep));
  EXPECT_EQ(first, 3);
  EXPECT_THAT(Present(ids), ElementsAre("job_m4", "job_m5", "job_m6", "job_m7"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(int second, admin_->TrimFinished(keep));
  EXPECT_EQ(second, 2);
  JOBPACT_ASSERT_OK_AND_ASSIGN(int third, admin_->TrimFinished(keep));
  EXPECT_EQ(third, 0);
  EXPECT_THAT(Present(ids), ElementsAre("job_m6", "job_m7"));
}

// Dedup still finds a job that succeeded within its window (SPEC 3 step
// 4), so those with a dedup key are kept whatever the count; a job without
// one, or of another status, is not.
TEST_P(FinishedRetentionContract, SucceededJobsDedupStillNeedsOutliveTheCount) {
  std::vector<std::string> ids;
  for (int i = 1; i <= 3; ++i) {
    ids.push_back("job_s" + std::to_string(i));
    Finish(ids.back(), "a", JobStatus::kSucceeded, "order:" + std::to_string(i));
  }
  const TimePoint since = Now();
  ids.push_back("job_n1");
  Finish(ids.back(), "a", JobStatus::kSucceeded);
  for (int i = 4; i <= 5; ++i) {
    ids.push_back("job_s" + std::to_string(i));
    Finish(ids.back(), "a", JobStatus::kSucceeded, "order:" + std::to_string(i));
  }
  for (int i = 1; i <= 3; ++i) {
    ids.push_back("job_f" + std::to_string(i));
    Finish(ids.back(), "a", JobStatus::kFailed);
  }
  FinishedRetention keep;
  keep.succeeded = 1;
  keep.failed = 1;
  keep.keep_succeeded_since = since;
  JOBPACT_ASSERT_OK_AND_ASSIGN(int n, admin_->TrimFinished(keep));
  EXPECT_EQ(n, 6);
  EXPECT_THAT(Present(ids), ElementsAre("job_s4", "job_s5", "job_f3"));
  // Still a duplicate for dedup.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> dup,
                               queue_->FindDuplicate("order:4", "job_new", since));
  EXPECT_EQ(dup, std::optional<std::string>("job_s4"));
  // Trimmed: no longer found, even with a window reaching back to it.
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      dup, queue_->FindDuplicate("order:1", "job_new", since - std::chrono::hours(1)));
  EXPECT_EQ(dup, std::nullopt);
}

// What a call looks at counts against its cap, kept or not: a window full
// of jobs dedup still needs costs one bounded step, and the deletable jobs
// behind them wait for the window to pass.
TEST_P(FinishedRetentionContract, JobsDedupStillNeedsCountAgainstTheCap) {
  const TimePoint since = Now();
  std::vector<std::string> ids;
  for (int i = 1; i <= 2; ++i) {
    ids.push_back("job_k" + std::to_string(i));
    Finish(ids.back(), "a", JobStatus::kSucceeded, "order:" + std::to_string(i));
  }
  for (int i = 1; i <= 2; ++i) {
    ids.push_back("job_n" + std::to_string(i));
    Finish(ids.back(), "a", JobStatus::kSucceeded);
  }
  FinishedRetention keep;
  keep.succeeded = 0;
  keep.max_jobs = 2;
  keep.keep_succeeded_since = since;
  JOBPACT_ASSERT_OK_AND_ASSIGN(int n, admin_->TrimFinished(keep));
  EXPECT_EQ(n, 0);
  EXPECT_THAT(Present(ids), ElementsAre("job_k1", "job_k2", "job_n1", "job_n2"));
  keep.max_jobs = 0;  // No cap: a chunk looks past them.
  JOBPACT_ASSERT_OK_AND_ASSIGN(n, admin_->TrimFinished(keep));
  EXPECT_EQ(n, 2);
  EXPECT_THAT(Present(ids), ElementsAre("job_k1", "job_k2"));
}

TEST_P(FinishedRetentionContract, NegativeCountsAreRefused) {
  FinishedRetention keep;
  keep.failed = -1;
  EXPECT_THAT(admin_->TrimFinished(keep),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("failed")));
  FinishedRetention cap;
  cap.succeeded = 1;
  cap.max_jobs = -5;
  EXPECT_THAT(admin_->TrimFinished(cap),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("max_jobs")));
  FinishedRetention nothing;  // No count for any status: nothing to do.
  JOBPACT_ASSERT_OK_AND_ASSIGN(int n, admin_->TrimFinished(nothing));
  EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
