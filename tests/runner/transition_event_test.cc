// One TransitionEvent per transition: an observer passed in
// JobRunnerOptions::transition_observers sees each transition the runner
// makes or reports exactly once, with its from, to, reason, failure and
// durations; a throwing observer breaks nothing.
#include "jobpact/transition_event.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"

namespace jobpact {
namespace {

using test_util::CapturedLogger;
using test_util::EnqueueOk;
using test_util::MakeJob;
using test_util::RecordingObserver;
using test_util::Seen;
using ::testing::ElementsAre;
using testing::Harness;
using ::testing::HasSubstr;
using testing::IsOk;
using ::testing::SizeIs;
using testing::StatusIs;

class ThrowingObserver final : public TransitionObserver {
 public:
  explicit ThrowingObserver(bool throw_int) : throw_int_(throw_int) {}
  void OnTransition(const TransitionEvent&) override {
    if (throw_int_) throw 42;
    throw std::runtime_error("observer bug");
  }

 private:
  const bool throw_int_;
};

// A harness whose runner reports to `observer` (and `extra` before it).
std::unique_ptr<Harness> Observed(std::shared_ptr<RecordingObserver> observer,
                                  std::shared_ptr<TransitionObserver> extra = nullptr,
                                  std::string logger_name = "jobpact.test") {
  return std::make_unique<Harness>([=](JobRunnerOptions& o) {
    if (extra) o.transition_observers.push_back(extra);
    o.transition_observers.push_back(observer);
    o.logger_name = logger_name;
  });
}

// Registers a handler of "v" that fails permanently, enqueues one job of it
// and runs it into the DLQ; returns its id.
std::string EnqueueRejected(Harness& h) {
  EXPECT_THAT(h.Handle("v", [](JobContext&) { return Status::InvalidArgument("bad amount"); }),
              IsOk());
  const std::string id = EnqueueOk(h, MakeJob("v"));
  EXPECT_THAT(h.RunUntilSettled(), IsOk());
  return id;
}

TEST(TransitionEventTest, ASuccessIsEnqueuedDeliveredAndSucceededWithItsDurations) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  ASSERT_THAT(h->Handle("invoice.generate",
                        [&](JobContext&) {
                          h->clock().Advance(Seconds(2));  // The handler's run time.
                          return Status::Ok();
                        }),
              IsOk());
  Envelope e = MakeJob("invoice.generate");
  e.tenant_id = "tenant_123";
  e.trace_id = "trc_abcd1234";
  const TimePoint enqueued = h->clock().Now();
  const std::string id = EnqueueOk(*h, e);
  h->clock().Advance(Seconds(3));  // Waits in the queue.
  ASSERT_THAT(h->RunUntilIdle(), IsOk());

  EXPECT_THAT(seen->StepsOf(id), ElementsAre("none->queued:enqueued", "queued->running:delivered",
                                             "running->succeeded:succeeded"));
  const std::vector<Seen> events = seen->For(id);
  ASSERT_THAT(events, SizeIs(3));
  EXPECT_EQ(events[0].origin, TransitionOrigin::kEnqueue);
  EXPECT_EQ(events[0].at, enqueued);
  EXPECT_EQ(events[1].origin, TransitionOrigin::kDelivery);
  EXPECT_EQ(events[1].epoch, 1);
  const Seen& done = events[2];
  EXPECT_EQ(done.origin, TransitionOrigin::kDelivery);
  EXPECT_EQ(done.job_type, "invoice.generate");
  EXPECT_EQ(done.queue, "default");
  EXPECT_EQ(done.tenant_id, "tenant_123");
  EXPECT_EQ(done.trace_id, "trc_abcd1234");
  EXPECT_TRUE(done.has_envelope);
  EXPECT_EQ(done.attempt, 1);
  EXPECT_EQ(done.epoch, 1);
  EXPECT_FALSE(done.failure.has_value());
  EXPECT_FALSE(done.ready_at.has_value());
  EXPECT_TRUE(done.attempt_spent);
  EXPECT_EQ(done.queue_latency, std::optional<Duration>(Seconds(3)));
  EXPECT_EQ(done.run_duration, std::optional<Duration>(Seconds(2)));
  EXPECT_EQ(done.total, std::optional<Duration>(Seconds(5)));
  EXPECT_EQ(done.at, enqueued + Seconds(5));
  // The runner's own metrics observer still counts the outcome.
  EXPECT_EQ(h->metrics().CounterTotal(metric::kSucceeded, "invoice.generate"), 1);
}

TEST(TransitionEventTest, ATransientFailureIsOneRetryEventWithItsFailureAndDelay) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  int calls = 0;
  ASSERT_THAT(h->Handle("t",
                        [&](JobContext&) {
                          return ++calls == 1 ? Status::Unavailable("upstream 503") : Status::Ok();
                        }),
              IsOk());
  const std::string id = EnqueueOk(*h, MakeJob("t"));
  ASSERT_THAT(h->RunUntilSettled(), IsOk());

