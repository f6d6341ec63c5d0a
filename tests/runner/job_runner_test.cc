// The JobRunner's delivery pipeline (SPEC 3-8), driven without threads
// through the testing Harness and a ManualClock.
#include "jobpact/job_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using testing::Harness;
using testing::IsOk;
using testing::StatusIs;

using test_util::CapturedLogger;
using test_util::EnqueueOk;
using test_util::MakeJob;

bool HistoryHas(const JobRecord& r, JobStatus from, JobStatus to, std::string_view why) {
  for (const Transition& t : r.history) {
    if (t.from == from && t.to == to && t.reason == why) return true;
  }
  return false;
}

// --- Static registration ------------------------------------------------------

Status StaticEcho(JobContext& ctx) {
  ctx.SetResult("echo:" + ctx.payload());
  return Status::Ok();
}
JOBPACT_REGISTER_HANDLER("static.echo", StaticEcho);

TEST(JobRunnerTest, StaticallyRegisteredHandlerRunsInEveryRunner) {
  Harness h;
  ASSERT_THAT(h.init_status(), IsOk());
  std::string id = EnqueueOk(h, MakeJob("static.echo", R"({"a":1})"));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kSucceeded);
  EXPECT_EQ(r.result, R"(echo:{"a":1})");
  // A second registration of the same type is refused.
  EXPECT_THAT(h.Handle("static.echo", StaticEcho), StatusIs(StatusCode::kAlreadyExists));
}

// --- Creation and registration --------------------------------------------------

TEST(JobRunnerTest, CreateRefusesBadOptionsNamingEach) {
  JobRunnerOptions o;
  o.workers = 0;
  o.dequeue_batch = 0;
  o.lock_busy_min_delay = Seconds(2);
  o.lock_busy_max_delay = Seconds(1);
  auto r = JobRunner::Create(o);
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("queue")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("workers")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("dequeue_batch")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("lock_busy_max_delay")));
}

TEST(JobRunnerTest, HandleRefusesBadNamesEmptyHandlersAndDuplicates) {
  Harness h;
  auto ok = [](JobContext&) { return Status::Ok(); };
  EXPECT_THAT(h.Handle("", ok), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(h.Handle("has space", ok), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(h.Handle("x", Handler()), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(h.Handle("x", ok), IsOk());
  EXPECT_THAT(h.Handle("x", ok), StatusIs(StatusCode::kAlreadyExists));
}

TEST(JobRunnerTest, PolicyOverrideRequiresAReasonAndIsKept) {
  Harness h;
  auto fail = [](JobContext&) { return Status::Unavailable("upstream 503"); };
  HandlerOptions no_reason;
  no_reason.policy = RetryPolicy{};
  no_reason.policy->on_transient = FailureAction::kFail;
  EXPECT_THAT(h.Handle("report.build", fail, no_reason),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("policy_reason")));
  no_reason.policy_reason = "   ";
  EXPECT_THAT(h.Handle("report.build", fail, no_reason),
              StatusIs(StatusCode::kInvalidArgument));

  HandlerOptions with_reason = no_reason;
  with_reason.policy_reason = "reports are rebuilt nightly anyway; see RB-12";
  ASSERT_THAT(h.Handle("report.build", fail, with_reason), IsOk());
  bool found = false;
  for (const auto& e : h.runner().policies().Entries()) {
    if (e.job_type == "report.build") {
      found = true;
      EXPECT_EQ(e.reason, with_reason.policy_reason);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(h.runner().policies().ToTable(), HasSubstr("RB-12"));

  // The override applies: a transient failure now fails the job at once.
  std::string id = EnqueueOk(h, MakeJob("report.build"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kFailed);
  EXPECT_EQ(r.reason, reason::kTransientError);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kFailed, "report.build"), 1);
}

// --- Success, failure, retries ----------------------------------------------------

TEST(JobRunnerTest, SuccessRecordsHistoryResultAndMetrics) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("invoice.generate",
                       [&](JobContext& ctx) {
                         ++calls;
                         EXPECT_EQ(ctx.attempt(), 1);
                         EXPECT_EQ(ctx.fencing_token(), 0u);
                         EXPECT_FALSE(ctx.cancelled());
                         EXPECT_EQ(ctx.deadline(), h.clock().Now() + Seconds(30));
                         ctx.SetResult(R"({"invoice_id":"inv_1"})");
                         return Status::Ok();
                       }),
              IsOk());
  Envelope env = MakeJob("invoice.generate", R"({"order_id":"ord_987"})");
  env.idempotency_key = "invoice.generate:ord_987";
  std::string id = EnqueueOk(h, env);
  h.clock().Advance(Seconds(2));  // Two seconds in the queue.
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(calls, 1);

  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kSucceeded);
  EXPECT_EQ(r.envelope.attempt, 1);
  EXPECT_EQ(r.result, R"({"invoice_id":"inv_1"})");
  EXPECT_TRUE(HistoryHas(r, JobStatus::kQueued, JobStatus::kRunning, reason::kDelivered) ||
              HistoryHas(r, JobStatus::kQueued, JobStatus::kRunning, ""));
  EXPECT_TRUE(HistoryHas(r, JobStatus::kRunning, JobStatus::kSucceeded, reason::kSucceeded));

  // The idempotent result was recorded before the ack.
  auto rec = h.idempotency().Get("invoice.generate:ord_987");
  ASSERT_THAT(rec, IsOk());
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ((*rec)->result, R"({"invoice_id":"inv_1"})");

  auto& m = h.metrics();
  EXPECT_EQ(m.CounterTotal(metric::kEnqueued, "invoice.generate"), 1);
  EXPECT_EQ(m.CounterTotal(metric::kStarted, "invoice.generate"), 1);
  EXPECT_EQ(m.Counter(metric::kSucceeded,
                      MetricLabels{"invoice.generate", "default", reason::kSucceeded, {}}),
            1);
  HistogramSnapshot latency = m.Histogram(metric::kQueueLatency, "invoice.generate");
  EXPECT_EQ(latency.count, 1);
  EXPECT_DOUBLE_EQ(latency.max, 2.0);
  EXPECT_EQ(m.Histogram(metric::kDuration, "invoice.generate").count, 1);
  HistogramSnapshot attempts = m.Histogram(metric::kAttempts, "invoice.generate");
  EXPECT_EQ(attempts.count, 1);
  EXPECT_DOUBLE_EQ(attempts.max, 1.0);
}

