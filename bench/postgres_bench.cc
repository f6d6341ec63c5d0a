// PostgreSQL backend throughput (issue 9), against JOBPACT_POSTGRES_URL (a
// server with stock durability: scripts/lib.sh start_postgres), a fresh
// schema per benchmark run, dropped afterwards.
//
//   BM_PostgresEnqueueSingle       one Enqueue (one transaction) per job
//   BM_PostgresEnqueueBatch100     EnqueueBatch of 100 jobs in one transaction
//   BM_PostgresProcess/B           10 threads drain a backlog: Dequeue(max_jobs = B)
//                                  then one CompleteBatch of what it got (one
//                                  commit per batch, a savepoint per job)
//   BM_PostgresLeaseWithBacklog/R  one Dequeue(16) + CompleteBatch(16) with R
//                                  ready jobs waiting (R = 1,000,000: the
//                                  partial ready index keeps it flat)
//   BM_PostgresFindDuplicateWithFinished/F  the dedup check of a key with F
//                                  jobs of other keys succeeded within the
//                                  window (flat in F)
//   BM_PostgresLeaseWithTenantBurst/R  the same with R jobs of one tenant and
//                                  20 of another waiting (tenant fairness,
//                                  issue 11: a lease reads at most 16 jobs
//                                  of each tenant, however many A has)
//
// items_per_second is jobs/s (wall clock).
//
// Run: JOBPACT_POSTGRES_URL=postgres://... build/bench/postgres_bench
//        --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <libpq-fe.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/postgres/postgres_backend.h"

namespace jobpact {
namespace {

// A fresh schema on the server of JOBPACT_POSTGRES_URL, dropped afterwards.
class BenchSchema {
 public:
  explicit BenchSchema(int pool_size = 12) {
    const char* url = std::getenv("JOBPACT_POSTGRES_URL");
    if (url == nullptr || *url == '\0') {
      error_ = "set JOBPACT_POSTGRES_URL (scripts/lib.sh start_postgres starts one)";
      return;
    }
    auto o = postgres::ParsePostgresUrl(url);
    if (!o.ok()) {
      error_ = o.status().ToString();
      return;
    }
    options_ = *o;
    char name[32];
    std::snprintf(name, sizeof name, "bench_%08x", static_cast<unsigned>(std::random_device{}()));
    options_.schema = name;
    options_.pool_size = pool_size;
    auto b = postgres::PostgresBackend::Open(options_, SystemClock::Default());
    if (!b.ok()) {
      error_ = b.status().ToString();
      return;
    }
    backend_ = *b;
  }
  ~BenchSchema() {
    if (!backend_) return;
    backend_.reset();
    (void)Sql("DROP SCHEMA \"" + options_.schema + "\" CASCADE");
  }
  postgres::PostgresBackend* get() const { return backend_.get(); }
  const std::string& error() const { return error_; }

  // Runs one statement on a connection of its own; "" or the error. With
  // `rows`, the first column of every row, one per line.
  std::string Sql(const std::string& sql, std::string* rows = nullptr) const {
    const std::string conninfo = "host=" + options_.host + " port=" + std::to_string(options_.port) +
                                 " dbname=" + options_.database +
                                 (options_.user.empty() ? "" : " user=" + options_.user);
    PGconn* c = PQconnectdb(conninfo.c_str());
    std::string out;
    if (PQstatus(c) != CONNECTION_OK) {
      out = PQerrorMessage(c);
    } else {
      PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);
      PGresult* r = PQexec(c, sql.c_str());
      const ExecStatusType st = PQresultStatus(r);
      if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) out = PQresultErrorMessage(r);
      for (int i = 0; rows != nullptr && i < PQntuples(r); ++i) {
        *rows += std::string(PQgetvalue(r, i, 0)) + "\n";
      }
      PQclear(r);
    }
    PQfinish(c);
    return out;
  }
  const std::string& schema() const { return options_.schema; }

