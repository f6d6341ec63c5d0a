// JobRunner throughput and latency on the in-memory backends: 2 worker
// threads, no-op handlers, logging at warn (issue 3 targets).
//
//   BM_DrainFullContract   (a) dedup_key + lock_key + idempotency_key, InMemoryMetricsSink
//   BM_DrainContractOff    (b) plain envelope, NullMetricsSink
//   BM_EnqueueToStart      (c) enqueue-to-start latency with idle workers (p50/p99, us)
//   BM_SteadyBacklog/N     (d) throughput while the backlog stays at N jobs
//                              (each handler enqueues a replacement job)
//
// "Drain" figures are the processing rate of a pre-filled backlog, from
// Start() to the last completion; the enqueue rate of the same jobs is
// reported apart (enqueue_jobs_per_s).
//
// Run: build-runner/bench/job_runner_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/process_memory.h"
#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "jobpact/in_memory/metrics_sink.h"
#include "jobpact/in_memory/queue_backend.h"
#include "jobpact/job_runner.h"

namespace jobpact {
namespace {

using SteadyClock = std::chrono::steady_clock;
using bench::ResidentBytes;

double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// CPU time of the whole process (all threads), in seconds.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Counts handler calls and wakes the bench thread at a target.
struct Counter {
  std::atomic<std::int64_t> done{0};
  std::int64_t target = 0;
  std::mutex mu;
  std::condition_variable cv;
  void Hit() {
    if (done.fetch_add(1, std::memory_order_relaxed) + 1 == target) {
      std::lock_guard<std::mutex> l(mu);
      cv.notify_all();
    }
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done.load() >= target; });
  }
};

// Workers of every runner here: 2, or JOBPACT_BENCH_WORKERS (to compare a
// 1-worker drain with a 2-worker one: what the workers' hand-offs cost).
int BenchWorkers() {
  const char* v = std::getenv("JOBPACT_BENCH_WORKERS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 2;
}

struct Rig {
  std::shared_ptr<Clock> clock = SystemClock::Default();
  std::shared_ptr<InMemoryQueueBackend> queue = std::make_shared<InMemoryQueueBackend>(clock);
  std::shared_ptr<InMemoryMetricsSink> metrics = std::make_shared<InMemoryMetricsSink>();
  std::unique_ptr<JobRunner> runner;

  explicit Rig(bool full_contract) {
    JobRunnerOptions o;
    o.queue = queue;
    o.clock = clock;
    o.workers = BenchWorkers();
    o.log_level = LogLevel::kWarn;
    o.logger_name = "jobpact.bench";
    if (full_contract) {
      o.metrics = metrics;
      o.locks = std::make_shared<InMemoryLockStore>(clock);
      o.idempotency = std::make_shared<InMemoryIdempotencyStore>(clock);
    } else {
      o.metrics = std::make_shared<NullMetricsSink>();
    }
    runner = std::move(JobRunner::Create(o).value());
  }
};

Envelope MakeEnvelope(std::int64_t i, bool full_contract) {
  Envelope e;
  e.job_type = "bench.noop";
  e.payload = "{\"order_id\":\"ord_" + std::to_string(i) + "\"}";
  if (full_contract) {
    const std::string id = std::to_string(i);
    e.idempotency_key = "bench.noop:ord_" + id;
    e.dedup_key = "bench.noop:ord_" + id;
    e.lock_key = "order:ord_" + id;
  }
  return e;
}

void Drain(benchmark::State& state, bool full_contract) {
  const std::int64_t jobs = state.range(0);
  double enqueue_seconds = 0;
  double cpu_seconds = 0;
  for (auto _ : state) {
    Rig rig(full_contract);
    Counter counter;
    counter.target = jobs;
    if (!rig.runner->Handle("bench.noop", [&](JobContext&) {
          counter.Hit();
          return Status::Ok();
        }).ok()) {
      state.SkipWithError("Handle failed");
      return;
    }
    const auto e0 = SteadyClock::now();
    for (std::int64_t i = 0; i < jobs; ++i) {
      if (!rig.runner->Enqueue(MakeEnvelope(i, full_contract)).ok()) {
        state.SkipWithError("Enqueue failed");
        return;
      }
    }
    enqueue_seconds += SecondsSince(e0);
    const auto t0 = SteadyClock::now();
    const double cpu0 = ProcessCpuSeconds();
    rig.runner->Start().IgnoreError();
    counter.Wait();
    rig.runner->Shutdown(Seconds(10)).IgnoreError();  // Waits for the last acks.
    state.SetIterationTime(SecondsSince(t0));
    cpu_seconds += ProcessCpuSeconds() - cpu0;
  }
  state.SetItemsProcessed(state.iterations() * jobs);
  state.counters["enqueue_jobs_per_s"] =
      benchmark::Counter(static_cast<double>(jobs * state.iterations()) / enqueue_seconds);
  // Load-independent: CPU spent per job by the workers (2 cores' worth at
  // most), so 2e6 / cpu_us_per_job bounds jobs/s on an idle machine.
  state.counters["cpu_us_per_job"] =
      cpu_seconds * 1e6 / static_cast<double>(jobs * state.iterations());
}

void BM_DrainFullContract(benchmark::State& state) { Drain(state, true); }
void BM_DrainContractOff(benchmark::State& state) { Drain(state, false); }
BENCHMARK(BM_DrainFullContract)->Arg(200000)->UseManualTime()->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_DrainContractOff)->Arg(200000)->UseManualTime()->Unit(benchmark::kMillisecond)
    ->Iterations(3);
