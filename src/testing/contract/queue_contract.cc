// QueueBackend contract: enqueue, ordering, scheduling, completion outcomes,
// transitions and history, dedup, purge, stats (leases: lease_contract.cc).
#include <algorithm>
#include <set>
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
int contract_internal::QueueContractAnchor() { return 0; }

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Ids(const std::vector<Delivery>& ds) {
  std::vector<std::string> ids;
  for (const Delivery& d : ds) ids.push_back(d.job.envelope.job_id);
  return ids;
}


// --- Enqueue and Get ---

TEST_P(QueueBackendContract, EnqueueStoresAQueuedJob) {
  const TimePoint t0 = Now();
  Envelope env = MakeJob("job_a");
  env.attempt = 7;  // A producer's value is never trusted.
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r, queue_->Enqueue(env, {}));
  EXPECT_EQ(r.job_id, "job_a");
  EXPECT_FALSE(r.duplicate);
  EXPECT_EQ(r.status, JobStatus::kQueued);

  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kQueued);
  EXPECT_EQ(rec.envelope.job_type, "test.job");
  EXPECT_EQ(rec.envelope.payload, R"({"n":1})");
  EXPECT_EQ(rec.envelope.trace_id, "trc_job_a");
  EXPECT_EQ(rec.envelope.attempt, 0);
  EXPECT_EQ(rec.epoch, 0);
  EXPECT_EQ(rec.enqueued_at, t0);
  EXPECT_EQ(rec.ready_at, t0);
  EXPECT_FALSE(rec.finished_at.has_value());
  ASSERT_EQ(rec.history.size(), 1u);
  EXPECT_EQ(rec.history[0].to, JobStatus::kQueued);
  EXPECT_EQ(rec.history[0].at, t0);
  EXPECT_EQ(rec.history[0].reason, reason::kEnqueued);
}

// Every entry point checks the envelope through the engine: a record that
// could not be decoded again is never stored (a tenant "acme corp" stored
// once used to make every later read of the SQLite file fail).
TEST_P(QueueBackendContract, EnqueueRefusesAnEnvelopeThatCouldNotBeReadBack) {
  Put(MakeJob("job_ok"));
  Envelope bad = MakeJob("job_bad");
  bad.tenant_id = "acme corp";
  Result<EnqueueResult> r = queue_->Enqueue(bad, {});
  EXPECT_THAT(r.status(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("tenant_id")));
  EXPECT_THAT(admin_->Get("job_bad").status(), StatusIs(StatusCode::kNotFound));
  // In a batch, one bad envelope refuses the whole batch, naming it.
  Result<std::vector<EnqueueResult>> batch =
      queue_->EnqueueBatch({MakeJob("job_b1"), bad, MakeJob("job_b3")}, {});
  EXPECT_THAT(batch.status(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("tenant_id")));
  EXPECT_THAT(admin_->Get("job_b1").status(), StatusIs(StatusCode::kNotFound));
  // The queue keeps working.
  TakeOne("job_ok");
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kRunning], 1);
}

TEST_P(QueueBackendContract, EnqueueKeepsTheWholeEnvelope) {
  Envelope env = MakeJob("job_full");
  env.tenant_id = "tenant_123";
  env.idempotency_key = "invoice.generate:ord_987";
  env.max_attempts = 9;
  env.lock_key = "order:ord_987";
  env.dedup_key = "dedup:ord_987";
  env.timeout = Seconds(12);
  env.visibility_timeout = Seconds(20);
  env.expires_at = Now() + Seconds(3600);
  env.start_by = Now() + Seconds(60);
  env.deadline = Now() + Seconds(7200);
  env.retry_policy = BackoffSpec{BackoffKind::kFixed, Seconds(2), 1.0, Seconds(2), JitterKind::kNone};
  env.payload = R"({"order_id":"ord_987","lines":[1,2,3]})";
  Put(env);
  JobRecord rec = MustGet("job_full");
  const Envelope& got = rec.envelope;
  EXPECT_EQ(got.tenant_id, env.tenant_id);
  EXPECT_EQ(got.idempotency_key, env.idempotency_key);
  EXPECT_EQ(got.max_attempts, 9);
  EXPECT_EQ(got.lock_key, env.lock_key);
  EXPECT_EQ(got.dedup_key, env.dedup_key);
  EXPECT_EQ(got.timeout, env.timeout);
  EXPECT_EQ(got.visibility_timeout, env.visibility_timeout);
  EXPECT_EQ(got.expires_at, env.expires_at);
  EXPECT_EQ(got.start_by, env.start_by);
  EXPECT_EQ(got.deadline, env.deadline);
  ASSERT_TRUE(got.retry_policy.has_value());
  EXPECT_EQ(got.retry_policy->kind, BackoffKind::kFixed);
  EXPECT_EQ(got.retry_policy->base_delay, Seconds(2));
  EXPECT_EQ(got.payload, env.payload);
  EXPECT_EQ(got.created_at, env.created_at);
}

