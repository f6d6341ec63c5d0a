// The runner's automatic guards (SPEC 10, 11): the retry budget per job type
// and the circuit breaker per dependency, driven by the Harness and its
// ManualClock. No threads, no sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using test_util::MakeJob;
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

// SPEC 10, 11: a retry the budget refuses is deferred, not dead-lettered.
// (This test used to assert the quarantine: the storm's refused retries in
// the DLQ with retry_budget_exhausted. That is now the per-type opt-in,
// DeadLetteringWhenExhaustedIsAnOptInPerJobType below.)
TEST(RunnerRetryBudgetTest, AStormExhaustsTheBudgetAndIsDeferredNotQuarantined) {
  Harness h(FloorOnly);
  std::map<std::string, int> storm_calls;
  ASSERT_THAT(h.Handle("storm",
                       [&](JobContext& ctx) {
                         ++storm_calls[ctx.envelope().job_id];
                         return Status::Unavailable("upstream 503");
                       }),
              IsOk());
  int calm_calls = 0;
  ASSERT_THAT(h.Handle("calm",
                       [&](JobContext&) {
                         return ++calm_calls == 1 ? Status::Unavailable("blip") : Status::Ok();
                       }),
              IsOk());
  const TimePoint t0 = h.clock().Now();
  std::vector<std::string> storm;
  for (int i = 0; i < 20; ++i) storm.push_back(h.Enqueue("storm").value().job_id);
  const std::string calm = h.Enqueue("calm").value().job_id;

  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  // The floor allowed 10 retries; the other 10 are deferred to t0 + 10 s,
  // when those 10 leave the window. Nothing is quarantined.
  EXPECT_EQ(CountStatus(h, storm, JobStatus::kRetryScheduled), 20);
  EXPECT_EQ(CountStatus(h, storm, JobStatus::kDeadLettered), 0);
  EXPECT_TRUE(h.DeadLetters().empty());
  int deferred = 0;
  for (const std::string& id : storm) {
    JobRecord r = h.Job(id);
    EXPECT_EQ(r.envelope.attempt, 1);
    ASSERT_TRUE(r.last_failure.has_value());
    EXPECT_EQ(r.last_failure->code, "UNAVAILABLE");
    if (r.history.back().reason == reason::kRetryBudgetDeferred) {
      ++deferred;
      EXPECT_EQ(r.ready_at, t0 + Seconds(10));
    } else {
      EXPECT_EQ(r.history.back().reason, reason::kTransientError);
      EXPECT_LE(r.ready_at, t0 + Seconds(1));  // Its backoff.
    }
  }
  EXPECT_EQ(deferred, 10);
  // Refusals and deferrals are counted; retries are retries either way.
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetExhausted, "storm"), 10);
  EXPECT_EQ(
      h.metrics().Counter(metric::kRetryBudgetDeferred, MetricLabels{"storm", "default", {}, {}}),
      10);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetries, "storm"), 20);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kDeadLettered, "storm"), 0);
  // Another type has its own budget.
  EXPECT_EQ(h.StatusOf(calm), JobStatus::kRetryScheduled);
  EXPECT_EQ(h.Job(calm).history.back().reason, reason::kTransientError);
  RetryBudgetSnapshot snap = h.runner().options().retry_budgets->ForJobType("storm").Snapshot();
  EXPECT_LT(snap.balance, 1);
  EXPECT_EQ(snap.reserved, 10);

  // To the end: the budget paces the storm's retries, each attempt counts
  // as usual, and the jobs end by their attempt limit, not in quarantine.
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(h.StatusOf(calm), JobStatus::kSucceeded);
  for (const std::string& id : storm) {
    EXPECT_EQ(h.StatusOf(id), JobStatus::kDeadLettered);
    EXPECT_EQ(h.Job(id).reason, reason::kMaxAttemptsExceeded);
    EXPECT_EQ(h.Job(id).envelope.attempt, 5);
    EXPECT_EQ(storm_calls[id], 5);
  }
  DlqFilter by_reason;
  by_reason.reason = "retry_budget_exhausted";
  EXPECT_TRUE(h.DeadLetters(by_reason).empty());
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetExhausted, "storm"),
            h.metrics().CounterTotal(metric::kRetryBudgetDeferred, "storm"));
}

