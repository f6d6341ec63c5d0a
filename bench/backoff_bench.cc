// Cost of the per-failure policy work: ComputeBackoff for each jitter kind and
// DecideRetry. Both run once per failed attempt on a worker thread, so they
// should stay in the tens of nanoseconds, well below any backend round trip.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "jobpact/retry_policy.h"

namespace jobpact {
namespace {

// Pre-generated samples, so the benchmark measures the policy arithmetic and
// not the RNG (whose mutex would dominate).
const std::vector<double>& Samples() {
  static const std::vector<double>* samples = [] {
    auto* v = new std::vector<double>(1024);
    std::uint64_t x = 88172645463325252ULL;  // xorshift64, fixed seed.
    for (double& s : *v) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      s = static_cast<double>(x >> 11) * 0x1.0p-53;
    }
    return v;
  }();
  return *samples;
}

void BM_ComputeBackoff(benchmark::State& state) {
  BackoffSpec spec;
  spec.jitter = static_cast<JitterKind>(state.range(0));
  state.SetLabel(std::string(JitterKindName(spec.jitter)));
  const std::vector<double>& samples = Samples();
  std::size_t i = 0;
  int attempt = 1;
  Duration previous{};
  for (auto _ : state) {
    previous = ComputeBackoff(spec, attempt, samples[i], previous);
    benchmark::DoNotOptimize(previous);
    i = (i + 1) & 1023;
    attempt = attempt % 12 + 1;  // Spans the uncapped and capped ranges.
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ComputeBackoff)
    ->Arg(static_cast<int>(JitterKind::kNone))
    ->Arg(static_cast<int>(JitterKind::kFull))
    ->Arg(static_cast<int>(JitterKind::kEqual))
    ->Arg(static_cast<int>(JitterKind::kDecorrelated));

void BM_ComputeBackoffHugeAttempt(benchmark::State& state) {
  BackoffSpec spec;
  const std::vector<double>& samples = Samples();
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ComputeBackoff(spec, 10000, samples[i], Duration{}));
    i = (i + 1) & 1023;
  }
}
BENCHMARK(BM_ComputeBackoffHugeAttempt);

void BM_DecideRetry(benchmark::State& state) {
  RetryPolicy policy;
  const auto c = static_cast<FailureClass>(state.range(0));
  state.SetLabel(std::string(FailureClassName(c)));
  const std::vector<double>& samples = Samples();
  std::size_t i = 0;
  int attempt = 1;
  for (auto _ : state) {
    RetryDecision d = DecideRetry(policy, c, attempt, samples[i], Duration{});
    benchmark::DoNotOptimize(d);
    i = (i + 1) & 1023;
    attempt = attempt % policy.max_attempts + 1;  // Covers retry and dead-letter.
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecideRetry)
    ->Arg(static_cast<int>(FailureClass::kTransient))
    ->Arg(static_cast<int>(FailureClass::kPermanent))
    ->Arg(static_cast<int>(FailureClass::kUnknown));

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