TEST_P(QueueBackendContract, ReusedJobIdIsAlreadyExists) {
  Put(MakeJob("job_a"));
  Envelope again = MakeJob("job_a", "other.type");
  EXPECT_THAT(queue_->Enqueue(again, {}).status(), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_EQ(MustGet("job_a").envelope.job_type, "test.job");
}

TEST_P(QueueBackendContract, GetUnknownJobIsNotFound) {
  EXPECT_THAT(admin_->Get("job_missing").status(), StatusIs(StatusCode::kNotFound));
}

TEST_P(QueueBackendContract, EnqueueBatchReturnsResultsInOrder) {
  std::vector<Envelope> envs = {MakeJob("job_b1"), MakeJob("job_b2"), MakeJob("job_b3")};
  envs[1].dedup_key = "k";
  envs[2].dedup_key = "k";  // A duplicate of job_b2 within the batch.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<EnqueueResult> rs, queue_->EnqueueBatch(envs, {}));
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].job_id, "job_b1");
  EXPECT_FALSE(rs[0].duplicate);
  EXPECT_EQ(rs[1].job_id, "job_b2");
  EXPECT_FALSE(rs[1].duplicate);
  EXPECT_EQ(rs[2].job_id, "job_b2");
  EXPECT_TRUE(rs[2].duplicate);
  EXPECT_THAT(admin_->Get("job_b3").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(Ids(Take(10)), (std::vector<std::string>{"job_b1", "job_b2"}));
}

// --- Ordering and scheduling ---

TEST_P(QueueBackendContract, DequeueOrdersByPriorityThenReadyAtThenId) {
  Put(MakeJob("job_c"));            // prio 0, t0
  Put(MakeJob("job_a"));            // prio 0, t0 (same time: id decides)
  Advance(Seconds(1));
  Put(MakeJob("job_low", "t", -5));  // prio -5, t1
  Put(MakeJob("job_hi", "t", 5));    // prio 5, t1: first despite being later
  Put(MakeJob("job_0"));            // prio 0, t1: after the t0 jobs despite its id
  Advance(Seconds(1));
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_hi", "job_a", "job_c", "job_0", "job_low"));
}

TEST_P(QueueBackendContract, DequeueOneAtATimeFollowsTheSameOrder) {
  Put(MakeJob("job_2"));
  Put(MakeJob("job_1"));
  Put(MakeJob("job_9", "t", 1));
  EXPECT_EQ(TakeOne("job_9").job.envelope.job_id, "job_9");
  EXPECT_EQ(TakeOne("job_1").job.envelope.job_id, "job_1");
  EXPECT_EQ(TakeOne("job_2").job.envelope.job_id, "job_2");
  EXPECT_THAT(Take(1), IsEmpty());
}

TEST_P(QueueBackendContract, DequeueOnEmptyQueueReturnsNothing) {
  EXPECT_THAT(Take(5), IsEmpty());
  EXPECT_THAT(Take(5, {"nope"}), IsEmpty());
}

TEST_P(QueueBackendContract, DequeueTakesOnlyFromTheQueuesAskedFor) {
  Put(MakeJob("job_q1", "t", 0, "q1"));
  Put(MakeJob("job_q2", "t", 0, "q2"));
  Put(MakeJob("job_q3", "t", 9, "q3"));
  EXPECT_THAT(Ids(Take(10, {"q2"})), ElementsAre("job_q2"));
  EXPECT_THAT(Ids(Take(10, {"q1", "q3"})), ElementsAre("job_q3", "job_q1"));
  EXPECT_THAT(Take(10), IsEmpty());
}

TEST_P(QueueBackendContract, DequeueAcrossQueuesKeepsGlobalOrder) {
  Put(MakeJob("job_x", "t", 0, "q1"));
  Advance(Seconds(1));
  Put(MakeJob("job_y", "t", 3, "q2"));
  Put(MakeJob("job_z", "t", 0, "q2"));
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_y", "job_x", "job_z"));
}

TEST_P(QueueBackendContract, ScheduledJobIsNotDeliveredBeforeItsTime) {
  const TimePoint t0 = Now();
  Envelope env = MakeJob("job_later");
  env.scheduled_at = t0 + Seconds(10);
  Put(env);
  Put(MakeJob("job_now"));
  EXPECT_EQ(MustGet("job_later").ready_at, t0 + Seconds(10));
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_now"));
  Advance(Seconds(9));
  EXPECT_THAT(Take(10), IsEmpty());
  Advance(Seconds(1));
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_later"));
}

TEST_P(QueueBackendContract, ScheduledInThePastIsReadyAtEnqueue) {
  Put(MakeJob("job_first"));
  Advance(Seconds(5));
  Envelope env = MakeJob("job_past");
  env.scheduled_at = Now() - Seconds(60);
  Put(env);
  // ready_at is never before enqueued_at, so arrival order is kept.
  EXPECT_EQ(MustGet("job_past").ready_at, Now());
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_first", "job_past"));
}

