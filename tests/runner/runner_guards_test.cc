// The runner's automatic guards (SPEC 10, 11): the retry budget per job type
// and the circuit breaker per dependency, driven by the Harness and its
// ManualClock. No threads, no sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using testing::Harness;
using testing::IsOk;
using testing::StatusIs;

int CountStatus(Harness& h, const std::vector<std::string>& ids, JobStatus s) {
  int n = 0;
  for (const std::string& id : ids) n += h.StatusOf(id) == s ? 1 : 0;
  return n;
}

// --- Retry budget -------------------------------------------------------------------

TEST(RunnerRetryBudgetTest, OnByDefaultWithTheSpecDefaults) {
  JobRunnerOptions o;
  EXPECT_TRUE(o.retry_budget_enabled);
  EXPECT_EQ(o.retry_budget.percent, 0.2);
  EXPECT_EQ(o.retry_budget.window, Seconds(10));
  EXPECT_EQ(o.retry_budget.min_retries_per_second, 10);
  Harness h;
  EXPECT_NE(h.runner().options().retry_budgets, nullptr);
}

TEST(RunnerRetryBudgetTest, BadOptionsAreRefused) {
  Harness h([](JobRunnerOptions& o) { o.retry_budget.window = Duration::zero(); });
  EXPECT_THAT(h.init_status(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("retry_budget")));
}

// Only the floor (percent 0): 1 retry/s over a 10 s window = 10 retries.
void FloorOnly(JobRunnerOptions& o) {
  o.retry_budget.percent = 0;
  o.retry_budget.min_retries_per_second = 1;
  o.retry_budget.window = Seconds(10);
}

TEST(RunnerRetryBudgetTest, AStormExhaustsTheBudgetAndIsQuarantined) {
  Harness h(FloorOnly);
  ASSERT_THAT(h.Handle("storm", [](JobContext&) { return Status::Unavailable("upstream 503"); }),
              IsOk());
  int calm_calls = 0;
  ASSERT_THAT(h.Handle("calm",
                       [&](JobContext&) {
                         return ++calm_calls == 1 ? Status::Unavailable("blip") : Status::Ok();
                       }),
              IsOk());
  std::vector<std::string> storm;
  for (int i = 0; i < 20; ++i) storm.push_back(h.Enqueue("storm").value().job_id);
  const std::string calm = h.Enqueue("calm").value().job_id;

  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  // The floor allowed 10 retries; the other 10 jobs are quarantined.
  EXPECT_EQ(CountStatus(h, storm, JobStatus::kRetryScheduled), 10);
  EXPECT_EQ(CountStatus(h, storm, JobStatus::kDeadLettered), 10);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetExhausted, "storm"), 10);
  DlqFilter by_reason;
  by_reason.reason = "retry_budget_exhausted";
  EXPECT_EQ(h.DeadLetters(by_reason).size(), 10u);
  EXPECT_EQ(h.metrics().Counter(metric::kDeadLettered,
                                MetricLabels{"storm", "default", "retry_budget_exhausted", {}}),
            10);
  // Another type has its own budget.
  EXPECT_EQ(h.StatusOf(calm), JobStatus::kRetryScheduled);
  EXPECT_LT(h.runner().options().retry_budgets->Balance("storm"), 1);

  // The window slides past the spent retries: the budget refills.
  ASSERT_THAT(h.AdvanceAndRun(Seconds(11)), IsOk());
  EXPECT_EQ(h.StatusOf(calm), JobStatus::kSucceeded);
  EXPECT_EQ(CountStatus(h, storm, JobStatus::kRetryScheduled), 10);
  for (const std::string& id : storm) {
    if (h.StatusOf(id) == JobStatus::kRetryScheduled) {
      EXPECT_EQ(h.Job(id).envelope.attempt, 2);
    }
  }
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetExhausted, "storm"), 10);
}

TEST(RunnerRetryBudgetTest, FirstAttemptsEarnRetries) {
  Harness h([](JobRunnerOptions& o) {
    o.retry_budget.percent = 0.5;
    o.retry_budget.min_retries_per_second = 0;
  });
  int calls = 0;
  ASSERT_THAT(h.Handle("t",
                       [&](JobContext& ctx) {
                         ++calls;
                         return ctx.attempt() == 1 && calls <= 4 ? Status::Unavailable("x")
                                                                 : Status::Ok();
                       }),
              IsOk());
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(h.Enqueue("t").value().job_id);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  // Deposits of 0.5 per first attempt: after jobs 1-2 one retry is paid
  // (job 2), after 3-4 another (job 4); jobs 1 and 3 found less than one.
  EXPECT_EQ(CountStatus(h, ids, JobStatus::kRetryScheduled), 2);
  EXPECT_EQ(CountStatus(h, ids, JobStatus::kDeadLettered), 2);
}

TEST(RunnerRetryBudgetTest, DisabledLetsEveryRetryThrough) {
  Harness h([](JobRunnerOptions& o) {
    FloorOnly(o);
    o.retry_budget_enabled = false;
  });
  EXPECT_EQ(h.runner().options().retry_budgets, nullptr);
  ASSERT_THAT(h.Handle("storm", [](JobContext&) { return Status::Unavailable("503"); }), IsOk());
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(h.Enqueue("storm").value().job_id);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(CountStatus(h, ids, JobStatus::kRetryScheduled), 20);
}

// --- Circuit breaker ----------------------------------------------------------------

