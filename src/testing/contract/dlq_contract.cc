// QueueBackend contract, dead-letter queue (SPEC 7): invalid envelopes kept
// whole, listing and filtering, inspection, controlled replay with an audit
// record, discard, purge.
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
int contract_internal::DeadLetterContractAnchor() { return 0; }

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

DlqAction Action(std::string actor, std::string why) {
  DlqAction a;
  a.actor = std::move(actor);
  a.reason = std::move(why);
  return a;
}

const Failure kTransient{FailureClass::kTransient, "http_503", "upstream unavailable"};
const Failure kPermanent{FailureClass::kPermanent, "not_found", "order does not exist"};

std::vector<std::string> Ids(const std::vector<DlqEntry>& es) {
  std::vector<std::string> ids;
  for (const DlqEntry& e : es) ids.push_back(e.job_id);
  return ids;
}

TEST_P(DeadLetterContract, InvalidEnvelopeIsKeptWholeWithItsProblems) {
  const std::string raw =
      R"({"job_id":"job_bad_1","job_type":"invoice.generate","trace_id":"trc_9","timeout_seconds":-3})";
  std::vector<FieldError> problems = {{"timeout_seconds", "must be > 0, got -3"},
                                      {"payload", "is required"}};
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::string id, queue_->DeadLetterInvalid(raw, problems));
  EXPECT_EQ(id, "job_bad_1");
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter(id));
  EXPECT_EQ(e.job_id, "job_bad_1");
  EXPECT_EQ(e.job_type, "invoice.generate");
  EXPECT_EQ(e.trace_id, "trc_9");
  EXPECT_EQ(e.reason, reason::kInvalidEnvelope);
  EXPECT_EQ(e.raw_envelope, raw);
  EXPECT_EQ(e.payload, raw);
  EXPECT_EQ(e.dead_lettered_at, Now());
  EXPECT_EQ(e.attempts, 0);
  ASSERT_TRUE(e.last_failure.has_value());
  EXPECT_EQ(e.last_failure->failure_class, FailureClass::kPermanent);
  EXPECT_EQ(e.last_failure->code, "invalid_envelope");
  EXPECT_THAT(e.last_failure->message, HasSubstr("timeout_seconds"));
  EXPECT_THAT(e.last_failure->message, HasSubstr("must be > 0, got -3"));
  EXPECT_THAT(e.last_failure->message, HasSubstr("payload"));
  ASSERT_FALSE(e.history.empty());
  EXPECT_EQ(e.history.back().to, JobStatus::kDeadLettered);
  EXPECT_EQ(e.history.back().reason, reason::kInvalidEnvelope);
  JobRecord rec = MustGet(id);
  EXPECT_EQ(rec.status, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.reason, reason::kInvalidEnvelope);
  EXPECT_THAT(Take(10), IsEmpty());
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.dead_letters, 1);
}

TEST_P(DeadLetterContract, AnEntryNamesItsJobsQueue) {
  PutInDlq(MakeJob("job_1", "mail.send", 0, "bulk"), std::string(reason::kPermanentError),
           kPermanent);
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter("job_1"));
  EXPECT_EQ(e.queue, "bulk");
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<DlqEntry> listed, admin_->ListDeadLetters({}));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].queue, "bulk");
}

TEST_P(DeadLetterContract, UnreadableInputGetsANewIdAndIsStillKept) {
  const std::string garbage = "not json at all {{{ \"job_id\": 42";
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::string id1,
                               queue_->DeadLetterInvalid(garbage, {{"", "malformed JSON"}}));
  EXPECT_FALSE(id1.empty());
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter(id1));
  EXPECT_EQ(e.raw_envelope, garbage);
  // A readable id that another job already has is not reused.
  Put(MakeJob("job_taken"));
  const std::string clash = R"({"job_id":"job_taken","max_attempts":0})";
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::string id2,
                               queue_->DeadLetterInvalid(clash, {{"max_attempts", "must be >= 1"}}));
  EXPECT_NE(id2, "job_taken");
  EXPECT_NE(id2, id1);
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e2, admin_->GetDeadLetter(id2));
  EXPECT_EQ(e2.raw_envelope, clash);
  EXPECT_EQ(MustGet("job_taken").status, JobStatus::kQueued);
}

