// QueueAdmin contract: the operator side every backend offers (SPEC 7, 10):
// job listing, cancel (a queued job is discarded, a running one is told at
// its next heartbeat), the control state that the lease step obeys in the
// store (pause per type and per queue, concurrency limits per type, routes
// to the DLQ), and the retry policies runners publish.
#include <algorithm>
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
int contract_internal::AdminContractAnchor() { return 0; }

namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

DlqAction Who(std::string actor, std::string why) {
  DlqAction a;
  a.actor = std::move(actor);
  a.reason = std::move(why);
  return a;
}

ControlRule Rule(ControlKind kind, std::string subject, int limit = 0,
                 FailureClass c = FailureClass::kUnknown) {
  ControlRule r;
  r.kind = kind;
  r.subject = std::move(subject);
  r.limit = limit;
  r.failure_class = c;
  r.actor = "alice";
  r.reason = "INC-7: upstream down";
  return r;
}

std::vector<std::string> Ids(const std::vector<Delivery>& ds) {
  std::vector<std::string> out;
  for (const Delivery& d : ds) out.push_back(d.job.envelope.job_id);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> Ids(const std::vector<JobRecord>& rs) {
  std::vector<std::string> out;
  for (const JobRecord& r : rs) out.push_back(r.envelope.job_id);
  return out;
}

// --- Listing ---

TEST_P(QueueAdminContract, ListJobsFiltersByStatusTypeAndQueueAndPagesById) {
  Put(MakeJob("job_1", "mail.send"));
  Put(MakeJob("job_2", "mail.send", 0, "bulk"));
  Put(MakeJob("job_3", "pdf.render"));
  Put(MakeJob("job_4", "mail.send"));
  TakeOne("job_1", "w1", {"default"});

  JobFilter all;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> every, admin_->ListJobs(all));
  EXPECT_THAT(Ids(every), ElementsAre("job_1", "job_2", "job_3", "job_4"));
  ASSERT_FALSE(every.empty());
  EXPECT_FALSE(every[0].history.empty()) << "listed records carry their history";

  JobFilter queued_mail;
  queued_mail.status = JobStatus::kQueued;
  queued_mail.job_type = "mail.send";
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> qm, admin_->ListJobs(queued_mail));
  EXPECT_THAT(Ids(qm), ElementsAre("job_2", "job_4"));

  JobFilter running;
  running.status = JobStatus::kRunning;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> r, admin_->ListJobs(running));
  EXPECT_THAT(Ids(r), ElementsAre("job_1"));

  JobFilter bulk;
  bulk.queue = "bulk";
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> b, admin_->ListJobs(bulk));
  EXPECT_THAT(Ids(b), ElementsAre("job_2"));

  JobFilter page;
  page.limit = 2;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> p1, admin_->ListJobs(page));
  EXPECT_THAT(Ids(p1), ElementsAre("job_1", "job_2"));
  page.after_job_id = p1.back().envelope.job_id;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> p2, admin_->ListJobs(page));
  EXPECT_THAT(Ids(p2), ElementsAre("job_3", "job_4"));
  page.after_job_id = "job_4";
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> p3, admin_->ListJobs(page));
  EXPECT_THAT(p3, IsEmpty());
}

TEST_P(QueueAdminContract, ListJobsRefusesABadLimitOrName) {
  JobFilter f;
  f.limit = 0;
  EXPECT_THAT(admin_->ListJobs(f).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("limit")));
  f.limit = 10;
  f.job_type = "mail send";
  EXPECT_THAT(admin_->ListJobs(f).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("mail send")));
}

// --- Cancel ---

