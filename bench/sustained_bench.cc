// Memory stays bounded under sustained load (issue 12): a JobRunner runs
// no-op jobs at full speed for a bounded time on each backend, while a
// producer keeps a backlog ready; every few seconds it samples the process's
// resident set (RSS), the heap in use (glibc mallinfo2) and, for SQLite,
// the database file with its -wal and -shm, and the finished jobs the store
// holds. At the end it compares the growth over the last third of the run
// with the growth over the first third: with count retention the store
// holds at most finished_retention.succeeded finished jobs of the type (plus
// what finishes between two maintenance passes), so after the first third
// the figures level off. With JOBPACT_SUSTAINED_RETENTION=age (age only,
// the behaviour before) they keep growing, which shows what the count
// retention is for.
//
// The jobs carry a dedup key each (the store's dedup index must shrink with
// the trimmed jobs), so the trim keeps every job that succeeded within the
// dedup window whatever the count (dedup may still find it): the window is
// JOBPACT_SUSTAINED_DEDUP_WINDOW seconds (default 10, so that a run of a
// minute shows the count at work; the runner's default is 5 minutes, and
// the store then holds the last 5 minutes of succeeded jobs with a dedup
// key). No idempotency key: idempotency records live in the
// IdempotencyStore and are retained by idempotency_retention (24 h) alone,
// which this run does not bound (docs/benchmarks.md says so).
//
// For the in-memory store it first measures the heap bytes each finished
// job holds (200,000 jobs drained with no count retention, heap in use after
// minus before, divided by the jobs).
//
// Environment:
//   JOBPACT_SUSTAINED_SECONDS   run time per backend (default 60)
//   JOBPACT_SUSTAINED_SAMPLE    seconds between samples (default 5)
//   JOBPACT_SUSTAINED_BACKENDS  comma-separated: memory,sqlite (default both)
//   JOBPACT_SUSTAINED_KEEP      finished_retention.succeeded (default the
//                               runner's, 100,000)
//   JOBPACT_SUSTAINED_RETENTION "count" (default) or "age" (no count limit)
//   JOBPACT_SUSTAINED_DEDUP_WINDOW  dedup_window in seconds (default 10)
//   JOBPACT_SUSTAINED_DIR       where the SQLite file goes (default: a new
//                               directory under the system temp directory)
//
// Run: build/bench/sustained_bench   (exit status 1 if a run did not level off)
#include <malloc.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/process_memory.h"
#include "jobpact/backend.h"
#include "jobpact/in_memory/metrics_sink.h"
#include "jobpact/job_runner.h"
#ifdef JOBPACT_BENCH_WITH_SQLITE
#include "jobpact/sqlite/sqlite_backend.h"
#endif