TEST(RunnerCircuitBreakerTest, OpensReschedulesWithoutAttemptsThenRecovers) {
  Harness h;
  bool down = true;
  int calls = 0;
  HandlerOptions ho;
  ho.dependency = "psp";
  ASSERT_THAT(h.Handle("pay",
                       [&](JobContext&) {
                         ++calls;
                         return down ? Status::Unavailable("psp 503") : Status::Ok();
                       },
                       ho),
              IsOk());
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(h.Enqueue("pay").value().job_id);
  const TimePoint opened_at = h.clock().Now();
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  CircuitBreaker& psp = h.runner().options().circuit_breakers->Get("psp");
  // 20 calls (the minimum), 100% failures >= 50%: open.
  EXPECT_EQ(psp.state(), CircuitState::kOpen);
  EXPECT_EQ(calls, 20);
  EXPECT_EQ(h.metrics().Gauge(metric::kCircuitState, MetricLabels{{}, {}, "psp", {}}), 1.0);

  // A new job is not run: rescheduled to the end of the open period, no
  // attempt spent.
  const std::string late = h.Enqueue("pay").value().job_id;
  EXPECT_EQ(h.RunUntilIdle().value(), 1);
  EXPECT_EQ(calls, 20);
  JobRecord r = h.Job(late);
  EXPECT_EQ(r.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(r.reason, "circuit_open");
  EXPECT_EQ(r.envelope.attempt, 0);
  EXPECT_EQ(r.ready_at, opened_at + Seconds(60));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kCircuitRejected, "pay"), 1);

  // The retries of the first 20 come due while it is open: rescheduled too,
  // keeping attempt 1 (their backoff is under 1 s).
  ASSERT_THAT(h.AdvanceAndRun(Seconds(1)), IsOk());
  EXPECT_EQ(calls, 20);
  for (const std::string& id : ids) {
    EXPECT_EQ(h.Job(id).reason, "circuit_open");
    EXPECT_EQ(h.Job(id).envelope.attempt, 1);
  }
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetries, "pay"), 20);  // Only the real ones.

  // 60 s later it is half-open; the trials succeed and close it.
  down = false;
  h.clock().Advance(opened_at + Seconds(60) - h.clock().Now());
  EXPECT_EQ(psp.state(), CircuitState::kHalfOpen);
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(psp.state(), CircuitState::kClosed);
  EXPECT_EQ(calls, 41);
  ids.push_back(late);
  EXPECT_EQ(CountStatus(h, ids, JobStatus::kSucceeded), 21);
  EXPECT_EQ(h.Job(late).envelope.attempt, 1);
  EXPECT_EQ(h.Job(ids[0]).envelope.attempt, 2);
  EXPECT_EQ(h.metrics().Gauge(metric::kCircuitState, MetricLabels{{}, {}, "psp", {}}), 0.0);
}

TEST(RunnerCircuitBreakerTest, FailingTrialsReopenIt) {
  Harness h;
  HandlerOptions ho;
  ho.dependency = "psp";
  int calls = 0;
  ASSERT_THAT(h.Handle("pay",
                       [&](JobContext&) {
                         ++calls;
                         return Status::Unavailable("psp 503");
                       },
                       ho),
              IsOk());
  for (int i = 0; i < 20; ++i) ASSERT_THAT(h.Enqueue("pay"), IsOk());
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  CircuitBreaker& psp = h.runner().options().circuit_breakers->Get("psp");
  ASSERT_EQ(psp.state(), CircuitState::kOpen);
  h.clock().Advance(Seconds(60));
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  // 10 trials ran (half_open_calls), all failed: open again.
  EXPECT_EQ(calls, 30);
  EXPECT_EQ(psp.state(), CircuitState::kOpen);
  EXPECT_EQ(psp.Snapshot().opened_total, 2);
}

TEST(RunnerCircuitBreakerTest, PermanentErrorsMeanTheDependencyAnswered) {
  Harness h;
  HandlerOptions ho;
  ho.dependency = "psp";
  ASSERT_THAT(h.Handle("pay", [](JobContext&) { return Status::InvalidArgument("card declined"); },
                       ho),
              IsOk());
  for (int i = 0; i < 25; ++i) ASSERT_THAT(h.Enqueue("pay"), IsOk());
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  CircuitBreakerSnapshot s = h.runner().options().circuit_breakers->Get("psp").Snapshot();
  EXPECT_EQ(s.state, CircuitState::kClosed);
  EXPECT_EQ(s.calls, 25);
  EXPECT_EQ(s.failures, 0);
}

// A failure after the deadline is a timeout (transient): the dependency was
// too slow, which counts against it even when its error was permanent.
TEST(RunnerCircuitBreakerTest, TimeoutsCountAsFailures) {
  Harness h([](JobRunnerOptions& o) { o.circuit_breaker.minimum_calls = 2; });
  HandlerOptions ho;
  ho.dependency = "slow-api";
  ASSERT_THAT(h.Handle("t",
                       [&](JobContext& ctx) {
                         h.clock().Advance(ctx.envelope().timeout);  // Overruns.
                         return Status::InvalidArgument("gave up");
                       },
                       ho),
              IsOk());
  for (int i = 0; i < 2; ++i) ASSERT_THAT(h.Enqueue("t"), IsOk());
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  CircuitBreakerSnapshot s = h.runner().options().circuit_breakers->Get("slow-api").Snapshot();
  EXPECT_EQ(s.state, CircuitState::kOpen);
  EXPECT_EQ(s.failures, 2);
}

TEST(RunnerCircuitBreakerTest, BadDependencyNameIsRefused) {
  Harness h;
  HandlerOptions ho;
  ho.dependency = "has space";
  EXPECT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }, ho),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("dependency")));
}

}  // namespace
}  // namespace jobpact