  EXPECT_THAT(seen->StepsOf(id),
              ElementsAre("none->queued:enqueued", "queued->running:delivered",
                          "running->retry_scheduled:transient_error",
                          "retry_scheduled->running:delivered", "running->succeeded:succeeded"));
  const std::vector<Seen> events = seen->For(id);
  ASSERT_THAT(events, SizeIs(5));
  const Seen& retry = events[2];
  ASSERT_TRUE(retry.failure.has_value());
  EXPECT_EQ(retry.failure->failure_class, FailureClass::kTransient);
  EXPECT_EQ(retry.failure->code, "UNAVAILABLE");
  EXPECT_EQ(retry.failure->message, "upstream 503");
  EXPECT_EQ(retry.attempt, 1);
  EXPECT_TRUE(retry.attempt_spent);
  ASSERT_TRUE(retry.ready_at.has_value());
  EXPECT_GT(retry.delay, Duration::zero());
  EXPECT_EQ(*retry.ready_at, retry.at + retry.delay);
  EXPECT_TRUE(retry.run_duration.has_value());
  EXPECT_EQ(events[3].epoch, 2);
  EXPECT_EQ(events[4].attempt, 2);
}

TEST(TransitionEventTest, APermanentFailureIsOneDeadLetterEvent) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  const std::string id = EnqueueRejected(*h);

  EXPECT_THAT(seen->StepsOf(id), ElementsAre("none->queued:enqueued", "queued->running:delivered",
                                             "running->dead_lettered:permanent_error"));
  const Seen dlq = seen->For(id).back();
  ASSERT_TRUE(dlq.failure.has_value());
  EXPECT_EQ(dlq.failure->failure_class, FailureClass::kPermanent);
  EXPECT_EQ(dlq.failure->code, "INVALID_ARGUMENT");
  EXPECT_EQ(dlq.failure->message, "bad amount");
}

TEST(TransitionEventTest, ADuplicateAtDeliveryIsOneSucceededEventWithoutAHandlerRun) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  ASSERT_THAT(h->Handle("report", [](JobContext&) { return Status::Ok(); }), IsOk());
  Envelope late = MakeJob("report");
  late.dedup_key = "report:2026-08-17";
  late.scheduled_at = h->clock().Now() + std::chrono::minutes(6);
  const std::string late_id = EnqueueOk(*h, late);
  h->clock().Advance(std::chrono::minutes(5) + Seconds(1));  // Past the enqueue window.
  Envelope now = MakeJob("report");
  now.dedup_key = "report:2026-08-17";
  const std::string now_id = EnqueueOk(*h, now);
  ASSERT_THAT(h->RunUntilSettled(), IsOk());

  EXPECT_THAT(seen->StepsOf(late_id),
              ElementsAre("none->queued:enqueued", "queued->running:delivered",
                          "running->succeeded:duplicate"));
  const Seen dup = seen->For(late_id).back();
  EXPECT_FALSE(dup.run_duration.has_value());
  EXPECT_FALSE(dup.queue_latency.has_value());
  EXPECT_THAT(seen->StepsOf(now_id), SizeIs(3));
}