TEST(JobRunnerTest, BackoffDelaysAreExactWithASequenceRandomSource) {
  // SPEC 11: exponential, base 1 s, x2, full jitter U(0, min(cap, base*2^n)).
  // Every sample is 0.5, so the delays are half the ceilings: 0.5, 1, 2, 4 s.
  Harness h([](JobRunnerOptions& o) { o.random = MakeSequenceRandomSource({0.5}); });
  ASSERT_THAT(h.Handle("flaky", [](JobContext&) { return Status::Unavailable("503"); }), IsOk());
  std::string id = EnqueueOk(h, MakeJob("flaky"));
  const std::vector<Duration> expected = {Millis(500), Seconds(1), Seconds(2), Seconds(4)};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(h.RunUntilIdle().value(), 1) << "attempt " << i + 1;
    JobRecord r = h.Job(id);
    ASSERT_EQ(r.status, JobStatus::kRetryScheduled);
    EXPECT_EQ(r.reason, reason::kTransientError);
    EXPECT_EQ(r.ready_at - h.clock().Now(), expected[i]) << "after attempt " << i + 1;
    EXPECT_EQ(r.previous_delay, expected[i]);
    // Not a moment early.
    h.clock().Advance(expected[i] - Millis(1));
    EXPECT_EQ(h.RunUntilIdle().value(), 0);
    EXPECT_EQ(h.AdvanceToNextRetry(), Millis(1));
  }
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kMaxAttemptsExceeded);
  EXPECT_EQ(h.metrics().Counter(metric::kRetries,
                                MetricLabels{"flaky", "default", {}, "transient"}),
            4);
}

TEST(JobRunnerTest, PerJobBackoffOverridesTheTypePolicyBackoff) {
  Harness h([](JobRunnerOptions& o) { o.random = MakeSequenceRandomSource({0.25}); });
  ASSERT_THAT(h.Handle("flaky", [](JobContext&) { return Status::Unavailable("503"); }), IsOk());
  Envelope env = MakeJob("flaky");
  BackoffSpec fixed;
  fixed.kind = BackoffKind::kFixed;
  fixed.base_delay = Seconds(7);
  fixed.max_delay = Seconds(7);
  fixed.jitter = JitterKind::kNone;
  env.retry_policy = fixed;
  std::string id = EnqueueOk(h, env);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.Job(id).ready_at - h.clock().Now(), Seconds(7));
}

