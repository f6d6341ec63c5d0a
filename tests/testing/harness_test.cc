// The testing kit itself: Harness, FailingQueueBackend and the matchers.
#include "jobpact/testing/harness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "jobpact/testing/failing_backends.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::FailingIdempotencyStore;
using testing::FailingLockStore;
using testing::FailingQueueBackend;
using testing::IdempotencyMethod;
using testing::LockMethod;
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

TEST(HarnessTest, RunCallsHaveTheShapeOfJobRunnerRunUntilIdle) {
  Harness h;
  static_assert(std::is_same_v<decltype(h.RunUntilIdle()), decltype(h.runner().RunUntilIdle())>,
                "Harness::RunUntilIdle returns what JobRunner::RunUntilIdle returns");
  static_assert(std::is_same_v<decltype(h.AdvanceAndRun(Seconds(1))), Result<int>>);
  static_assert(std::is_same_v<decltype(h.RunUntilSettled()), Result<int>>);
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.Enqueue("t"), IsOk());
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(h.AdvanceAndRun(Seconds(1)).value(), 0);
  // RunUntilSettled stops at the first refused run and returns its error.
  Envelope later;
  later.job_type = "t";
  later.scheduled_at = h.clock().Now() + Seconds(30);
  ASSERT_THAT(h.Enqueue(later), IsOk());
  const TimePoint before = h.clock().Now();
  h.faults().FailNext(QueueMethod::kDequeue, Status::Unavailable("redis down"));
  EXPECT_THAT(h.RunUntilSettled(), StatusIs(StatusCode::kUnavailable, HasSubstr("redis down")));
  EXPECT_EQ(h.clock().Now(), before);         // It did not go on past the error...
  EXPECT_EQ(h.RunUntilSettled().value(), 1);  // ...and the next call runs the job.
}

TEST(HarnessTest, RunCallsOfARefusedHarnessReturnItsInitStatus) {
  Harness h([](JobRunnerOptions& o) { o.workers = 0; });
  ASSERT_THAT(h.init_status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(h.RunUntilIdle(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("workers")));
  EXPECT_THAT(h.AdvanceAndRun(Seconds(1)), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(h.RunUntilSettled(), StatusIs(StatusCode::kInvalidArgument));
}

TEST(HarnessTest, EnqueueBatchGoesThroughTheRunner) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  std::vector<Envelope> batch(2);
  batch[0].job_type = "t";
  batch[1].job_type = "t";
  batch[1].scheduled_at = h.clock().Now() + Seconds(30);
  std::vector<Envelope> invalid = batch;
  invalid[1].max_attempts = -1;
  EXPECT_THAT(h.EnqueueBatch(invalid),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("index 1 (max_attempts")));
  EXPECT_TRUE(h.faults().EnqueuedJobIds().empty());
  Result<std::vector<EnqueueResult>> r = h.EnqueueBatch(batch);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(h.faults().EnqueuedJobIds(),
            (std::vector<std::string>{(*r)[0].job_id, (*r)[1].job_id}));
  ASSERT_THAT(h.RunUntilSettled(), IsOk());  // Knows the scheduled one too.
  EXPECT_EQ(h.StatusOf((*r)[1].job_id), JobStatus::kSucceeded);

  Harness refused([](JobRunnerOptions& o) { o.workers = 0; });
  EXPECT_THAT(refused.EnqueueBatch(batch), StatusIs(StatusCode::kInvalidArgument));
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
  EXPECT_EQ(h.RunUntilIdle().value(), 0);
  EXPECT_EQ(h.AdvanceToNextRetry(), Seconds(30));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(h.AdvanceToNextRetry(), Seconds(60));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(h.AdvanceToNextRetry(), Duration::zero());
}