TEST_P(QueueAdminContract, CancelDiscardsAJobThatHasNotStartedWithTheAudit) {
  Put(MakeJob("job_1"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(CancelOutcome o, admin_->Cancel("job_1", Who("bob", "typo")));
  EXPECT_EQ(o, CancelOutcome::kDiscarded);
  JobRecord r = MustGet("job_1");
  EXPECT_EQ(r.status, JobStatus::kDiscarded);
  EXPECT_EQ(r.reason, reason::kCancelled);
  ASSERT_THAT(r.audit, SizeIs(1));
  EXPECT_THAT(r.audit[0], HasSubstr("cancel by bob: typo"));
  EXPECT_EQ(r.history.back().to, JobStatus::kDiscarded);
  EXPECT_THAT(Take(1), IsEmpty()) << "a cancelled job is never delivered";
}

TEST_P(QueueAdminContract, CancelOfARunningJobIsReportedAtTheNextRenewAndLeavesTheLease) {
  Put(MakeJob("job_1"));
  Delivery d = TakeOne("job_1");
  EXPECT_FALSE(d.lease.cancel_requested);
  Advance(Seconds(5));
  JOBPACT_ASSERT_OK_AND_ASSIGN(Lease renewed, queue_->Renew(d.lease, Seconds(60), "step-3"));
  EXPECT_FALSE(renewed.cancel_requested);

  JOBPACT_ASSERT_OK_AND_ASSIGN(CancelOutcome o, admin_->Cancel("job_1", Who("bob", "runaway")));
  EXPECT_EQ(o, CancelOutcome::kCancelRequested);
  JobRecord r = MustGet("job_1");
  EXPECT_EQ(r.status, JobStatus::kRunning) << "the handler decides when it stops";
  EXPECT_TRUE(r.cancel_requested);
  EXPECT_EQ(r.lease_expires_at, renewed.expires_at) << "a cancel does not touch the lease";
  EXPECT_EQ(r.checkpoint, "step-3") << "nor the checkpoint";
  EXPECT_THAT(r.audit.back(), HasSubstr("cancel by bob: runaway"));

  JOBPACT_ASSERT_OK_AND_ASSIGN(Lease again, queue_->Renew(d.lease, Seconds(60), ""));
  EXPECT_TRUE(again.cancel_requested);
  ASSERT_THAT(queue_->Complete(d, Outcome(JobStatus::kDiscarded, std::string(reason::kCancelled))),
              IsOk());
  EXPECT_EQ(MustGet("job_1").status, JobStatus::kDiscarded);
}

TEST_P(QueueAdminContract, ACancelRequestSurvivesACompletionComputedBeforeIt) {
  // The worker computed its retry from the delivery it holds, which does not
  // know of the cancel; the stored request must not be lost by that write.
  Put(MakeJob("job_1"));
  Delivery d = TakeOne("job_1");
  ASSERT_THAT(admin_->Cancel("job_1", Who("bob", "stop it")).status(), IsOk());
  Completion retry = Outcome(JobStatus::kRetryScheduled, std::string(reason::kTransientError));
  ASSERT_THAT(queue_->Complete(d, retry), IsOk());
  EXPECT_TRUE(MustGet("job_1").cancel_requested);
  EXPECT_THAT(MustGet("job_1").audit, ElementsAre(HasSubstr("cancel by bob: stop it")))
      << "nor is its audit line";
  Delivery next = TakeOne("job_1");
  EXPECT_TRUE(next.job.cancel_requested) << "the next delivery tells its worker at once";
  EXPECT_TRUE(next.lease.cancel_requested);
}

TEST_P(QueueAdminContract, ReplayStartsAgainWithoutTheCancelRequest) {
  Put(MakeJob("job_1"));
  Delivery d = TakeOne("job_1");
  ASSERT_THAT(admin_->Cancel("job_1", Who("bob", "stop")).status(), IsOk());
  Completion dl = Outcome(JobStatus::kDeadLettered, std::string(reason::kPermanentError));
  dl.failure = Failure{FailureClass::kPermanent, "bad", "bad input"};
  ASSERT_THAT(queue_->Complete(d, dl), IsOk());
  ASSERT_THAT(admin_->Replay("job_1", Who("carol", "fixed the input")), IsOk());
  EXPECT_FALSE(MustGet("job_1").cancel_requested);
  EXPECT_FALSE(TakeOne("job_1").lease.cancel_requested);
}

TEST_P(QueueAdminContract, CancelRefusesWhatCannotBeCancelledAndNamesWhy) {
  EXPECT_THAT(admin_->Cancel("job_none", Who("bob", "x")).status(),
              StatusIs(StatusCode::kNotFound, HasSubstr("job_none")));
  Put(MakeJob("job_1"));
  EXPECT_THAT(admin_->Cancel("job_1", Who("", "x")).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor")));
  EXPECT_THAT(admin_->Cancel("job_1", Who("bob", " ")).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("reason")));
  ASSERT_THAT(queue_->Complete(TakeOne("job_1"), Outcome(JobStatus::kSucceeded, "")), IsOk());
  EXPECT_THAT(admin_->Cancel("job_1", Who("bob", "x")).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("succeeded")));
  PutInDlq(MakeJob("job_2"), std::string(reason::kPermanentError),
           Failure{FailureClass::kPermanent, "bad", "bad"});
  EXPECT_THAT(admin_->Cancel("job_2", Who("bob", "x")).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("discard it instead")));
}