 private:
  postgres::PostgresOptions options_;
  std::shared_ptr<postgres::PostgresBackend> backend_;
  std::string error_;
};

std::int64_t ToNsForBench(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

Envelope MakeEnvelope(std::int64_t i) {
  Envelope e;
  e.job_type = "bench.noop";
  e.payload = "{\"order_id\":\"ord_" + std::to_string(i) + "\"}";
  PrepareForEnqueue(e, SystemClock::Default()->Now());
  return e;
}

bool Fill(postgres::PostgresBackend& backend, std::int64_t jobs) {
  std::vector<Envelope> batch;
  for (std::int64_t i = 0; i < jobs; ++i) {
    batch.push_back(MakeEnvelope(i));
    if (batch.size() == 500 || i + 1 == jobs) {
      if (!backend.queue()->EnqueueBatch(batch, {}).ok()) return false;
      batch.clear();
    }
  }
  return true;
}

void BM_PostgresEnqueueSingle(benchmark::State& state) {
  BenchSchema db;
  if (db.get() == nullptr) return state.SkipWithError(db.error().c_str());
  std::int64_t i = 0;
  for (auto _ : state) {
    if (!db.get()->queue()->Enqueue(MakeEnvelope(i++), {}).ok()) {
      return state.SkipWithError("Enqueue failed");
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PostgresEnqueueSingle)->Iterations(1000)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_PostgresEnqueueBatch100(benchmark::State& state) {
  BenchSchema db;
  if (db.get() == nullptr) return state.SkipWithError(db.error().c_str());
  std::int64_t i = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<Envelope> batch;
    for (int k = 0; k < 100; ++k) batch.push_back(MakeEnvelope(i++));
    state.ResumeTiming();
    if (!db.get()->queue()->EnqueueBatch(batch, {}).ok()) {
      return state.SkipWithError("EnqueueBatch failed");
    }
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_PostgresEnqueueBatch100)->Iterations(100)->UseRealTime()->Unit(benchmark::kMicrosecond);

// One lease and one grouped completion of what it got.
bool LeaseAndComplete(QueueBackend& q, int batch, const std::string& worker, int* got) {
  DequeueRequest req;
  req.max_jobs = batch;
  req.worker_id = worker;
  auto d = q.Dequeue(req);
  if (!d.ok()) return false;
  *got = static_cast<int>(d->size());
  if (d->empty()) return true;
  std::vector<CompletionRequest> done(d->size());
  for (std::size_t k = 0; k < d->size(); ++k) done[k].delivery = std::move((*d)[k]);
  for (const Status& s : q.CompleteBatch(done)) {
    if (!s.ok()) return false;
  }
  return true;
}

// Ten threads drain a backlog straight through the QueueBackend.
void BM_PostgresProcess(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  constexpr std::int64_t kJobs = 20000;
  constexpr int kThreads = 10;
  for (auto _ : state) {
    BenchSchema db(kThreads + 2);
    if (db.get() == nullptr) return state.SkipWithError(db.error().c_str());
    if (!Fill(*db.get(), kJobs)) return state.SkipWithError("fill failed");
    QueueBackend& q = *db.get()->queue();
    std::atomic<std::int64_t> left{kJobs};
    std::atomic<bool> failed{false};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const std::string worker = "w" + std::to_string(t);
        while (left.load() > 0 && !failed.load()) {
          int got = 0;
          if (!LeaseAndComplete(q, batch, worker, &got)) failed = true;
          left -= got;
          if (got == 0) std::this_thread::yield();
        }
      });
    }
    for (auto& th : threads) th.join();
    // Manual time: the drain only, not the fill or the schema's drop.
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (failed.load()) return state.SkipWithError("dequeue or complete failed");
  }
  state.SetItemsProcessed(state.iterations() * kJobs);
}
BENCHMARK(BM_PostgresProcess)->Arg(1)->Arg(16)->Arg(32)->Iterations(1)->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The lease step with a large ready backlog: the partial index on ready
// jobs must make it cost the same for 1,000 and 1,000,000 waiting jobs.
void BM_PostgresLeaseWithBacklog(benchmark::State& state) {
  const std::int64_t backlog = state.range(0);
  BenchSchema db;
  if (db.get() == nullptr) return state.SkipWithError(db.error().c_str());
  QueueBackend& q = *db.get()->queue();
  // One job through the API, then copies of its row by SQL (an API fill of
  // a million jobs would take minutes on this box).
  if (!q.Enqueue(MakeEnvelope(0), {}).ok()) return state.SkipWithError("enqueue failed");
  const std::string t = "\"" + db.schema() + "\".jobs";
  const std::string fill =
      "INSERT INTO " + t +
      " (job_id, job_type, queue, priority, status, attempt, max_attempts, ready_at_ns, "
      "enqueued_at_ns, updated_at_ns, epoch, visibility_timeout_ns, envelope, history) SELECT "
      "'bk_' || lpad(g::text, 9, '0'), job_type, queue, priority, status, attempt, "
      "max_attempts, ready_at_ns + g, enqueued_at_ns, updated_at_ns, epoch, "
      "visibility_timeout_ns, envelope, history FROM " + t + ", generate_series(1, " +
      std::to_string(backlog - 1) + ") g";
  if (std::string e = db.Sql(fill); !e.empty()) return state.SkipWithError(e.c_str());
  if (std::string e = db.Sql("VACUUM ANALYZE " + t); !e.empty()) {
    return state.SkipWithError(e.c_str());
  }
  // The plan of the lease step's pick (the same WHERE and ORDER BY as
  // src/backends/postgres/queue_lease.cc), printed once per size: an
  // index scan of the partial ready index that stops after 16 rows.
  std::string plan;
  const std::string c = "\"" + db.schema() + "\".control";
  if (std::string e = db.Sql(
          "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT j.job_id FROM " + t +
              " j WHERE j.status IN ('queued', 'retry_scheduled') AND j.ready_at_ns <= " +
              std::to_string(ToNsForBench(SystemClock::Default()->Now())) +
              " AND NOT EXISTS (SELECT 1 FROM " + c +
              " c WHERE c.failure_class = '' AND ((c.kind = 'pause_type' AND c.subject = "
              "j.job_type) OR (c.kind = 'pause_queue' AND c.subject = j.queue))) ORDER BY "
              "j.priority DESC, j.ready_at_ns, j.job_id LIMIT 16 FOR UPDATE OF j SKIP LOCKED",
          &plan);
      !e.empty()) {
    return state.SkipWithError(e.c_str());
  }
  std::fprintf(stderr, "lease pick with %lld ready jobs:\n%s", static_cast<long long>(backlog),
               plan.c_str());
  for (auto _ : state) {
    int got = 0;
    if (!LeaseAndComplete(q, 16, "w", &got) || got != 16) {
      return state.SkipWithError("lease failed");
    }
  }
  state.SetItemsProcessed(state.iterations() * 16);
}
// Tenant A's burst of R jobs, then tenant B's 20 (copies by SQL, as
// above; schema version 3's tenant_id column). Each lease takes turns, so
// the first two take B's jobs alongside A's; the cost must not grow with R.
void BM_PostgresLeaseWithTenantBurst(benchmark::State& state) {
  const std::int64_t backlog = state.range(0);
  BenchSchema db;
  if (db.get() == nullptr) return state.SkipWithError(db.error().c_str());
  QueueBackend& q = *db.get()->queue();
  if (!q.Enqueue(MakeEnvelope(0), {}).ok()) return state.SkipWithError("enqueue failed");
  const std::string t = "\"" + db.schema() + "\".jobs";
  const std::string fill =
      "INSERT INTO " + t +
      " (job_id, job_type, queue, priority, status, attempt, max_attempts, ready_at_ns, "
      "enqueued_at_ns, updated_at_ns, epoch, visibility_timeout_ns, envelope, history, "
      "tenant_id) SELECT 'bk_' || lpad(g::text, 9, '0'), job_type, queue, priority, status, "
      "attempt, max_attempts, ready_at_ns + g, enqueued_at_ns, updated_at_ns, epoch, "
      "visibility_timeout_ns, envelope, history, CASE WHEN g < " +
      std::to_string(backlog) + " THEN 'tenant-a' ELSE 'tenant-b' END FROM " + t +
      ", generate_series(1, " + std::to_string(backlog + 20) + ") g";
  if (std::string e = db.Sql(fill); !e.empty()) return state.SkipWithError(e.c_str());
  if (std::string e = db.Sql("VACUUM ANALYZE " + t); !e.empty()) {
    return state.SkipWithError(e.c_str());
  }
  for (auto _ : state) {
    int got = 0;
    if (!LeaseAndComplete(q, 16, "w", &got) || got != 16) {
      return state.SkipWithError("lease failed");
    }
  }
  state.SetItemsProcessed(state.iterations() * 16);
}
BENCHMARK(BM_PostgresLeaseWithTenantBurst)
    ->Arg(10000)
    ->Arg(1000000)
    ->Iterations(300)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_PostgresLeaseWithBacklog)->Arg(10000)->Arg(1000000)->Iterations(300)->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// FindDuplicate (the delivery-time dedup check, as the lease step runs it