TEST_P(DeadLetterContract, InvalidEnvelopeCannotBeReplayed) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      std::string id, queue_->DeadLetterInvalid(R"({"job_id":"job_bad"})", {{"job_type", "is required"}}));
  EXPECT_THAT(admin_->Replay(id, Action("alice", "try it")),
              StatusIs(StatusCode::kFailedPrecondition));
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter(id));
  EXPECT_EQ(e.reason, reason::kInvalidEnvelope);  // Still there.
}

TEST_P(DeadLetterContract, ListFiltersByTypeReasonClassAndTime) {
  const TimePoint t0 = Now();
  PutInDlq(MakeJob("job_1", "type.a"), "max_attempts_exceeded", kTransient);
  Advance(std::chrono::minutes(1));
  PutInDlq(MakeJob("job_2", "type.b"), "permanent_error", kPermanent);
  Advance(std::chrono::minutes(1));
  PutInDlq(MakeJob("job_3", "type.a"), "permanent_error", kPermanent);
  Advance(std::chrono::minutes(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      std::string inv,
      queue_->DeadLetterInvalid(R"({"job_id":"job_4","job_type":"type.c"})", {{"payload", "required"}}));
  ASSERT_EQ(inv, "job_4");

  auto list = [this](DlqFilter f) {
    Result<std::vector<DlqEntry>> r = admin_->ListDeadLetters(f);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? Ids(*r) : std::vector<std::string>{};
  };
  EXPECT_THAT(list({}), ElementsAre("job_1", "job_2", "job_3", "job_4"));
  DlqFilter by_type;
  by_type.job_type = "type.a";
  EXPECT_THAT(list(by_type), ElementsAre("job_1", "job_3"));
  DlqFilter by_reason;
  by_reason.reason = "permanent_error";
  EXPECT_THAT(list(by_reason), ElementsAre("job_2", "job_3"));
  DlqFilter invalid;
  invalid.reason = std::string(reason::kInvalidEnvelope);
  EXPECT_THAT(list(invalid), ElementsAre("job_4"));
  DlqFilter permanent;
  permanent.failure_class = FailureClass::kPermanent;
  EXPECT_THAT(list(permanent), ElementsAre("job_2", "job_3", "job_4"));
  DlqFilter transient;
  transient.failure_class = FailureClass::kTransient;
  EXPECT_THAT(list(transient), ElementsAre("job_1"));
  DlqFilter after;
  after.dead_lettered_after = t0 + std::chrono::minutes(1);  // Inclusive.
  EXPECT_THAT(list(after), ElementsAre("job_2", "job_3", "job_4"));
  DlqFilter before;
  before.dead_lettered_before = t0 + std::chrono::minutes(2);  // Exclusive.
  EXPECT_THAT(list(before), ElementsAre("job_1", "job_2"));
  DlqFilter window;
  window.dead_lettered_after = t0 + std::chrono::minutes(1);
  window.dead_lettered_before = t0 + std::chrono::minutes(3);
  EXPECT_THAT(list(window), ElementsAre("job_2", "job_3"));
  DlqFilter limited;
  limited.limit = 2;
  EXPECT_THAT(list(limited), ElementsAre("job_1", "job_2"));
  DlqFilter combined;
  combined.job_type = "type.a";
  combined.failure_class = FailureClass::kPermanent;
  EXPECT_THAT(list(combined), ElementsAre("job_3"));
  DlqFilter nothing;
  nothing.job_type = "type.zzz";
  EXPECT_THAT(list(nothing), IsEmpty());
}

TEST_P(DeadLetterContract, ListedEntriesCarryTheirDetails) {
  PutInDlq(MakeJob("job_1", "type.a"), "max_attempts_exceeded", kTransient);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<DlqEntry> es, admin_->ListDeadLetters({}));
  ASSERT_EQ(es.size(), 1u);
  EXPECT_EQ(es[0].job_type, "type.a");
  EXPECT_EQ(es[0].payload, R"({"n":1})");
  EXPECT_EQ(es[0].attempts, 1);
  EXPECT_EQ(es[0].reason, "max_attempts_exceeded");
  ASSERT_TRUE(es[0].last_failure.has_value());
  EXPECT_EQ(es[0].last_failure->code, "http_503");
  EXPECT_EQ(es[0].trace_id, "trc_job_1");
  EXPECT_EQ(es[0].history.size(), 3u);
}