TEST(TransitionEventTest, ADuplicateEnqueueStoresNothingAndEmitsNoEvent) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  Envelope e = MakeJob("report");
  e.dedup_key = "report:1";
  const std::string id = EnqueueOk(*h, e);
  Result<EnqueueResult> again = h->Enqueue(e);
  ASSERT_THAT(again, IsOk());
  ASSERT_TRUE(again->duplicate);
  EXPECT_THAT(seen->StepsOf(id), ElementsAre("none->queued:enqueued"));
  EXPECT_EQ(seen->size(), 1u);
}

TEST(TransitionEventTest, AnExpiredJobIsOneDiscardedEvent) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  ASSERT_THAT(h->Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  Envelope e = MakeJob("t");
  e.ttl = Seconds(10);
  const std::string id = EnqueueOk(*h, e);
  h->clock().Advance(Seconds(11));
  ASSERT_THAT(h->RunUntilIdle(), IsOk());
  EXPECT_THAT(seen->StepsOf(id), ElementsAre("none->queued:enqueued", "queued->running:delivered",
                                             "running->discarded:expired"));
  EXPECT_FALSE(seen->For(id).back().failure.has_value());
}

TEST(TransitionEventTest, ABusyLockIsARequeueThatSpendsNoAttempt) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  ASSERT_THAT(h->Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_THAT(h->locks().Acquire("order:1", "someone-else", Seconds(60)), IsOk());
  Envelope e = MakeJob("t");
  e.lock_key = "order:1";
  const std::string id = EnqueueOk(*h, e);
  ASSERT_THAT(h->RunUntilIdle(), IsOk());
  EXPECT_THAT(seen->StepsOf(id), ElementsAre("none->queued:enqueued", "queued->running:delivered",
                                             "running->retry_scheduled:lock_busy"));
  const Seen busy = seen->For(id).back();
  EXPECT_FALSE(busy.attempt_spent);
  EXPECT_FALSE(busy.failure.has_value());
  EXPECT_TRUE(busy.ready_at.has_value());
}

TEST(TransitionEventTest, AFencedCompletionEmitsNoEventAndTheLeaseRecoveryDoes) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  ASSERT_THAT(h->Handle("video.transcode", [](JobContext&) { return Status::Ok(); }), IsOk());
  const std::string id = EnqueueOk(*h, MakeJob("video.transcode"));
  // The worker "dies" before its completion is stored.
  h->faults().FailNext(testing::QueueMethod::kComplete, Status::Unavailable("worker killed"));
  ASSERT_THAT(h->RunUntilIdle(), IsOk());
  EXPECT_THAT(seen->StepsOf(id), ElementsAre("none->queued:enqueued", "queued->running:delivered"));
  ASSERT_THAT(h->ExpireLease(id), IsOk());
  ASSERT_THAT(h->RunUntilIdle(), IsOk());  // Recovered, then run again.

  EXPECT_THAT(seen->StepsOf(id),
              ElementsAre("none->queued:enqueued", "queued->running:delivered",
                          "running->queued:lease_expired", "queued->running:delivered",
                          "running->succeeded:succeeded"));
  const Seen recovery = seen->For(id)[2];
  EXPECT_EQ(recovery.origin, TransitionOrigin::kLeaseRecovery);
  EXPECT_EQ(recovery.lease_recoveries, 1);
  EXPECT_EQ(recovery.attempt, 1);
  EXPECT_EQ(h->metrics().CounterTotal(metric::kLeaseRecoveries, "video.transcode"), 1);
}