// --- Control state obeyed by the lease step ---

TEST_P(QueueAdminContract, APausedTypeIsNeverLeasedAndResumesWhereItWas) {
  Put(MakeJob("job_a1", "mail.send", 5));
  Put(MakeJob("job_b1", "pdf.render"));
  Put(MakeJob("job_a2", "mail.send", 5));
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kPauseType, "mail.send")), IsOk());

  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_b1"));
  EXPECT_THAT(Take(10), IsEmpty());
  for (const char* id : {"job_a1", "job_a2"}) {
    JobRecord r = MustGet(id);
    EXPECT_EQ(r.status, JobStatus::kQueued) << id;
    EXPECT_EQ(r.epoch, 0) << id << " was never leased and handed back";
    EXPECT_EQ(r.envelope.attempt, 0) << id;
    EXPECT_THAT(r.history, SizeIs(1)) << id;
  }

  ASSERT_THAT(admin_->ClearControl({ControlKind::kPauseType, "mail.send"}, "alice", "fixed"),
              IsOk());
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_a1", "job_a2"));
}

TEST_P(QueueAdminContract, APausedQueueIsNeverLeased) {
  Put(MakeJob("job_1", "t", 0, "bulk"));
  Put(MakeJob("job_2", "t", 0, "default"));
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kPauseQueue, "bulk")), IsOk());
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_2"));
  EXPECT_THAT(Take(10, {"bulk"}), IsEmpty());
  ASSERT_THAT(admin_->ClearControl({ControlKind::kPauseQueue, "bulk"}, "alice", "ok"), IsOk());
  EXPECT_THAT(Ids(Take(10, {"bulk"})), ElementsAre("job_1"));
}

TEST_P(QueueAdminContract, AConcurrencyLimitCountsRunningJobsAcrossLeaseCalls) {
  for (int i = 1; i <= 5; ++i) Put(MakeJob("job_a" + std::to_string(i), "mail.send"));
  Put(MakeJob("job_b1", "pdf.render"));
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kConcurrencyLimit, "mail.send", 2)), IsOk());

  std::vector<Delivery> first = Take(10);
  EXPECT_THAT(Ids(first), ElementsAre("job_a1", "job_a2", "job_b1"))
      << "one batch takes the type up to its limit, other types as usual";
  EXPECT_THAT(Take(10, {}, "w2"), IsEmpty()) << "another worker gets none either";
  EXPECT_EQ(MustGet("job_a3").epoch, 0) << "held jobs are not leased and handed back";

  ASSERT_THAT(queue_->Complete(first[0], Outcome(JobStatus::kSucceeded, "")), IsOk());
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_a3")) << "a finished job frees one slot";

  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kConcurrencyLimit, "mail.send", 4)), IsOk());
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_a4", "job_a5")) << "a raised limit applies at once";
}

TEST_P(QueueAdminContract, AZeroLimitHoldsTheTypeAndAnExpiredLeaseFreesItsSlot) {
  Put(MakeJob("job_1", "mail.send"));
  Put(MakeJob("job_2", "mail.send"));
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kConcurrencyLimit, "mail.send", 0)), IsOk());
  EXPECT_THAT(Take(10), IsEmpty());
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kConcurrencyLimit, "mail.send", 1)), IsOk());
  Delivery held = TakeOne("job_1");
  EXPECT_THAT(Take(10), IsEmpty());
  // The holder dies: once its lease is recovered the slot is free again.
  Advance(Seconds(46));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> rec, queue_->RecoverExpiredLeases(3));
  ASSERT_THAT(rec, SizeIs(1));
  EXPECT_THAT(Take(1), SizeIs(1));
}

