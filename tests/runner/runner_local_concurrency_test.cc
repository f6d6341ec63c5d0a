// The local (per-process) concurrency limit of a job type
// (HandlerOptions::local_max_concurrency, issue 11): at most N of the
// type's handlers run at once in one runner; a delivery past it is
// rescheduled shortly with reason "concurrency_limited", no attempt spent.
// Real worker threads (the limit is about handlers running at once); the
// clock is a ManualClock moved only to bring rescheduled jobs back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"
#include "tests/support/wait_for.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using test_support::WaitFor;
using test_util::EnqueueOk;
using test_util::MakeJob;
using testing::Harness;
using testing::IsOk;
using testing::StatusIs;

// Counts the handlers running at once and the most ever seen; blocks each
// until released.
struct Running {
  std::atomic<int> now{0};
  std::atomic<int> most{0};
  std::atomic<int> entered{0};
  std::atomic<bool> open{false};
  Status Run() {
    const int n = now.fetch_add(1) + 1;
    int seen = most.load();
    while (n > seen && !most.compare_exchange_weak(seen, n)) {
    }
    entered.fetch_add(1);
    WaitFor([&] { return open.load(); });
    now.fetch_sub(1);
    return Status::Ok();
  }
};

TEST(RunnerLocalConcurrencyTest, AtMostNHandlersOfTheTypeRunAtOnceInTheProcess) {
  Harness h([](JobRunnerOptions& o) {
    o.workers = 3;
    o.dequeue_batch = 1;
  });
  Running render;
  std::atomic<int> other_runs{0};
  HandlerOptions limited;
  limited.local_max_concurrency = 2;
  ASSERT_THAT(h.Handle("pdf.render", [&](JobContext&) { return render.Run(); }, limited), IsOk());
  ASSERT_THAT(h.Handle("mail.send", [&](JobContext&) { ++other_runs; return Status::Ok(); }),
              IsOk());
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(EnqueueOk(h, MakeJob("pdf.render")));
  ASSERT_THAT(h.runner().Start(), IsOk());

  // Two run; the third delivery is turned away, without an attempt (the
  // counter moves before the outcome is written: wait for the record).
  auto held_job = [&] {
    return std::find_if(ids.begin(), ids.end(), [&](const std::string& id) {
      return h.StatusOf(id) == JobStatus::kRetryScheduled;
    });
  };
  ASSERT_TRUE(WaitFor([&] {
    return render.entered.load() == 2 &&
           h.metrics().CounterTotal(metric::kConcurrencyLimited, "pdf.render") >= 1 &&
           held_job() != ids.end();
  }));
  const auto held = held_job();
  ASSERT_NE(held, ids.end());
  const JobRecord r = h.Job(*held);
  EXPECT_EQ(r.history.back().reason, reason::kConcurrencyLimited);
  EXPECT_EQ(r.envelope.attempt, 0) << "a held delivery spends no attempt";
  ASSERT_TRUE(r.last_failure.has_value());
  EXPECT_THAT(r.last_failure->message, HasSubstr("local_max_concurrency"));

  // Other types are not held by it: the third worker runs them.
  EnqueueOk(h, MakeJob("mail.send"));
  ASSERT_TRUE(WaitFor([&] { return other_runs.load() == 1; }));

  render.open = true;
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) {
          return h.StatusOf(id) == JobStatus::kSucceeded;
        });
      },
      [&] { h.clock().Advance(Millis(100)); }));
  EXPECT_EQ(render.most.load(), 2);
  EXPECT_EQ(render.entered.load(), 3) << "each job's handler ran once";
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
}

TEST(RunnerLocalConcurrencyTest, TheSlotIsGivenBackWhenTheHandlerEnds) {
  // One worker, a limit of one: every job runs in turn, none is held, also
  // after a failing attempt and after a rate limiter's refusal.
  Harness h;
  int runs = 0;
  HandlerOptions o;
  o.local_max_concurrency = 1;
  o.local_rate_limit = RateLimit{1, 2};
  ASSERT_THAT(h.Handle("pdf.render",
                       [&](JobContext&) {
                         return ++runs == 1 ? Status::Unavailable("renderer restarting")
                                            : Status::Ok();
                       },
                       o),
              IsOk());
  for (int i = 0; i < 4; ++i) EnqueueOk(h, MakeJob("pdf.render"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(int settled, h.RunUntilSettled());
  EXPECT_GT(settled, 0);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kConcurrencyLimited, "pdf.render"), 0);
  EXPECT_GT(h.metrics().CounterTotal(metric::kRateLimited, "pdf.render"), 0);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kSucceeded, "pdf.render"), 4);
}

TEST(RunnerLocalConcurrencyTest, ALimitBelowOneIsRefusedAtRegistration) {
  Harness h;
  HandlerOptions o;
  o.local_max_concurrency = 0;
  EXPECT_THAT(h.Handle("pdf.render", [](JobContext&) { return Status::Ok(); }, o),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("'pdf.render': local_max_concurrency must be >= 1, not 0")));
}

}  // namespace
}  // namespace jobpact
