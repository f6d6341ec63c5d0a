// The seeds' incidents, reproduced in memory with the testing Harness and a
// ManualClock. No threads: where an incident needs a second worker, the
// first worker's handler (or a hook just before its ack) calls
// RunUntilIdle() again, which plays the second worker taking over.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"

namespace jobpact {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using testing::Harness;
using testing::IsOk;
using testing::IdempotencyMethod;
using testing::QueueMethod;
using testing::StatusIs;

using test_util::EnqueueOk;
using test_util::MakeJob;

bool HistoryHas(const std::vector<Transition>& history, JobStatus from, JobStatus to,
                std::string_view why) {
  for (const Transition& t : history) {
    if (t.from == from && t.to == to && t.reason == why) return true;
  }
  return false;
}

// Seed incident: "double processing". A worker keeps running while its lease
// expires (here: its lease renewals cannot reach the queue store, while the
// idempotency store still answers, so its claim stays alive). Another worker
// receives the job. The business effect must happen once, and the first
// worker's late completion must be refused.
TEST(RunnerIncidentsTest, DoubleProcessingLeaseExpiresWhileFirstWorkerRuns) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("invoice.generate",
                       [&](JobContext& ctx) {
                         if (ctx.attempt() == 1) {
                           h.clock().Advance(Seconds(20));
                           h.faults().FailNext(QueueMethod::kRenew,
                                               Status::Unavailable("partition"));
                           // The lease is not renewed, the claim is.
                           EXPECT_THAT(ctx.Heartbeat(), StatusIs(StatusCode::kUnavailable));
                           h.clock().Advance(Seconds(26));  // Lease (45 s) expired.
                           // Meanwhile a second worker recovers the lease and
                           // receives the job: the claim is in progress.
                           EXPECT_THAT(h.RunUntilIdle(), IsOk());
                           EXPECT_TRUE(ctx.cancelled());
                         }
                         ++effects;  // The side effect.
                         ctx.SetResult("inv_1");
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("invoice.generate", R"({"order_id":"ord_987"})");
  env.idempotency_key = "invoice.generate:ord_987";
  std::string id = EnqueueOk(h, env);

  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  // The second delivery found the claim in progress and waits, no attempt spent.
  JobRecord mid = h.Job(id);
  EXPECT_EQ(mid.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(mid.reason, reason::kIdempotencyInProgress);
  EXPECT_EQ(mid.lease_recoveries, 1);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions, "invoice.generate"), 1);

  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(r.status, JobStatus::kSucceeded);
  EXPECT_EQ(r.reason, reason::kIdempotentSkip);
  EXPECT_EQ(r.result, "inv_1");
  EXPECT_TRUE(HistoryHas(r.history, JobStatus::kRunning, JobStatus::kQueued, reason::kLeaseExpired));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kLeaseRecoveries), 1);
}

// "Crash between the side effect and the ack": the ack never reaches the
// store. The lease expires, the job is delivered again, and the recorded
// idempotent result makes the redelivery skip the effect.
TEST(RunnerIncidentsTest, CrashBetweenSideEffectAndAckRunsTheEffectOnce) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext& ctx) {
                         ++effects;
                         ctx.SetResult("ch_42");
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("charge");
  env.idempotency_key = "charge:ord_1";
  std::string id = EnqueueOk(h, env);

  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("worker crashed"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kRunning);  // Nobody acked.

  ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());  // The lease expires; maintenance recovers it.
  JobRecord r = h.Job(id);
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(r.status, JobStatus::kSucceeded);
  EXPECT_EQ(r.reason, reason::kIdempotentSkip);
  EXPECT_EQ(r.result, "ch_42");
  EXPECT_EQ(r.lease_recoveries, 1);
}