TEST(JobRunnerTest, HandlerThrowingRuntimeErrorIsAFailedAttempt) {
  Harness h;
  ASSERT_THAT(h.Handle("boom",
                       [](JobContext&) -> Status { throw std::runtime_error("disk on fire"); }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("boom"));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.reason, reason::kUnknownError);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->failure_class, FailureClass::kUnknown);
  EXPECT_THAT(r.last_failure->message, HasSubstr("runtime_error"));
  EXPECT_THAT(r.last_failure->message, HasSubstr("disk on fire"));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kAnomalies, "boom"), 1);
}

TEST(JobRunnerTest, HandlerThrowingAnIntIsAFailedAttempt) {
  Harness h;
  ASSERT_THAT(h.Handle("boom", [](JobContext&) -> Status { throw 42; }), IsOk());
  std::string id = EnqueueOk(h, MakeJob("boom"));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->failure_class, FailureClass::kUnknown);
  EXPECT_THAT(r.last_failure->message, HasSubstr("int"));
}

TEST(JobRunnerTest, ClassifierOfTheJobTypeDecidesTheClassOfThrownExceptions) {
  Harness h;
  HandlerOptions o;
  o.classifier.AddType<std::out_of_range>(FailureClass::kPermanent);
  ASSERT_THAT(h.Handle("lookup", [](JobContext&) -> Status { throw std::out_of_range("no row"); },
                       o),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("lookup"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kPermanentError);
}

TEST(JobRunnerTest, ReturnedStatusCodeDecidesTheClass) {
  Harness h;
  ASSERT_THAT(h.Handle("v", [](JobContext&) { return Status::InvalidArgument("bad amount"); }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("v"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->failure_class, FailureClass::kPermanent);
  EXPECT_EQ(r.last_failure->code, "INVALID_ARGUMENT");
  EXPECT_EQ(r.last_failure->message, "bad amount");
}

TEST(JobRunnerTest, UnknownJobTypeIsDeadLetteredNoHandler) {
  Harness h;
  std::string id = EnqueueOk(h, MakeJob("nobody.handles.this"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kNoHandler);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->failure_class, FailureClass::kPermanent);
}

// --- Timeouts and deadlines ---------------------------------------------------------

TEST(JobRunnerTest, FailureAfterTheDeadlineIsATransientTimeout) {
  Harness h;
  ASSERT_THAT(h.Handle("slow",
                       [&](JobContext& ctx) {
                         h.clock().Advance(Seconds(31));  // Past the 30 s timeout.
                         EXPECT_TRUE(ctx.cancelled());
                         return Status::Cancelled("gave up");
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("slow"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.reason, reason::kTimeout);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->failure_class, FailureClass::kTransient);
  EXPECT_EQ(r.last_failure->code, "timeout");
  EXPECT_EQ(h.metrics().CounterTotal(metric::kTimeouts, "slow"), 1);
}

TEST(JobRunnerTest, SuccessAfterTheDeadlineStands) {
  Harness h;
  ASSERT_THAT(h.Handle("slow",
                       [&](JobContext&) {
                         h.clock().Advance(Seconds(31));
                         return Status::Ok();
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("slow"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
}

TEST(JobRunnerTest, StartByPassedIsDiscardedAndTotalDeadlineDeadLettered) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  Envelope a = MakeJob("t");
  a.start_by = h.clock().Now() + Seconds(10);
  Envelope b = MakeJob("t");
  b.deadline = h.clock().Now() + Seconds(10);
  std::string ida = EnqueueOk(h, a);
  std::string idb = EnqueueOk(h, b);
  h.clock().Advance(Seconds(11));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(h.StatusOf(ida), JobStatus::kDiscarded);
  EXPECT_EQ(h.Job(ida).reason, reason::kStartByPassed);
  EXPECT_EQ(h.StatusOf(idb), JobStatus::kDeadLettered);
  EXPECT_EQ(h.Job(idb).reason, reason::kTotalDeadlinePassed);
}

TEST(JobRunnerTest, RetryThatWouldEndPastTheTotalDeadlineIsDeadLettered) {
  Harness h([](JobRunnerOptions& o) { o.random = MakeSequenceRandomSource({0.99}); });
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Unavailable("503"); }), IsOk());
  Envelope e = MakeJob("t");
  e.deadline = h.clock().Now() + Millis(500);  // The first backoff is ~0.99 s.
  std::string id = EnqueueOk(h, e);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kDeadLettered);
  EXPECT_EQ(h.Job(id).reason, reason::kTotalDeadlinePassed);
}

// --- Envelopes ------------------------------------------------------------------------

TEST(JobRunnerTest, EnqueueRefusesAnInvalidEnvelopeListingEveryProblem) {
  Harness h;
  Envelope e = MakeJob("ok.type");
  e.max_attempts = -1;
  e.timeout = Seconds(-1);
  auto r = h.Enqueue(e);
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_attempts")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("timeout_seconds")));
  EXPECT_EQ(h.queue().Size(), 0u);
}

// --- Batch enqueue ---------------------------------------------------------------------

TEST(JobRunnerTest, EnqueueBatchPreparesEveryEnvelopeAsEnqueueDoesInOneBackendCall) {
  Harness h;
  RetryPolicy three = h.runner().policies().Default();
  three.max_attempts = 3;
  ASSERT_THAT(h.runner().policies().Override("report.build", three, "reports are cheap to redo"),
              IsOk());
  int runs = 0;
  for (const char* type : {"invoice.generate", "report.build"}) {
    ASSERT_THAT(h.Handle(type,
                         [&](JobContext&) {
                           ++runs;
                           return Status::Ok();
                         }),
                IsOk());
  }
  std::vector<Envelope> batch;
  batch.push_back(MakeJob("invoice.generate"));  // Defaults throughout.
  Envelope given = MakeJob("invoice.generate");
  given.job_id = "job_given";
  given.max_attempts = 7;
  given.attempt = 4;  // A producer's attempt is never trusted.
  given.ttl = Seconds(60);
  batch.push_back(given);
  batch.push_back(MakeJob("report.build"));  // The type's policy decides max_attempts.

  Result<std::vector<EnqueueResult>> r = h.EnqueueBatch(batch);
  ASSERT_THAT(r, IsOk());
  ASSERT_THAT(*r, SizeIs(3));
  EXPECT_EQ(h.faults().Calls(testing::QueueMethod::kEnqueueBatch), 1);
  EXPECT_EQ(h.faults().Calls(testing::QueueMethod::kEnqueue), 0);
  EXPECT_EQ((*r)[1].job_id, "job_given");
  const TimePoint now = h.clock().Now();
  for (const EnqueueResult& e : *r) {
    EXPECT_FALSE(e.duplicate);
    EXPECT_EQ(e.status, JobStatus::kQueued);
    const Envelope stored = h.Job(e.job_id).envelope;
    EXPECT_EQ(stored.job_id.rfind("job_", 0), 0u) << stored.job_id;
    EXPECT_EQ(stored.created_at, now);
    EXPECT_EQ(stored.attempt, 0);
  }
  EXPECT_EQ(h.Job((*r)[0].job_id).envelope.max_attempts, 5);
  EXPECT_EQ(h.Job((*r)[1].job_id).envelope.max_attempts, 7);
  EXPECT_EQ(h.Job((*r)[1].job_id).envelope.expires_at, now + Seconds(60));
  EXPECT_EQ(h.Job((*r)[2].job_id).envelope.max_attempts, 3);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kEnqueued, "invoice.generate"), 2);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kEnqueued, "report.build"), 1);

  EXPECT_EQ(h.RunUntilIdle().value(), 3);
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(h.Job("job_given").envelope.attempt, 1);
}