TEST(HarnessTest, FailedDequeueIsReportedAndTheNextRunRecovers) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  auto id = h.Enqueue("t")->job_id;
  h.faults().FailNext(QueueMethod::kDequeue, Status::Unavailable("redis down"));
  EXPECT_THAT(h.RunUntilIdle(), StatusIs(StatusCode::kUnavailable, HasSubstr("redis down")));
  EXPECT_THAT(h.last_error(), StatusIs(StatusCode::kUnavailable, HasSubstr("redis down")));
  EXPECT_EQ(h.StatusOf(id), JobStatus::kQueued);
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
}

TEST(HarnessTest, FailureAfterApplyingMakesTheChangeButReportsTheError) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  auto id = h.Enqueue("t")->job_id;
  h.faults().FailNextAfterApplying(QueueMethod::kComplete, Status::Unavailable("reply lost"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.faults().Calls(QueueMethod::kComplete), 1);
}

TEST(HarnessTest, ExpireLeaseLetsTheNextMaintenancePassRecoverTheJob) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  auto id = h.Enqueue("t")->job_id;
  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("crash"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  ASSERT_EQ(h.StatusOf(id), JobStatus::kRunning);
  ASSERT_THAT(h.ExpireLease(id), IsOk());
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
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
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
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

TEST(HarnessTest, LastErrorIsClearedByALaterSuccessfulRun) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  EXPECT_THAT(h.last_error(), IsOk());  // No run yet.
  h.faults().FailNext(QueueMethod::kDequeue, Status::Unavailable("redis down"));
  EXPECT_THAT(h.RunUntilIdle(), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(h.last_error(), StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(h.RunUntilIdle().value(), 0);  // Nothing to do, but the run succeeded.
  EXPECT_THAT(h.last_error(), IsOk());
}

TEST(FailingQueueBackendTest, FailNextWithAnOkStatusInjectsUnavailable) {
  auto clock = std::make_shared<testing::ManualClock>();
  auto base = std::make_shared<InMemoryQueueBackend>(clock);
  FailingQueueBackend q(base);
  q.FailNext(QueueMethod::kStats, Status::Ok());
  EXPECT_THAT(q.Stats(), StatusIs(StatusCode::kUnavailable, HasSubstr("injected fault")));
  EXPECT_THAT(q.Stats(), IsOk());
}

TEST(FailingLockStoreTest, FailsOnCommandAndOtherwisePassesThrough) {
  auto clock = std::make_shared<testing::ManualClock>();
  auto base = std::make_shared<InMemoryLockStore>(clock);
  FailingLockStore locks(base);
  locks.FailNext(LockMethod::kAcquire, Status::Unavailable("redis down"));
  EXPECT_THAT(locks.Acquire("k", "a", Seconds(10)),
              StatusIs(StatusCode::kUnavailable, HasSubstr("redis down")));
  EXPECT_THAT(base->Inspect("k").value(), ::testing::Eq(std::nullopt));  // Nothing changed.
  EXPECT_THAT(locks.Acquire("k", "a", Seconds(10)), IsOk());
  // Applied, then reported as failed: the lock is released all the same.
  locks.FailNextAfterApplying(LockMethod::kRelease, Status::Unavailable("reply lost"));
  EXPECT_THAT(locks.Release("k", "a"), StatusIs(StatusCode::kUnavailable));
  EXPECT_FALSE(base->Inspect("k").value().has_value());
  int hooks = 0;
  locks.BeforeNext(LockMethod::kInspect, [&] { ++hooks; });
  locks.FailNext(LockMethod::kInspect, Status::Ok());  // OK: replaced by Unavailable.
  EXPECT_THAT(locks.Inspect("k"), StatusIs(StatusCode::kUnavailable, HasSubstr("injected fault")));
  EXPECT_EQ(hooks, 1);
  EXPECT_EQ(locks.Calls(LockMethod::kAcquire), 2);
  EXPECT_EQ(LockMethodName(LockMethod::kRenew), "Renew");
}

TEST(FailingIdempotencyStoreTest, FailsOnCommandAndOtherwisePassesThrough) {
  auto clock = std::make_shared<testing::ManualClock>();
  auto base = std::make_shared<InMemoryIdempotencyStore>(clock);
  FailingIdempotencyStore idem(base);
  idem.FailNext(IdempotencyMethod::kClaim, Status::Unavailable("down"), 2);
  EXPECT_THAT(idem.Claim("k", "a", Seconds(10)), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(idem.Claim("k", "a", Seconds(10)), StatusIs(StatusCode::kUnavailable));
  ASSERT_THAT(idem.Claim("k", "a", Seconds(10)), IsOk());
  idem.FailNext(IdempotencyMethod::kComplete, Status::Unavailable("timeout"));
  EXPECT_THAT(idem.Complete("k", "a", "r", Seconds(60)), StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(base->Get("k").value()->state, IdempotencyRecord::State::kInProgress);
  idem.Clear();
  EXPECT_THAT(idem.Complete("k", "a", "r", Seconds(60)), IsOk());
  EXPECT_EQ(base->Get("k").value()->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ(idem.Calls(IdempotencyMethod::kClaim), 3);
  EXPECT_EQ(IdempotencyMethodName(IdempotencyMethod::kComplete), "Complete");
}

// A lock store outage is the store's fault, not the job's: the delivery is
// rescheduled without spending an attempt, and runs once the store is back.
TEST(HarnessTest, LockStoreOutageReschedulesWithoutSpendingAnAttempt) {
  Harness h;
  int runs = 0;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) {
    ++runs;
    return Status::Ok();
  }),
              IsOk());
  Envelope e;
  e.job_type = "t";
  e.lock_key = "order:1";
  const std::string id = h.Enqueue(e).value().job_id;
  h.lock_faults().FailNext(LockMethod::kAcquire, Status::Unavailable("redis down"));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(runs, 0);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.envelope.attempt, 0);  // Given back.
  EXPECT_EQ(r.reason, "transient_error");
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetries, "t"), 0);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).envelope.attempt, 1);
  EXPECT_EQ(h.lock_faults().Calls(LockMethod::kAcquire), 2);
}

