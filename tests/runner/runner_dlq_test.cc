// Controlled DLQ operations through the runner (SPEC 7): replay of a
// selection (by filter or by ids) with a dry run, a rate limit spacing the
// replayed jobs' ready_at, attempts reset, and an audit record of who and
// why; discard with a reason. ManualClock, no threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using testing::Harness;
using testing::IsOk;
using testing::StatusIs;

// Two job types that fail permanently (dead-lettered at once) until `fixed`.
struct DlqFixture {
  Harness h;
  bool fixed = false;
  int runs = 0;

  DlqFixture() {
    for (const char* type : {"invoice.generate", "email.send"}) {
      EXPECT_THAT(h.Handle(type,
                           [this](JobContext&) {
                             ++runs;
                             return fixed ? Status::Ok() : Status::InvalidArgument("bad payload");
                           }),
                  IsOk());
    }
  }
  std::string DeadLetter(const std::string& type) {
    const std::string id = h.Enqueue(type).value().job_id;
    EXPECT_THAT(h.RunUntilIdle(), IsOk());
    EXPECT_EQ(h.StatusOf(id), JobStatus::kDeadLettered);
    return id;
  }
};

ReplayRequest Request() {
  ReplayRequest r;
  r.actor = "alice@oncall";
  r.reason = "INC-42: payload bug fixed in v1.2.3";
  return r;
}

TEST(RunnerDlqTest, ActorAndReasonAreRequired) {
  DlqFixture f;
  const std::string id = f.DeadLetter("invoice.generate");
  ReplayRequest r = Request();
  r.actor = "  ";
  EXPECT_THAT(f.h.runner().ReplayDeadLetters(r),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor")));
  r = Request();
  r.reason.clear();
  EXPECT_THAT(f.h.runner().ReplayDeadLetters(r), StatusIs(StatusCode::kInvalidArgument));
  r = Request();
  r.max_per_second = -1;
  EXPECT_THAT(f.h.runner().ReplayDeadLetters(r),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_per_second")));
  EXPECT_THAT(f.h.runner().DiscardDeadLetter(id, "", "why"),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(f.h.runner().DiscardDeadLetter(id, "bob", ""),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(f.h.StatusOf(id), JobStatus::kDeadLettered);
}

TEST(RunnerDlqTest, DryRunListsTheSelectionAndChangesNothing) {
  DlqFixture f;
  const std::string a = f.DeadLetter("invoice.generate");
  const std::string b = f.DeadLetter("email.send");
  ReplayRequest r = Request();
  r.dry_run = true;
  Result<ReplayReport> report = f.h.runner().ReplayDeadLetters(r);
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->would_replay, ElementsAre(a, b));
  EXPECT_THAT(report->replayed, IsEmpty());
  EXPECT_THAT(report->failed, IsEmpty());
  EXPECT_EQ(f.h.StatusOf(a), JobStatus::kDeadLettered);
  EXPECT_EQ(f.h.StatusOf(b), JobStatus::kDeadLettered);
  EXPECT_THAT(f.h.queue().GetDeadLetter(a).value().audit, IsEmpty());
  EXPECT_EQ(f.h.metrics().CounterTotal(metric::kReplayed), 0);
}

TEST(RunnerDlqTest, ReplaysASelectionByFilterWithAttemptsReset) {
  DlqFixture f;
  const std::string a = f.DeadLetter("invoice.generate");
  const std::string b = f.DeadLetter("email.send");
  f.fixed = true;
  ReplayRequest r = Request();
  r.selection.job_type = "invoice.generate";
  Result<ReplayReport> report = f.h.runner().ReplayDeadLetters(r);
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->replayed, ElementsAre(a));
  EXPECT_EQ(f.h.StatusOf(a), JobStatus::kQueued);
  EXPECT_EQ(f.h.Job(a).envelope.attempt, 0);  // Reset.
  EXPECT_EQ(f.h.StatusOf(b), JobStatus::kDeadLettered);
  EXPECT_EQ(f.h.metrics().Counter(metric::kReplayed,
                                  MetricLabels{"invoice.generate", "default", "permanent_error", {}}),
            1);
  ASSERT_THAT(f.h.RunUntilIdle(), IsOk());
  EXPECT_EQ(f.h.StatusOf(a), JobStatus::kSucceeded);
  EXPECT_EQ(f.h.Job(a).envelope.attempt, 1);
}

TEST(RunnerDlqTest, ReplaysExplicitIdsAndReportsUnknownOnes) {
  DlqFixture f;
  const std::string a = f.DeadLetter("invoice.generate");
  const std::string b = f.DeadLetter("invoice.generate");
  const std::string c = f.DeadLetter("email.send");
  ReplayRequest r = Request();
  r.job_ids = {b, "job_nope", c};
  r.selection.job_type = "invoice.generate";  // c does not match it.
  Result<ReplayReport> report = f.h.runner().ReplayDeadLetters(r);
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->replayed, ElementsAre(b));
  ASSERT_EQ(report->failed.size(), 2u);
  EXPECT_EQ(report->failed[0].first, "job_nope");
  EXPECT_THAT(report->failed[0].second, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(report->failed[1].first, c);
  EXPECT_THAT(report->failed[1].second,
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("selection")));
  EXPECT_EQ(f.h.StatusOf(a), JobStatus::kDeadLettered);
  EXPECT_EQ(f.h.StatusOf(b), JobStatus::kQueued);
  EXPECT_EQ(f.h.StatusOf(c), JobStatus::kDeadLettered);
}

TEST(RunnerDlqTest, RateLimitSpacesReadyAtWithoutSleeping) {
  DlqFixture f;
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(f.DeadLetter("invoice.generate"));
  ReplayRequest r = Request();
  r.max_per_second = 2;  // One every 500 ms.
  r.max_jobs = 3;
  const TimePoint now = f.h.clock().Now();
  Result<ReplayReport> report = f.h.runner().ReplayDeadLetters(r);
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->replayed, ElementsAre(ids[0], ids[1], ids[2]));
  EXPECT_EQ(f.h.clock().Now(), now);  // Nothing slept.
  EXPECT_EQ(f.h.Job(ids[0]).ready_at, now);
  EXPECT_EQ(f.h.Job(ids[1]).ready_at, now + Millis(500));
  EXPECT_EQ(f.h.Job(ids[2]).ready_at, now + Millis(1000));
  EXPECT_EQ(f.h.StatusOf(ids[3]), JobStatus::kDeadLettered);  // Over max_jobs.
  f.fixed = true;
  EXPECT_EQ(f.h.RunUntilIdle().value(), 1);  // Only the first is ready yet.
  EXPECT_EQ(f.h.AdvanceAndRun(Millis(500)).value(), 1);
  EXPECT_EQ(f.h.AdvanceAndRun(Millis(500)).value(), 1);
}