TEST(JobRunnerTest, EnqueueBatchWithAnInvalidEnvelopeStoresNothingAndNamesEachIndex) {
  Harness h;
  std::vector<Envelope> batch(4, MakeJob("ok.type"));
  batch[1].max_attempts = -1;
  batch[1].timeout = Seconds(-1);
  batch[3].job_type = "bad type!";
  Result<std::vector<EnqueueResult>> r = h.EnqueueBatch(batch);
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("2 of 4 envelopes are invalid")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("index 1 (max_attempts")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("timeout_seconds")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("index 3 (job_type")));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("index 0")));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("index 2")));
  EXPECT_EQ(h.faults().Calls(testing::QueueMethod::kEnqueueBatch), 0);
  EXPECT_EQ(h.queue().Size(), 0u);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kEnqueued), 0);
}

TEST(JobRunnerTest, EnqueueBatchReportsDuplicatesInInputOrder) {
  Harness h;
  Envelope first = MakeJob("email.send");
  first.dedup_key = "email.send:welcome:cus_1";
  const std::string existing = EnqueueOk(h, first);
  std::vector<Envelope> batch;
  batch.push_back(first);  // A duplicate of the job enqueued above.
  Envelope other = MakeJob("email.send");
  other.dedup_key = "email.send:welcome:cus_2";
  batch.push_back(other);
  batch.push_back(other);  // A duplicate of the envelope before it.
  Result<std::vector<EnqueueResult>> r = h.EnqueueBatch(batch);
  ASSERT_THAT(r, IsOk());
  ASSERT_THAT(*r, SizeIs(3));
  EXPECT_TRUE((*r)[0].duplicate);
  EXPECT_EQ((*r)[0].job_id, existing);
  EXPECT_FALSE((*r)[1].duplicate);
  EXPECT_TRUE((*r)[2].duplicate);
  EXPECT_EQ((*r)[2].job_id, (*r)[1].job_id);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kEnqueued, "email.send"), 2);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kDedupHits, "email.send"), 2);
}