// --- Backpressure at enqueue (kMaxQueueDepth) ---

TEST_P(QueueAdminContract, AQueueAtItsMaximumDepthRefusesEnqueuesAndNamesIt) {
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kMaxQueueDepth, "bulk", 2)), IsOk());
  Put(MakeJob("job_1", "t", 0, "bulk"));
  Put(MakeJob("job_2", "t", 0, "bulk"));
  Result<EnqueueResult> refused = queue_->Enqueue(MakeJob("job_3", "t", 0, "bulk"), {});
  EXPECT_THAT(refused.status(), StatusIs(StatusCode::kResourceExhausted,
                                         AllOf(HasSubstr("queue bulk"), HasSubstr("depth 2"),
                                               HasSubstr("maximum 2"))));
  EXPECT_THAT(admin_->Get("job_3").status(), StatusIs(StatusCode::kNotFound))
      << "a refused job is not stored";
  Put(MakeJob("job_d1", "t", 0, "default"));  // Other queues are not limited.

  // Depth counts waiting jobs (ready and scheduled), not running ones.
  Delivery running = TakeOne("job_1", "w1", {"bulk"});
  Put(MakeJob("job_3", "t", 0, "bulk"));
  Completion retry = Outcome(JobStatus::kRetryScheduled, std::string(reason::kTransientError));
  retry.ready_at = Now() + Seconds(30);
  retry.failure = Failure{FailureClass::kTransient, "http_503", "upstream unavailable"};
  ASSERT_THAT(queue_->Complete(running, retry), IsOk());
  EXPECT_THAT(queue_->Enqueue(MakeJob("job_4", "t", 0, "bulk"), {}).status(),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("depth 3")))
      << "a retry waiting for its time counts";

  // A raised limit applies at once; a lifted one lets everything in.
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kMaxQueueDepth, "bulk", 4)), IsOk());
  Put(MakeJob("job_4", "t", 0, "bulk"));
  ASSERT_THAT(admin_->ClearControl({ControlKind::kMaxQueueDepth, "bulk"}, "alice", "drained"),
              IsOk());
  Put(MakeJob("job_5", "t", 0, "bulk"));
}

TEST_P(QueueAdminContract, ABatchPastAQueuesMaximumDepthIsRefusedWhole) {
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kMaxQueueDepth, "bulk", 3)), IsOk());
  Put(MakeJob("job_1", "t", 0, "bulk"));
  Result<std::vector<EnqueueResult>> refused = queue_->EnqueueBatch(
      {MakeJob("job_d", "t", 0, "default"), MakeJob("job_2", "t", 0, "bulk"),
       MakeJob("job_3", "t", 0, "bulk"), MakeJob("job_4", "u", 0, "bulk")},
      {});
  EXPECT_THAT(refused.status(),
              StatusIs(StatusCode::kResourceExhausted, AllOf(HasSubstr("queue bulk"),
                                                             HasSubstr("3 jobs are not"))));
  for (const char* id : {"job_d", "job_2", "job_3", "job_4"}) {
    EXPECT_THAT(admin_->Get(id).status(), StatusIs(StatusCode::kNotFound))
        << id << ": nothing of a refused batch is stored";
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      std::vector<EnqueueResult> fits,
      queue_->EnqueueBatch({MakeJob("job_2", "t", 0, "bulk"), MakeJob("job_4", "u", 0, "bulk")},
                           {}));
  EXPECT_THAT(fits, SizeIs(2));
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats stats, admin_->Stats());
  EXPECT_EQ(stats.queues["bulk"].depth, 3);
}

