// Rate limits in the runner (issue 11, SPEC 10 "backoff on rate limits"):
// a job type's shared and local rates, a dependency's rate, and a
// handler's "429, retry after D" holding its dependency in every process
// sharing the backend. ManualClock, no threads, no sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/job_runner.h"
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
using testing::StatusIs;

TEST(RunnerRateLimitTest, ASharedRateHoldsATypeToItsBurstThenOneStartPerInterval) {
  Harness h;
  int runs = 0;
  HandlerOptions ho;
  ho.rate_limit = RateLimit{1, 2};  // 1 start/s, 2 at once.
  ASSERT_THAT(h.Handle("mail.send", [&](JobContext&) { ++runs; return Status::Ok(); }, ho),
              IsOk());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(EnqueueOk(h, MakeJob("mail.send")));

  ASSERT_THAT(h.RunUntilIdle().status(), IsOk());
  EXPECT_EQ(runs, 2) << "the burst";
  JobRecord held = h.Job(ids[2]);
  EXPECT_EQ(held.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(held.history.back().reason, reason::kRateLimited);
  EXPECT_EQ(held.envelope.attempt, 0) << "a rate-limited delivery spends no attempt";
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRateLimited, "mail.send"), 3);

  // The three held jobs come back one second apart, each in its slot.
  std::vector<TimePoint> back;
  for (int i = 2; i < 5; ++i) back.push_back(h.Job(ids[i]).ready_at);
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back[1] - back[0], Seconds(1));
  EXPECT_EQ(back[2] - back[1], Seconds(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(int settled, h.RunUntilSettled());
  EXPECT_EQ(runs, 5);
  EXPECT_EQ(settled, 3) << "each held job was refused once, then ran at its slot";
}

TEST(RunnerRateLimitTest, AnUpstream429HoldsItsDependencyInEveryProcessUntilRetryAfter) {
  auto clock = std::make_shared<ManualClock>();
  BackendBundle shared = InMemoryBackend(clock);
  // Two services on one store, each taking its own queue.
  auto make = [&](std::string id, std::string queue) {
    JobRunnerOptions o;
    o.backend = shared;
    o.clock = clock;
    o.runner_id = std::move(id);
    o.queues = {std::move(queue)};
    o.log_level = LogLevel::kOff;
    return JobRunner::Create(o);
  };
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobRunner> a, make("runner-a", "captures"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobRunner> b, make("runner-b", "refunds"));
  auto job = [](std::string type, std::string queue) {
    Envelope e = MakeJob(std::move(type));
    e.queue = std::move(queue);
    return e;
  };
  HandlerOptions psp;
  psp.dependency = "psp";
  int charged = 0;
  bool limited_once = false;
  ASSERT_THAT(a->Handle("payment.capture",
                        [&](JobContext& ctx) {
                          if (!limited_once) {
                            limited_once = true;
                            return ctx.RateLimited(Seconds(30), "http 429, Retry-After: 30");
                          }
                          ++charged;
                          return Status::Ok();
                        },
                        psp),
              IsOk());
  int refunded = 0;
  ASSERT_THAT(b->Handle("payment.refund", [&](JobContext&) { ++refunded; return Status::Ok(); },
                        psp),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult capture, a->Enqueue(job("payment.capture", "captures")));
  ASSERT_THAT(a->RunUntilIdle().status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord failed, shared.admin->Get(capture.job_id));
  EXPECT_EQ(failed.status, JobStatus::kRetryScheduled);
  ASSERT_TRUE(failed.last_failure.has_value());
  EXPECT_EQ(failed.last_failure->failure_class, FailureClass::kTransient);
  EXPECT_EQ(failed.last_failure->code, "rate_limited");
  EXPECT_THAT(failed.last_failure->message, HasSubstr("Retry-After: 30"));
  EXPECT_GE(failed.ready_at, clock->Now() + Seconds(30)) << "no retry before Retry-After";
  EXPECT_EQ(failed.envelope.attempt, 1) << "a rate-limited attempt counts as a transient failure";

  // Another process's job that calls the same dependency waits too.
  JOBPACT_ASSERT_OK_AND_ASSIGN(EnqueueResult refund, b->Enqueue(job("payment.refund", "refunds")));
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(refunded, 0);
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord held, shared.admin->Get(refund.job_id));
  EXPECT_EQ(held.history.back().reason, reason::kRateLimited);
  EXPECT_EQ(held.ready_at, clock->Now() + Seconds(30));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<RateLimiterState> limiters,
                               shared.rate_limits->List(10));
  ASSERT_THAT(limiters, SizeIs(1));
  EXPECT_EQ(limiters[0].key, "dependency:psp");

  clock->Advance(Seconds(30));
  ASSERT_THAT(b->RunUntilIdle().status(), IsOk());
  ASSERT_THAT(a->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(refunded, 1);
  EXPECT_EQ(charged, 1);
}

