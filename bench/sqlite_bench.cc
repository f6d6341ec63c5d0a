// SQLite backend throughput (issue 4 targets), on a fresh database file per
// benchmark run (WAL, synchronous=NORMAL: the defaults).
//
//   BM_SqliteEnqueueSingle       one Enqueue (one transaction) per job
//   BM_SqliteEnqueueBatch100     EnqueueBatch of 100 jobs in one transaction
//   BM_SqliteProcess/B           2 threads: Dequeue(max_jobs = B) + Complete per
//                                job, straight on the QueueBackend
//   BM_SqliteRunnerContractOff/N/B  JobRunner, 2 workers, dequeue batch B, plain jobs
//   BM_SqliteRunnerFullContract/N/B the same with dedup_key + lock_key +
//                                idempotency_key, the LockStore and the
//                                IdempotencyStore on the same SQLite file
//   BM_SqliteStartLatencyAcrossProcesses/W/N  enqueue->start latency of a job
//                                enqueued by this process and run by an idle
//                                JobRunner in a child process on the same
//                                file, N jobs 5 ms apart; W = 1: the
//                                runner waits on the file's WAL (inotify,
//                                QueueBackend::WaitForWork), W = 0: it polls
//                                (poll_interval 100 ms, the default)
//   BM_SqliteLeasePastPausedBacklog/P  one Dequeue(16) + 16 Completes of a
//                                live type while P older jobs of a paused
//                                type wait ahead of it (the lease step must
//                                cost the same for P = 0 and P = 100,000)
//
// items_per_second is jobs/s (wall clock); cpu_us_per_job is the process's
// CPU time per job, all threads. "Process" figures are the drain rate of a
// pre-filled backlog, from the first dequeue to the last completion.
//
// Run: build-sqlite/bench/sqlite_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/queue_backend_wrapper.h"
#include "jobpact/sqlite/sqlite_backend.h"