TEST_P(QueueAdminContract, AMaximumDepthOfZeroRefusesEveryEnqueueAndABadOneIsRefused) {
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kMaxQueueDepth, "bulk", 0)), IsOk());
  EXPECT_THAT(queue_->Enqueue(MakeJob("job_1", "t", 0, "bulk"), {}).status(),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("depth 0 of its maximum 0")));
  EXPECT_THAT(admin_->SetControl(Rule(ControlKind::kMaxQueueDepth, "bulk", -1)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("maximum queue depth")));
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState s, admin_->ReadControl());
  EXPECT_EQ(s.MaxQueueDepth("bulk"), 0);
  EXPECT_EQ(s.MaxQueueDepth("default"), std::nullopt);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> audit, admin_->ControlAudit(10));
  ASSERT_THAT(audit, SizeIs(1));
  EXPECT_THAT(audit[0], HasSubstr("set max_queue_depth bulk 0 by alice"));
}

TEST_P(QueueAdminContract, ControlRulesAreStoredWithWhoAndWhenReplacedByKeyAndAudited) {
  const TimePoint t0 = Now();
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kConcurrencyLimit, "mail.send", 3)), IsOk());
  Advance(Seconds(1));
  ControlRule lower = Rule(ControlKind::kConcurrencyLimit, "mail.send", 1);
  lower.actor = "bob";
  lower.reason = "runbook: lower its concurrency";
  ASSERT_THAT(admin_->SetControl(lower), IsOk());
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kRouteToDlq, "mail.send", 0,
                                      FailureClass::kUnknown)),
              IsOk());
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kRouteToDlq, "mail.send", 0,
                                      FailureClass::kPermanent)),
              IsOk());
  ASSERT_THAT(admin_->SetControl(Rule(ControlKind::kPauseQueue, "bulk")), IsOk());

  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState s, admin_->ReadControl());
  ASSERT_THAT(s.rules, SizeIs(4));
  EXPECT_EQ(s.ConcurrencyLimit("mail.send"), 1);
  EXPECT_EQ(s.ConcurrencyLimit("pdf.render"), std::nullopt);
  EXPECT_TRUE(s.QueuePaused("bulk"));
  EXPECT_FALSE(s.TypePaused("bulk"));
  EXPECT_TRUE(s.RoutesToDlq("mail.send", FailureClass::kUnknown));
  EXPECT_TRUE(s.RoutesToDlq("mail.send", FailureClass::kPermanent));
  EXPECT_FALSE(s.RoutesToDlq("mail.send", FailureClass::kTransient));
  for (const ControlRule& r : s.rules) {
    if (r.kind != ControlKind::kConcurrencyLimit) continue;
    EXPECT_EQ(r.actor, "bob");
    EXPECT_EQ(r.reason, "runbook: lower its concurrency");
    EXPECT_EQ(r.set_at, t0 + Seconds(1));
  }

  ASSERT_THAT(admin_->ClearControl({ControlKind::kRouteToDlq, "mail.send", FailureClass::kUnknown},
                                   "carol", "classified now"),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState after, admin_->ReadControl());
  EXPECT_FALSE(after.RoutesToDlq("mail.send", FailureClass::kUnknown));
  EXPECT_TRUE(after.RoutesToDlq("mail.send", FailureClass::kPermanent));

  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> audit, admin_->ControlAudit(100));
  ASSERT_THAT(audit, SizeIs(6));
  EXPECT_THAT(audit[0], HasSubstr("set concurrency_limit mail.send 3 by alice: INC-7"));
  EXPECT_THAT(audit[1], HasSubstr("set concurrency_limit mail.send 1 by bob: runbook"));
  EXPECT_THAT(audit[5], HasSubstr("clear route_to_dlq mail.send unknown by carol: classified"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> last, admin_->ControlAudit(1));
  EXPECT_THAT(last, ElementsAre(audit[5]));
}

TEST_P(QueueAdminContract, ControlChangesRefuseBadInputAndNameIt) {
  ControlRule no_actor = Rule(ControlKind::kPauseType, "mail.send");
  no_actor.actor = "";
  EXPECT_THAT(admin_->SetControl(no_actor), StatusIs(StatusCode::kInvalidArgument,
                                                     HasSubstr("actor")));
  ControlRule no_reason = Rule(ControlKind::kPauseType, "mail.send");
  no_reason.reason = "";
  EXPECT_THAT(admin_->SetControl(no_reason), StatusIs(StatusCode::kInvalidArgument,
                                                      HasSubstr("reason")));
  EXPECT_THAT(admin_->SetControl(Rule(ControlKind::kPauseType, "mail send; DROP")),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("mail send; DROP")));
  EXPECT_THAT(admin_->SetControl(Rule(ControlKind::kConcurrencyLimit, "mail.send", -1)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("-1")));
  EXPECT_THAT(admin_->ClearControl({ControlKind::kPauseType, "mail.send"}, "alice", "x"),
              StatusIs(StatusCode::kNotFound, HasSubstr("pause_type mail.send")));
  EXPECT_THAT(admin_->ClearControl({ControlKind::kPauseType, "mail.send"}, "", "x"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor")));
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState s, admin_->ReadControl());
  EXPECT_THAT(s.rules, IsEmpty());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> audit, admin_->ControlAudit(10));
  EXPECT_THAT(audit, IsEmpty()) << "refused changes leave no audit line";
}