// SPEC 3 step 9: the result is recorded before the ack. When recording
// fails after the effect, the job is not acked as succeeded: the attempt
// fails as transient ("idempotency_record_failed"), the claim is kept (the
// effect may have happened), the retry waits for the claim to expire, then
// runs again and records its result. At least once, never silently "done".
TEST(HarnessTest, IdempotencyRecordFailureIsNotAckedAsSuccess) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("charge", [&](JobContext& ctx) {
    ++effects;
    ctx.SetResult("charged");
    return Status::Ok();
  }),
              IsOk());
  Envelope e;
  e.job_type = "charge";
  e.idempotency_key = "charge:ord_1";
  e.timeout = Seconds(10);
  e.visibility_timeout = Seconds(20);
  const std::string id = h.Enqueue(e).value().job_id;
  h.idempotency_faults().FailNext(IdempotencyMethod::kComplete, Status::Unavailable("timeout"));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(effects, 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.envelope.attempt, 1);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->code, "idempotency_record_failed");
  EXPECT_EQ(r.last_failure->failure_class, FailureClass::kTransient);
  // The claim was not released.
  EXPECT_EQ(h.idempotency().Get("charge:ord_1").value()->state,
            IdempotencyRecord::State::kInProgress);
  EXPECT_EQ(h.idempotency_faults().Calls(IdempotencyMethod::kRelease), 0);

  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(effects, 2);  // At least once: the effect ran again after the claim expired.
  EXPECT_EQ(h.Job(id).envelope.attempt, 2);
  auto rec = h.idempotency().Get("charge:ord_1").value();
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ(rec->result, "charged");
  EXPECT_GE(h.metrics().CounterTotal(metric::kRetries, "charge"), 1);
}

}  // namespace
}  // namespace jobpact