// The same crash with a transactional effect: the ack is what commits the
// effect, so the idempotency result must not be recorded before it. A lost
// ack leaves the key uncompleted and the redelivery runs (and commits) the
// effect: exactly one effect in the end, never an idempotent_skip of an
// effect that never happened.
TEST(RunnerIncidentsTest, FailedAckWithTransactionalEffectDoesNotCompleteTheKey) {
  Harness h;
  int runs = 0;
  int committed = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext& ctx) {
                         ++runs;
                         ctx.SetResult("ch_" + std::to_string(runs));
                         ctx.SetTransactionalEffect([&](void*) {
                           ++committed;
                           return Status::Ok();
                         });
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("charge");
  env.idempotency_key = "charge:ord_tx";
  std::string id = EnqueueOk(h, env);

  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("worker crashed"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kRunning);  // Nobody acked.
  EXPECT_EQ(committed, 0);
  auto rec = h.idempotency().Get("charge:ord_tx");
  ASSERT_THAT(rec.status(), IsOk());
  EXPECT_TRUE(!rec->has_value() ||
              (*rec)->state != IdempotencyRecord::State::kCompleted);

  ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());  // The lease expires; the job runs again.
  JobRecord r = h.Job(id);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(committed, 1);
  EXPECT_EQ(r.status, JobStatus::kSucceeded);
  EXPECT_EQ(r.reason, reason::kSucceeded);  // Not idempotent_skip.
  EXPECT_EQ(r.result, "ch_2");
  // Recorded after the ack that committed the effect.
  rec = h.idempotency().Get("charge:ord_tx");
  ASSERT_THAT(rec.status(), IsOk());
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ((*rec)->result, "ch_2");

  // A later job with the same key is skipped: still one effect.
  Envelope again = MakeJob("charge");
  again.idempotency_key = "charge:ord_tx";
  std::string id2 = EnqueueOk(h, again);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(h.Job(id2).reason, reason::kIdempotentSkip);
  EXPECT_EQ(committed, 1);
}

// A handler that overran its idempotency claim must not commit its
// transactional effect: the key may have been taken over by another delivery
// that runs the same effect (reproduced before the fix: both committed).
TEST(RunnerIncidentsTest, TransactionalEffectIsNotCommittedWhenTheClaimWasLost) {
  Harness h;
  int committed = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext& ctx) {
                         // The handler stalls past its claim; meanwhile
                         // another delivery of the key claims it.
                         h.clock().Advance(Seconds(46));
                         auto other = h.idempotency().Claim("charge:ord_lost", "other-worker#1",
                                                            Seconds(45));
                         EXPECT_THAT(other.status(), IsOk());
                         ctx.SetTransactionalEffect([&](void*) {
                           ++committed;
                           return Status::Ok();
                         });
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("charge");
  env.idempotency_key = "charge:ord_lost";
  std::string id = EnqueueOk(h, env);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(committed, 0);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->code, reason::kIdempotencyClaimLost);
  auto rec = h.idempotency().Get("charge:ord_lost");
  ASSERT_THAT(rec.status(), IsOk());
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->owner, "other-worker#1");
}

// An effect that fails rolls the completion back: the key is not recorded,
// and the redelivery runs the effect again.
TEST(RunnerIncidentsTest, FailingTransactionalEffectDoesNotCompleteTheKey) {
  Harness h;
  int runs = 0;
  int committed = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext& ctx) {
                         const bool fail = ++runs == 1;
                         ctx.SetTransactionalEffect([&committed, fail](void*) {
                           if (fail) return Status::Unavailable("deadlock, rolled back");
                           ++committed;
                           return Status::Ok();
                         });
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("charge");
  env.idempotency_key = "charge:ord_fx";
  std::string id = EnqueueOk(h, env);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(committed, 0);
  auto rec = h.idempotency().Get("charge:ord_fx");
  ASSERT_THAT(rec.status(), IsOk());
  EXPECT_TRUE(!rec->has_value() ||
              (*rec)->state != IdempotencyRecord::State::kCompleted);
  ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(committed, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).reason, reason::kSucceeded);
}

// With a transactional effect the result is recorded after the ack: a
// failure to record it is logged, and the committed success stands (no
// retry, which would run the effect a second time).
TEST(RunnerIncidentsTest, RecordFailureAfterTransactionalAckIsNotRetried) {
  Harness h;
  int committed = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext& ctx) {
                         ctx.SetTransactionalEffect([&](void*) {
                           ++committed;
                           return Status::Ok();
                         });
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("charge");
  env.idempotency_key = "charge:ord_rf";
  std::string id = EnqueueOk(h, env);
  h.idempotency_faults().FailNext(IdempotencyMethod::kComplete, Status::Unavailable("down"));
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(committed, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).envelope.attempt, 1);
}