TEST(JobRunnerTest, EnqueueBatchReturnsTheBackendErrorAndCountsNothing) {
  Harness h;
  h.faults().FailNext(testing::QueueMethod::kEnqueueBatch, Status::Unavailable("store down"));
  std::vector<Envelope> batch(2, MakeJob("t"));
  EXPECT_THAT(h.EnqueueBatch(batch), StatusIs(StatusCode::kUnavailable, HasSubstr("store down")));
  EXPECT_EQ(h.queue().Size(), 0u);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kEnqueued), 0);
  // An empty batch is not an error and calls nothing.
  Result<std::vector<EnqueueResult>> empty = h.EnqueueBatch({});
  ASSERT_THAT(empty, IsOk());
  EXPECT_THAT(*empty, SizeIs(0));
  EXPECT_EQ(h.faults().Calls(testing::QueueMethod::kEnqueueBatch), 1);
}

TEST(JobRunnerTest, InvalidJsonEnvelopeIsDeadLetteredWithTheRawInput) {
  Harness h;
  const std::string raw = R"({"job_type": "x", "max_attempts": "five", )";
  auto r = h.EnqueueJson(raw);
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("dead-lettered as")));
  std::vector<DlqEntry> dlq = h.DeadLetters();
  ASSERT_THAT(dlq, SizeIs(1));
  EXPECT_EQ(dlq[0].reason, reason::kInvalidEnvelope);
  EXPECT_EQ(dlq[0].raw_envelope, raw);
  EXPECT_THAT(r.status().message(), HasSubstr(dlq[0].job_id));
  ASSERT_TRUE(dlq[0].last_failure.has_value());
  EXPECT_EQ(dlq[0].last_failure->failure_class, FailureClass::kPermanent);
  EXPECT_EQ(h.metrics().Counter(metric::kDeadLettered,
                                MetricLabels{{}, {}, reason::kInvalidEnvelope, {}}),
            1);
}

TEST(JobRunnerTest, ValidJsonEnvelopeIsEnqueuedWithTheReferenceFields) {
  Harness h;
  std::string seen_payload;
  ASSERT_THAT(h.Handle("invoice.generate",
                       [&](JobContext& ctx) {
                         seen_payload = ctx.payload();
                         EXPECT_EQ(ctx.envelope().trace_id, "trc_abcd1234");
                         return Status::Ok();
                       }),
              IsOk());
  auto r = h.EnqueueJson(R"({
    "job_id": "job_01HXYZ", "job_type": "invoice.generate", "tenant_id": "tenant_123",
    "payload": { "order_id": "ord_987" }, "idempotency_key": "invoice.generate:ord_987",
    "attempt": 3, "max_attempts": 5, "trace_id": "trc_abcd1234",
    "timeout_seconds": 30, "visibility_timeout_seconds": 45 })");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->job_id, "job_01HXYZ");
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf("job_01HXYZ"), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job("job_01HXYZ").envelope.attempt, 1);  // The producer's 3 is not trusted.
  EXPECT_THAT(seen_payload, HasSubstr("ord_987"));
}

TEST(JobRunnerTest, InvalidEnvelopeWrittenStraightToTheBackendIsDeadLetteredAtDelivery) {
  Harness h;
  Envelope e = MakeJob("x");
  PrepareForEnqueue(e, h.clock().Now());
  e.timeout = Seconds(60);  // Not below the 45 s visibility timeout: invalid.
  ASSERT_THAT(h.queue().Enqueue(e, {}), IsOk());
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(e.job_id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kInvalidEnvelope);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_THAT(r.last_failure->message, HasSubstr("visibility_timeout_seconds"));
}

