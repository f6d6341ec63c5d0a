// Cost of the two guards a worker consults around every job: the retry
// budget (RecordFirstAttempt on each first attempt, TryRetry on each failure
// that the policy retries) and the circuit breaker (Acquire before calling a
// dependency, Record* after). Both take one uncontended mutex and read the
// clock, so they should cost tens of nanoseconds, far below a backend round
// trip. The threaded variants show the cost when every worker hits the same
// job type or dependency.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "jobpact/circuit_breaker.h"
#include "jobpact/clock.h"
#include "jobpact/retry_budget.h"

namespace jobpact {
namespace {

// Shared across the threads of a threaded benchmark run.
RetryBudgets& SharedBudgets() {
  static RetryBudgets* budgets = RetryBudgets::Create().value().release();
  return *budgets;
}

CircuitBreakers& SharedBreakers() {
  static CircuitBreakers* breakers = CircuitBreakers::Create().value().release();
  return *breakers;
}

void BM_RetryBudget_RecordFirstAttempt(benchmark::State& state) {
  RetryBudget& budget = SharedBudgets().ForJobType("bench.first_attempt");
  for (auto _ : state) budget.RecordFirstAttempt();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RetryBudget_RecordFirstAttempt)->Threads(1)->Threads(2)->UseRealTime();

// Five first attempts per retry: at the 20% budget every retry is allowed,
// so both the deposit and the withdrawal paths run.
void BM_RetryBudget_FirstAttemptsAndRetry(benchmark::State& state) {
  RetryBudget& budget = SharedBudgets().ForJobType("bench.mixed");
  for (auto _ : state) {
    for (int i = 0; i < 5; ++i) budget.RecordFirstAttempt();
    benchmark::DoNotOptimize(budget.TryRetry());
  }
  state.SetItemsProcessed(state.iterations() * 6);
}
BENCHMARK(BM_RetryBudget_FirstAttemptsAndRetry)->Threads(1)->Threads(2)->UseRealTime();

// The refusal path: a budget with no floor and no traffic.
void BM_RetryBudget_TryRetryExhausted(benchmark::State& state) {
  RetryBudgetOptions o;
  o.min_retries_per_second = 0;
  auto budget = RetryBudget::Create(o).value();
  for (auto _ : state) benchmark::DoNotOptimize(budget->TryRetry());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RetryBudget_TryRetryExhausted);

// Through the registry: one map lookup under a shared lock per call.
void BM_RetryBudgets_ByJobType(benchmark::State& state) {
  RetryBudgets& budgets = SharedBudgets();
  const std::string types[] = {"email.send", "invoice.generate", "report.build", "sms.send"};
  for (const std::string& t : types) budgets.RecordFirstAttempt(t);
  std::size_t i = 0;
  for (auto _ : state) {
    budgets.RecordFirstAttempt(types[i & 3]);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RetryBudgets_ByJobType)->Threads(1)->Threads(2)->UseRealTime();

// Closed breaker, healthy dependency: Acquire + RecordSuccess per call.
void BM_CircuitBreaker_AcquireRecordSuccess(benchmark::State& state) {
  CircuitBreaker& breaker = SharedBreakers().Get("bench.healthy");
  for (auto _ : state) {
    Result<CircuitBreaker::Permit> permit = breaker.Acquire();
    if (permit.ok()) breaker.RecordSuccess(*permit);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CircuitBreaker_AcquireRecordSuccess)->Threads(1)->Threads(2)->UseRealTime();

// The permit-less pair.
void BM_CircuitBreaker_TryAcquireRecord(benchmark::State& state) {
  CircuitBreaker& breaker = SharedBreakers().Get("bench.permitless");
  std::size_t i = 0;
  for (auto _ : state) {
    if (breaker.TryAcquire()) {
      // 1 failure in 4: stays closed.
      if ((++i & 3) == 0) {
        breaker.RecordFailure();
      } else {
        breaker.RecordSuccess();
      }
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CircuitBreaker_TryAcquireRecord)->Threads(1)->Threads(2)->UseRealTime();

// An open breaker refusing calls: TryAcquire only (no message formatted).
void BM_CircuitBreaker_TryAcquireOpen(benchmark::State& state) {
  CircuitBreakerOptions o;
  o.open_duration = std::chrono::hours(24);
  auto breaker = CircuitBreaker::Create("bench.open", o).value();
  for (int i = 0; i < 20; ++i) breaker->RecordFailure();
  for (auto _ : state) benchmark::DoNotOptimize(breaker->TryAcquire());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CircuitBreaker_TryAcquireOpen);

// An open breaker refusing calls through Acquire, which formats the
// kUnavailable message with the retry time.
void BM_CircuitBreaker_AcquireOpenWithMessage(benchmark::State& state) {
  CircuitBreakerOptions o;
  o.open_duration = std::chrono::hours(24);
  auto breaker = CircuitBreaker::Create("bench.open", o).value();
  for (int i = 0; i < 20; ++i) breaker->RecordFailure();
  for (auto _ : state) benchmark::DoNotOptimize(breaker->Acquire());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CircuitBreaker_AcquireOpenWithMessage);

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