// The worker stalls right before its ack (a long GC pause); the job is
// taken over meanwhile. Its ack is then fenced.
TEST(RunnerIncidentsTest, StaleAckAfterTakeoverIsRefusedAndNeverOverwrites) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext& ctx) {
                         ++effects;
                         ctx.SetResult("ch_" + std::to_string(effects));
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("charge");
  env.idempotency_key = "charge:ord_2";
  std::string id = EnqueueOk(h, env);
  h.faults().BeforeNext(QueueMethod::kComplete, [&] {
    h.clock().Advance(Seconds(46));
    EXPECT_THAT(h.RunUntilIdle(), IsOk());  // The second worker: idempotent skip, acked.
  });
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(r.status, JobStatus::kSucceeded);
  EXPECT_EQ(r.reason, reason::kIdempotentSkip);
  EXPECT_EQ(r.epoch, 2);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions, "charge"), 1);
}

// The broker hands the same delivery out twice.
TEST(RunnerIncidentsTest, DuplicateDeliveryRunsTheEffectOnce) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("email.send", [&](JobContext&) { ++effects; return Status::Ok(); }),
              IsOk());
  Envelope env = MakeJob("email.send");
  env.idempotency_key = "welcome:cus_1";
  std::string id = EnqueueOk(h, env);
  h.faults().DeliverTwice();
  EXPECT_EQ(h.RunUntilIdle().value(), 2);
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).reason, reason::kSucceeded);  // The copy never overwrote it.
}

// Seed incident: a poison message. A permanent error goes to the DLQ after
// one attempt instead of looping.
TEST(RunnerIncidentsTest, PoisonMessageWithPermanentErrorIsDeadLetteredAfterOneAttempt) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("invoice.generate",
                       [&](JobContext&) -> Status {
                         ++calls;
                         throw PermanentError("order ord_404 does not exist", "order_not_found");
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("invoice.generate", R"({"order_id":"ord_404"})"));
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kPermanentError);
  std::vector<DlqEntry> dlq = h.DeadLetters();
  ASSERT_THAT(dlq, SizeIs(1));
  ASSERT_TRUE(dlq[0].last_failure.has_value());
  EXPECT_EQ(dlq[0].last_failure->code, "order_not_found");
  EXPECT_EQ(h.metrics().Counter(metric::kDeadLettered, MetricLabels{"invoice.generate", "default",
                                                                    reason::kPermanentError, {}}),
            1);
}

// An unclassified error is retried on the smaller budget (3), then
// dead-lettered as unknown_non_retryable.
TEST(RunnerIncidentsTest, PoisonMessageWithUnknownErrorUsesTheSmallerBudget) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("parse",
                       [&](JobContext&) -> Status {
                         ++calls;
                         throw std::logic_error("unexpected token");
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("parse"));
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 3);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kUnknownNonRetryable);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kAnomalies, "parse"), 3);
}