// --- Handler-driven outcomes ----------------------------------------------------------

TEST(JobRunnerTest, SnoozeReschedulesWithoutSpendingAnAttempt) {
  Harness h;
  std::vector<int> attempts;
  ASSERT_THAT(h.Handle("poll",
                       [&](JobContext& ctx) {
                         attempts.push_back(ctx.attempt());
                         if (attempts.size() == 1) return ctx.Snooze(Seconds(30));
                         return Status::Ok();
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("poll"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.reason, reason::kSnoozed);
  EXPECT_EQ(r.envelope.attempt, 0);
  EXPECT_EQ(r.ready_at, h.clock().Now() + Seconds(30));
  EXPECT_EQ(h.AdvanceToNextRetry(), Seconds(30));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(attempts, (std::vector<int>{1, 1}));
}

TEST(JobRunnerTest, DiscardFromTheHandlerKeepsItsReason) {
  Harness h;
  ASSERT_THAT(h.Handle("price.update",
                       [](JobContext& ctx) { return ctx.Discard("superseded_by_newer_event"); }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("price.update"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDiscarded);
  EXPECT_EQ(r.reason, "superseded_by_newer_event");
  EXPECT_TRUE(h.DeadLetters().empty());
  EXPECT_EQ(h.metrics().Counter(metric::kDiscarded, MetricLabels{"price.update", "default",
                                                                 "superseded_by_newer_event", {}}),
            1);
}

TEST(JobRunnerTest, CheckpointFromAHeartbeatIsVisibleToTheNextAttempt) {
  Harness h;
  std::vector<std::string> seen;
  ASSERT_THAT(h.Handle("export",
                       [&](JobContext& ctx) {
                         seen.push_back(ctx.checkpoint());
                         if (ctx.attempt() == 1) {
                           EXPECT_THAT(ctx.Heartbeat(R"({"page":3})"), IsOk());
                           return Status::Unavailable("warehouse timeout");
                         }
                         return Status::Ok();
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("export"));
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(seen, (std::vector<std::string>{"", R"({"page":3})"}));
}

TEST(JobRunnerTest, TransactionalEffectRunsWithTheSuccessfulCompletion) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("tx",
                       [&](JobContext& ctx) {
                         ctx.SetTransactionalEffect([&](void* native) {
                           EXPECT_EQ(native, nullptr);  // In memory.
                           ++effects;
                           return Status::Ok();
                         });
                         return Status::Ok();
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("tx"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
}

TEST(JobRunnerTest, IdempotentSkipReturnsTheStoredResult) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext& ctx) {
                         ++effects;
                         ctx.SetResult("ch_1");
                         return Status::Ok();
                       }),
              IsOk());
  Envelope a = MakeJob("charge");
  a.idempotency_key = "charge:ord_1";
  std::string ida = EnqueueOk(h, a);
  std::string idb = EnqueueOk(h, a);  // Same key, new job id.
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(h.Job(ida).reason, reason::kSucceeded);
  JobRecord b = h.Job(idb);
  EXPECT_EQ(b.status, JobStatus::kSucceeded);
  EXPECT_EQ(b.reason, reason::kIdempotentSkip);
  EXPECT_EQ(b.result, "ch_1");
  EXPECT_EQ(h.metrics().CounterTotal(metric::kIdempotentSkips, "charge"), 1);
}

TEST(JobRunnerTest, FailureReleasesTheIdempotencyClaimForTheRetry) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext&) {
                         return ++calls == 1 ? Status::Unavailable("503") : Status::Ok();
                       }),
              IsOk());
  Envelope a = MakeJob("charge");
  a.idempotency_key = "charge:ord_2";
  std::string id = EnqueueOk(h, a);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  auto rec = h.idempotency().Get("charge:ord_2");
  ASSERT_THAT(rec, IsOk());
  EXPECT_FALSE(rec->has_value());  // Released: the retry can claim it.
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
}

// A job leased in the same batch as a slow one must not lose its lease
// while it waits: it is renewed before it starts.
TEST(JobRunnerTest, JobWaitingBehindASlowOneInItsBatchKeepsItsLease) {
  Harness h([](JobRunnerOptions& o) { o.dequeue_batch = 2; });
  std::vector<int> order;
  ASSERT_THAT(h.Handle("t",
                       [&](JobContext& ctx) {
                         order.push_back(std::stoi(ctx.payload()));
                         if (ctx.payload() == "1") h.clock().Advance(Seconds(40));  // Lease: 45 s.
                         return Status::Ok();
                       }),
              IsOk());
  std::string a = EnqueueOk(h, MakeJob("t", "1"));
  std::string b = EnqueueOk(h, MakeJob("t", "2"));
  EXPECT_EQ(h.RunUntilIdle().value(), 2);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_GE(h.faults().Calls(testing::QueueMethod::kRenew), 1);
  h.clock().Advance(Seconds(10));  // Past b's original lease.
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(a), JobStatus::kSucceeded);
  EXPECT_EQ(h.StatusOf(b), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(b).lease_recoveries, 0);
  EXPECT_EQ(h.Job(b).envelope.attempt, 1);
}