TEST(RunnerDlqTest, AuditRecordSurvivesTheJobReturningToTheDlq) {
  DlqFixture f;
  const std::string id = f.DeadLetter("invoice.generate");
  ReplayRequest r = Request();
  r.reset_attempts = false;
  r.extra_attempts = 2;
  ASSERT_THAT(f.h.runner().ReplayDeadLetters(r), IsOk());
  EXPECT_EQ(f.h.Job(id).envelope.attempt, 1);  // Kept.
  ASSERT_THAT(f.h.RunUntilIdle(), IsOk());     // Still broken: back to the DLQ.
  ASSERT_EQ(f.h.StatusOf(id), JobStatus::kDeadLettered);
  DlqEntry e = f.h.queue().GetDeadLetter(id).value();
  ASSERT_EQ(e.audit.size(), 1u);
  EXPECT_THAT(e.audit[0], HasSubstr("alice@oncall"));
  EXPECT_THAT(e.audit[0], HasSubstr("INC-42"));
  EXPECT_EQ(e.attempts, 2);
}

TEST(RunnerDlqTest, InvalidEnvelopesAreReportedAsFailedPrecondition) {
  DlqFixture f;
  Result<EnqueueResult> bad = f.h.EnqueueJson(R"({"job_type": 42})");
  ASSERT_THAT(bad, StatusIs(StatusCode::kInvalidArgument));
  std::vector<DlqEntry> dlq = f.h.DeadLetters();
  ASSERT_EQ(dlq.size(), 1u);
  const std::string id = dlq[0].job_id;
  const std::string good = f.DeadLetter("email.send");
  for (bool dry : {true, false}) {
    ReplayRequest r = Request();
    r.dry_run = dry;
    Result<ReplayReport> report = f.h.runner().ReplayDeadLetters(r);
    ASSERT_THAT(report, IsOk());
    ASSERT_EQ(report->failed.size(), 1u);
    EXPECT_EQ(report->failed[0].first, id);
    EXPECT_THAT(report->failed[0].second, StatusIs(StatusCode::kFailedPrecondition));
    EXPECT_THAT(dry ? report->would_replay : report->replayed, ElementsAre(good));
  }
  EXPECT_EQ(f.h.StatusOf(good), JobStatus::kQueued);
}