// Small runs for valgrind --tool=callgrind (instruction counts per job are
// repeatable on a loaded machine where wall time is not):
//   --benchmark_filter='Drain.*/20000/'
BENCHMARK(BM_DrainFullContract)->Arg(20000)->UseManualTime()->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_DrainContractOff)->Arg(20000)->UseManualTime()->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_EnqueueToStart(benchmark::State& state) {
  Rig rig(false);
  std::atomic<std::int64_t> started_ns{0};
  if (!rig.runner->Handle("bench.noop", [&](JobContext&) {
        started_ns.store(SteadyClock::now().time_since_epoch().count(), std::memory_order_release);
        return Status::Ok();
      }).ok()) {
    state.SkipWithError("Handle failed");
    return;
  }
  rig.runner->Start().IgnoreError();
  std::vector<double> latencies_us;
  for (auto _ : state) {
    // Let both workers go idle (they wait on the condition variable).
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    started_ns.store(0, std::memory_order_release);
    const auto t0 = SteadyClock::now();
    if (!rig.runner->Enqueue(MakeEnvelope(0, false)).ok()) {
      state.SkipWithError("Enqueue failed");
      break;
    }
    std::int64_t s;
    while ((s = started_ns.load(std::memory_order_acquire)) == 0) {
    }
    latencies_us.push_back(
        static_cast<double>(s - t0.time_since_epoch().count()) / 1000.0);
  }
  rig.runner->Shutdown(Seconds(10)).IgnoreError();
  if (latencies_us.empty()) return;
  std::sort(latencies_us.begin(), latencies_us.end());
  auto pct = [&](double q) {
    return latencies_us[std::min(latencies_us.size() - 1,
                                 static_cast<std::size_t>(q * latencies_us.size()))];
  };
  state.counters["p50_us"] = pct(0.50);
  state.counters["p99_us"] = pct(0.99);
  state.counters["max_us"] = latencies_us.back();
}
BENCHMARK(BM_EnqueueToStart)->Iterations(5000);

// The backlog stays at N: each handler enqueues one replacement job, so the
// queue holds N jobs throughout while `kProcessed` jobs run.
void BM_SteadyBacklog(benchmark::State& state) {
  const std::int64_t backlog = state.range(0);
  constexpr std::int64_t kProcessed = 200000;
  double bytes_per_job = 0;
  for (auto _ : state) {
    Rig rig(false);
    Counter counter;
    counter.target = kProcessed;
    std::atomic<std::int64_t> next_id{backlog};
    JobRunner* runner = rig.runner.get();
    if (!runner->Handle("bench.noop", [&](JobContext&) {
          runner->Enqueue(MakeEnvelope(next_id.fetch_add(1), false)).status().IgnoreError();
          counter.Hit();
          return Status::Ok();
        }).ok()) {
      state.SkipWithError("Handle failed");
      return;
    }
    const long rss0 = ResidentBytes();
    for (std::int64_t i = 0; i < backlog; ++i) {
      runner->Enqueue(MakeEnvelope(i, false)).status().IgnoreError();
    }
    // Only the first iteration grows the heap; later ones reuse freed memory.
    if (bytes_per_job == 0) {
      bytes_per_job = static_cast<double>(ResidentBytes() - rss0) / static_cast<double>(backlog);
    }
    const auto t0 = SteadyClock::now();
    runner->Start().IgnoreError();
    counter.Wait();
    state.SetIterationTime(SecondsSince(t0));
    runner->Shutdown(Seconds(10)).IgnoreError();
  }
  state.SetItemsProcessed(state.iterations() * kProcessed);
  state.counters["rss_bytes_per_queued_job"] = bytes_per_job;
}
BENCHMARK(BM_SteadyBacklog)->Arg(1000)->Arg(1000000)->UseManualTime()
    ->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