// Retries exhausted: the DLQ entry carries the full record (SPEC 7).
TEST(RunnerIncidentsTest, RetriesExhaustedDeadLettersWithTheFullRecord) {
  Harness h;
  ASSERT_THAT(h.Handle("flaky.upstream",
                       [](JobContext&) { return Status::Unavailable("upstream 503"); }),
              IsOk());
  Envelope env = MakeJob("flaky.upstream", R"({"order_id":"ord_1"})");
  env.trace_id = "trc_abcd1234";
  const TimePoint created = h.clock().Now();
  std::string id = EnqueueOk(h, env);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());

  Result<DlqEntry> e = h.queue().GetDeadLetter(id);
  ASSERT_THAT(e, IsOk());
  EXPECT_EQ(e->job_type, "flaky.upstream");
  EXPECT_EQ(e->payload, R"({"order_id":"ord_1"})");
  EXPECT_EQ(e->created_at, created);
  EXPECT_EQ(e->attempts, 5);
  EXPECT_EQ(e->reason, reason::kMaxAttemptsExceeded);
  ASSERT_TRUE(e->last_failure.has_value());
  EXPECT_EQ(e->last_failure->failure_class, FailureClass::kTransient);
  EXPECT_EQ(e->last_failure->code, "UNAVAILABLE");
  EXPECT_EQ(e->last_failure->message, "upstream 503");
  EXPECT_EQ(e->trace_id, "trc_abcd1234");
  EXPECT_EQ(e->dead_lettered_at, h.clock().Now());
  int retries = 0;
  for (const Transition& t : e->history) {
    if (t.to == JobStatus::kRetryScheduled) ++retries;
  }
  EXPECT_EQ(retries, 4);
  EXPECT_TRUE(HistoryHas(e->history, JobStatus::kRunning, JobStatus::kDeadLettered,
                         reason::kMaxAttemptsExceeded));
  EXPECT_EQ(h.metrics().Counter(metric::kRetries,
                                MetricLabels{"flaky.upstream", "default", {}, "transient"}),
            4);
  HistogramSnapshot attempts = h.metrics().Histogram(metric::kAttempts, "flaky.upstream");
  EXPECT_EQ(attempts.count, 1);
  EXPECT_DOUBLE_EQ(attempts.max, 5.0);
}

// Seed incident: a TTL that expires while the job waits (here, for its
// retry) discards the job; it does not go to the DLQ.
TEST(RunnerIncidentsTest, TtlExpiredWhileWaitingIsDiscardedNotDeadLettered) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("otp.send", [&](JobContext&) { ++calls; return Status::Unavailable("smtp"); }),
              IsOk());
  Envelope env = MakeJob("otp.send");
  env.ttl = Seconds(60);
  BackoffSpec slow;
  slow.kind = BackoffKind::kFixed;
  slow.base_delay = Seconds(120);
  slow.max_delay = Seconds(120);
  slow.jitter = JitterKind::kNone;
  env.retry_policy = slow;
  std::string id = EnqueueOk(h, env);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDiscarded);
  EXPECT_EQ(r.reason, reason::kExpired);
  EXPECT_TRUE(h.DeadLetters().empty());
  EXPECT_EQ(h.metrics().Counter(metric::kDiscarded,
                                MetricLabels{"otp.send", "default", reason::kExpired, {}}),
            1);
}

// Seed incident: lock contention. A busy lock requeues the job after a
// jittered delay without spending an attempt.
TEST(RunnerIncidentsTest, LockContentionRequeuesWithoutSpendingAnAttempt) {
  Harness h([](JobRunnerOptions& o) { o.random = MakeSequenceRandomSource({0.5}); });
  int calls = 0;
  ASSERT_THAT(h.Handle("invoice.generate", [&](JobContext&) { ++calls; return Status::Ok(); }),
              IsOk());
  ASSERT_THAT(h.locks().Acquire("order:ord_987", "another-worker", Seconds(600)), IsOk());
  Envelope env = MakeJob("invoice.generate");
  env.lock_key = "order:ord_987";
  std::string id = EnqueueOk(h, env);

  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.reason, reason::kLockBusy);
  EXPECT_EQ(r.envelope.attempt, 0);
  EXPECT_EQ(r.lock_waits, 1);
  // 100 ms + 0.5 * (1000 - 100) ms.
  EXPECT_EQ(r.ready_at - h.clock().Now(), Millis(550));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kLockContention, "invoice.generate"), 1);

  ASSERT_THAT(h.locks().Release("order:ord_987", "another-worker"), IsOk());
  h.AdvanceToNextRetry();
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).envelope.attempt, 1);
  // Released after the outcome.
  auto holder = h.locks().Inspect("order:ord_987");
  ASSERT_THAT(holder, IsOk());
  EXPECT_FALSE(holder->has_value());
}

TEST(RunnerIncidentsTest, LockWaitsAreBoundedByMaxLockWaits) {
  Harness h([](JobRunnerOptions& o) { o.max_lock_waits = 3; });
  int calls = 0;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.locks().Acquire("stuck", "gone-owner", std::chrono::hours(1)), IsOk());
  Envelope env = MakeJob("t");
  env.lock_key = "stuck";
  std::string id = EnqueueOk(h, env);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 0);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kLockWaitsExhausted);
  EXPECT_EQ(r.lock_waits, 3);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kLockContention, "t"), 4);
}