TEST(RunnerDlqTest, DiscardRecordsWhoAndWhyAndCountsIt) {
  DlqFixture f;
  const std::string id = f.DeadLetter("invoice.generate");
  EXPECT_THAT(f.h.runner().DiscardDeadLetter(id, "bob", "customer cancelled the order"), IsOk());
  JobRecord r = f.h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDiscarded);
  EXPECT_EQ(r.reason, "operator_discard");
  // Labelled like every other counter: the job's queue, "default" here.
  EXPECT_EQ(f.h.metrics().Counter(
                metric::kDiscarded,
                MetricLabels{"invoice.generate", "default", "operator_discard", {}}),
            1);
  EXPECT_EQ(f.h.metrics().Counter(metric::kDiscarded,
                                  MetricLabels{"invoice.generate", {}, "operator_discard", {}}),
            0);
  EXPECT_THAT(f.h.runner().DiscardDeadLetter(id, "bob", "again"),
              StatusIs(StatusCode::kNotFound));
}

// Who discarded a job and why can be read back once it left the DLQ (it
// used to be written and never returned by any public call).
TEST(RunnerDlqTest, DiscardedJobKeepsItsAuditTrailInItsRecord) {
  DlqFixture f;
  const std::string id = f.DeadLetter("invoice.generate");
  ASSERT_THAT(f.h.runner().DiscardDeadLetter(id, "bob", "customer cancelled the order"), IsOk());
  JobRecord r = f.h.Job(id);
  ASSERT_EQ(r.audit.size(), 1u);
  EXPECT_THAT(r.audit[0], ::testing::HasSubstr("discard by bob: customer cancelled the order"));
  Result<JobRecord> got = f.h.queue().Get(id);
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->audit, r.audit);
}

TEST(RunnerDlqTest, DiscardCountsUnderTheJobsOwnQueue) {
  DlqFixture f;
  Envelope env;
  env.job_type = "invoice.generate";
  env.queue = "billing";
  const std::string id = f.h.Enqueue(env).value().job_id;
  ASSERT_THAT(f.h.RunUntilIdle(), IsOk());
  ASSERT_EQ(f.h.StatusOf(id), JobStatus::kDeadLettered);
  EXPECT_THAT(f.h.runner().DiscardDeadLetter(id, "bob", "order cancelled"), IsOk());
  EXPECT_EQ(f.h.metrics().Counter(
                metric::kDiscarded,
                MetricLabels{"invoice.generate", "billing", "operator_discard", {}}),
            1);
}

TEST(RunnerDlqTest, DiscardOfAnInvalidEnvelopeCountsUnderTheDefaultQueue) {
  DlqFixture f;
  EXPECT_THAT(f.h.runner().EnqueueJson(R"({"job_id":"job_bad1","job_type":"invoice.generate","max_attempts":-1})"),
              StatusIs(StatusCode::kInvalidArgument));
  ASSERT_THAT(f.h.queue().GetDeadLetter("job_bad1"), IsOk());
  EXPECT_THAT(f.h.runner().DiscardDeadLetter("job_bad1", "bob", "garbage input"), IsOk());
  EXPECT_EQ(f.h.metrics().Counter(
                metric::kDiscarded,
                MetricLabels{"invoice.generate", "default", "operator_discard", {}}),
            1);
}

}  // namespace
}  // namespace jobpact
