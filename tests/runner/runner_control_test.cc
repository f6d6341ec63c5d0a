// The runner obeys the operator side of its store (SPEC 10): a pause from
// another runner holds, a job leased just before a pause is given back, a
// route sends a failure class straight to the DLQ, an operator's cancel
// stops a running handler at its heartbeat and discards a job that has not
// run, and the runner publishes its retry policies for operator tools.
// ManualClock, no threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/job_runner.h"
#include "jobpact/operations.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using test_util::EnqueueOk;
using test_util::MakeJob;
using testing::Harness;
using testing::IsOk;
using testing::ManualClock;

DlqAction Who(std::string actor, std::string why) {
  DlqAction a;
  a.actor = std::move(actor);
  a.reason = std::move(why);
  return a;
}

TEST(RunnerControlTest, APauseGivenByOneRunnerHoldsInAnotherOnTheSameStore) {
  auto clock = std::make_shared<ManualClock>();
  BackendBundle shared = InMemoryBackend(clock);
  auto make = [&](std::string id) {
    JobRunnerOptions o;
    o.backend = shared;
    o.clock = clock;
    o.runner_id = std::move(id);
    o.log_level = LogLevel::kOff;
    return JobRunner::Create(o);
  };
  auto a = make("runner-a");
  auto b = make("runner-b");
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  int runs = 0;
  ASSERT_THAT((*b)->Handle("email.send", [&](JobContext&) { ++runs; return Status::Ok(); }),
              IsOk());
  Envelope env = MakeJob("email.send");
  ASSERT_THAT((*b)->Enqueue(env).status(), IsOk());

  ASSERT_THAT((*a)->Pause("email.send"), IsOk());
  ASSERT_THAT((*b)->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(runs, 0);
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState s, shared.admin->ReadControl());
  ASSERT_THAT(s.rules, SizeIs(1));
  EXPECT_EQ(s.rules[0].actor, "runner-a") << "the audit names the runner that paused";

  ASSERT_THAT((*a)->Resume("email.send"), IsOk());
  ASSERT_THAT((*b)->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(runs, 1);
}

TEST(RunnerControlTest, AJobLeasedJustBeforeAPauseIsGivenBackWithoutSpendingAnAttempt) {
  Harness h;
  std::vector<std::string> ran;
  // Both jobs come in one dequeue batch; the first one's handler pauses the
  // type, as an operator elsewhere could at that moment.
  ASSERT_THAT(h.Handle("report.build",
                       [&](JobContext& ctx) {
                         ran.push_back(ctx.envelope().job_id);
                         return h.runner().Pause("report.build");
                       }),
              IsOk());
  std::string first = EnqueueOk(h, MakeJob("report.build"));
  std::string second = EnqueueOk(h, MakeJob("report.build"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  ASSERT_THAT(ran, SizeIs(1));
  const std::string& held = ran[0] == first ? second : first;
  JobRecord r = h.Job(held);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.reason, reason::kPaused);
  EXPECT_EQ(r.envelope.attempt, 0);
}

TEST(RunnerControlTest, ARouteSendsTheFailureClassOfTheTypeStraightToTheDlq) {
  Harness h;
  int unknown_runs = 0, transient_runs = 0;
  ASSERT_THAT(h.Handle("pdf.render",
                       [&](JobContext&) -> Status {
                         ++unknown_runs;
                         throw std::runtime_error("renderer crashed");
                       }),
              IsOk());
  ASSERT_THAT(h.Handle("mail.send",
                       [&](JobContext&) {
                         ++transient_runs;
                         return Status::Unavailable("relay busy");
                       }),
              IsOk());
  Result<std::unique_ptr<Operations>> ops = Operations::Open(h.runner().options().backend);
  ASSERT_THAT(ops.status(), IsOk());
  ASSERT_THAT((*ops)->RouteToDlq("pdf.render", FailureClass::kUnknown, "alice",
                                 "INC-5: stop retrying the crashing renderer"),
              IsOk());
  ASSERT_THAT((*ops)->RouteToDlq("mail.send", FailureClass::kPermanent, "alice", "not this class"),
              IsOk());
  std::string pdf = EnqueueOk(h, MakeJob("pdf.render"));
  std::string mail = EnqueueOk(h, MakeJob("mail.send"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(unknown_runs, 1);
  JobRecord r = h.Job(pdf);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kRoutedToDlq);
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_EQ(r.last_failure->failure_class, FailureClass::kUnknown);
  EXPECT_EQ(h.StatusOf(mail), JobStatus::kRetryScheduled) << "other classes retry as usual";
}

TEST(RunnerControlTest, AControlStateThatCannotBeReadLeavesTheLastOneInForce) {
  // Fail static: a store that cannot be read must not lift a route (or a
  // pause) the runner has already seen.
  Harness h;
  int runs = 0;
  ASSERT_THAT(h.Handle("pdf.render",
                       [&](JobContext&) -> Status {
                         ++runs;
                         throw std::runtime_error("renderer crashed");
                       }),
              IsOk());
  ControlRule route;
  route.kind = ControlKind::kRouteToDlq;
  route.subject = "pdf.render";
  route.failure_class = FailureClass::kUnknown;
  route.actor = "alice";
  route.reason = "stop retrying";
  ASSERT_THAT(h.queue().SetControl(route), IsOk());
  ASSERT_THAT(h.RunUntilIdle(), IsOk());  // The runner reads the route.
  // The route is cleared in the store, but the runner cannot read it again.
  ASSERT_THAT(h.queue().ClearControl({ControlKind::kRouteToDlq, "pdf.render",
                                      FailureClass::kUnknown},
                                     "alice", "done"),
              IsOk());
  h.faults().FailNext(QueueMethod::kReadControl, Status::Unavailable("store down"), 100);
  std::string id = EnqueueOk(h, MakeJob("pdf.render"));
  h.clock().Advance(Seconds(5));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(h.Job(id).reason, reason::kRoutedToDlq) << "the last state read stands";
}

TEST(RunnerControlTest, AnOperatorCancelStopsTheRunningHandlerAtItsHeartbeat) {
  Harness h;
  bool saw_cancel = false;
  int runs = 0;
  ASSERT_THAT(h.Handle("export.build",
                       [&](JobContext& ctx) -> Status {
                         ++runs;
                         // Another process cancels the job while it runs.
                         EXPECT_THAT(h.queue()
                                         .Cancel(ctx.envelope().job_id, Who("bob", "wrong month"))
                                         .status(),
                                     IsOk());
                         EXPECT_FALSE(ctx.cancelled());
                         EXPECT_THAT(ctx.Heartbeat("page-3"), IsOk());
                         saw_cancel = ctx.cancelled();
                         return Status::Cancelled("stopped on request");
                       }),
              IsOk());
  std::string id = EnqueueOk(h, MakeJob("export.build"));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_TRUE(saw_cancel);
  EXPECT_EQ(runs, 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kDiscarded) << "a cancelled job is not retried";
  EXPECT_EQ(r.reason, reason::kCancelled);
  EXPECT_THAT(r.audit.back(), HasSubstr("cancel by bob: wrong month"));
}

TEST(RunnerControlTest, AJobCancelledBeforeItsTurnNeverRuns) {
  Harness h;
  int runs = 0;
  ASSERT_THAT(h.Handle("export.build", [&](JobContext&) { ++runs; return Status::Ok(); }), IsOk());
  std::string id = EnqueueOk(h, MakeJob("export.build"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(CancelOutcome o, h.queue().Cancel(id, Who("bob", "duplicate")));
  EXPECT_EQ(o, CancelOutcome::kDiscarded);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kDiscarded);
}

TEST(RunnerControlTest, TheRunnerPublishesItsPoliciesWithTheirReasons) {
  Harness h;
  HandlerOptions slow;
  RetryPolicy p;
  p.max_attempts = 9;
  slow.policy = p;
  slow.policy_reason = "the PSP rate-limits bursts";
  ASSERT_THAT(h.Handle("payment.charge", [](JobContext&) { return Status::Ok(); }, slow), IsOk());
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<PublishedPolicy> got, h.queue().ReadPolicies());
  ASSERT_THAT(got, SizeIs(2));
  EXPECT_EQ(got[0].job_type, "*");
  EXPECT_EQ(got[1].job_type, "payment.charge");
  EXPECT_EQ(got[1].policy.max_attempts, 9);
  EXPECT_EQ(got[1].reason, "the PSP rate-limits bursts");
  EXPECT_EQ(got[1].publisher, h.runner().options().runner_id);
}

TEST(RunnerControlTest, BackpressureRefusesEnqueuesPastTheMaximumDepthAndCountsThem) {
  Harness h;
  ASSERT_THAT(h.Handle("report.build", [](JobContext&) { return Status::Ok(); }), IsOk());
  Result<std::unique_ptr<Operations>> ops = Operations::Open(h.runner().options().backend);
  ASSERT_THAT(ops.status(), IsOk());
  ASSERT_THAT((*ops)->SetMaxQueueDepth("default", 2, "alice", "INC-9: backlog growth"), IsOk());
  ASSERT_THAT(h.Enqueue("report.build").status(), IsOk());
  ASSERT_THAT(h.Enqueue("report.build").status(), IsOk());

  Result<EnqueueResult> refused = h.Enqueue("report.build");
  EXPECT_THAT(refused.status(),
              testing::StatusIs(StatusCode::kResourceExhausted,
                                HasSubstr("queue default is at depth 2 of its maximum 2")));
  Result<std::vector<EnqueueResult>> batch =
      h.EnqueueBatch({MakeJob("report.build"), MakeJob("report.build")});
  EXPECT_THAT(batch.status(), testing::StatusIs(StatusCode::kResourceExhausted));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kEnqueueRefused, "report.build"), 3);
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats stats, (*ops)->Stats());
  EXPECT_EQ(stats.queues["default"].depth, 2) << "nothing refused was stored";

  // Once the backlog drains, the same enqueue goes through.
  ASSERT_THAT(h.RunUntilIdle().status(), IsOk());
  EXPECT_THAT(h.Enqueue("report.build").status(), IsOk());
}

}  // namespace
}  // namespace jobpact