TEST(RunnerRetryBudgetTest, AnUpstreamBlipOfFiveThousandJobsEndsWithAllSucceeded) {
  // The SPEC 11 defaults: 20% of first attempts over 10 s, floor 10/s.
  Harness h([](JobRunnerOptions& o) {
    o.log_level = LogLevel::kError;              // 5,000 retry lines otherwise.
    o.random = MakeSequenceRandomSource({0.5});  // Every backoff 0.5 s.
  });
  ASSERT_TRUE(h.runner().options().retry_budget_enabled);
  std::map<std::string, int> calls;
  ASSERT_THAT(h.Handle("invoice.generate",
                       [&](JobContext& ctx) {
                         // The upstream blips: every job's first attempt fails.
                         return ++calls[ctx.envelope().job_id] == 1
                                    ? Status::Unavailable("upstream 503")
                                    : Status::Ok();
                       }),
              IsOk());
  constexpr int kJobs = 5000;
  std::vector<std::string> ids;
  ids.reserve(kJobs);
  for (int i = 0; i < kJobs; ++i) ids.push_back(h.Enqueue("invoice.generate").value().job_id);

  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  // About 100 + 0.2 * 5,000 retries fit in the budget; the rest wait.
  const std::int64_t deferred =
      h.metrics().CounterTotal(metric::kRetryBudgetDeferred, "invoice.generate");
  EXPECT_GT(deferred, 3500);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetExhausted, "invoice.generate"), deferred);
  EXPECT_TRUE(h.DeadLetters().empty());

  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(CountStatus(h, ids, JobStatus::kSucceeded), kJobs);
  EXPECT_TRUE(h.DeadLetters().empty());
  for (const std::string& id : ids) ASSERT_EQ(calls[id], 2) << id;
  EXPECT_EQ(h.metrics().CounterTotal(metric::kDeadLettered), 0);
}

TEST(RunnerRetryBudgetTest, DeferredRetriesRunAtThePaceTheBudgetAllows) {
  Harness h([](JobRunnerOptions& o) {
    FloorOnly(o);                                // 10 retries per 10 s window.
    o.random = MakeSequenceRandomSource({0.5});  // Backoffs of 0.5 s.
    o.log_level = LogLevel::kError;
  });
  std::vector<TimePoint> retry_starts;
  ASSERT_THAT(h.Handle("blip",
                       [&](JobContext& ctx) {
                         if (ctx.attempt() == 1) return Status::Unavailable("blip");
                         retry_starts.push_back(h.clock().Now());
                         return Status::Ok();
                       }),
              IsOk());
  const TimePoint t0 = h.clock().Now();
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(h.Enqueue("blip").value().job_id);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  std::map<TimePoint, int> ready;
  for (const std::string& id : ids) ++ready[h.Job(id).ready_at];
  // 10 retries now (after their backoff), then 10 per window.
  EXPECT_EQ(ready, (std::map<TimePoint, int>{{t0 + Millis(500), 10},
                                             {t0 + Seconds(10), 10},
                                             {t0 + Seconds(20), 10},
                                             {t0 + Seconds(30), 10}}));
  ASSERT_THAT(h.RunUntilSettled(), IsOk());
  EXPECT_EQ(CountStatus(h, ids, JobStatus::kSucceeded), 40);
  std::map<TimePoint, int> started;
  for (TimePoint t : retry_starts) ++started[t];
  EXPECT_EQ(started, ready);
}

