// The code of docs/testing.md, compiled and run.
//
// Every ```cpp block of docs/testing.md is copied from a region of this file
// between "// [docs:<name>]" and "// [/docs:<name>]" markers, and the test
// DocsTestingMd.EveryCodeBlockIsCompiledHere checks that each block still
// appears here verbatim (modulo indentation), so the page cannot drift from
// code that compiles and passes.
#include <memory>

#include "jobpact/testing/backend_contract.h"
#include "tests/docs/doc_blocks.h"

// [docs:includes]
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobpact/in_memory.h"
#include "jobpact/job_runner.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"

namespace {

using ::jobpact::JobContext;
using ::jobpact::JobStatus;
using ::jobpact::Status;
using ::jobpact::StatusCode;
using ::jobpact::testing::Harness;
using ::jobpact::testing::IsOk;
using ::jobpact::testing::QueueMethod;
using ::jobpact::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace metric = ::jobpact::metric;
// [/docs:includes]

TEST(HarnessTest, ConfigureTheRunner) {
  // [docs:configure]
  Harness h([](jobpact::JobRunnerOptions& o) {
    o.random = jobpact::MakeSequenceRandomSource({0.5});  // exact jitter
    o.log_level = jobpact::LogLevel::kOff;                // quiet
  });
  ASSERT_THAT(h.init_status(), IsOk());  // not OK if Create refused the options
  // [/docs:configure]
  EXPECT_EQ(h.runner().options().log_level, jobpact::LogLevel::kOff);
  Harness refused([](jobpact::JobRunnerOptions& o) { o.workers = 0; });
  EXPECT_THAT(refused.init_status(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("workers")));
  EXPECT_THAT(refused.Enqueue("t"), StatusIs(StatusCode::kInvalidArgument));
}

// [docs:invoice_handler]
// The code under test: an ordinary handler calling a billing API. The fake
// answers 503 `failures_left` times, then issues invoices.
struct FakeBilling {
  int failures_left = 0;
  int invoices_issued = 0;
};

jobpact::Handler MakeInvoiceHandler(FakeBilling& billing) {
  return [&billing](JobContext& ctx) -> Status {
    if (billing.failures_left > 0) {
      --billing.failures_left;
      return Status::Unavailable("billing answered 503");  // Transient.
    }
    ++billing.invoices_issued;
    ctx.SetResult("inv_" + std::to_string(billing.invoices_issued));
    return Status::Ok();
  };
}

// A test helper: the reasons of a job's history, oldest first.
std::vector<std::string> Reasons(const jobpact::JobRecord& job) {
  std::vector<std::string> out;
  for (const jobpact::Transition& t : job.history) out.push_back(t.reason);
  return out;
}
// [/docs:invoice_handler]

// [docs:invoice_retries]
TEST(InvoiceHandlerTest, TwoTransientFailuresThenSuccess) {
  // Pin the jitter sample: full jitter then waits exactly half the ceiling.
  Harness h(
      [](jobpact::JobRunnerOptions& o) { o.random = jobpact::MakeSequenceRandomSource({0.5}); });
  ASSERT_THAT(h.init_status(), IsOk());
  FakeBilling billing;
  billing.failures_left = 2;
  ASSERT_THAT(h.Handle("invoice.generate", MakeInvoiceHandler(billing)), IsOk());

  jobpact::Result<jobpact::EnqueueResult> enqueued =
      h.Enqueue("invoice.generate", R"({"order_id":"ord_987"})");
  ASSERT_THAT(enqueued, IsOk());
  const std::string id = enqueued->job_id;

  EXPECT_EQ(h.RunUntilIdle().value(), 1);  // Attempt 1: 503.
  EXPECT_EQ(h.StatusOf(id), JobStatus::kRetryScheduled);
  EXPECT_EQ(h.Job(id).last_failure->code, "UNAVAILABLE");
  EXPECT_EQ(h.RunUntilIdle().value(), 0);                   // Nothing is due before the retry time.
  EXPECT_EQ(h.AdvanceToNextRetry(), jobpact::Millis(500));  // 0.5 x 1 s
  EXPECT_EQ(h.RunUntilIdle().value(), 1);                   // Attempt 2: 503.
  EXPECT_EQ(h.AdvanceToNextRetry(), jobpact::Seconds(1));   // 0.5 x 2 s
  EXPECT_EQ(h.RunUntilIdle().value(), 1);                   // Attempt 3: success.

  jobpact::JobRecord job = h.Job(id);
  EXPECT_EQ(job.status, JobStatus::kSucceeded);
  EXPECT_EQ(job.envelope.attempt, 3);
  EXPECT_EQ(job.result, "inv_1");
  EXPECT_EQ(billing.invoices_issued, 1);
  EXPECT_THAT(Reasons(job), ElementsAre("enqueued", "delivered", "transient_error", "delivered",
                                        "transient_error", "delivered", "succeeded"));

  const jobpact::InMemoryMetricsSink& m = h.metrics();
  EXPECT_EQ(m.CounterTotal(metric::kEnqueued, "invoice.generate"), 1);
  EXPECT_EQ(m.CounterTotal(metric::kStarted, "invoice.generate"), 3);
  EXPECT_EQ(m.Counter(metric::kRetries, {"invoice.generate", "default", {}, "transient"}), 2);
  EXPECT_EQ(m.Counter(metric::kSucceeded, {"invoice.generate", "default", "succeeded", {}}), 1);
  EXPECT_EQ(m.Histogram(metric::kAttempts, "invoice.generate").max, 3);
  EXPECT_EQ(m.Histogram(metric::kDuration, "invoice.generate").count, 3);
}
// [/docs:invoice_retries]

// [docs:crash_between_effect_and_ack]
TEST(InvoiceHandlerTest, CrashBetweenEffectAndAckRunsTheEffectOnce) {
  Harness h;
  FakeBilling billing;
  ASSERT_THAT(h.Handle("invoice.generate", MakeInvoiceHandler(billing)), IsOk());
  jobpact::Envelope env;
  env.job_type = "invoice.generate";
  env.payload = R"({"order_id":"ord_987"})";
  env.idempotency_key = "invoice.generate:ord_987";
  const std::string id = h.Enqueue(env).value().job_id;

  // The handler runs and the runner records the idempotent result, then the
  // ack (QueueBackend::Complete) is lost: as if the process died right there.
  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("worker crashed"));
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(billing.invoices_issued, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kRunning);  // Nobody acked it.