// --- Pause / Resume ---------------------------------------------------------------------

TEST(JobRunnerTest, PausedTypeStaysQueuedUntouchedUntilResumed) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("email.send", [&](JobContext&) { ++calls; return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.Handle("other", [&](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.runner().Pause("email.send"), IsOk());
  std::string id = EnqueueOk(h, MakeJob("email.send"));
  std::string other = EnqueueOk(h, MakeJob("other"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(h.StatusOf(other), JobStatus::kSucceeded);
  // The store's lease step passed it over: never leased, nothing spent.
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kQueued);
  EXPECT_EQ(r.epoch, 0);
  EXPECT_EQ(r.envelope.attempt, 0);
  h.clock().Advance(Seconds(60));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(calls, 0);
  ASSERT_THAT(h.runner().Resume("email.send"), IsOk());
  ASSERT_THAT(h.runner().Resume("email.send"), IsOk()) << "resuming twice is fine";
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).envelope.attempt, 1);
}

// --- Logs ---------------------------------------------------------------------------------

TEST(JobRunnerTest, OneTextLogLinePerTransitionCarriesTheJobFields) {
  CapturedLogger capture("jobpact.test.text");
  Harness h([](JobRunnerOptions& o) {
    o.logger_name = "jobpact.test.text";
    o.log_level = LogLevel::kInfo;
  });
  int calls = 0;
  ASSERT_THAT(h.Handle("invoice.generate",
                       [&](JobContext& ctx) {
                         ctx.Log(LogLevel::kInfo, "rendering the pdf");
                         return ++calls == 1 ? Status::Unavailable("upstream 503")
                                             : Status::Ok();
                       }),
              IsOk());
  Envelope e = MakeJob("invoice.generate");
  e.trace_id = "trc_abcd1234";
  e.idempotency_key = "invoice.generate:ord_987";
  std::string id = EnqueueOk(h, e);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());

  std::vector<std::string> transitions;
  bool handler_line = false;
  for (const std::string& line : capture.Lines()) {
    if (line.find("handler job_id=" + id) != std::string::npos &&
        line.find("message=\"rendering the pdf\"") != std::string::npos) {
      handler_line = true;
    }
    if (line.find("transition job_id=" + id) != std::string::npos) transitions.push_back(line);
  }
  EXPECT_TRUE(handler_line);
  ASSERT_THAT(transitions, SizeIs(2));  // running->retry_scheduled, running->succeeded.
  EXPECT_THAT(transitions[0], HasSubstr("job_type=invoice.generate attempt=1 max_attempts=5 "
                                        "trace_id=trc_abcd1234 "
                                        "idempotency_key=invoice.generate:ord_987"));
  EXPECT_THAT(transitions[0], HasSubstr("from=running to=retry_scheduled reason=transient_error "
                                        "error_class=transient error_code=UNAVAILABLE "
                                        "error_message=\"upstream 503\""));
  EXPECT_THAT(transitions[1], HasSubstr("attempt=2"));
  EXPECT_THAT(transitions[1], HasSubstr("to=succeeded reason=succeeded"));
}