// --- Published policies ---

TEST_P(QueueAdminContract, PublishedPoliciesAreReadBackWithTheirReasons) {
  const TimePoint t0 = Now();
  PublishedPolicy def;
  def.job_type = std::string(kDefaultPolicyType);
  def.publisher = "runner-1";
  PublishedPolicy mail;
  mail.job_type = "mail.send";
  mail.policy.max_attempts = 8;
  mail.policy.max_unknown_attempts = 2;
  mail.policy.backoff.kind = BackoffKind::kDecorrelated;
  mail.policy.backoff.base_delay = Millis(250);
  mail.policy.backoff.max_delay = Seconds(60);
  mail.policy.backoff.jitter = JitterKind::kEqual;
  mail.policy.on_permanent = FailureAction::kFail;
  mail.reason = "SMTP relay throttles bursts";
  mail.publisher = "runner-1";
  ASSERT_THAT(admin_->PublishPolicies({def, mail}), IsOk());

  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<PublishedPolicy> got, admin_->ReadPolicies());
  ASSERT_THAT(got, SizeIs(2));
  EXPECT_EQ(got[0].job_type, "*");
  EXPECT_EQ(got[0].reason, "");
  EXPECT_EQ(got[0].policy.max_attempts, RetryPolicy{}.max_attempts);
  const PublishedPolicy& m = got[1];
  EXPECT_EQ(m.job_type, "mail.send");
  EXPECT_EQ(m.reason, "SMTP relay throttles bursts");
  EXPECT_EQ(m.publisher, "runner-1");
  EXPECT_EQ(m.published_at, t0);
  EXPECT_EQ(m.policy.max_attempts, 8);
  EXPECT_EQ(m.policy.max_unknown_attempts, 2);
  EXPECT_EQ(m.policy.backoff.kind, BackoffKind::kDecorrelated);
  EXPECT_EQ(m.policy.backoff.base_delay, Millis(250));
  EXPECT_EQ(m.policy.backoff.max_delay, Seconds(60));
  EXPECT_EQ(m.policy.backoff.multiplier, 2.0);
  EXPECT_EQ(m.policy.backoff.jitter, JitterKind::kEqual);
  EXPECT_EQ(m.policy.on_permanent, FailureAction::kFail);

  mail.policy.max_attempts = 3;
  mail.publisher = "runner-2";
  ASSERT_THAT(admin_->PublishPolicies({mail}), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<PublishedPolicy> again, admin_->ReadPolicies());
  ASSERT_THAT(again, SizeIs(2));
  EXPECT_EQ(again[1].policy.max_attempts, 3) << "a type's policy is replaced, not added";
  EXPECT_EQ(again[1].publisher, "runner-2");
}

TEST_P(QueueAdminContract, PublishingRefusesAnOverrideWithoutAReasonOrABadPolicy) {
  PublishedPolicy p;
  p.job_type = "mail.send";
  EXPECT_THAT(admin_->PublishPolicies({p}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("reason")));
  p.reason = "why";
  p.policy.max_attempts = 0;
  EXPECT_THAT(admin_->PublishPolicies({p}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("mail.send")));
  p.policy = RetryPolicy{};
  p.job_type = "bad type";
  EXPECT_THAT(admin_->PublishPolicies({p}), StatusIs(StatusCode::kInvalidArgument));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<PublishedPolicy> got, admin_->ReadPolicies());
  EXPECT_THAT(got, IsEmpty());
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