namespace jobpact {
namespace {

using SteadyClock = std::chrono::steady_clock;
using bench::ResidentBytes;

double EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atof(v) > 0 ? std::atof(v) : fallback;
}
std::string EnvString(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

long HeapInUse() { return static_cast<long>(mallinfo2().uordblks); }

long FileBytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<long>(st.st_size) : 0;
}

double Mb(long bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct Sample {
  double seconds = 0;
  std::int64_t jobs = 0;
  long rss = 0;
  long heap = 0;
  long file = 0;  // SQLite: db + wal + shm; 0 in memory.
  std::int64_t finished = 0;
};

// The runner on one backend, a producer thread keeping a backlog ready.
class Run {
 public:
  Run(BackendBundle bundle, std::optional<std::int64_t> keep) {
    JobRunnerOptions o;
    o.backend = std::move(bundle);
    o.workers = 2;
    o.log_level = LogLevel::kWarn;
    o.logger_name = "jobpact.bench";
    o.metrics = std::make_shared<NullMetricsSink>();
    o.finished_retention.succeeded = keep;
    o.dedup_window = std::chrono::duration_cast<Duration>(
        std::chrono::duration<double>(EnvDouble("JOBPACT_SUSTAINED_DEDUP_WINDOW", 10)));
    admin_ = o.backend.admin;
    auto runner = JobRunner::Create(o);
    if (!runner.ok()) {
      std::fprintf(stderr, "JobRunner::Create: %s\n", runner.status().ToString().c_str());
      std::exit(2);
    }
    runner_ = std::move(*runner);
    Status handled = runner_->Handle("bench.sustained", [this](JobContext&) {
      done_.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    });
    if (!handled.ok()) std::exit(2);
  }

  void Start() {
    (void)runner_->Start();
    producer_ = std::thread([this] { Produce(); });
  }
  void Stop() {
    stop_ = true;
    producer_.join();
    (void)runner_->Shutdown(Seconds(30));
  }
  // Processes `jobs` jobs and waits for them (the bytes-per-job preamble).
  void Drain(std::int64_t jobs) {
    limit_ = jobs;
    Start();
    while (done_.load() < jobs) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    Stop();
  }

  std::int64_t done() const { return done_.load(std::memory_order_relaxed); }
  std::int64_t Finished() {
    Result<QueueStats> s = admin_->Stats();
    return s.ok() ? s->by_status[JobStatus::kSucceeded] : -1;
  }

 private:
  // Keeps up to kBacklog jobs waiting, in batches of kBatch.
  void Produce() {
    constexpr std::int64_t kBacklog = 20000;
    constexpr int kBatch = 500;
    while (!stop_ && (limit_ == 0 || enqueued_ < limit_)) {
      if (enqueued_ - done() > kBacklog) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      std::vector<Envelope> batch;
      for (int i = 0; i < kBatch && (limit_ == 0 || enqueued_ < limit_); ++i, ++enqueued_) {
        Envelope e;
        e.job_type = "bench.sustained";
        e.payload = "{\"order_id\":\"ord_" + std::to_string(enqueued_) + "\"}";
        e.dedup_key = "bench.sustained:ord_" + std::to_string(enqueued_);
        batch.push_back(std::move(e));
      }
      Result<std::vector<EnqueueResult>> r = runner_->EnqueueBatch(std::move(batch));
      if (!r.ok()) {
        std::fprintf(stderr, "EnqueueBatch: %s\n", r.status().ToString().c_str());
        std::exit(2);
      }
    }
  }

  std::shared_ptr<QueueAdmin> admin_;
  std::unique_ptr<JobRunner> runner_;
  std::thread producer_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> done_{0};
  std::int64_t enqueued_ = 0;  // Producer thread only.
  std::int64_t limit_ = 0;     // 0: no limit.
};

// Heap bytes per finished job held by the in-memory store.
void MeasureBytesPerFinishedJob() {
  constexpr std::int64_t kJobs = 200000;
  const long before = HeapInUse();
  Run run(InMemoryBackend(SystemClock::Default()), std::nullopt);
  run.Drain(kJobs);
  malloc_trim(0);
  const long after = HeapInUse();
  std::printf("memory: %lld finished jobs held: heap in use +%.1f MB, %.0f bytes per job\n",
              static_cast<long long>(run.Finished()), Mb(after - before),
              static_cast<double>(after - before) / static_cast<double>(kJobs));
}

// Runs one backend for `seconds`, sampling every `sample` seconds. Returns
// true if the last third's growth is at most a fifth of the first third's
// (or under 8 MB in all), for RSS and the file alike.
bool Sustain(const std::string& name, BackendBundle bundle, const std::string& db_path,
             double seconds, double sample, std::optional<std::int64_t> keep) {
  std::vector<Sample> samples;
  Run run(std::move(bundle), keep);
  const auto t0 = SteadyClock::now();
  auto take = [&] {
    Sample s;
    s.seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    s.jobs = run.done();
    s.rss = ResidentBytes();
    s.heap = HeapInUse();
    if (!db_path.empty()) {
      s.file = FileBytes(db_path) + FileBytes(db_path + "-wal") + FileBytes(db_path + "-shm");
    }
    s.finished = run.Finished();
    samples.push_back(s);
    std::printf(
        "%-7s t=%6.1fs jobs=%10lld (%7.0f/s) rss=%8.1f MB heap=%8.1f MB file=%8.1f MB "
        "succeeded held=%lld\n",
        name.c_str(), s.seconds, static_cast<long long>(s.jobs),
        s.seconds > 0 ? static_cast<double>(s.jobs) / s.seconds : 0.0, Mb(s.rss), Mb(s.heap),
        Mb(s.file), static_cast<long long>(s.finished));
    std::fflush(stdout);
  };
  run.Start();
  take();
  const auto end = t0 + std::chrono::duration_cast<SteadyClock::duration>(
                            std::chrono::duration<double>(seconds));
  auto next = t0;
  while (SteadyClock::now() < end) {
    next +=
        std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(sample));
    std::this_thread::sleep_until(std::min(next, end));
    take();
  }
  run.Stop();

  // Growth over the first and the last third, from the samples nearest to
  // 0, T/3, 2T/3 and T.
  auto at = [&](double t) {
    const Sample* best = &samples.front();
    for (const Sample& s : samples) {
      if (std::abs(s.seconds - t) < std::abs(best->seconds - t)) best = &s;
    }
    return *best;
  };
  const double T = samples.back().seconds;
  const Sample a = at(0), b = at(T / 3), c = at(2 * T / 3), d = samples.back();
  auto flat = [](long first, long last) {
    return last <= 8L * 1024 * 1024 || (first > 0 && last * 5 <= first);
  };
  const bool rss_flat = flat(b.rss - a.rss, d.rss - c.rss);
  const bool file_flat = db_path.empty() || flat(b.file - a.file, d.file - c.file);
  std::printf("%-7s %.0f s, %lld jobs (%.0f/s): rss first third %+.1f MB, last third %+.1f MB",
              name.c_str(), T, static_cast<long long>(d.jobs), static_cast<double>(d.jobs) / T,
              Mb(b.rss - a.rss), Mb(d.rss - c.rss));
  if (!db_path.empty()) {
    std::printf("; file first third %+.1f MB, last third %+.1f MB", Mb(b.file - a.file),
                Mb(d.file - c.file));
  }
  std::printf(" -> %s\n", rss_flat && file_flat ? "levels off" : "still growing");
  return rss_flat && file_flat;
}

int Main() {
  const double seconds = EnvDouble("JOBPACT_SUSTAINED_SECONDS", 60);
  const double sample = EnvDouble("JOBPACT_SUSTAINED_SAMPLE", 5);
  const std::string backends = EnvString("JOBPACT_SUSTAINED_BACKENDS", "memory,sqlite");
  const bool by_age_only = EnvString("JOBPACT_SUSTAINED_RETENTION", "count") == "age";
  std::optional<std::int64_t> keep = JobRunnerOptions().finished_retention.succeeded;
  if (const char* k = std::getenv("JOBPACT_SUSTAINED_KEEP")) keep = std::atoll(k);
  if (by_age_only) keep.reset();
  std::printf(
      "sustained run: %.0f s per backend, sample every %.0f s, 2 workers, no-op jobs, "
      "retention: %s\n",
      seconds, sample,
      keep ? ("newest " + std::to_string(*keep) + " succeeded per type, 24 h").c_str()
           : "24 h (age only)");
  bool all_flat = true;
  std::stringstream list(backends);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (name == "memory") {
      MeasureBytesPerFinishedJob();
      all_flat &=
          Sustain("memory", InMemoryBackend(SystemClock::Default()), "", seconds, sample, keep);
    } else if (name == "sqlite") {
#ifdef JOBPACT_BENCH_WITH_SQLITE
      std::string dir = EnvString("JOBPACT_SUSTAINED_DIR", "");
      if (dir.empty()) {
        std::string tmpl =
            (std::filesystem::temp_directory_path() / "jobpact_sustained_XXXXXX").string();
        if (mkdtemp(tmpl.data()) == nullptr) return 2;
        dir = tmpl;
      }
      const std::string path = dir + "/jobs.db";
      auto db = sqlite::SqliteBackend::Open(path, {}, SystemClock::Default());
      if (!db.ok()) {
        std::fprintf(stderr, "open %s: %s\n", path.c_str(), db.status().ToString().c_str());
        return 2;
      }
      all_flat &= Sustain("sqlite", (*db)->bundle(), path, seconds, sample, keep);
      db->reset();
      std::filesystem::remove_all(dir);
#else
      std::printf("sqlite: not built (-DJOBPACT_WITH_SQLITE=ON)\n");
#endif
    } else {
      std::fprintf(stderr, "unknown backend '%s' (memory, sqlite)\n", name.c_str());
      return 2;
    }
  }
  return all_flat ? 0 : 1;
}

}  // namespace
}  // namespace jobpact

int main() { return jobpact::Main(); }