TEST_P(DeadLetterContract, GetDeadLetterOfAJobNotInTheDlqIsNotFound) {
  Put(MakeJob("job_1"));
  EXPECT_THAT(admin_->GetDeadLetter("job_1").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(admin_->GetDeadLetter("job_missing").status(), StatusIs(StatusCode::kNotFound));
}

TEST_P(DeadLetterContract, ReplayRequeuesTheJobWithAnAuditRecord) {
  PutInDlq(MakeJob("job_1"), "max_attempts_exceeded", kTransient);
  Advance(std::chrono::minutes(10));
  ASSERT_THAT(admin_->Replay("job_1", Action("alice", "INC-42: upstream fixed")), IsOk());
  JobRecord rec = MustGet("job_1");
  EXPECT_EQ(rec.status, JobStatus::kQueued);
  EXPECT_EQ(rec.envelope.attempt, 0);  // reset_attempts defaults to true.
  EXPECT_EQ(rec.reason, reason::kReplay);
  EXPECT_EQ(rec.ready_at, Now());
  EXPECT_FALSE(rec.finished_at.has_value());
  EXPECT_EQ(rec.history.back().from, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.history.back().to, JobStatus::kQueued);
  EXPECT_EQ(rec.history.back().at, Now());
  EXPECT_EQ(rec.history.back().reason, reason::kReplay);
  // It left the DLQ.
  EXPECT_THAT(admin_->GetDeadLetter("job_1").status(), StatusIs(StatusCode::kNotFound));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<DlqEntry> left, admin_->ListDeadLetters({}));
  EXPECT_THAT(left, IsEmpty());
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.dead_letters, 0);
  // It runs again from attempt 1, as a new delivery.
  Delivery d = TakeOne("job_1");
  EXPECT_EQ(d.job.envelope.attempt, 1);
  EXPECT_EQ(d.job.epoch, 2);
  // Back in the DLQ, the entry shows who replayed it, when and why.
  Completion again;
  again.to = JobStatus::kDeadLettered;
  again.reason = "permanent_error";
  again.failure = kPermanent;
  ASSERT_THAT(queue_->Complete(d, again), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter("job_1"));
  ASSERT_EQ(e.audit.size(), 1u);
  EXPECT_THAT(e.audit[0], HasSubstr("alice"));
  EXPECT_THAT(e.audit[0], HasSubstr("INC-42: upstream fixed"));
  EXPECT_EQ(e.reason, "permanent_error");
  ASSERT_THAT(admin_->Replay("job_1", Action("bob", "second try")), IsOk());
  ASSERT_THAT(queue_->Complete(TakeOne("job_1"), again), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e2, admin_->GetDeadLetter("job_1"));
  ASSERT_EQ(e2.audit.size(), 2u);
  EXPECT_THAT(e2.audit[1], HasSubstr("bob"));
}

TEST_P(DeadLetterContract, ReplayWithoutResetKeepsAttemptsAndAddsExtra) {
  Envelope env = MakeJob("job_1");
  env.max_attempts = 2;
  Put(env);
  Delivery d1 = TakeOne("job_1");
  Completion retry;
  retry.to = JobStatus::kRetryScheduled;
  retry.reason = "transient_error";
  ASSERT_THAT(queue_->Complete(d1, retry), IsOk());
  Delivery d2 = TakeOne("job_1");
  Completion dlq;
  dlq.to = JobStatus::kDeadLettered;
  dlq.reason = "max_attempts_exceeded";
  ASSERT_THAT(queue_->Complete(d2, dlq), IsOk());
  DlqAction a = Action("alice", "one more try");
  a.reset_attempts = false;
  a.extra_attempts = 3;
  ASSERT_THAT(admin_->Replay("job_1", a), IsOk());
  JobRecord rec = MustGet("job_1");
  EXPECT_EQ(rec.envelope.attempt, 2);
  EXPECT_EQ(rec.envelope.max_attempts, 5);
  EXPECT_EQ(TakeOne("job_1").job.envelope.attempt, 3);
}