// too) of a key with one queued job, with F jobs of other keys succeeded
// within the window (copies by SQL, as above). Its cost must not grow with
// F: the statement reads the key's rows from the dedup index and filters
// their status (JOBPACT_PG_DEDUP_LIVE); an OR of the statuses let the
// planner AND in a bitmap of every job succeeded within the window, per
// lookup (1.8 ms of server CPU per job at 20,000 jobs).
void BM_PostgresFindDuplicateWithFinished(benchmark::State& state) {
  const std::int64_t finished = state.range(0);
  BenchSchema db;
  if (db.get() == nullptr) return state.SkipWithError(db.error().c_str());
  QueueBackend& q = *db.get()->queue();
  Envelope probe = MakeEnvelope(0);
  probe.dedup_key = "probe";
  if (!q.Enqueue(probe, {}).ok()) return state.SkipWithError("enqueue failed");
  const std::string t = "\"" + db.schema() + "\".jobs";
  const std::string now = std::to_string(ToNsForBench(SystemClock::Default()->Now()));
  const std::string fill =
      "INSERT INTO " + t +
      " (job_id, job_type, queue, priority, status, attempt, max_attempts, ready_at_ns, "
      "enqueued_at_ns, updated_at_ns, finished_at_ns, epoch, visibility_timeout_ns, envelope, "
      "history, dedup_key) SELECT 'fin_' || lpad(g::text, 9, '0'), job_type, queue, priority, "
      "'succeeded', 1, max_attempts, ready_at_ns, enqueued_at_ns, " + now + ", " + now +
      ", 1, visibility_timeout_ns, envelope, history, 'k_' || g FROM " + t +
      ", generate_series(1, " + std::to_string(finished) + ") g";
  if (std::string e = db.Sql(fill); !e.empty()) return state.SkipWithError(e.c_str());
  // No ANALYZE: as in a busy queue, where the table outgrows its statistics
  // between autovacuum's passes.
  const TimePoint since = SystemClock::Default()->Now() - std::chrono::hours(1);
  for (auto _ : state) {
    auto dup = q.FindDuplicate("probe", "someone_else", since);
    if (!dup.ok()) return state.SkipWithError(dup.status().ToString().c_str());
    benchmark::DoNotOptimize(dup);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PostgresFindDuplicateWithFinished)->Arg(1000)->Arg(100000)->Iterations(500)
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