  // The lease (visibility timeout, 45 s) runs out; the next maintenance pass
  // takes the job back and it is delivered again, as attempt 2.
  ASSERT_THAT(h.AdvanceAndRun(jobpact::Seconds(46)), IsOk());

  jobpact::JobRecord job = h.Job(id);
  EXPECT_EQ(billing.invoices_issued, 1);  // The effect happened once.
  EXPECT_EQ(job.status, JobStatus::kSucceeded);
  EXPECT_EQ(job.reason, "idempotent_skip");
  EXPECT_EQ(job.result, "inv_1");  // The stored result of attempt 1.
  EXPECT_EQ(job.envelope.attempt, 2);
  EXPECT_EQ(job.lease_recoveries, 1);
  EXPECT_THAT(Reasons(job), ElementsAre("enqueued", "delivered", "lease_expired", "delivered",
                                        "idempotent_skip"));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kIdempotentSkips, "invoice.generate"), 1);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kLeaseRecoveries), 1);
}

TEST(InvoiceHandlerTest, WithoutAnIdempotencyKeyTheSameCrashRunsTheEffectTwice) {
  Harness h;
  FakeBilling billing;
  ASSERT_THAT(h.Handle("invoice.generate", MakeInvoiceHandler(billing)), IsOk());
  const std::string id = h.Enqueue("invoice.generate", R"({"order_id":"ord_987"})").value().job_id;
  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("worker crashed"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  ASSERT_THAT(h.AdvanceAndRun(jobpact::Seconds(46)), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(billing.invoices_issued, 2);  // Two invoices for one order.
}
// [/docs:crash_between_effect_and_ack]

// [docs:store_down]
TEST(FaultInjectionTest, TheStoreIsDown) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  const std::string id = h.Enqueue("t").value().job_id;
  h.faults().FailNext(QueueMethod::kDequeue, Status::Unavailable("redis down"));
  EXPECT_THAT(h.RunUntilIdle(), StatusIs(StatusCode::kUnavailable, HasSubstr("redis down")));
  EXPECT_THAT(h.last_error(), StatusIs(StatusCode::kUnavailable, HasSubstr("redis down")));
  EXPECT_EQ(h.StatusOf(id), JobStatus::kQueued);  // Nothing changed.
  EXPECT_EQ(h.RunUntilIdle().value(), 1);         // The store is back.
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.faults().Calls(QueueMethod::kDequeue), 3);  // Failed, took the job, found none.
}
// [/docs:store_down]