// Two duplicates of one business effect (one idempotency key, two jobs)
// run concurrently: the second finds the claim in progress and waits; then
// it skips. One effect.
TEST(RunnerIncidentsTest, TwoConcurrentDuplicatesWithOneIdempotencyKeyRunTheEffectOnce) {
  Harness h([](JobRunnerOptions& o) { o.dequeue_batch = 1; });
  int effects = 0;
  bool nested = false;
  ASSERT_THAT(h.Handle("payout",
                       [&](JobContext&) {
                         if (!nested) {
                           nested = true;
                           // The duplicate arrives meanwhile.
                           EXPECT_THAT(h.RunUntilIdle(), IsOk());
                         }
                         ++effects;
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("payout");
  env.idempotency_key = "payout:2026-08:acct_1";
  std::string a = EnqueueOk(h, env);
  std::string b = EnqueueOk(h, env);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.Job(b).status, JobStatus::kRetryScheduled);
  EXPECT_EQ(h.Job(b).reason, reason::kIdempotencyInProgress);
  EXPECT_EQ(h.Job(b).envelope.attempt, 0);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(h.Job(a).reason, reason::kSucceeded);
  EXPECT_EQ(h.Job(b).status, JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(b).reason, reason::kIdempotentSkip);
}

// Deduplication at enqueue: an equivalent message within the window returns
// the existing job.
TEST(RunnerIncidentsTest, DedupAtEnqueueReturnsTheExistingJob) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("invoice.generate", [&](JobContext&) { ++calls; return Status::Ok(); }),
              IsOk());
  Envelope env = MakeJob("invoice.generate");
  env.dedup_key = "invoice.generate:ord_987";
  Result<EnqueueResult> first = h.Enqueue(env);
  Result<EnqueueResult> second = h.Enqueue(env);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  EXPECT_FALSE(first->duplicate);
  EXPECT_TRUE(second->duplicate);
  EXPECT_EQ(second->job_id, first->job_id);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kDedupHits, "invoice.generate"), 1);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kEnqueued, "invoice.generate"), 1);
}

// Deduplication at delivery: a job enqueued outside the enqueue window (it
// was scheduled long ago) finds its twin already succeeded.
TEST(RunnerIncidentsTest, DedupAtDeliverySucceedsAsDuplicate) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("report", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  Envelope late = MakeJob("report");
  late.dedup_key = "report:2026-08-17";
  late.scheduled_at = h.clock().Now() + std::chrono::minutes(6);
  std::string late_id = EnqueueOk(h, late);
  h.clock().Advance(std::chrono::minutes(5) + Seconds(1));  // Past the enqueue window.
  Envelope now = MakeJob("report");
  now.dedup_key = "report:2026-08-17";
  Result<EnqueueResult> r = h.Enqueue(now);
  ASSERT_THAT(r, IsOk());
  ASSERT_FALSE(r->duplicate);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(r->job_id), JobStatus::kSucceeded);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());  // The scheduled twin is delivered.
  EXPECT_EQ(calls, 1);
  JobRecord twin = h.Job(late_id);
  EXPECT_EQ(twin.status, JobStatus::kSucceeded);
  EXPECT_EQ(twin.reason, reason::kDuplicate);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kDedupHits, "report"), 1);
  // The in-memory store answered the check in its lease step.
  EXPECT_EQ(h.faults().Calls(QueueMethod::kFindDuplicate), 0);
}