TEST_P(QueueBackendContract, ScheduledJobsBecomeReadyInTimeOrder) {
  const TimePoint t0 = Now();
  for (int i : {3, 1, 2}) {
    Envelope env = MakeJob("job_s" + std::to_string(i));
    env.scheduled_at = t0 + Seconds(i);
    Put(env);
  }
  Advance(Seconds(10));
  EXPECT_THAT(Ids(Take(10)), ElementsAre("job_s1", "job_s2", "job_s3"));
}

TEST_P(QueueBackendContract, BatchDequeueRespectsMaxJobsAndNeverRepeats) {
  for (int i = 0; i < 5; ++i) Put(MakeJob("job_" + std::to_string(i)));
  std::vector<Delivery> first = Take(2);
  EXPECT_EQ(first.size(), 2u);
  std::vector<Delivery> rest = Take(10);
  EXPECT_EQ(rest.size(), 3u);
  EXPECT_THAT(Take(10), IsEmpty());
  std::set<std::string> ids;
  for (const auto* batch : {&first, &rest}) {
    for (const Delivery& d : *batch) EXPECT_TRUE(ids.insert(d.job.envelope.job_id).second);
  }
  EXPECT_EQ(ids.size(), 5u);
}

TEST_P(QueueBackendContract, DequeueRejectsMaxJobsBelowOne) {
  DequeueRequest req;
  req.max_jobs = 0;
  EXPECT_THAT(queue_->Dequeue(req).status(), StatusIs(StatusCode::kInvalidArgument));
}

TEST_P(QueueBackendContract, DequeueIntoGivesWhatDequeueGivesInTheCallersVector) {
  for (int i = 0; i < 3; ++i) Put(MakeJob("job_" + std::to_string(i)));
  std::vector<Delivery> batch(4);  // Stale content: cleared first.
  batch[0].job.envelope.job_id = "stale";
  DequeueRequest req;
  req.max_jobs = 2;
  ASSERT_THAT(queue_->DequeueInto(req, &batch), IsOk());
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].job.envelope.job_id, "job_0");
  EXPECT_EQ(batch[1].job.envelope.job_id, "job_1");
  for (const Delivery& d : batch) {
    EXPECT_EQ(d.job.status, JobStatus::kRunning);
    EXPECT_EQ(d.lease.job_id, d.job.envelope.job_id);
    EXPECT_EQ(d.lease.token, d.job.lease_token);
  }
  // The same vector again: the rest, then nothing.
  ASSERT_THAT(queue_->DequeueInto(req, &batch), IsOk());
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].job.envelope.job_id, "job_2");
  ASSERT_THAT(queue_->DequeueInto(req, &batch), IsOk());
  EXPECT_THAT(batch, IsEmpty());
  // An error leaves it empty.
  batch.resize(1);
  req.max_jobs = 0;
  EXPECT_THAT(queue_->DequeueInto(req, &batch), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(batch, IsEmpty());
}

// --- Completion outcomes ---

TEST_P(QueueBackendContract, CompleteSucceededStoresTheResult) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Advance(Seconds(3));
  Completion c = Outcome(JobStatus::kSucceeded, std::string(reason::kSucceeded));
  c.result = R"({"invoice":"inv_1"})";
  ASSERT_THAT(queue_->Complete(d, c), IsOk());
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kSucceeded);
  EXPECT_EQ(rec.result, R"({"invoice":"inv_1"})");
  EXPECT_EQ(rec.reason, reason::kSucceeded);
  EXPECT_EQ(rec.finished_at, Now());
  EXPECT_EQ(rec.updated_at, Now());
  EXPECT_EQ(rec.envelope.attempt, 1);
  EXPECT_EQ(rec.history.back().from, JobStatus::kRunning);
  EXPECT_EQ(rec.history.back().to, JobStatus::kSucceeded);
  EXPECT_THAT(Take(10), IsEmpty());
}

TEST_P(QueueBackendContract, CompleteRetryScheduledKeepsReadyAtAndDelay) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Completion c = Outcome(JobStatus::kRetryScheduled, std::string(reason::kTransientError));
  c.ready_at = Now() + Seconds(5);
  c.delay = Seconds(5);
  c.failure = Failure{FailureClass::kTransient, "http_503", "upstream unavailable"};
  c.checkpoint = "step=2";
  ASSERT_THAT(queue_->Complete(d, c), IsOk());
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(rec.ready_at, Now() + Seconds(5));
  EXPECT_EQ(rec.previous_delay, Seconds(5));
  ASSERT_TRUE(rec.last_failure.has_value());
  EXPECT_EQ(rec.last_failure->failure_class, FailureClass::kTransient);
  EXPECT_EQ(rec.last_failure->code, "http_503");
  EXPECT_EQ(rec.last_failure->message, "upstream unavailable");
  EXPECT_EQ(rec.checkpoint, "step=2");
  EXPECT_FALSE(rec.finished_at.has_value());
  EXPECT_THAT(Take(10), IsEmpty());
  Advance(Seconds(4));
  EXPECT_THAT(Take(10), IsEmpty());
  Advance(Seconds(1));
  Delivery again = TakeOne("job_a");
  EXPECT_EQ(again.job.envelope.attempt, 2);
  EXPECT_EQ(again.job.history.back().from, JobStatus::kRetryScheduled);
  EXPECT_EQ(again.job.previous_delay, Seconds(5));
}