TEST(JobRunnerTest, ARetryBudgetDeferralIsLoggedOnItsTransitionLine) {
  CapturedLogger capture("jobpact.test.deferral");
  Harness h([](JobRunnerOptions& o) {
    o.logger_name = "jobpact.test.deferral";
    o.log_level = LogLevel::kInfo;
    o.retry_budget.percent = 0;
    o.retry_budget.min_retries_per_second = 0.1;  // One retry per 10 s window.
  });
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Unavailable("upstream 503"); }),
              IsOk());
  const std::string first = EnqueueOk(h, MakeJob("t"));
  const std::string second = EnqueueOk(h, MakeJob("t"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  std::vector<std::string> lines;
  for (const std::string& line : capture.Lines()) {
    if (line.find("transition job_id=" + second) != std::string::npos &&
        line.find("to=retry_scheduled") != std::string::npos) {
      lines.push_back(line);
    }
  }
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0], HasSubstr("from=running to=retry_scheduled reason=retry_budget_deferred "
                                  "error_class=transient error_code=UNAVAILABLE "
                                  "error_message=\"upstream 503\" delay_ms=10000"));
  EXPECT_EQ(h.Job(first).history.back().reason, reason::kTransientError);
}

TEST(JobRunnerTest, LeaseRecoveriesLogOneTransitionLinePerJob) {
  CapturedLogger capture("jobpact.test.recovery");
  Harness h([](JobRunnerOptions& o) {
    o.logger_name = "jobpact.test.recovery";
    o.log_level = LogLevel::kInfo;
    o.max_lease_recoveries = 1;
  });
  ASSERT_THAT(h.Handle("video.transcode", [](JobContext&) { return Status::Ok(); }), IsOk());
  Envelope e = MakeJob("video.transcode");
  e.trace_id = "trc_lease1";
  e.idempotency_key = "video.transcode:v1";
  std::string id = EnqueueOk(h, e);
  h.faults().FailNext(testing::QueueMethod::kComplete, Status::Unavailable("worker killed"), 100);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());  // Recovery 1: back to the queue, dies again.
  ASSERT_THAT(h.AdvanceAndRun(Seconds(46)), IsOk());  // Recovery 2: over the cap.
  h.faults().Clear();
  ASSERT_EQ(h.StatusOf(id), JobStatus::kDeadLettered);

  std::vector<std::string> transitions;
  for (const std::string& line : capture.Lines()) {
    if (line.find("transition job_id=" + id) != std::string::npos) transitions.push_back(line);
  }
  ASSERT_THAT(transitions, SizeIs(2));
  EXPECT_THAT(transitions[0], HasSubstr("job_type=video.transcode attempt=1 max_attempts=5 "
                                        "trace_id=trc_lease1 "
                                        "idempotency_key=video.transcode:v1"));
  EXPECT_THAT(transitions[0], HasSubstr("from=running to=queued reason=lease_expired"));
  EXPECT_THAT(transitions[1], HasSubstr("attempt=2"));
  EXPECT_THAT(transitions[1],
              HasSubstr("from=running to=dead_lettered reason=lease_expired_repeatedly"));
}

TEST(JobRunnerTest, JsonLogsWriteOneObjectPerLine) {
  CapturedLogger capture("jobpact.test.json");
  Harness h([](JobRunnerOptions& o) {
    o.logger_name = "jobpact.test.json";
    o.log_level = LogLevel::kInfo;
    o.json_logs = true;
  });
  ASSERT_THAT(h.Handle("v", [](JobContext&) { return Status::InvalidArgument("bad \"amount\""); }),
              IsOk());
  Envelope e = MakeJob("v");
  e.trace_id = "trc_1";
  std::string id = EnqueueOk(h, e);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());

  int parsed = 0;
  bool found = false;
  for (const std::string& line : capture.Lines()) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line;
    ++parsed;
    if (j.value("event", "") == "transition" && j.value("job_id", "") == id) {
      found = true;
      EXPECT_EQ(j["job_type"], "v");
      EXPECT_EQ(j["attempt"], 1);
      EXPECT_EQ(j["max_attempts"], 5);
      EXPECT_EQ(j["trace_id"], "trc_1");
      EXPECT_FALSE(j.contains("idempotency_key"));
      EXPECT_EQ(j["from"], "running");
      EXPECT_EQ(j["to"], "dead_lettered");
      EXPECT_EQ(j["reason"], "permanent_error");
      EXPECT_EQ(j["error_class"], "permanent");
      EXPECT_EQ(j["error_code"], "INVALID_ARGUMENT");
      EXPECT_EQ(j["error_message"], "bad \"amount\"");
      EXPECT_EQ(j["level"], "error");
      EXPECT_EQ(j["ts"], FormatRfc3339(h.clock().Now()));
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace jobpact
