// The retry budget a job gets: the job type's policy unless the producer
// gave max_attempts in the envelope.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using testing::Harness;
using testing::IsOk;

class RunnerPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RetryPolicy slow = h_.runner().policies().Default();
    slow.max_attempts = 8;
    HandlerOptions o;
    o.policy = slow;
    o.policy_reason = "slow warehouse: month-end queries queue for minutes";
    ASSERT_TRUE(h_.Handle("report.build",
                          [this](JobContext&) -> Status {
                            ++calls_;
                            return Status::Unavailable("warehouse busy");
                          },
                          o)
                    .ok());
  }
  Harness h_;
  int calls_ = 0;
};

TEST_F(RunnerPolicyTest, PerTypeOverrideDecidesTheBudgetWhenTheEnvelopeGivesNone) {
  Result<EnqueueResult> r = h_.Enqueue("report.build");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_THAT(h_.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls_, 8);
  JobRecord rec = h_.Job(r->job_id);
  EXPECT_EQ(rec.status, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.reason, reason::kMaxAttemptsExceeded);
  EXPECT_EQ(rec.envelope.max_attempts, 8);  // Stored, so the record says what applied.
}

TEST_F(RunnerPolicyTest, EnvelopeMaxAttemptsWinsOverThePolicy) {
  Envelope e;
  e.job_type = "report.build";
  e.max_attempts = 2;
  Result<EnqueueResult> r = h_.Enqueue(e);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_THAT(h_.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls_, 2);
  EXPECT_EQ(h_.Job(r->job_id).status, JobStatus::kDeadLettered);
}

// Unknown failures: a handler that throws something unclassified. The
// default policy gives 5 attempts, 3 of them while the failures are unknown.
class RunnerUnknownBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(h_.Handle("feed.import", [this](JobContext&) -> Status {
                    ++calls_;
                    throw std::runtime_error("parser blew up");
                  }).ok());
  }
  JobRecord RunWithEnvelopeMaxAttempts(int max_attempts) {
    Envelope e;
    e.job_type = "feed.import";
    e.max_attempts = max_attempts;
    Result<EnqueueResult> r = h_.Enqueue(e);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(h_.RunUntilSettled().ok());
    return r.ok() ? h_.Job(r->job_id) : JobRecord{};
  }
  Harness h_;
  int calls_ = 0;
};

TEST_F(RunnerUnknownBudgetTest, EnvelopeMaxAttemptsCapsTheUnknownBudget) {
  // min(max_unknown_attempts 3, max_attempts 2): both budgets end together.
  JobRecord rec = RunWithEnvelopeMaxAttempts(2);
  EXPECT_EQ(calls_, 2);
  EXPECT_EQ(rec.status, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.reason, reason::kMaxAttemptsExceeded);
}

TEST_F(RunnerUnknownBudgetTest, EnvelopeMaxAttemptsDoesNotRaiseTheUnknownBudget) {
  // min(3, 10): the envelope raised the whole budget, not the unknown one.
  JobRecord rec = RunWithEnvelopeMaxAttempts(10);
  EXPECT_EQ(calls_, 3);
  EXPECT_EQ(rec.status, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.reason, reason::kUnknownNonRetryable);
}

TEST(RunnerPolicyOverrideTest, UnknownBudgetAboveMaxAttemptsIsRefusedAtRegistration) {
  Harness h;
  HandlerOptions o;
  o.policy = h.runner().policies().Default();  // max_unknown_attempts 3.
  o.policy->max_attempts = 2;
  o.policy_reason = "best effort";
  Status s = h.Handle("cache.warm", [](JobContext&) { return Status::Ok(); }, o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("max_unknown_attempts must be <= max_attempts "
                                                "(got 3 > 2)"));
  o.policy->max_unknown_attempts = 2;
  EXPECT_TRUE(h.Handle("cache.warm", [](JobContext&) { return Status::Ok(); }, o).ok());
}

TEST(RunnerZeroDelayTest, ZeroBaseDelayRetriesWithoutTheClockMoving) {
  Harness h;
  int calls = 0;
  HandlerOptions o;
  o.policy = h.runner().policies().Default();
  o.policy->max_attempts = 3;
  o.policy->backoff.base_delay = Duration::zero();
  o.policy_reason = "cache warm-up: a retry costs nothing, so it happens at once";
  ASSERT_TRUE(h.Handle("cache.warm",
                       [&](JobContext&) -> Status {
                         ++calls;
                         return Status::Unavailable("cold");
                       },
                       o)
                  .ok());
  Result<EnqueueResult> r = h.Enqueue("cache.warm");
  ASSERT_TRUE(r.ok()) << r.status();
  // Each retry is ready at once: no AdvanceToNextRetry is needed.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.RunUntilIdle().ok());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(h.StatusOf(r->job_id), JobStatus::kDeadLettered);
  EXPECT_EQ(h.Job(r->job_id).reason, reason::kMaxAttemptsExceeded);
}

TEST(RunnerDefaultPolicyTest, DefaultBudgetIsFiveAttempts) {
  Harness h;
  int calls = 0;
  ASSERT_TRUE(h.Handle("t", [&](JobContext&) -> Status {
                 ++calls;
                 return Status::Unavailable("down");
               }).ok());
  ASSERT_TRUE(h.Enqueue("t").ok());
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 5);
}

}  // namespace
}  // namespace jobpact