// [docs:reply_lost]
TEST(FaultInjectionTest, TheAckIsWrittenButTheReplyIsLost) {
  Harness h;
  int calls = 0;
  ASSERT_THAT(h.Handle("t",
                       [&](JobContext&) {
                         ++calls;
                         return Status::Ok();
                       }),
              IsOk());
  const std::string id = h.Enqueue("t").value().job_id;
  h.faults().FailNextAfterApplying(QueueMethod::kComplete, Status::Unavailable("timeout"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);  // The store has the outcome.
  ASSERT_THAT(h.AdvanceAndRun(jobpact::Seconds(46)), IsOk());
  EXPECT_EQ(calls, 1);  // And nothing runs it again.
}
// [/docs:reply_lost]

// [docs:deliver_twice]
TEST(FaultInjectionTest, TheBrokerDeliversTwice) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("email.send",
                       [&](JobContext&) {
                         ++effects;
                         return Status::Ok();
                       }),
              IsOk());
  jobpact::Envelope env;
  env.job_type = "email.send";
  env.idempotency_key = "email.send:welcome:cus_1";
  const std::string id = h.Enqueue(env).value().job_id;
  h.faults().DeliverTwice();
  EXPECT_EQ(h.RunUntilIdle().value(), 2);  // Two deliveries of one lease...
  EXPECT_EQ(effects, 1);           // ...one effect.
  EXPECT_EQ(h.Job(id).reason, "succeeded");
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions), 1);  // The copy was fenced.
}
// [/docs:deliver_twice]

// [docs:stall_before_ack]
TEST(FaultInjectionTest, TheWorkerStallsBeforeItsAck) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext&) {
                         ++effects;
                         return Status::Ok();
                       }),
              IsOk());
  jobpact::Envelope env;
  env.job_type = "charge";
  env.idempotency_key = "charge:ord_2";
  const std::string id = h.Enqueue(env).value().job_id;
  // Just before the first worker's ack: its lease expires and a second
  // worker (a nested RunUntilIdle) takes the job over.
  h.faults().BeforeNext(QueueMethod::kComplete, [&] {
    h.clock().Advance(jobpact::Seconds(46));
    EXPECT_THAT(h.RunUntilIdle(), IsOk());
  });
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(h.Job(id).reason, "idempotent_skip");  // The second worker's outcome stands.
  EXPECT_EQ(h.Job(id).epoch, 2);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions), 1);  // The late ack.
}
// [/docs:stall_before_ack]

// [docs:expire_lease]
TEST(FaultInjectionTest, ExpireLeaseWithoutMovingTheClock) {
  Harness h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  const std::string id = h.Enqueue("t").value().job_id;
  h.faults().FailNext(QueueMethod::kComplete, Status::Unavailable("crash"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  ASSERT_THAT(h.ExpireLease(id), IsOk());  // As if its worker died.
  ASSERT_THAT(h.RunUntilIdle(), IsOk());   // Maintenance recovers it; it runs again.
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).lease_recoveries, 1);
}
// [/docs:expire_lease]