TEST_P(DeadLetterContract, ReplayAtALaterTime) {
  PutInDlq(MakeJob("job_1"), "max_attempts_exceeded", kTransient);
  DlqAction a = Action("alice", "after the maintenance window");
  a.ready_at = Now() + std::chrono::minutes(30);
  ASSERT_THAT(admin_->Replay("job_1", a), IsOk());
  EXPECT_EQ(MustGet("job_1").ready_at, Now() + std::chrono::minutes(30));
  EXPECT_THAT(Take(10), IsEmpty());
  Advance(std::chrono::minutes(30));
  TakeOne("job_1");
}

TEST_P(DeadLetterContract, ReplayAndDiscardCheckTheirInput) {
  PutInDlq(MakeJob("job_1"), "max_attempts_exceeded", kTransient);
  Put(MakeJob("job_queued"));
  for (bool replay : {true, false}) {
    auto act = [&](std::string_view id, const DlqAction& a) {
      return replay ? admin_->Replay(id, a) : admin_->Discard(id, a);
    };
    SCOPED_TRACE(replay ? "Replay" : "Discard");
    EXPECT_THAT(act("job_1", Action("", "why")), StatusIs(StatusCode::kInvalidArgument));
    EXPECT_THAT(act("job_1", Action("alice", "")), StatusIs(StatusCode::kInvalidArgument));
    EXPECT_THAT(act("job_missing", Action("alice", "why")), StatusIs(StatusCode::kNotFound));
    EXPECT_THAT(act("job_queued", Action("alice", "why")), StatusIs(StatusCode::kNotFound));
    EXPECT_EQ(MustGet("job_1").status, JobStatus::kDeadLettered);
    EXPECT_EQ(MustGet("job_queued").status, JobStatus::kQueued);
  }
}

TEST_P(DeadLetterContract, DiscardEndsTheJobWithAnAuditRecord) {
  PutInDlq(MakeJob("job_1"), "permanent_error", kPermanent);
  Advance(std::chrono::minutes(5));
  ASSERT_THAT(admin_->Discard("job_1", Action("bob", "superseded by job_2")), IsOk());
  JobRecord rec = MustGet("job_1");
  EXPECT_EQ(rec.status, JobStatus::kDiscarded);
  EXPECT_EQ(rec.reason, reason::kOperatorDiscard);
  EXPECT_EQ(rec.finished_at, Now());
  EXPECT_EQ(rec.history.back().from, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.history.back().to, JobStatus::kDiscarded);
  EXPECT_EQ(rec.history.back().reason, reason::kOperatorDiscard);
  EXPECT_THAT(admin_->GetDeadLetter("job_1").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(admin_->Discard("job_1", Action("bob", "again")), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(admin_->Replay("job_1", Action("bob", "undo")), StatusIs(StatusCode::kNotFound));
  // Now a final status: removed by the status retention, not the DLQ's.
  JOBPACT_ASSERT_OK_AND_ASSIGN(int n, admin_->PurgeFinished(Now() + Seconds(1)));
  EXPECT_EQ(n, 1);
  EXPECT_THAT(admin_->Get("job_1").status(), StatusIs(StatusCode::kNotFound));
}

TEST_P(DeadLetterContract, PurgeDeletesOnlyEntriesOlderThanTheCutoff) {
  const TimePoint t0 = Now();
  PutInDlq(MakeJob("job_old"), "permanent_error", kPermanent);
  Advance(std::chrono::hours(1));
  PutInDlq(MakeJob("job_new"), "permanent_error", kPermanent);
  JOBPACT_ASSERT_OK_AND_ASSIGN(int first, admin_->PurgeDeadLetters(t0 + std::chrono::minutes(30)));
  EXPECT_EQ(first, 1);
  EXPECT_THAT(admin_->GetDeadLetter("job_old").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(admin_->Get("job_old").status(), StatusIs(StatusCode::kNotFound));
  ASSERT_THAT(admin_->GetDeadLetter("job_new").status(), IsOk());
  // The cutoff is exclusive: an entry dead-lettered exactly then stays.
  JOBPACT_ASSERT_OK_AND_ASSIGN(int none, admin_->PurgeDeadLetters(Now()));
  EXPECT_EQ(none, 0);
  JOBPACT_ASSERT_OK_AND_ASSIGN(int second, admin_->PurgeDeadLetters(Now() + Seconds(1)));
  EXPECT_EQ(second, 1);
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.dead_letters, 0);
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