TEST(RunnerRateLimitTest, ARateLimitedErrorThrownDeepInAHandlerDoesTheSame) {
  Harness h;
  HandlerOptions ho;
  ho.dependency = "geo-api";
  int calls = 0;
  ASSERT_THAT(h.Handle("geo.lookup",
                       [&](JobContext&) -> Status {
                         if (++calls == 1) throw RateLimitedError(Seconds(12), "429 from geo-api");
                         return Status::Ok();
                       },
                       ho),
              IsOk());
  const std::string id = EnqueueOk(h, MakeJob("geo.lookup"));
  ASSERT_THAT(h.RunUntilIdle().status(), IsOk());
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.last_failure->code, "rate_limited");
  EXPECT_GE(r.ready_at, h.clock().Now() + Seconds(12));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRateLimited, "geo.lookup"), 1);
  ASSERT_THAT(h.RunUntilSettled().status(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(calls, 2);
}

TEST(RunnerRateLimitTest, ALocalRateCountsInItsOwnProcessOnly) {
  auto clock = std::make_shared<ManualClock>();
  BackendBundle shared = InMemoryBackend(clock);
  int runs = 0;
  std::vector<std::unique_ptr<JobRunner>> runners;
  for (const char* id : {"runner-a", "runner-b"}) {
    JobRunnerOptions o;
    o.backend = shared;
    o.clock = clock;
    o.runner_id = id;
    o.log_level = LogLevel::kOff;
    o.dequeue_batch = 1;
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobRunner> r, JobRunner::Create(o));
    HandlerOptions ho;
    ho.local_rate_limit = RateLimit{1, 1};
    ASSERT_THAT(r->Handle("pdf.render", [&](JobContext&) { ++runs; return Status::Ok(); }, ho),
                IsOk());
    runners.push_back(std::move(r));
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_THAT(runners[0]->Enqueue(MakeJob("pdf.render")).status(), IsOk());
  }
  // Runner a runs one, and is refused its second (rescheduled a second on).
  ASSERT_THAT(runners[0]->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(runs, 1);
  // Runner b's limiter is its own: it runs a job at once.
  ASSERT_THAT(runners[0]->Enqueue(MakeJob("pdf.render")).status(), IsOk());
  ASSERT_THAT(runners[1]->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(runs, 2) << "one per process per second";
}

TEST(RunnerRateLimitTest, BadRatesAreRefusedAtRegistrationAndCreate) {
  Harness h;
  HandlerOptions ho;
  ho.rate_limit = RateLimit{-1, 1};
  EXPECT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }, ho),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("per_second")));
  Harness bad([](JobRunnerOptions& o) { o.dependency_rate_limits["psp"] = RateLimit{1, 0}; });
  EXPECT_THAT(bad.init_status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("dependency_rate_limits[psp]")));
}

}  // namespace
}  // namespace jobpact