// Two jobs with one dedup key leased in one batch: the work runs once. Each
// is running once leased, so a check made when each starts found the other
// running and both ended as duplicates with the work never done; the check
// in the lease step sees the first one running only when it leases the
// second.
TEST(RunnerIncidentsTest, TwoJobsWithOneDedupKeyInOneBatchRunOnce) {
  Harness h;
  std::vector<std::string> ran;
  ASSERT_THAT(h.Handle("report", [&](JobContext& ctx) {
    ran.push_back(ctx.envelope().job_id);
    return Status::Ok();
  }), IsOk());
  EnqueueOptions no_enqueue_dedup;
  no_enqueue_dedup.dedup_window = Duration::zero();
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    Envelope e = MakeJob("report");
    e.dedup_key = "report:2026-08-17";
    PrepareForEnqueue(e, h.clock().Now());
    Result<EnqueueResult> r = h.faults().Enqueue(e, no_enqueue_dedup);
    ASSERT_THAT(r, IsOk());
    ids.push_back(r->job_id);
  }
  Result<int> processed = h.RunUntilIdle();
  ASSERT_THAT(processed, IsOk());
  EXPECT_EQ(*processed, 2);
  EXPECT_THAT(ran, ElementsAre(ids[0]));
  EXPECT_EQ(h.StatusOf(ids[0]), JobStatus::kSucceeded);
  JobRecord twin = h.Job(ids[1]);
  EXPECT_EQ(twin.status, JobStatus::kSucceeded);
  EXPECT_EQ(twin.reason, reason::kDuplicate);
  EXPECT_EQ(twin.result, "duplicate of " + ids[0]);
}

// Seed incident: a lost update. A worker stalls past its lock's TTL; two
// other deliveries take the lock and write. The stalled worker's write
// carries an older fencing token and the resource refuses it.
TEST(RunnerIncidentsTest, LostUpdateIsPreventedByTheFencingToken) {
  struct Account {
    std::uint64_t last_token = 0;
    int balance = 0;
    int refused = 0;
    Status Write(std::uint64_t token, int value) {
      if (token < last_token) {
        ++refused;
        return Status::Aborted("stale fencing token " + std::to_string(token));
      }
      last_token = token;
      balance = value;
      return Status::Ok();
    }
  } account;
  Harness h([](JobRunnerOptions& o) { o.dequeue_batch = 1; });
  bool stalled = false;
  ASSERT_THAT(h.Handle("account.deposit",
                       [&](JobContext& ctx) {
                         const int amount = std::stoi(ctx.payload());
                         const int read = account.balance;
                         if (amount == 10 && !stalled) {
                           stalled = true;
                           h.clock().Advance(Seconds(46));  // Lock and lease expire.
                           EXPECT_THAT(h.RunUntilIdle(), IsOk());  // Others take over.
                         }
                         return account.Write(ctx.fencing_token(), read + amount);
                       }),
              IsOk());
  Envelope a = MakeJob("account.deposit", "10");
  a.lock_key = "account:1";
  Envelope b = MakeJob("account.deposit", "20");
  b.lock_key = "account:1";
  std::string ida = EnqueueOk(h, a);
  std::string idb = EnqueueOk(h, b);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(account.refused, 1);
  EXPECT_EQ(account.balance, 30);  // Without the fence: 10 (B's deposit lost).
  EXPECT_EQ(h.StatusOf(ida), JobStatus::kSucceeded);
  EXPECT_EQ(h.StatusOf(idb), JobStatus::kSucceeded);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions, "account.deposit"), 1);
}

// Seed incident: a job that keeps killing its worker. Each delivery dies
// before its ack; after max_lease_recoveries the job is dead-lettered
// instead of looping.
TEST(RunnerIncidentsTest, JobThatKeepsKillingItsWorkerIsDeadLetteredAfterTheRecoveryCap) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("video.transcode", [&](JobContext&) { ++calls; return Status::Ok(); }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("video.transcode"));
  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("worker killed (OOM)"), 100);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  for (int i = 0; i < 10 && h.StatusOf(id) != JobStatus::kDeadLettered; ++i) {
    ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());
  }
  h.faults().Clear();
  EXPECT_EQ(calls, 4);  // The first delivery and three recoveries.
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kLeaseExpiredRepeatedly);
  EXPECT_EQ(r.lease_recoveries, 4);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kLeaseRecoveries), 4);
  // Per job: the recoveries by job type, and the dead-lettering by reason
  // (SPEC 8), which happens in maintenance, not in a worker's Finish.
  EXPECT_EQ(h.metrics().CounterTotal(metric::kLeaseRecoveries, "video.transcode"), 4);
  EXPECT_EQ(h.metrics().Counter(metric::kLeaseRecoveries,
                                {"video.transcode", r.envelope.queue, {}, {}}),
            4);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kDeadLettered, "video.transcode"), 1);
  EXPECT_EQ(h.metrics().Counter(metric::kDeadLettered,
                                {"video.transcode", r.envelope.queue,
                                 reason::kLeaseExpiredRepeatedly, {}}),
            1);
  const auto attempts = h.metrics().Histogram(metric::kAttempts, "video.transcode");
  EXPECT_EQ(attempts.count, 1);
  EXPECT_EQ(attempts.max, 4);
}