TEST(RunnerRetryBudgetTest, TheTotalDeadlineStillBoundsADeferral) {
  Harness h(FloorOnly);
  ASSERT_THAT(h.Handle("storm", [](JobContext&) { return Status::Unavailable("503"); }), IsOk());
  std::vector<std::string> spend;
  for (int i = 0; i < 10; ++i) spend.push_back(h.Enqueue("storm").value().job_id);
  Envelope tight = MakeJob("storm");
  tight.deadline = h.clock().Now() + Seconds(5);  // Before the budget has room.
  const std::string tight_id = h.Enqueue(tight).value().job_id;
  Envelope loose = MakeJob("storm");
  loose.deadline = h.clock().Now() + Seconds(60);
  const std::string loose_id = h.Enqueue(loose).value().job_id;
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  EXPECT_EQ(CountStatus(h, spend, JobStatus::kRetryScheduled), 10);
  JobRecord r = h.Job(tight_id);
  EXPECT_EQ(r.status, JobStatus::kDeadLettered);
  EXPECT_EQ(r.reason, reason::kTotalDeadlinePassed);
  EXPECT_EQ(h.Job(loose_id).status, JobStatus::kRetryScheduled);
  EXPECT_EQ(h.Job(loose_id).history.back().reason, reason::kRetryBudgetDeferred);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetExhausted, "storm"), 2);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetDeferred, "storm"), 1);
  // Only the loose job's retry was booked.
  EXPECT_EQ(h.runner().options().retry_budgets->ForJobType("storm").Snapshot().reserved, 1);
}

TEST(RunnerRetryBudgetTest, DeadLetteringWhenExhaustedIsAnOptInPerJobType) {
  Harness h([](JobRunnerOptions& o) {
    RetryBudgetOptions floor_only;
    floor_only.percent = 0;
    floor_only.min_retries_per_second = 1;
    std::shared_ptr<RetryBudgets> budgets = RetryBudgets::Create(floor_only, o.clock).value();
    RetryBudgetOptions quarantine = floor_only;
    quarantine.on_exhausted = RetryBudgetExhaustedAction::kDeadLetter;
    EXPECT_THAT(budgets->Override("storm", quarantine, "stale quotes are worthless; see MD-7"),
                IsOk());
    o.retry_budgets = budgets;
  });
  for (const char* type : {"storm", "other"}) {
    ASSERT_THAT(h.Handle(type, [](JobContext&) { return Status::Unavailable("upstream 503"); }),
                IsOk());
  }
  std::vector<std::string> storm, other;
  for (int i = 0; i < 20; ++i) storm.push_back(h.Enqueue("storm").value().job_id);
  for (int i = 0; i < 20; ++i) other.push_back(h.Enqueue("other").value().job_id);
  ASSERT_THAT(h.RunUntilIdle(), IsOk());
  // The opted-in type: the floor allowed 10 retries; the other 10 jobs are
  // quarantined, as before the deferral existed.
  EXPECT_EQ(CountStatus(h, storm, JobStatus::kRetryScheduled), 10);
  EXPECT_EQ(CountStatus(h, storm, JobStatus::kDeadLettered), 10);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetExhausted, "storm"), 10);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetDeferred, "storm"), 0);
  DlqFilter by_reason;
  by_reason.reason = "retry_budget_exhausted";
  EXPECT_EQ(h.DeadLetters(by_reason).size(), 10u);
  EXPECT_EQ(h.metrics().Counter(metric::kDeadLettered,
                                MetricLabels{"storm", "default", "retry_budget_exhausted", {}}),
            10);
  EXPECT_EQ(h.runner().options().retry_budgets->ForJobType("storm").Snapshot().reserved, 0);
  // The type left at the default defers.
  EXPECT_EQ(CountStatus(h, other, JobStatus::kRetryScheduled), 20);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kRetryBudgetDeferred, "other"), 10);
  EXPECT_THAT(h.runner().options().retry_budgets->DescribeOverrides(),
              HasSubstr("storm: percent=0 window=10s min_retries_per_second=1 buckets=10 "
                        "on_exhausted=dead_letter (stale quotes are worthless; see MD-7)"));
}

TEST(RunnerRetryBudgetTest, FirstAttemptsEarnRetries) {
  Harness h([](JobRunnerOptions& o) {
    o.retry_budget.percent = 0.5;
    o.retry_budget.min_retries_per_second = 0;
    // Refusals show as dead letters (the opt-in) so each job's fate says
    // whether its retry was paid for.
    o.retry_budget.on_exhausted = RetryBudgetExhaustedAction::kDeadLetter;
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