TEST(TransitionEventTest, DlqReplayAndDiscardAreOperatorEvents) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  const std::string id = EnqueueRejected(*h);
  ReplayRequest replay;
  replay.job_ids = {id};
  replay.actor = "alice";
  replay.reason = "fixed the amount parser";
  Result<ReplayReport> report = h->runner().ReplayDeadLetters(replay);
  ASSERT_THAT(report, IsOk());
  ASSERT_THAT(report->replayed, ElementsAre(id));
  ASSERT_THAT(h->RunUntilSettled(), IsOk());  // Dead-lettered again.
  ASSERT_THAT(h->runner().DiscardDeadLetter(id, "bob", "obsolete order"), IsOk());

  EXPECT_THAT(seen->StepsOf(id),
              ElementsAre("none->queued:enqueued", "queued->running:delivered",
                          "running->dead_lettered:permanent_error", "dead_lettered->queued:replay",
                          "queued->running:delivered", "running->dead_lettered:permanent_error",
                          "dead_lettered->discarded:operator_discard"));
  const std::vector<Seen> events = seen->For(id);
  const Seen& replayed = events[3];
  EXPECT_EQ(replayed.origin, TransitionOrigin::kOperator);
  EXPECT_EQ(replayed.actor, "alice");
  EXPECT_EQ(replayed.operator_reason, "fixed the amount parser");
  EXPECT_EQ(replayed.dlq_reason, "permanent_error");
  EXPECT_TRUE(replayed.reset_attempts);
  EXPECT_EQ(replayed.ready_at, std::optional<TimePoint>(replayed.at));
  EXPECT_FALSE(replayed.has_envelope);
  const Seen& discarded = events[6];
  EXPECT_EQ(discarded.origin, TransitionOrigin::kOperator);
  EXPECT_EQ(discarded.actor, "bob");
  EXPECT_EQ(discarded.operator_reason, "obsolete order");
  EXPECT_EQ(discarded.queue, "default");
}

TEST(TransitionEventTest, AnInvalidEnvelopeIsOneDeadLetterEventFromNone) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen);
  Result<EnqueueResult> r = h->EnqueueJson(R"({"job_type": "bad type!", "payload": {}})");
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument));
  std::vector<DlqEntry> dlq = h->DeadLetters();
  ASSERT_THAT(dlq, SizeIs(1));
  EXPECT_THAT(seen->StepsOf(dlq[0].job_id), ElementsAre("none->dead_lettered:invalid_envelope"));
  const Seen e = seen->For(dlq[0].job_id).front();
  EXPECT_FALSE(e.has_envelope);
  ASSERT_TRUE(e.failure.has_value());
  EXPECT_EQ(e.failure->failure_class, FailureClass::kPermanent);
  EXPECT_EQ(e.failure->code, "invalid_envelope");
}

TEST(TransitionEventTest, AThrowingObserverBreaksNeitherTheRunnerNorTheOtherObservers) {
  CapturedLogger capture("jobpact.test.observer");
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen, std::make_shared<ThrowingObserver>(false), "jobpact.test.observer");
  ASSERT_THAT(h->Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  const std::string first = EnqueueOk(*h, MakeJob("t"));
  const std::string second = EnqueueOk(*h, MakeJob("t"));
  ASSERT_THAT(h->RunUntilIdle(), IsOk());

  EXPECT_EQ(h->StatusOf(first), JobStatus::kSucceeded);
  EXPECT_EQ(h->StatusOf(second), JobStatus::kSucceeded);
  EXPECT_THAT(seen->StepsOf(second), SizeIs(3));
  EXPECT_EQ(h->metrics().CounterTotal(metric::kSucceeded, "t"), 2);
  int reports = 0;
  for (const std::string& line : capture.Lines()) {
    if (line.find("transition_observer_threw") == std::string::npos) continue;
    ++reports;
    EXPECT_THAT(line, HasSubstr("observer=transition_observers[0]"));
    EXPECT_THAT(line, HasSubstr("observer bug"));
  }
  EXPECT_EQ(reports, 1);  // Once per observer, not once per event.
}

TEST(TransitionEventTest, AnObserverThrowingANonStandardExceptionIsCaughtToo) {
  auto seen = std::make_shared<RecordingObserver>();
  auto h = Observed(seen, std::make_shared<ThrowingObserver>(true));
  ASSERT_THAT(h->Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  const std::string id = EnqueueOk(*h, MakeJob("t"));
  ASSERT_THAT(h->RunUntilIdle(), IsOk());
  EXPECT_EQ(h->StatusOf(id), JobStatus::kSucceeded);
  EXPECT_THAT(seen->StepsOf(id), SizeIs(3));
}

TEST(TransitionEventTest, ANullObserverIsRefusedByCreate) {
  Harness h([](JobRunnerOptions& o) { o.transition_observers.push_back(nullptr); });
  EXPECT_THAT(h.init_status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(h.init_status().message(), HasSubstr("transition_observers[0] is null"));
}

}  // namespace
}  // namespace jobpact