TEST_P(QueueBackendContract, RequeueWithoutSpendingAnAttemptGivesItBack) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Completion c = Outcome(JobStatus::kQueued, std::string(reason::kLockBusy));
  c.spend_attempt = false;
  c.lock_wait = true;
  c.ready_at = Now() + Millis(300);
  ASSERT_THAT(queue_->Complete(d, c), IsOk());
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kQueued);
  EXPECT_EQ(rec.envelope.attempt, 0);
  EXPECT_EQ(rec.lock_waits, 1);
  EXPECT_EQ(rec.ready_at, Now() + Millis(300));
  EXPECT_EQ(rec.history.back().reason, reason::kLockBusy);
  EXPECT_THAT(Take(10), IsEmpty());
  Advance(Millis(300));
  Delivery again = TakeOne("job_a");
  EXPECT_EQ(again.job.envelope.attempt, 1);  // Still the first attempt.
  EXPECT_EQ(again.job.epoch, 2);             // But a new delivery.
  // A snooze (no lock wait) does not count as a lock wait.
  Completion snooze = Outcome(JobStatus::kQueued, std::string(reason::kSnoozed));
  snooze.spend_attempt = false;
  ASSERT_THAT(queue_->Complete(again, snooze), IsOk());
  rec = MustGet("job_a");
  EXPECT_EQ(rec.lock_waits, 1);
  EXPECT_EQ(rec.envelope.attempt, 0);
  EXPECT_EQ(rec.ready_at, Now());
}

TEST_P(QueueBackendContract, CompleteFailedIsFinal) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Completion c = Outcome(JobStatus::kFailed, std::string(reason::kPermanentError));
  c.failure = Failure{FailureClass::kPermanent, "bad_input", "order ord_987 does not exist"};
  ASSERT_THAT(queue_->Complete(d, c), IsOk());
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kFailed);
  EXPECT_EQ(rec.reason, reason::kPermanentError);
  EXPECT_EQ(rec.finished_at, Now());
  ASSERT_TRUE(rec.last_failure.has_value());
  EXPECT_EQ(rec.last_failure->code, "bad_input");
  // Not in the DLQ, never delivered again, and the lease is spent.
  EXPECT_THAT(admin_->GetDeadLetter("job_a").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(Take(10), IsEmpty());
  EXPECT_THAT(queue_->Complete(d, Outcome(JobStatus::kSucceeded, "succeeded")),
              StatusIs(StatusCode::kAborted));
}

TEST_P(QueueBackendContract, CompleteDeadLetteredKeepsTheFailure) {
  Envelope env = MakeJob("job_a", "invoice.generate");
  env.payload = R"({"order_id":"ord_987"})";
  const TimePoint created = Now();
  Put(env);
  Delivery d = TakeOne("job_a");
  Advance(Seconds(7));
  Completion c = Outcome(JobStatus::kDeadLettered, std::string(reason::kMaxAttemptsExceeded));
  c.failure = Failure{FailureClass::kTransient, "http_503", "gave up"};
  ASSERT_THAT(queue_->Complete(d, c), IsOk());
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.finished_at, Now());
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter("job_a"));
  EXPECT_EQ(e.job_id, "job_a");
  EXPECT_EQ(e.job_type, "invoice.generate");
  EXPECT_EQ(e.payload, R"({"order_id":"ord_987"})");
  EXPECT_EQ(e.created_at, created);
  EXPECT_EQ(e.attempts, 1);
  EXPECT_EQ(e.reason, reason::kMaxAttemptsExceeded);
  ASSERT_TRUE(e.last_failure.has_value());
  EXPECT_EQ(e.last_failure->failure_class, FailureClass::kTransient);
  EXPECT_EQ(e.last_failure->code, "http_503");
  EXPECT_EQ(e.last_failure->message, "gave up");
  EXPECT_EQ(e.trace_id, "trc_job_a");
  EXPECT_EQ(e.dead_lettered_at, Now());
  ASSERT_GE(e.history.size(), 3u);
  EXPECT_EQ(e.history.back().to, JobStatus::kDeadLettered);
  EXPECT_TRUE(e.audit.empty());
  EXPECT_THAT(Take(10), IsEmpty());
}

TEST_P(QueueBackendContract, CompleteDiscardedIsFinal) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  ASSERT_THAT(queue_->Complete(d, Outcome(JobStatus::kDiscarded, std::string(reason::kExpired))),
              IsOk());
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kDiscarded);
  EXPECT_EQ(rec.reason, reason::kExpired);
  EXPECT_EQ(rec.finished_at, Now());
  EXPECT_THAT(admin_->GetDeadLetter("job_a").status(), StatusIs(StatusCode::kNotFound));
}

