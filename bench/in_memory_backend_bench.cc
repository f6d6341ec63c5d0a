// Benchmarks of the in-memory reference backends: the costs the JobRunner's
// throughput targets rest on (300k jobs/s full contract, 1M jobs/s plain,
// with 2 workers; a 1,000,000-job backlog within 20% of a 1,000 one; under
// 1 KiB per queued small job).
//
//   build-mem/bench/in_memory_backend_bench --benchmark_min_time=0.5
#include <malloc.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "jobpact/in_memory.h"
#include "jobpact/job.h"
#include "jobpact/prometheus/metrics_sink.h"

namespace jobpact {
namespace {

// A small job, as a producer would enqueue it after PrepareForEnqueue.
Envelope SmallJob(const Clock& clock) {
  Envelope env;
  env.job_type = "email.send";
  env.payload = R"({"user_id":12345})";
  PrepareForEnqueue(env, clock.Now());
  return env;
}

void BM_Enqueue(benchmark::State& state) {
  auto clock = SystemClock::Default();
  InMemoryQueueBackend queue(clock);
  Envelope env = SmallJob(*clock);
  std::vector<std::string> ids;
  for (int i = 0; i < 200000; ++i) ids.push_back(NewJobId(clock->Now()));
  std::size_t next = 0;
  for (auto _ : state) {
    env.job_id = ids[next++];  // The copy into env is part of what is timed.
    benchmark::DoNotOptimize(queue.Enqueue(env, {}));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Enqueue)->Iterations(200000);

// Steady state at a constant backlog: each job is enqueued, dequeued (in
// batches of range(0)) and completed, with the finished records purged as
// the runner's maintenance would. range(1) is the backlog kept queued.
void BM_EnqueueDequeueComplete(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int backlog = static_cast<int>(state.range(1));
  auto clock = SystemClock::Default();
  InMemoryQueueBackend queue(clock);
  Envelope env = SmallJob(*clock);
  std::vector<std::string> ids;
  for (int i = 0; i < backlog + 1'000'000; ++i) ids.push_back(NewJobId(clock->Now()));
  std::size_t next_id = 0;
  for (int i = 0; i < backlog; ++i) {
    env.job_id = ids[next_id++];
    (void)queue.Enqueue(env, {});
  }
  DequeueRequest req;
  req.max_jobs = batch;
  req.worker_id = "bench";
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  std::int64_t jobs = 0;
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) {
      if (next_id == ids.size()) next_id = 0;  // Old ones were purged by then.
      env.job_id = ids[next_id++];
      (void)queue.Enqueue(env, {});
    }
    Result<std::vector<Delivery>> got = queue.Dequeue(req);
    for (const Delivery& d : *got) (void)queue.Complete(d, done);
    jobs += static_cast<std::int64_t>(got->size());
    if (jobs % 16384 < batch) (void)queue.PurgeFinished(clock->Now() + Seconds(1));
  }
  state.SetItemsProcessed(jobs);
  state.counters["backlog"] = static_cast<double>(backlog);
}
BENCHMARK(BM_EnqueueDequeueComplete)
    ->ArgNames({"batch", "backlog"})
    ->Args({1, 1000})
    ->Args({16, 1000})
    ->Args({1, 1'000'000})
    ->Args({16, 1'000'000})
    ->Unit(benchmark::kNanosecond);

// Two threads sharing one backend, as two runner workers do.
void BM_DequeueCompleteTwoThreads(benchmark::State& state) {
  static std::shared_ptr<InMemoryQueueBackend> queue;
  auto clock = SystemClock::Default();
  if (state.thread_index() == 0) queue = std::make_shared<InMemoryQueueBackend>(clock);
  // Benchmark's threads start together after this setup (barrier in State).
  Envelope env = SmallJob(*clock);
  DequeueRequest req;
  req.max_jobs = 16;
  req.worker_id = "bench" + std::to_string(state.thread_index());
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  std::int64_t jobs = 0;
  for (auto _ : state) {
    for (int i = 0; i < 16; ++i) {
      env.job_id = NewJobId(clock->Now());
      (void)queue->Enqueue(env, {});
    }
    Result<std::vector<Delivery>> got = queue->Dequeue(req);
    for (const Delivery& d : *got) (void)queue->Complete(d, done);
    jobs += static_cast<std::int64_t>(got->size());
    if (jobs % 16384 < 16) (void)queue->PurgeFinished(clock->Now() + Seconds(1));
  }
  state.SetItemsProcessed(jobs);
  if (state.thread_index() == 0) queue.reset();
}
BENCHMARK(BM_DequeueCompleteTwoThreads)->Threads(2)->UseRealTime();

void BM_LockAcquireRelease(benchmark::State& state) {
  auto clock = SystemClock::Default();
  InMemoryLockStore locks(clock);
  std::vector<std::string> keys;
  for (int i = 0; i < 1024; ++i) keys.push_back("order:" + std::to_string(i));
  std::size_t i = 0;
  for (auto _ : state) {
    const std::string& key = keys[i++ & 1023];
    benchmark::DoNotOptimize(locks.Acquire(key, "worker-1", Seconds(30)));
    benchmark::DoNotOptimize(locks.Release(key, "worker-1"));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LockAcquireRelease);

void BM_IdempotencyClaimComplete(benchmark::State& state) {
  auto clock = SystemClock::Default();
  InMemoryIdempotencyStore store(clock);
  std::vector<std::string> keys;
  for (int i = 0; i < 200000; ++i) keys.push_back("invoice.generate:ord_" + std::to_string(i));
  std::size_t i = 0;
  for (auto _ : state) {
    const std::string& key = keys[i++ % keys.size()];
    benchmark::DoNotOptimize(store.Claim(key, "worker-1", Seconds(45)));
    benchmark::DoNotOptimize(store.Complete(key, "worker-1", "ok", std::chrono::hours(24)));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_IdempotencyClaimComplete)->Iterations(200000);

// The two sinks share their sample path (src/internal/series_table.h); the
// Prometheus one adds a bucket search per observation.
template <typename Sink>
void BM_MetricsIncrement(benchmark::State& state) {
  static Sink* sink = new Sink();  // Shared by the threads.
  MetricLabels labels{"invoice.generate", "default", "", ""};
  for (auto _ : state) sink->Increment(metric::kSucceeded, labels, 1);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_TEMPLATE(BM_MetricsIncrement, InMemoryMetricsSink)->Threads(1)->Threads(2);
BENCHMARK_TEMPLATE(BM_MetricsIncrement, PrometheusMetricsSink)->Threads(1)->Threads(2);

template <typename Sink>
void BM_MetricsObserve(benchmark::State& state) {
  static Sink* sink = new Sink();
  MetricLabels labels{"invoice.generate", "default", "", ""};
  double v = 0.001;
  for (auto _ : state) {
    sink->Observe(metric::kDuration, labels, v);
    v = v < 10 ? v * 1.01 : 0.001;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_TEMPLATE(BM_MetricsObserve, InMemoryMetricsSink)->Threads(1)->Threads(2);
BENCHMARK_TEMPLATE(BM_MetricsObserve, PrometheusMetricsSink)->Threads(1)->Threads(2);

// A scrape of a service's worth of series: 20 job types' counters (with
// reasons and failure classes), their three histograms, a few gauges.
void BM_PrometheusScrape(benchmark::State& state) {
  PrometheusMetricsSink sink;
  for (int t = 0; t < 20; ++t) {
    const std::string type = "job.type_" + std::to_string(t);
    const MetricLabels l{type, "default", "", ""};
    for (std::string_view c : {metric::kEnqueued, metric::kStarted, metric::kSucceeded}) {
      sink.Increment(c, l, 100);
    }
    sink.Increment(metric::kDeadLettered, {type, "default", "permanent_error", ""}, 1);
    sink.Increment(metric::kRetries, {type, "default", "", "transient"}, 5);
    for (std::string_view h : {metric::kQueueLatency, metric::kDuration, metric::kAttempts}) {
      sink.Observe(h, l, 0.02);
    }
    sink.SetGauge(metric::kRetryBudgetBalance, {type, "", "", ""}, 10);
  }
  sink.SetGauge(metric::kQueueDepth, {"", "default", "", ""}, 42);
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = sink.Scrape();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_PrometheusScrape)->Unit(benchmark::kMicrosecond);

// Bytes in use on the heap: small blocks plus mmapped large ones (hash
// table bucket arrays).
std::size_t HeapInUse() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Heap bytes per queued small job (everything the backend keeps for it:
// record, indexes, history), from glibc's allocator statistics.
void BM_MemoryPerQueuedJob(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto clock = SystemClock::Default();
  Envelope env = SmallJob(*clock);
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(NewJobId(clock->Now()));
  double per_job = 0;
  for (auto _ : state) {
    auto queue = std::make_unique<InMemoryQueueBackend>(clock);
    const std::size_t before = HeapInUse();
    for (const std::string& id : ids) {
      env.job_id = id;
      (void)queue->Enqueue(env, {});
    }
    const std::size_t after = HeapInUse();
    per_job = static_cast<double>(after - before) / n;
    state.PauseTiming();
    queue.reset();
    state.ResumeTiming();
  }
  state.counters["bytes_per_job"] = per_job;
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_MemoryPerQueuedJob)->Arg(100000)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