// [docs:matchers]
TEST(MatchersTest, AssertTheSpecificError) {
  Harness h;
  auto ok_handler = [](JobContext&) { return Status::Ok(); };
  EXPECT_THAT(h.Handle("report.build", ok_handler), IsOk());
  EXPECT_THAT(h.Handle("report.build", ok_handler), StatusIs(StatusCode::kAlreadyExists));
  jobpact::Envelope env;
  env.job_type = "report.build";
  env.max_attempts = -1;
  EXPECT_THAT(h.Enqueue(env), StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_attempts")));
  EXPECT_THAT(h.queue().GetDeadLetter("job_nope"), StatusIs(StatusCode::kNotFound));
}
// [/docs:matchers]

// [docs:manual_clock]
TEST(ManualClockTest, DriveARunnerByHand) {
  auto clock = std::make_shared<jobpact::testing::ManualClock>();  // 2026-01-01T00:00:00Z
  auto queue = std::make_shared<jobpact::InMemoryQueueBackend>(clock);
  jobpact::JobRunnerOptions options;
  options.clock = clock;  // Everything must share the one clock.
  options.queue = queue;
  options.locks = std::make_shared<jobpact::InMemoryLockStore>(clock);
  options.idempotency = std::make_shared<jobpact::InMemoryIdempotencyStore>(clock);
  options.log_level = jobpact::LogLevel::kOff;
  auto runner = jobpact::JobRunner::Create(options).value();
  ASSERT_THAT(runner->Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());

  jobpact::Envelope env;
  env.job_type = "t";
  env.scheduled_at = clock->Now() + jobpact::Seconds(30);
  const std::string id = runner->Enqueue(env).value().job_id;
  EXPECT_THAT(runner->RunUntilIdle(), IsOk());  // Not due yet.
  EXPECT_EQ(queue->Get(id)->status, JobStatus::kQueued);
  clock->Advance(jobpact::Seconds(30));
  EXPECT_EQ(runner->RunUntilIdle().value(), 1);
  EXPECT_EQ(queue->Get(id)->status, JobStatus::kSucceeded);
}
// [/docs:manual_clock]

// [docs:idempotency_record_fails]
TEST(FaultInjectionTest, CrashBeforeTheIdempotencyRecordIsWritten) {
  Harness h;
  int effects = 0;
  ASSERT_THAT(h.Handle("charge",
                       [&](JobContext&) {
                         ++effects;
                         return Status::Ok();
                       }),
              IsOk());
  jobpact::Envelope env;
  env.job_type = "charge";
  env.idempotency_key = "charge:ord_3";
  const std::string id = h.Enqueue(env).value().job_id;
  h.idempotency_faults().FailNext(jobpact::testing::IdempotencyMethod::kComplete,
                                  Status::Unavailable("timeout"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(effects, 1);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kRetryScheduled);  // Not acked as succeeded.
  EXPECT_EQ(h.Job(id).last_failure->code, "idempotency_record_failed");
  // The claim expires with its TTL; the retry runs again.
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(effects, 2);  // At least once.
}
// [/docs:idempotency_record_fails]

// The conformance suite on "your" backend: the reference one stands in for
// it, so the page's line is compiled and the whole suite runs through it.
using MyQueueBackend = jobpact::InMemoryQueueBackend;

}  // namespace

// [docs:contract_suite]
namespace {

// A fresh, empty set of stores on the suite's clock, for every test.
jobpact::testing::BackendSet MakeMyStore(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  return {std::make_shared<MyQueueBackend>(clock),
          std::make_shared<jobpact::InMemoryLockStore>(clock),
          std::make_shared<jobpact::InMemoryIdempotencyStore>(clock)};
}

}  // namespace

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(MyStore,
                                     jobpact::testing::BackendFactory{"my_store", MakeMyStore});
// [/docs:contract_suite]

namespace {

// --- Keeps docs/testing.md honest ----------------------------------------------

TEST(DocsTestingMd, EveryCodeBlockIsCompiledHere) {
  const std::string root =
      jobpact::doc_blocks::SourceRoot();
  jobpact::doc_blocks::ExpectEveryCodeBlockIn(root + "docs/testing.md", root + "tests/docs/docs_testing_example_test.cc", 10);
}

}  // namespace