TEST_P(QueueBackendContract, IllegalTransitionIsRefusedAndChangesNothing) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  EXPECT_THAT(queue_->Complete(d, Outcome(JobStatus::kRunning, "again")),
              StatusIs(StatusCode::kFailedPrecondition));
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kRunning);
  EXPECT_EQ(rec.history.size(), 2u);
  // The lease is still good for a legal outcome.
  EXPECT_THAT(queue_->Complete(d, Outcome(JobStatus::kSucceeded, "succeeded")), IsOk());
}

TEST_P(QueueBackendContract, TransactionalEffectCommitsWithTheCompletion) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Completion failing = Outcome(JobStatus::kSucceeded, "succeeded");
  int calls = 0;
  failing.transactional_effect = [&calls](void*) {
    ++calls;
    return Status::Unavailable("business write failed");
  };
  Status s = queue_->Complete(d, failing);
  if (s.code() == StatusCode::kUnimplemented) GTEST_SKIP() << "no transactional completion";
  EXPECT_THAT(s, StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(MustGet("job_a").status, JobStatus::kRunning);  // Nothing was written.
  Completion ok = Outcome(JobStatus::kSucceeded, "succeeded");
  ok.transactional_effect = [&calls](void*) {
    ++calls;
    return Status::Ok();
  };
  ASSERT_THAT(queue_->Complete(d, ok), IsOk());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(MustGet("job_a").status, JobStatus::kSucceeded);
}

// --- History ---

TEST_P(QueueBackendContract, HistoryRecordsEveryTransitionWithTimeAndReason) {
  const TimePoint t0 = Now();
  Put(MakeJob("job_a"));
  Advance(Seconds(1));
  Delivery d1 = TakeOne("job_a");
  Advance(Seconds(1));
  Completion retry = Outcome(JobStatus::kRetryScheduled, std::string(reason::kTimeout));
  retry.ready_at = Now() + Seconds(2);
  ASSERT_THAT(queue_->Complete(d1, retry), IsOk());
  Advance(Seconds(2));
  Delivery d2 = TakeOne("job_a");
  Advance(Seconds(1));
  ASSERT_THAT(queue_->Complete(d2, Outcome(JobStatus::kSucceeded, "succeeded")), IsOk());
  std::vector<Transition> h = MustGet("job_a").history;
  ASSERT_EQ(h.size(), 5u);
  auto expect = [&h](std::size_t i, JobStatus from, JobStatus to, TimePoint at, std::string_view why) {
    EXPECT_EQ(h[i].from, from) << i;
    EXPECT_EQ(h[i].to, to) << i;
    EXPECT_EQ(h[i].at, at) << i;
    EXPECT_EQ(h[i].reason, why) << i;
  };
  expect(0, JobStatus::kQueued, JobStatus::kQueued, t0, reason::kEnqueued);
  expect(1, JobStatus::kQueued, JobStatus::kRunning, t0 + Seconds(1), reason::kDelivered);
  expect(2, JobStatus::kRunning, JobStatus::kRetryScheduled, t0 + Seconds(2), reason::kTimeout);
  expect(3, JobStatus::kRetryScheduled, JobStatus::kRunning, t0 + Seconds(4), reason::kDelivered);
  expect(4, JobStatus::kRunning, JobStatus::kSucceeded, t0 + Seconds(5), "succeeded");
}

TEST_P(QueueBackendContract, HistoryIsBoundedToTheMostRecentEntries) {
  Put(MakeJob("job_a"));
  const int cycles = static_cast<int>(kMaxHistory);  // 2 transitions each.
  for (int i = 0; i < cycles; ++i) {
    Delivery d = TakeOne("job_a");
    Advance(Seconds(1));
    Completion snooze = Outcome(JobStatus::kQueued, "snooze_" + std::to_string(i));
    snooze.spend_attempt = false;
    ASSERT_THAT(queue_->Complete(d, snooze), IsOk());
  }
  std::vector<Transition> h = MustGet("job_a").history;
  ASSERT_EQ(h.size(), kMaxHistory);
  EXPECT_EQ(h.back().reason, "snooze_" + std::to_string(cycles - 1));
  EXPECT_EQ(h.back().at, Now());
  EXPECT_NE(h.front().reason, reason::kEnqueued);  // The oldest went first.
  for (std::size_t i = 1; i < h.size(); ++i) EXPECT_LE(h[i - 1].at, h[i].at);
}

// --- Deduplication ---