// Deliveries lost to crashes spend attempts too (the next delivery has the
// next attempt number); once the budget is used up the job is dead-lettered
// at delivery without running.
TEST(RunnerIncidentsTest, AttemptBudgetCountsDeliveriesLostToCrashes) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  Envelope env = MakeJob("t");
  env.max_attempts = 2;
  std::string id = EnqueueOk(h, env);
  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("worker killed"), 2);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());              // Attempt 1 dies before its ack.
  ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());  // Attempt 2 dies too.
  ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());  // Attempt 3 would exceed the budget.
  EXPECT_EQ(calls, 2);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kMaxAttemptsExceeded);
  EXPECT_EQ(r.envelope.attempt, 2);
  EXPECT_EQ(r.lease_recoveries, 2);
}

// The DLQ is quarantine: replay (attempts reset, runs again, audit kept)
// and discard with a reason.
TEST(RunnerIncidentsTest, DeadLetterReplayAndDiscard) {
  Harness h;
  bool upstream_fixed = false;
  ASSERT_THAT(h.Handle("webhook.deliver",
                       [&](JobContext&) {
                         return upstream_fixed ? Status::Ok()
                                               : Status::FailedPrecondition("endpoint disabled");
                       }),
              IsOk());
  std::string a = EnqueueOk(h, MakeJob("webhook.deliver", R"({"n":1})"));
  std::string b = EnqueueOk(h, MakeJob("webhook.deliver", R"({"n":2})"));
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  ASSERT_EQ(h.StatusOf(a), JobStatus::kDeadLettered);
  ASSERT_EQ(h.StatusOf(b), JobStatus::kDeadLettered);

  upstream_fixed = true;
  DlqAction replay;
  replay.actor = "oncall@example.com";
  replay.reason = "endpoint re-enabled, INC-42";
  ASSERT_THAT(h.queue().Replay(a, replay), IsOk());
  DlqAction discard;
  discard.actor = "oncall@example.com";
  discard.reason = "customer deleted";
  ASSERT_THAT(h.queue().Discard(b, discard), IsOk());
  ASSERT_THAT(h.RunUntilSettled(), IsOk());

  JobRecord ra = h.Job(a);
  EXPECT_EQ(ra.status, JobStatus::kSucceeded);
  EXPECT_EQ(ra.envelope.attempt, 1);  // Attempts were reset.
  EXPECT_TRUE(HistoryHas(ra.history, JobStatus::kRunning, JobStatus::kDeadLettered,
                         reason::kPermanentError));
  EXPECT_TRUE(HistoryHas(ra.history, JobStatus::kDeadLettered, JobStatus::kQueued, reason::kReplay));
  JobRecord rb = h.Job(b);
  EXPECT_EQ(rb.status, JobStatus::kDiscarded);
  EXPECT_TRUE(HistoryHas(rb.history, JobStatus::kDeadLettered, JobStatus::kDiscarded,
                         reason::kOperatorDiscard));
  EXPECT_TRUE(h.DeadLetters().empty());
}

// A backend error during a pre-step requeues without spending an attempt
// (instead of counting a crash recovery against the job).
TEST(RunnerIncidentsTest, DedupCheckFailureRequeuesWithoutSpendingAnAttempt) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  Envelope env = MakeJob("t");
  env.dedup_key = "t:1";
  std::string id = EnqueueOk(h, env);
  h.faults().FailNext(QueueMethod::kFindDuplicate, Status::Unavailable("store down"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.envelope.attempt, 0);
  EXPECT_EQ(calls, 0);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
}

}  // namespace
}  // namespace jobpact