namespace jobpact {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// CPU time (user + system) of the whole process, all threads: with the
// machine shared, wall-clock rates undercount what the code can do, and
// cpu_us_per_job says what one job costs.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// A fresh database in a new temporary directory, removed afterwards.
class BenchDb {
 public:
  BenchDb() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "jobpact_sqlite_bench_XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) dir_ = tmpl;
    auto b = sqlite::SqliteBackend::Open(dir_ + "/jobs.db", {}, SystemClock::Default());
    if (b.ok()) backend_ = *b;
  }
  ~BenchDb() {
    backend_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  sqlite::SqliteBackend* get() const { return backend_.get(); }
  std::string path() const { return dir_ + "/jobs.db"; }

 private:
  std::string dir_;
  std::shared_ptr<sqlite::SqliteBackend> backend_;
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
  PrepareForEnqueue(e, SystemClock::Default()->Now());
  return e;
}

bool Fill(sqlite::SqliteBackend& backend, std::int64_t jobs, bool full_contract) {
  std::vector<Envelope> batch;
  for (std::int64_t i = 0; i < jobs; ++i) {
    batch.push_back(MakeEnvelope(i, full_contract));
    if (batch.size() == 500 || i + 1 == jobs) {
      if (!backend.queue()->EnqueueBatch(batch, {}).ok()) return false;
      batch.clear();
    }
  }
  return true;
}

void BM_SqliteEnqueueSingle(benchmark::State& state) {
  BenchDb db;
  if (db.get() == nullptr) return state.SkipWithError("open failed");
  std::int64_t i = 0;
  for (auto _ : state) {
    if (!db.get()->queue()->Enqueue(MakeEnvelope(i++, false), {}).ok()) {
      return state.SkipWithError("Enqueue failed");
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SqliteEnqueueSingle)->Iterations(20000)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_SqliteEnqueueBatch100(benchmark::State& state) {
  BenchDb db;
  if (db.get() == nullptr) return state.SkipWithError("open failed");
  std::int64_t i = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<Envelope> batch;
    for (int k = 0; k < 100; ++k) batch.push_back(MakeEnvelope(i++, false));
    state.ResumeTiming();
    if (!db.get()->queue()->EnqueueBatch(batch, {}).ok()) {
      return state.SkipWithError("EnqueueBatch failed");
    }
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_SqliteEnqueueBatch100)->Iterations(500)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Two threads drain a backlog straight through the QueueBackend.
void BM_SqliteProcess(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  constexpr std::int64_t kJobs = 50000;
  double cpu = 0;
  for (auto _ : state) {
    state.PauseTiming();
    BenchDb db;
    if (db.get() == nullptr || !Fill(*db.get(), kJobs, false)) {
      return state.SkipWithError("setup failed");
    }
    std::atomic<bool> failed{false};
    auto queue = db.get()->queue();
    state.ResumeTiming();
    const auto t0 = SteadyClock::now();
    const double cpu0 = ProcessCpuSeconds();
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        DequeueRequest req;
        req.max_jobs = batch;
        req.worker_id = "bench/w" + std::to_string(t);
        Completion done;
        done.reason = "succeeded";
        while (!failed) {
          auto got = queue->Dequeue(req);
          if (!got.ok()) {
            failed = true;
            return;
          }
          if (got->empty()) return;
          for (const Delivery& d : *got) {
            if (!queue->Complete(d, done).ok()) failed = true;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    state.SetIterationTime(SecondsSince(t0));
    cpu += ProcessCpuSeconds() - cpu0;
    if (failed) return state.SkipWithError("Dequeue/Complete failed");
  }
  state.SetItemsProcessed(state.iterations() * kJobs);
  state.counters["cpu_us_per_job"] = cpu * 1e6 / static_cast<double>(state.iterations() * kJobs);
}
BENCHMARK(BM_SqliteProcess)
    ->Arg(1)
    ->Arg(16)
    ->Arg(64)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// The JobRunner (2 workers) drains a backlog on the SQLite stores.
void RunnerDrain(benchmark::State& state, bool full_contract) {
  const std::int64_t jobs = state.range(0);
  double cpu = 0;
  for (auto _ : state) {
    state.PauseTiming();
    BenchDb db;
    if (db.get() == nullptr || !Fill(*db.get(), jobs, full_contract)) {
      return state.SkipWithError("setup failed");
    }
    JobRunnerOptions o;
    // The whole bundle in both variants: a SQLite queue needs its own
    // locks and idempotency store (JobRunner::Create refuses in-memory
    // ones); jobs without keys (!full_contract) touch them only through the
    // maintenance pass's purge of expired claims.
    o.backend = db.get()->bundle();
    o.workers = 2;
    o.dequeue_batch = static_cast<int>(state.range(1));
    o.log_level = LogLevel::kWarn;
    o.logger_name = "jobpact.bench";
    auto runner = JobRunner::Create(o);
    if (!runner.ok()) return state.SkipWithError("JobRunner::Create failed");
    std::atomic<std::int64_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
    Status handled = (*runner)->Handle("bench.noop", [&](JobContext&) {
      if (done.fetch_add(1) + 1 == jobs) {
        std::lock_guard<std::mutex> l(mu);
        cv.notify_all();
      }
      return Status::Ok();
    });
    if (!handled.ok()) return state.SkipWithError("Handle failed");
    state.ResumeTiming();
    const auto t0 = SteadyClock::now();
    const double cpu0 = ProcessCpuSeconds();
    (*runner)->Start().IgnoreError();
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return done.load() >= jobs; });
    }
    (*runner)->Shutdown(Seconds(30)).IgnoreError();  // Waits for the last acks.
    state.SetIterationTime(SecondsSince(t0));
    cpu += ProcessCpuSeconds() - cpu0;
    auto stats = db.get()->admin()->Stats();
    if (!stats.ok() || stats->by_status[JobStatus::kSucceeded] != jobs) {
      return state.SkipWithError("not every job succeeded");
    }
  }
  state.SetItemsProcessed(state.iterations() * jobs);
  state.counters["cpu_us_per_job"] = cpu * 1e6 / static_cast<double>(state.iterations() * jobs);
}

void BM_SqliteRunnerContractOff(benchmark::State& state) { RunnerDrain(state, false); }
void BM_SqliteRunnerFullContract(benchmark::State& state) { RunnerDrain(state, true); }
BENCHMARK(BM_SqliteRunnerContractOff)
    ->Args({50000, 16})
    ->Args({50000, 64})
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SqliteRunnerFullContract)
    ->Args({20000, 16})
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// A queue that cannot wait for work: the runner polls, as it did before
// the SQLite backend waited on its WAL.
class PollingQueue final : public QueueBackendWrapper {
 public:
  using QueueBackendWrapper::QueueBackendWrapper;
  Result<bool> WaitForWork(Duration) override {
    return Status::Unimplemented("WaitForWork: off for this benchmark");
  }
};

std::int64_t MonotonicNs() {
  // CLOCK_MONOTONIC (steady_clock) is one clock for every process of the
  // machine, so the child's start time and the parent's enqueue time compare.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

// The child: a JobRunner (1 worker) on `path` that writes each job's
// enqueue->start latency (ns, from the payload's enqueue time) to `out`,
// until it has run `jobs` jobs. Never returns.
[[noreturn]] void LatencyWorker(const std::string& path, bool wait_on_wal, int jobs, int out) {
  auto backend = sqlite::SqliteBackend::Open(path, {}, SystemClock::Default());
  if (!backend.ok()) _exit(2);
  JobRunnerOptions o;
  o.backend = (*backend)->bundle();
  if (!wait_on_wal) o.backend.queue = std::make_shared<PollingQueue>(o.backend.queue);
  o.workers = 1;
  o.log_level = LogLevel::kWarn;
  o.logger_name = "jobpact.bench";
  auto runner = JobRunner::Create(o);
  if (!runner.ok()) _exit(3);
  std::atomic<int> done{0};
  Status handled = (*runner)->Handle("bench.latency", [&](JobContext& ctx) {
    const std::int64_t now = MonotonicNs();
    const std::string& p = ctx.envelope().payload;  // {"t":<ns>}
    const std::int64_t sent = std::stoll(p.substr(p.find(':') + 1));
    const std::int64_t latency = now - sent;
    if (write(out, &latency, sizeof latency) != static_cast<ssize_t>(sizeof latency)) _exit(4);
    done.fetch_add(1);
    return Status::Ok();
  });
  if (!handled.ok() || !(*runner)->Start().ok()) _exit(5);
  while (done.load() < jobs) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  (*runner)->Shutdown(Seconds(10)).IgnoreError();
  _exit(0);
}

void BM_SqliteStartLatencyAcrossProcesses(benchmark::State& state) {
  const bool wait_on_wal = state.range(0) == 1;
  const int kJobs = static_cast<int>(state.range(1));
  constexpr int kWarmUp = 5;
  std::vector<double> latencies_ms;
  for (auto _ : state) {
    BenchDb db;  // Creates the file and its schema before the fork.
    if (db.get() == nullptr) return state.SkipWithError("setup failed");
    int fds[2];
    if (pipe(fds) != 0) return state.SkipWithError("pipe failed");
    const pid_t pid = fork();
    if (pid < 0) return state.SkipWithError("fork failed");
    if (pid == 0) {
      close(fds[0]);
      LatencyWorker(db.path(), wait_on_wal, kWarmUp + kJobs, fds[1]);
    }
    close(fds[1]);
    bool ok = true;
    for (int i = 0; i < kWarmUp + kJobs && ok; ++i) {
      Envelope e;
      e.job_type = "bench.latency";
      e.payload = "{\"t\":" + std::to_string(MonotonicNs()) + "}";
      PrepareForEnqueue(e, SystemClock::Default()->Now());
      ok = db.get()->queue()->Enqueue(e, {}).ok();
      // One job at a time: the worker is idle again when the next comes.
      std::int64_t latency = 0;
      ok = ok && read(fds[0], &latency, sizeof latency) == static_cast<ssize_t>(sizeof latency);
      if (ok && i >= kWarmUp) latencies_ms.push_back(static_cast<double>(latency) / 1e6);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    close(fds[0]);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    if (!ok || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return state.SkipWithError("the worker process failed");
    }
  }
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto at = [&](double q) {
    return latencies_ms[static_cast<std::size_t>(q * static_cast<double>(latencies_ms.size() - 1))];
  };
  state.counters["p50_ms"] = at(0.50);
  state.counters["p99_ms"] = at(0.99);
  state.counters["max_ms"] = latencies_ms.back();
}
BENCHMARK(BM_SqliteStartLatencyAcrossProcesses)
    ->Args({1, 500})
    ->Args({0, 50})  // Polling: about 0.1 s a job.
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void BM_SqliteLeasePastPausedBacklog(benchmark::State& state) {
  const std::int64_t paused = state.range(0);
  BenchDb db;
  if (db.get() == nullptr) return state.SkipWithError("cannot open the database");
  // The paused type's jobs are older, so they head the ready order.
  if (!Fill(*db.get(), paused, false)) return state.SkipWithError("fill failed");
  ControlRule pause;
  pause.kind = ControlKind::kPauseType;
  pause.subject = "bench.noop";
  pause.actor = "bench";
  pause.reason = "a paused backlog";
  if (!db.get()->admin()->SetControl(pause).ok()) return state.SkipWithError("pause failed");
  constexpr int kBatch = 16;
  const std::int64_t live_jobs = kBatch * static_cast<std::int64_t>(state.max_iterations);
  std::vector<Envelope> live;
  for (std::int64_t i = 0; i < live_jobs; ++i) {
    Envelope e = MakeEnvelope(i, false);
    e.job_type = "bench.live";
    live.push_back(std::move(e));
  }
  if (!db.get()->queue()->EnqueueBatch(live, {}).ok()) return state.SkipWithError("enqueue");
  DequeueRequest req;
  req.max_jobs = kBatch;
  req.worker_id = "bench";
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  for (auto _ : state) {
    auto batch = db.get()->queue()->Dequeue(req);
    if (!batch.ok() || static_cast<int>(batch->size()) != kBatch) {
      return state.SkipWithError("the lease step did not deliver the live jobs");
    }
    for (const Delivery& d : *batch) {
      if (d.job.envelope.job_type != "bench.live") return state.SkipWithError("leased a paused job");
      if (!db.get()->queue()->Complete(d, done).ok()) return state.SkipWithError("complete");
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_SqliteLeasePastPausedBacklog)
    ->Arg(0)
    ->Arg(100000)
    ->Iterations(50)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