TEST_P(QueueBackendContract, DuplicateWithinTheWindowReturnsTheExistingJob) {
  EnqueueOptions opts;
  opts.dedup_window = std::chrono::minutes(5);
  Envelope first = MakeJob("job_1");
  first.dedup_key = "invoice.generate:ord_987";
  ASSERT_THAT(queue_->Enqueue(first, opts).status(), IsOk());
  Advance(std::chrono::minutes(4));
  Envelope second = MakeJob("job_2");
  second.dedup_key = "invoice.generate:ord_987";
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r, queue_->Enqueue(second, opts));
  EXPECT_TRUE(r.duplicate);
  EXPECT_EQ(r.job_id, "job_1");
  EXPECT_EQ(r.status, JobStatus::kQueued);
  EXPECT_THAT(admin_->Get("job_2").status(), StatusIs(StatusCode::kNotFound));
  // A running or succeeded job within the window is still the duplicate.
  Delivery d = TakeOne("job_1");
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r2, queue_->Enqueue(second, opts));
  EXPECT_TRUE(r2.duplicate);
  EXPECT_EQ(r2.status, JobStatus::kRunning);
  ASSERT_THAT(queue_->Complete(d, Outcome(JobStatus::kSucceeded, "succeeded")), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r3, queue_->Enqueue(second, opts));
  EXPECT_TRUE(r3.duplicate);
  EXPECT_EQ(r3.status, JobStatus::kSucceeded);
  // Once the window has passed, a new job is stored.
  Advance(std::chrono::minutes(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r4, queue_->Enqueue(second, opts));
  EXPECT_FALSE(r4.duplicate);
  EXPECT_EQ(r4.job_id, "job_2");
  EXPECT_EQ(MustGet("job_2").status, JobStatus::kQueued);
}

TEST_P(QueueBackendContract, DifferentDedupKeysOrNoKeyAreNotDuplicates) {
  Envelope a = MakeJob("job_1");
  a.dedup_key = "k1";
  Envelope b = MakeJob("job_2");
  b.dedup_key = "k2";
  Put(a);
  Put(b);
  Put(MakeJob("job_3"));
  Put(MakeJob("job_4"));
  EXPECT_EQ(Take(10).size(), 4u);
}

TEST_P(QueueBackendContract, ZeroWindowDisablesEnqueueDedup) {
  EnqueueOptions opts;
  opts.dedup_window = Duration::zero();
  Envelope a = MakeJob("job_1");
  a.dedup_key = "k";
  Envelope b = MakeJob("job_2");
  b.dedup_key = "k";
  ASSERT_THAT(queue_->Enqueue(a, opts).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r, queue_->Enqueue(b, opts));
  EXPECT_FALSE(r.duplicate);
}

TEST_P(QueueBackendContract, DedupIgnoresJobsThatEndedWithoutEffect) {
  struct Case {
    JobStatus end;
    std::string reason;
  };
  int n = 0;
  for (const Case& c : {Case{JobStatus::kDiscarded, std::string(reason::kExpired)},
                        Case{JobStatus::kDeadLettered, std::string(reason::kPermanentError)},
                        Case{JobStatus::kFailed, std::string(reason::kPermanentError)}}) {
    const std::string key = "key_" + std::to_string(n);
    Envelope first = MakeJob("job_first_" + std::to_string(n));
    first.dedup_key = key;
    Put(first);
    Delivery d = TakeOne(first.job_id);
    ASSERT_THAT(queue_->Complete(d, Outcome(c.end, c.reason)), IsOk());
    Envelope second = MakeJob("job_second_" + std::to_string(n));
    second.dedup_key = key;
    JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r, queue_->Enqueue(second, {}));
    EXPECT_FALSE(r.duplicate) << JobStatusName(c.end);
    EXPECT_EQ(r.job_id, second.job_id);
    ASSERT_EQ(TakeOne(second.job_id).job.envelope.job_id, second.job_id);
    ++n;
  }
}

TEST_P(QueueBackendContract, FindDuplicateSeesRunningOrRecentlySucceededJobs) {
  EnqueueOptions no_dedup;
  no_dedup.dedup_window = Duration::zero();
  Envelope j1 = MakeJob("job_1");
  j1.dedup_key = "k";
  Envelope j2 = MakeJob("job_2");
  j2.dedup_key = "k";
  ASSERT_THAT(queue_->Enqueue(j1, no_dedup).status(), IsOk());
  ASSERT_THAT(queue_->Enqueue(j2, no_dedup).status(), IsOk());
  const TimePoint t0 = Now();
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> none,
                               queue_->FindDuplicate("k", "job_2", t0));
  EXPECT_FALSE(none.has_value());  // job_1 is only queued.
  Delivery d1 = TakeOne("job_1");
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> running,
                               queue_->FindDuplicate("k", "job_2", t0));
  EXPECT_EQ(running, std::optional<std::string>("job_1"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> self,
                               queue_->FindDuplicate("k", "job_1", t0));
  EXPECT_FALSE(self.has_value());  // Never itself; job_2 is only queued.
  Advance(Seconds(10));
  const TimePoint t1 = Now();
  ASSERT_THAT(queue_->Complete(d1, Outcome(JobStatus::kSucceeded, "succeeded")), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> recent,
                               queue_->FindDuplicate("k", "job_2", t1));
  EXPECT_EQ(recent, std::optional<std::string>("job_1"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> too_old,
                               queue_->FindDuplicate("k", "job_2", t1 + Seconds(1)));
  EXPECT_FALSE(too_old.has_value());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> other_key,
                               queue_->FindDuplicate("other", "job_2", t0));
  EXPECT_FALSE(other_key.has_value());
}

TEST_P(QueueBackendContract, FindDuplicateIgnoresFailedAndDeadLetteredJobs) {
  EnqueueOptions no_dedup;
  no_dedup.dedup_window = Duration::zero();
  for (const char* id : {"job_1", "job_2", "job_3"}) {
    Envelope e = MakeJob(id);
    e.dedup_key = "k";
    ASSERT_THAT(queue_->Enqueue(e, no_dedup).status(), IsOk());
  }
  const TimePoint t0 = Now();
  Delivery d1 = TakeOne("job_1");
  Delivery d2 = TakeOne("job_2");
  ASSERT_THAT(queue_->Complete(d1, Outcome(JobStatus::kFailed, "permanent_error")), IsOk());
  ASSERT_THAT(queue_->Complete(d2, Outcome(JobStatus::kDeadLettered, "permanent_error")), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> dup,
                               queue_->FindDuplicate("k", "job_3", t0));
  EXPECT_FALSE(dup.has_value());
}

// A store may answer the delivery-time dedup check inside its lease step
// (DequeueRequest::dedup_window); if it does, its answer is FindDuplicate's
// at that moment, and two jobs with one key leased in one step are not
// both duplicates of each other.
TEST_P(QueueBackendContract, LeaseStepDedupAnswersAsFindDuplicateWould) {
  EnqueueOptions no_dedup;
  no_dedup.dedup_window = Duration::zero();
  for (const char* id : {"job_1", "job_2", "job_3"}) {
    Envelope e = MakeJob(id);
    if (std::string(id) != "job_3") e.dedup_key = "k";
    ASSERT_THAT(queue_->Enqueue(e, no_dedup).status(), IsOk());
  }
  DequeueRequest req;
  req.max_jobs = 3;
  req.dedup_window = Seconds(10);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> first, queue_->Dequeue(req));
  ASSERT_THAT(Ids(first), ElementsAre("job_1", "job_2", "job_3"));
  const bool checks = first[0].dedup_checked;
  for (const Delivery& d : first) {
    EXPECT_EQ(d.dedup_checked, checks) << d.job.envelope.job_id;
  }
  EXPECT_EQ(first[0].duplicate_of, "");  // job_2 was only queued.
  EXPECT_EQ(first[1].duplicate_of, checks ? "job_1" : "");
  EXPECT_EQ(first[2].duplicate_of, "");  // No key.

  // A success within the window, then a running job once it is too old.
  Advance(Seconds(1));
  ASSERT_THAT(queue_->Complete(first[0], Outcome(JobStatus::kSucceeded, "succeeded")), IsOk());
  ASSERT_THAT(queue_->Complete(first[1], Outcome(JobStatus::kFailed, "permanent_error")), IsOk());
  Envelope j4 = MakeJob("job_4");
  j4.dedup_key = "k";
  ASSERT_THAT(queue_->Enqueue(j4, no_dedup).status(), IsOk());
  Advance(Seconds(5));
  req.max_jobs = 1;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> second, queue_->Dequeue(req));
  ASSERT_THAT(Ids(second), ElementsAre("job_4"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> asked,
                               queue_->FindDuplicate("k", "job_4", Now() - Seconds(10)));
  EXPECT_EQ(asked, std::optional<std::string>("job_1"));
  EXPECT_EQ(second[0].dedup_checked, checks);
  EXPECT_EQ(second[0].duplicate_of, checks ? "job_1" : "");

  Envelope j5 = MakeJob("job_5");
  j5.dedup_key = "k";
  ASSERT_THAT(queue_->Enqueue(j5, no_dedup).status(), IsOk());
  Advance(Seconds(20));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> third, queue_->Dequeue(req));
  ASSERT_THAT(Ids(third), ElementsAre("job_5"));
  EXPECT_EQ(third[0].duplicate_of, checks ? "job_4" : "");  // job_1 is too old now.

  // Not asked: not checked.
  Envelope j6 = MakeJob("job_6");
  j6.dedup_key = "k";
  ASSERT_THAT(queue_->Enqueue(j6, no_dedup).status(), IsOk());
  req.dedup_window.reset();
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> unasked, queue_->Dequeue(req));
  ASSERT_THAT(Ids(unasked), ElementsAre("job_6"));
  EXPECT_FALSE(unasked[0].dedup_checked);
  EXPECT_EQ(unasked[0].duplicate_of, "");
}

// --- Retention ---

TEST_P(QueueBackendContract, PurgeFinishedRemovesOnlyOldFinalJobs) {
  const TimePoint t0 = Now();
  for (const char* id : {"job_1ok", "job_2failed", "job_3discarded", "job_4dlq", "job_5running",
                         "job_6retry"}) {
    Put(MakeJob(id));
  }
  Put(MakeJob("job_queued", "t", -1));
  ASSERT_THAT(queue_->Complete(TakeOne("job_1ok"), Outcome(JobStatus::kSucceeded, "succeeded")),
              IsOk());
  Advance(std::chrono::hours(1));
  ASSERT_THAT(
      queue_->Complete(TakeOne("job_2failed"), Outcome(JobStatus::kFailed, "permanent_error")),
      IsOk());
  ASSERT_THAT(
      queue_->Complete(TakeOne("job_3discarded"), Outcome(JobStatus::kDiscarded, "expired")),
      IsOk());
  ASSERT_THAT(
      queue_->Complete(TakeOne("job_4dlq"), Outcome(JobStatus::kDeadLettered, "permanent_error")),
      IsOk());
  TakeOne("job_5running");
  Completion retry = Outcome(JobStatus::kRetryScheduled, "transient_error");
  retry.ready_at = Now() + std::chrono::hours(100);
  ASSERT_THAT(queue_->Complete(TakeOne("job_6retry"), retry), IsOk());

  JOBPACT_ASSERT_OK_AND_ASSIGN(int first, admin_->PurgeFinished(t0 + std::chrono::minutes(30)));
  EXPECT_EQ(first, 1);
  EXPECT_THAT(admin_->Get("job_1ok").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(MustGet("job_2failed").status, JobStatus::kFailed);

  JOBPACT_ASSERT_OK_AND_ASSIGN(int rest, admin_->PurgeFinished(Now() + std::chrono::hours(1000)));
  EXPECT_EQ(rest, 2);  // failed and discarded; never queued, running, retrying or DLQ jobs.
  EXPECT_THAT(admin_->Get("job_2failed").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(admin_->Get("job_3discarded").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(MustGet("job_4dlq").status, JobStatus::kDeadLettered);
  EXPECT_EQ(MustGet("job_5running").status, JobStatus::kRunning);
  EXPECT_EQ(MustGet("job_6retry").status, JobStatus::kRetryScheduled);
  EXPECT_EQ(MustGet("job_queued").status, JobStatus::kQueued);
}

TEST_P(QueueBackendContract, PurgedJobNoLongerCountsForDedup) {
  Envelope a = MakeJob("job_1");
  a.dedup_key = "k";
  Put(a);
  ASSERT_THAT(queue_->Complete(TakeOne("job_1"), Outcome(JobStatus::kSucceeded, "succeeded")),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(int n, admin_->PurgeFinished(Now() + Seconds(1)));
  EXPECT_EQ(n, 1);
  Envelope b = MakeJob("job_2");
  b.dedup_key = "k";
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult r, queue_->Enqueue(b, {}));
  EXPECT_FALSE(r.duplicate);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<std::string> dup,
                               queue_->FindDuplicate("k", "job_2", TimePoint{}));
  EXPECT_FALSE(dup.has_value());
}

// --- Stats ---

TEST_P(QueueBackendContract, StatsReportDepthAgeRunningStatusesAndDlq) {
  const TimePoint t0 = Now();
  Put(MakeJob("job_a1", "t", 0, "q1"));
  Advance(Seconds(10));
  Put(MakeJob("job_a2", "t", 7, "q1"));  // Higher priority, but younger.
  Envelope later = MakeJob("job_a3", "t", 0, "q1");
  later.scheduled_at = Now() + std::chrono::hours(1);
  Put(later);
  Put(MakeJob("job_b1", "t", 0, "q2"));
  Put(MakeJob("job_b2", "t", 0, "q2"));
  Put(MakeJob("job_c1", "t", 0, "q3"));
  TakeOne("job_b1", "w", {"q2"});
  ASSERT_THAT(queue_->Complete(TakeOne("job_b2", "w", {"q2"}),
                               Outcome(JobStatus::kDeadLettered, "permanent_error")),
              IsOk());
  ASSERT_THAT(
      queue_->Complete(TakeOne("job_c1", "w", {"q3"}), Outcome(JobStatus::kSucceeded, "succeeded")),
      IsOk());
  Advance(Seconds(5));

  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  ASSERT_EQ(st.queues.count("q1"), 1u);
  EXPECT_EQ(st.queues["q1"].depth, 3);  // Two ready plus one scheduled.
  EXPECT_EQ(st.queues["q1"].running, 0);
  EXPECT_EQ(st.queues["q1"].oldest_ready_age, Now() - t0);
  ASSERT_EQ(st.queues.count("q2"), 1u);
  EXPECT_EQ(st.queues["q2"].depth, 0);
  EXPECT_EQ(st.queues["q2"].running, 1);
  EXPECT_EQ(st.queues["q2"].oldest_ready_age, Duration::zero());
  EXPECT_EQ(st.by_status[JobStatus::kQueued], 3);
  EXPECT_EQ(st.by_status[JobStatus::kRunning], 1);
  EXPECT_EQ(st.by_status[JobStatus::kDeadLettered], 1);
  EXPECT_EQ(st.by_status[JobStatus::kSucceeded], 1);
  EXPECT_EQ(st.by_status[JobStatus::kFailed], 0);
  EXPECT_EQ(st.dead_letters, 1);
}

TEST_P(QueueBackendContract, StatsOldestAgeStartsWhenAScheduledJobBecomesReady) {
  Envelope later = MakeJob("job_s");
  later.scheduled_at = Now() + Seconds(60);
  Put(later);
  Advance(Seconds(90));
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.queues["default"].depth, 1);
  EXPECT_EQ(st.queues["default"].oldest_ready_age, Seconds(30));
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
