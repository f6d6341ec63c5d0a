// The jobpact demo: a realistic workload on one execution contract.
//
// Four job types share one runner, one retry policy model and one DLQ:
//   invoice.generate  idempotency key per order (duplicates skip the effect)
//                     and a lock per customer (contention is requeued free)
//   email.send        a TTL: emails that waited too long are discarded
//   upstream.fetch    a flaky dependency: transient errors, retried with
//                     backoff and jitter, some exhaust their attempts
//   report.render     poison payloads: permanent errors go straight to the
//                     DLQ, unexpected exceptions get the smaller budget
// plus a malformed envelope, which is dead-lettered whole, never dropped.
//
// It runs on real threads and the real clock with the in-memory backends,
// prints a live progress line, then a summary built from the metrics sink and
// the DLQ: per status and job type, retries by class, the DLQ with reasons,
// and queue latency and handler duration percentiles.
//
// With --sqlite FILE the same workload runs on the durable SQLite backend;
// invoices are then written in the transaction that completes their job
// (transactional completion). --stop-after SECONDS shuts down early; running
// the demo again on the same file resumes where it stopped.
//
// With --backend URL the stores come from jobpact::OpenBackend(URL), e.g.
// redis://127.0.0.1:6379/0?namespace=demo or
// postgres://postgres@127.0.0.1:5432/app?schema=demo, which many processes
// can share. The work can then be split between processes (scripts/demo
// --redis, scripts/demo --postgres):
//   --enqueue-only               produce the workload, then exit
//   --work-only --worker-name A  produce nothing; run jobs until the shared
//                                store has none pending, then print how
//                                many this process ran ("DEMO_COUNTS ...")
//   --report-only                print the store's counts per status
//                                ("DEMO_STORE ...") and the DLQ
//
// Usage: demo [--jobs N] [--workers N] [--seed N] [--sqlite FILE | --backend URL]
//             [--stop-after S] [--enqueue-only | --work-only | --report-only]
//             [--worker-name NAME] [--metrics-out FILE]
//             [--dashboard PORT [--serve] [--token TOKEN]]
//
// With --dashboard PORT (0: any free port) and a build with the HTTP
// endpoint (-DJOBPACT_WITH_HTTP=ON), the demo serves /metrics and the
// dashboard on 127.0.0.1 while it runs and prints its URL; --serve keeps it
// up after the workload until Ctrl-C, so that its DLQ can be looked at and
// replayed. The operator token (--token, else a random one) is printed:
// the dashboard's actions need it.
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/failure.h"
#include "jobpact/in_memory.h"
#include "jobpact/job_runner.h"
#include "jobpact/prometheus/metrics_sink.h"
#ifdef JOBPACT_DEMO_WITH_HTTP
#include "jobpact/http/endpoint.h"
#include "jobpact/operations.h"
#endif
#ifdef JOBPACT_DEMO_WITH_SQLITE
#include <sqlite3.h>

#include "jobpact/sqlite/sqlite_backend.h"
#endif
#ifdef JOBPACT_DEMO_WITH_POSTGRES
#include <libpq-fe.h>

#include "jobpact/postgres/postgres_backend.h"
#endif

namespace {

// The demo reads its summary from an InMemoryMetricsSink and exports the
// same samples through a PrometheusMetricsSink: a sink that passes each
// sample to both.
class TeeMetricsSink final : public jobpact::MetricsSink {
 public:
  TeeMetricsSink(std::shared_ptr<jobpact::MetricsSink> a, std::shared_ptr<jobpact::MetricsSink> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  void Increment(std::string_view name, const jobpact::MetricLabels& labels,
                 std::int64_t delta) noexcept override {
    a_->Increment(name, labels, delta);
    b_->Increment(name, labels, delta);
  }
  void Observe(std::string_view name, const jobpact::MetricLabels& labels,
               double value) noexcept override {
    a_->Observe(name, labels, value);
    b_->Observe(name, labels, value);
  }
  void SetGauge(std::string_view name, const jobpact::MetricLabels& labels,
                double value) noexcept override {
    a_->SetGauge(name, labels, value);
    b_->SetGauge(name, labels, value);
  }

 private:
  std::shared_ptr<jobpact::MetricsSink> a_, b_;
};

using jobpact::Duration;
using jobpact::JobContext;
using jobpact::Status;

struct DemoOptions {
  int jobs = 400;  // Per job type, roughly.
  int workers = 4;
  unsigned seed = 2026;
  std::string sqlite_path;  // Empty: in-memory backends.
  double stop_after = 0;    // Seconds; 0: run until every job is settled.
  std::string backend_url;  // Non-empty: jobpact::OpenBackend(backend_url).
  enum class Role { kAll, kEnqueueOnly, kWorkOnly, kReportOnly, kOutbox } role = Role::kAll;
  std::string worker_name = "main";
  std::string metrics_out;  // Non-empty: write a Prometheus scrape there at the end.
  int dashboard_port = -1;  // >= 0: serve the dashboard there (0: any free port).
  bool serve = false;       // Keep the dashboard up after the workload, until Ctrl-C.
  std::string token;        // The dashboard's operator token; empty: a random one.
};

DemoOptions ParseArgs(int argc, char** argv) {
  DemoOptions o;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) -> const char* {
      if (std::strcmp(argv[i], flag) != 0) return nullptr;
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (const char* v = value("--jobs")) {
      o.jobs = std::max(10, std::atoi(v));
    } else if (const char* w = value("--workers")) {
      o.workers = std::max(1, std::atoi(w));
    } else if (const char* s = value("--seed")) {
      o.seed = static_cast<unsigned>(std::strtoul(s, nullptr, 10));
    } else if (const char* f = value("--sqlite")) {
      o.sqlite_path = f;
    } else if (const char* t = value("--stop-after")) {
      o.stop_after = std::atof(t);
    } else if (const char* b = value("--backend")) {
      o.backend_url = b;
    } else if (const char* n = value("--worker-name")) {
      o.worker_name = n;
    } else if (const char* p = value("--metrics-out")) {
      o.metrics_out = p;
    } else if (const char* d = value("--dashboard")) {
      o.dashboard_port = std::atoi(d);
    } else if (const char* k = value("--token")) {
      o.token = k;
    } else if (std::strcmp(argv[i], "--serve") == 0) {
      o.serve = true;
    } else if (std::strcmp(argv[i], "--enqueue-only") == 0) {
      o.role = DemoOptions::Role::kEnqueueOnly;
    } else if (std::strcmp(argv[i], "--work-only") == 0) {
      o.role = DemoOptions::Role::kWorkOnly;
    } else if (std::strcmp(argv[i], "--report-only") == 0) {
      o.role = DemoOptions::Role::kReportOnly;
    } else if (std::strcmp(argv[i], "--outbox") == 0) {
      o.role = DemoOptions::Role::kOutbox;
    } else {
      std::fprintf(stderr,
                   "usage: demo [--jobs N] [--workers N] [--seed N] [--sqlite FILE | --backend URL] "
                   "[--stop-after SECONDS] [--enqueue-only | --work-only | --report-only | --outbox] "
                   "[--worker-name NAME] [--metrics-out FILE] "
                   "[--dashboard PORT [--serve] [--token TOKEN]]\n");
      std::exit(2);
    }
  }
  if (!o.sqlite_path.empty() && !o.backend_url.empty()) {
    std::fprintf(stderr, "--sqlite and --backend are exclusive\n");
    std::exit(2);
  }
  if (o.serve && o.dashboard_port < 0) o.dashboard_port = 0;
  return o;
}

// A stand-in for a business side effect that must happen once per order.
class InvoiceLedger {
 public:
  void Issue(const std::string& order) {
    std::lock_guard<std::mutex> l(mu_);
    ++issued_[order];
  }
  int DuplicateEffects() const {
    std::lock_guard<std::mutex> l(mu_);
    int dups = 0;
    for (const auto& [order, n] : issued_) dups += n - 1;
    return dups;
  }
  std::size_t Orders() const {
    std::lock_guard<std::mutex> l(mu_);
    return issued_.size();
  }
  int Issues() const {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const auto& [order, k] : issued_) n += k;
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int> issued_;
};

// Extracts "key":"value" from a flat JSON payload; enough for the demo.
std::string Field(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":\"";
  std::size_t at = json.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  return json.substr(at, json.find('"', at) - at);
}

void Work(std::chrono::microseconds d) { std::this_thread::sleep_for(d); }

std::string Pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// --report-only: what the shared store holds, one line per status and one
// machine-readable line for scripts/demo --redis.
int ReportStore(jobpact::QueueAdmin& admin) {
  auto st = admin.Stats();
  if (!st.ok()) {
    std::fprintf(stderr, "cannot read the store: %s\n", st.status().ToString().c_str());
    return 1;
  }
  std::int64_t total = 0, pending = 0;
  std::string line;
  for (const auto& [status, n] : st->by_status) {
    total += n;
    if (!jobpact::IsFinal(status) && status != jobpact::JobStatus::kDeadLettered) pending += n;
    line += " " + std::string(jobpact::JobStatusName(status)) + "=" + std::to_string(n);
  }
  std::printf("DEMO_STORE total=%lld pending=%lld%s\n", static_cast<long long>(total),
              static_cast<long long>(pending), line.c_str());
  return 0;
}

}  // namespace

#ifdef JOBPACT_DEMO_WITH_POSTGRES
// --outbox with a postgres: URL: an order row and its job written in ONE
// transaction on the application's own connection (the outbox case), once
// rolled back and once committed; the job exists iff the order does.
int RunOutbox(const std::string& url) {
  auto options = jobpact::postgres::ParsePostgresUrl(url);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 1;
  }
  auto backend = jobpact::postgres::PostgresBackend::Open(*options, jobpact::SystemClock::Default());
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  const std::string table = "\"" + options->schema + "\".demo_orders";
  auto exec = [](PGconn* c, const std::string& sql) -> Status {
    PGresult* r = PQexec(c, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    const std::string msg = PQresultErrorMessage(r);
    PQclear(r);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? Status::Ok() : Status::Internal(msg);
  };
  auto order_job = [](const std::string& order) {
    jobpact::Envelope env;
    env.job_type = "invoice.generate";
    env.payload = "{\"order\":\"" + order + "\"}";
    jobpact::PrepareForEnqueue(env, jobpact::SystemClock::Default()->Now());
    return env;
  };
  Status ready = (*backend)->RunInTransaction([&](PGconn* c) {
    return exec(c, "CREATE TABLE IF NOT EXISTS " + table + " (id text PRIMARY KEY)");
  });
  if (!ready.ok()) {
    std::fprintf(stderr, "%s\n", ready.ToString().c_str());
    return 1;
  }
  std::string rolled_back_job, committed_job;
  for (const bool commit : {false, true}) {
    const std::string order = commit ? "outbox-ord-2" : "outbox-ord-1";
    jobpact::Envelope env = order_job(order);
    (commit ? committed_job : rolled_back_job) = env.job_id;
    Status s = (*backend)->RunInTransaction([&](PGconn* c) -> Status {
      JOBPACT_RETURN_IF_ERROR(exec(c, "INSERT INTO " + table + " (id) VALUES ('" + order + "')"));
      JOBPACT_RETURN_IF_ERROR((*backend)->EnqueueInTransaction(c, env, {}).status());
      return commit ? Status::Ok() : Status::FailedPrecondition("payment declined: roll back");
    });
    std::printf("transactional enqueue of %s with order %s: %s\n", env.job_id.c_str(),
                order.c_str(), commit ? "committed" : ("rolled back (" + s.message() + ")").c_str());
  }
  const bool none = (*backend)->admin()->Get(rolled_back_job).status().code() ==
                    jobpact::StatusCode::kNotFound;
  const bool one = (*backend)->admin()->Get(committed_job).ok();
  std::printf("after the rollback: job %s %s; after the commit: job %s %s\n",
              rolled_back_job.c_str(), none ? "does not exist" : "EXISTS (wrong)",
              committed_job.c_str(), one ? "exists" : "IS MISSING (wrong)");
  std::printf("DEMO_OUTBOX ok=%d\n", none && one ? 1 : 0);
  return none && one ? 0 : 1;
}
#endif

#ifdef JOBPACT_DEMO_WITH_HTTP
volatile std::sig_atomic_t g_stop_serving = 0;
extern "C" void StopServing(int) { g_stop_serving = 1; }

// A random operator token: 24 hex digits.
std::string RandomToken() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 24; ++i) t += "0123456789abcdef"[rd() % 16];
  return t;
}

// Starts /metrics and the dashboard beside the runner; prints its URL and
// one line for scripts ("DEMO_DASHBOARD url=... token=...").
std::unique_ptr<jobpact::HttpEndpoint> StartDashboard(
    const DemoOptions& opt, const jobpact::BackendBundle& backend,
    std::shared_ptr<jobpact::PrometheusMetricsSink> prometheus,
    std::shared_ptr<jobpact::MetricsSink> metrics, std::shared_ptr<jobpact::Clock> clock,
    const jobpact::JobRunner* runner) {
  jobpact::OperationsOptions oo;
  oo.clock = clock;
  oo.metrics = std::move(metrics);  // Replays and discards count in /metrics too.
  auto ops = jobpact::Operations::Open(backend, oo);
  if (!ops.ok()) {
    std::fprintf(stderr, "dashboard: %s\n", ops.status().ToString().c_str());
    return nullptr;
  }
  jobpact::HttpEndpointOptions h;
  h.port = opt.dashboard_port;
  h.metrics = std::move(prometheus);
  h.admin = backend.admin;
  h.runner = runner;
  h.dashboard = true;
  h.operations = std::move(*ops);
  h.operator_token = opt.token.empty() ? RandomToken() : opt.token;
  h.operator_name = "demo";
  h.clock = clock;
  auto endpoint = jobpact::HttpEndpoint::Start(h);
  if (!endpoint.ok()) {
    std::fprintf(stderr, "dashboard: %s\n", endpoint.status().ToString().c_str());
    return nullptr;
  }
  std::printf("dashboard: %s/  (operator token for its actions: %s)%s\n",
              (*endpoint)->url().c_str(), h.operator_token.c_str(),
              opt.serve ? "" : "; --serve keeps it up after the run");
  std::printf("DEMO_DASHBOARD url=%s/ token=%s\n", (*endpoint)->url().c_str(),
              h.operator_token.c_str());
  std::fflush(stdout);
  return std::move(*endpoint);
}
#endif

int main(int argc, char** argv) {
  const DemoOptions opt = ParseArgs(argc, argv);
  if (opt.role == DemoOptions::Role::kOutbox) {
#ifdef JOBPACT_DEMO_WITH_POSTGRES
    if (opt.backend_url.rfind("postgres", 0) == 0) return RunOutbox(opt.backend_url);
#endif
    std::fprintf(stderr, "--outbox needs --backend postgres://... in a build with PostgreSQL\n");
    return 2;
  }
  auto clock = jobpact::SystemClock::Default();
  auto metrics = std::make_shared<jobpact::InMemoryMetricsSink>();
  jobpact::JobRunnerOptions ro;
#ifdef JOBPACT_DEMO_WITH_SQLITE
  std::shared_ptr<jobpact::sqlite::SqliteBackend> db;
#endif
  // The queue, locks and idempotency store always come as one bundle, from
  // one place: a SQLite queue with in-memory locks would lock nothing
  // across processes (JobRunner::Create refuses it).
  if (!opt.backend_url.empty()) {
    jobpact::BackendOpenOptions bo;
    bo.clock = clock;
    auto opened = jobpact::OpenBackend(opt.backend_url, bo);
    if (!opened.ok()) {
      std::fprintf(stderr, "cannot open %s: %s\n", opt.backend_url.c_str(),
                   opened.status().ToString().c_str());
      return 1;
    }
    ro.backend = *opened;
  } else if (opt.sqlite_path.empty()) {
    ro.backend = jobpact::InMemoryBackend(clock);
  } else {
#ifdef JOBPACT_DEMO_WITH_SQLITE
    jobpact::sqlite::SqliteOptions so;
    so.adopt_existing_database = true;  // The demo keeps its invoices table in the same file.
    auto opened = jobpact::sqlite::SqliteBackend::Open(opt.sqlite_path, so, clock);
    if (!opened.ok()) {
      std::fprintf(stderr, "cannot open %s: %s\n", opt.sqlite_path.c_str(),
                   opened.status().ToString().c_str());
      return 1;
    }
    db = *opened;
    jobpact::Status made = db->RunInTransaction([](sqlite3* conn) -> Status {
      char* err = nullptr;
      if (sqlite3_exec(conn, "CREATE TABLE IF NOT EXISTS demo_invoices (order_id TEXT NOT NULL)",
                       nullptr, nullptr, &err) != SQLITE_OK) {
        Status s = Status::Internal(err != nullptr ? err : "create table failed");
        sqlite3_free(err);
        return s;
      }
      return Status::Ok();
    });
    if (!made.ok()) {
      std::fprintf(stderr, "cannot prepare %s: %s\n", opt.sqlite_path.c_str(),
                   made.ToString().c_str());
      return 1;
    }
    // The SqliteBackend itself is kept for RunInTransaction above; a
    // service that needs only the stores would call
    // jobpact::OpenBackend("sqlite:///path/jobs.db?adopt_existing_database=1").
    ro.backend = db->bundle();
#else
    std::fprintf(stderr, "this demo was built without the SQLite backend "
                         "(configure with -DJOBPACT_WITH_SQLITE=ON)\n");
    return 2;
#endif
  }
  // The operator side of the same store: stats and the DLQ.
  const std::shared_ptr<jobpact::QueueAdmin> admin = ro.backend.admin;
  auto prometheus = std::make_shared<jobpact::PrometheusMetricsSink>();
  ro.metrics = std::make_shared<TeeMetricsSink>(metrics, prometheus);
  ro.clock = clock;
  ro.workers = opt.workers;
  ro.random_seed = opt.seed;
  ro.log_level = jobpact::LogLevel::kOff;  // The summary tells the story.
  // The demo compresses time: lock waits are short so contention resolves
  // within the run.
  ro.lock_busy_min_delay = jobpact::Millis(5);
  ro.lock_busy_max_delay = jobpact::Millis(30);
  ro.maintenance_interval = jobpact::Millis(200);
  auto created = jobpact::JobRunner::Create(ro);
  if (!created.ok()) {
    std::fprintf(stderr, "cannot create runner: %s\n", created.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<jobpact::JobRunner> runner = std::move(created).value();
  using Role = DemoOptions::Role;
  if (opt.role == Role::kReportOnly) return ReportStore(*admin);

  // A retry policy override, with the reason the contract requires.
  jobpact::RetryPolicy fast = runner->policies().Default();
  fast.backoff.base_delay = jobpact::Millis(20);
  fast.backoff.max_delay = jobpact::Millis(400);
  const char* kFastReason = "demo: time compressed 50x so retries finish within the run";
  auto fast_options = [&] {
    jobpact::HandlerOptions o;
    o.policy = fast;
    o.policy_reason = kFastReason;
    return o;
  };

  InvoiceLedger ledger;
  std::atomic<std::uint64_t> flaky_state{opt.seed};

  jobpact::Status s = runner->Handle(
      "invoice.generate",
      [&](JobContext& ctx) -> Status {
        Work(std::chrono::microseconds(300));
        const std::string order = Field(ctx.payload(), "order_id");
        if (opt.sqlite_path.empty()) {
          ledger.Issue(order);
        } else {
#ifdef JOBPACT_DEMO_WITH_SQLITE
          // Written in the transaction that marks the job succeeded: it
          // commits if and only if the job does, whatever crashes.
          ctx.SetTransactionalEffect([order](void* native) -> Status {
            sqlite3_stmt* st = nullptr;
            auto* conn = static_cast<sqlite3*>(native);
            if (sqlite3_prepare_v2(conn, "INSERT INTO demo_invoices(order_id) VALUES (?1)", -1,
                                   &st, nullptr) != SQLITE_OK) {
              return Status::Unavailable(sqlite3_errmsg(conn));
            }
            sqlite3_bind_text(st, 1, order.c_str(), -1, SQLITE_TRANSIENT);
            const int rc = sqlite3_step(st);
            sqlite3_finalize(st);
            return rc == SQLITE_DONE ? Status::Ok() : Status::Unavailable(sqlite3_errmsg(conn));
          });
#endif
        }
        ctx.SetResult(R"({"invoice":"inv_)" + Field(ctx.payload(), "order_id") + "\"}");
        return Status::Ok();
      },
      fast_options());
  if (s.ok()) {
    s = runner->Handle("email.send", [](JobContext&) -> Status {
      Work(std::chrono::microseconds(200));
      return Status::Ok();
    });
  }
  if (s.ok()) {
    s = runner->Handle(
        "upstream.fetch",
        [&](JobContext&) -> Status {
          Work(std::chrono::microseconds(500));
          // A deterministic coin: 20% of calls fail like a 503 would.
          std::uint64_t x = flaky_state.fetch_add(0x9E3779B97F4A7C15ULL) * 0xBF58476D1CE4E5B9ULL;
          if ((x >> 33) % 100 < 20) throw jobpact::TransientError("upstream answered 503", "http_503");
          return Status::Ok();
        },
        fast_options());
  }
  if (s.ok()) {
    jobpact::HandlerOptions report_options = fast_options();
    s = runner->Handle(
        "report.render",
        [](JobContext& ctx) -> Status {
          const std::string kind = Field(ctx.payload(), "kind");
          if (kind == "missing_template") {
            throw jobpact::PermanentError("template 'q3-summary' does not exist", "no_template");
          }
          if (kind == "corrupt") throw std::logic_error("renderer invariant broken: page < 0");
          Work(std::chrono::microseconds(800));
          return Status::Ok();
        },
        report_options);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "cannot register handlers: %s\n", s.ToString().c_str());
    return 1;
  }

  const std::string where = !opt.backend_url.empty() ? "backend " + ro.backend.url
                            : opt.sqlite_path.empty() ? std::string("in-memory backends")
                                                      : "SQLite backend in " + opt.sqlite_path;
  if (opt.role == Role::kWorkOnly) {
    std::printf("jobpact demo, worker %s (pid %d): %d workers, %s\n", opt.worker_name.c_str(),
                static_cast<int>(getpid()), opt.workers, where.c_str());
  } else {
    std::printf("jobpact demo: %d workers, %s, about %d jobs\n", opt.workers, where.c_str(),
                opt.jobs * 4);
    std::printf("policies (per-type overrides carry their reason):\n%s\n",
                runner->policies().ToTable().c_str());
  }

  // --- Produce (unless a durable queue already holds this workload) ---
  std::int64_t already_stored = 0;
  if (auto st = admin->Stats(); st.ok()) {
    for (const auto& [status, n] : st->by_status) already_stored += n;
  }
  // A worker-only process never produces: another process did.
  const bool resuming = already_stored > 0 || opt.role == Role::kWorkOnly;
  if (opt.role == Role::kWorkOnly) {
    std::printf("worker %s: %lld jobs in the shared store; producing nothing\n\n",
                opt.worker_name.c_str(), static_cast<long long>(already_stored));
  } else if (resuming) {
    std::printf("resuming: %lld jobs already in %s; producing nothing new\n\n",
                static_cast<long long>(already_stored),
                opt.sqlite_path.empty() ? where.c_str() : opt.sqlite_path.c_str());
  }
  std::mt19937 rng(opt.seed);
  int enqueued = 0, duplicates_at_enqueue = 0, rejected = 0;
  auto enqueue = [&](jobpact::Envelope e) {
    auto r = runner->Enqueue(std::move(e));
    if (!r.ok()) {
      ++rejected;
    } else if (r->duplicate) {
      ++duplicates_at_enqueue;
    } else {
      ++enqueued;
    }
  };
  for (int i = 0; i < (resuming ? 0 : opt.jobs); ++i) {
    // Invoices: 1 order in 5 is submitted twice (a retried HTTP request) with
    // the same idempotency key; customers share locks.
    const std::string order = "ord_" + std::to_string(i);
    const int copies = (i % 5 == 0) ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      jobpact::Envelope inv;
      inv.job_type = "invoice.generate";
      inv.payload = R"({"order_id":")" + order + R"(","customer_id":"cus_)" +
                    std::to_string(i % 4) + "\"}";
      inv.idempotency_key = "invoice.generate:" + order;
      inv.lock_key = "customer:cus_" + std::to_string(i % 4);
      inv.trace_id = "trc_" + std::to_string(rng());
      enqueue(inv);
    }
    // Emails: a TTL of 1.5 s; one in 8 is scheduled 2 s out, so it expires.
    jobpact::Envelope mail;
    mail.job_type = "email.send";
    mail.payload = R"({"to":"user)" + std::to_string(i) + R"(@example.com"})";
    mail.ttl = jobpact::Millis(1500);
    if (i % 8 == 0) mail.scheduled_at = clock->Now() + jobpact::Millis(2000);
    mail.dedup_key = "email.send:welcome:" + std::to_string(i % (opt.jobs - opt.jobs / 10));
    enqueue(mail);
    // Upstream calls: flaky.
    jobpact::Envelope fetch;
    fetch.job_type = "upstream.fetch";
    fetch.payload = R"({"url":"https://upstream.internal/items/)" + std::to_string(i) + "\"}";
    enqueue(fetch);
    // Reports: 1 in 20 has a poison payload, 1 in 40 trips a bug.
    jobpact::Envelope report;
    report.job_type = "report.render";
    const char* kind = i % 20 == 0 ? "missing_template" : (i % 40 == 1 ? "corrupt" : "ok");
    report.payload = std::string(R"({"kind":")") + kind + "\"}";
    enqueue(report);
  }
  // A producer with a bug: the envelope is malformed. It is kept whole in
  // the DLQ, not dropped.
  if (!resuming) {
    auto bad = runner->EnqueueJson(
        R"({"job_type":"invoice.generate","payload":{"order_id":"ord_x"},"timeout_seconds":-1})");
    std::printf("malformed envelope: %s\n\n", bad.status().ToString().c_str());
  }
  if (opt.role == Role::kEnqueueOnly) {
    // Stored jobs, plus the malformed envelope, dead-lettered at enqueue.
    std::printf("DEMO_ENQUEUED stored=%d invalid=%d duplicates=%d rejected=%d orders=%d\n",
                enqueued, resuming ? 0 : 1, duplicates_at_enqueue, rejected,
                resuming ? 0 : opt.jobs);
    return rejected == 0 ? 0 : 1;
  }

  // --- The dashboard, beside the runner (--dashboard PORT) ---
#ifdef JOBPACT_DEMO_WITH_HTTP
  std::unique_ptr<jobpact::HttpEndpoint> dashboard;
  if (opt.dashboard_port >= 0) {
    dashboard = StartDashboard(opt, ro.backend, prometheus, ro.metrics, clock, runner.get());
    if (dashboard == nullptr) return 1;
  }
#else
  if (opt.dashboard_port >= 0) {
    std::fprintf(stderr, "--dashboard: this demo was built without the HTTP endpoint "
                         "(configure with -DJOBPACT_WITH_HTTP=ON)\n");
    return 2;
  }
#endif

  // --- Run, with a live progress line ---
  const bool tty = isatty(STDOUT_FILENO) != 0;
  const auto started = std::chrono::steady_clock::now();
  jobpact::Status start_status = runner->Start();
  if (!start_status.ok()) {
    std::fprintf(stderr, "cannot start: %s\n", start_status.ToString().c_str());
    return 1;
  }
  auto count = [](const jobpact::QueueStats& st, jobpact::JobStatus js) -> std::int64_t {
    auto it = st.by_status.find(js);
    return it == st.by_status.end() ? 0 : it->second;
  };
  int ticks = 0;
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    auto st = admin->Stats();
    if (!st.ok()) break;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const std::int64_t pending = count(*st, jobpact::JobStatus::kQueued) +
                                 count(*st, jobpact::JobStatus::kRunning) +
                                 count(*st, jobpact::JobStatus::kRetryScheduled);
    char line[256];
    std::snprintf(line, sizeof line,
                  "%s[%5.2fs] queued %4lld  running %2lld  retrying %4lld  succeeded %5lld  "
                  "dead-lettered %3lld  discarded %3lld",
                  opt.role == Role::kWorkOnly ? (opt.worker_name + " ").c_str() : "", secs,
                  static_cast<long long>(count(*st, jobpact::JobStatus::kQueued)),
                  static_cast<long long>(count(*st, jobpact::JobStatus::kRunning)),
                  static_cast<long long>(count(*st, jobpact::JobStatus::kRetryScheduled)),
                  static_cast<long long>(count(*st, jobpact::JobStatus::kSucceeded)),
                  static_cast<long long>(st->dead_letters),
                  static_cast<long long>(count(*st, jobpact::JobStatus::kDiscarded)));
    if (tty) {
      std::printf("\r%s", line);
    } else if (ticks % 4 == 0 || pending == 0) {
      std::printf("%s\n", line);
    }
    std::fflush(stdout);
    ++ticks;
    if (pending == 0 || secs > 60) break;
    if (opt.stop_after > 0 && secs >= opt.stop_after) {
      std::printf("%sstopping early (--stop-after): %lld jobs still pending%s\n", tty ? "\n" : "",
                  static_cast<long long>(pending),
                  opt.sqlite_path.empty() ? " are lost with the in-memory backends"
                                          : "; run again on the same file to resume");
      break;
    }
  }
  if (tty) std::printf("\n");
  jobpact::Status shut = runner->Shutdown(jobpact::Seconds(5));
  if (!shut.ok()) std::printf("shutdown: %s\n", shut.ToString().c_str());

  // --- Summary ---
  const std::vector<std::string> types = {"invoice.generate", "email.send", "upstream.fetch",
                                          "report.render"};
  namespace m = jobpact::metric;
  std::printf("\n== Outcomes per job type\n");
  std::printf("%s %9s %9s %9s %13s %9s\n", Pad("job type", 18).c_str(), "enqueued", "succeeded",
              "failed", "dead-lettered", "discarded");
  for (const std::string& t : types) {
    std::printf("%s %9lld %9lld %9lld %13lld %9lld\n", Pad(t, 18).c_str(),
                static_cast<long long>(metrics->CounterTotal(m::kEnqueued, t)),
                static_cast<long long>(metrics->CounterTotal(m::kSucceeded, t)),
                static_cast<long long>(metrics->CounterTotal(m::kFailed, t)),
                static_cast<long long>(metrics->CounterTotal(m::kDeadLettered, t)),
                static_cast<long long>(metrics->CounterTotal(m::kDiscarded, t)));
  }
  std::printf("producer side: %d stored, %d duplicates returned the existing job, %d rejected\n",
              enqueued, duplicates_at_enqueue, rejected);

  std::printf("\n== Contract at work\n");
  std::map<std::string, std::int64_t> retries_by_class;
  std::map<std::string, std::int64_t> discards_by_reason;
  for (const jobpact::CounterSeries& c : metrics->Counters()) {
    if (c.name == m::kRetries) retries_by_class[c.failure_class] += c.value;
    if (c.name == m::kDiscarded) discards_by_reason[c.reason] += c.value;
  }
  for (const auto& [cls, n] : retries_by_class) {
    std::printf("retries (%s): %lld\n", cls.c_str(), static_cast<long long>(n));
  }
  for (const auto& [why, n] : discards_by_reason) {
    std::printf("discarded (%s): %lld\n", why.c_str(), static_cast<long long>(n));
  }
  std::printf("lock contention (requeued, no attempt spent): %lld\n",
              static_cast<long long>(metrics->CounterTotal(m::kLockContention)));
  std::printf("idempotent skips: %lld   dedup hits: %lld\n",
              static_cast<long long>(metrics->CounterTotal(m::kIdempotentSkips)),
              static_cast<long long>(metrics->CounterTotal(m::kDedupHits)));
  int duplicate_effects = ledger.DuplicateEffects();
  if (opt.sqlite_path.empty()) {
    std::printf("invoices issued: %zu orders, duplicate effects: %d\n", ledger.Orders(),
                duplicate_effects);
  } else {
#ifdef JOBPACT_DEMO_WITH_SQLITE
    // Counted across every run on this file.
    long long rows = 0, orders = 0;
    jobpact::Status counted = db->RunInTransaction([&](sqlite3* conn) -> Status {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(conn, "SELECT COUNT(*), COUNT(DISTINCT order_id) FROM demo_invoices",
                             -1, &st, nullptr) != SQLITE_OK) {
        return Status::Internal(sqlite3_errmsg(conn));
      }
      if (sqlite3_step(st) == SQLITE_ROW) {
        rows = sqlite3_column_int64(st, 0);
        orders = sqlite3_column_int64(st, 1);
      }
      sqlite3_finalize(st);
      return Status::Ok();
    });
    if (!counted.ok()) std::printf("cannot count invoices: %s\n", counted.ToString().c_str());
    duplicate_effects = static_cast<int>(rows - orders);
    std::printf("invoices in %s (all runs): %lld orders, duplicate effects: %d\n",
                opt.sqlite_path.c_str(), orders, duplicate_effects);
#endif
  }

  std::printf("\n== Dead-letter queue (quarantine, replayable)\n");
  auto dlq = admin->ListDeadLetters({});
  if (dlq.ok()) {
    std::map<std::string, std::pair<int, std::string>> by_reason;
    for (const jobpact::DlqEntry& e : *dlq) {
      auto& slot = by_reason[e.job_type + " / " + e.reason];
      ++slot.first;
      if (slot.second.empty() && e.last_failure) {
        slot.second = std::string(jobpact::FailureClassName(e.last_failure->failure_class)) +
                      " " + e.last_failure->code + ": " + e.last_failure->message;
      }
    }
    for (const auto& [key, v] : by_reason) {
      std::printf("%3d  %s\n     e.g. %s\n", v.first, key.c_str(),
                  v.second.substr(0, 110).c_str());
    }
  }

  std::printf("\n== Latency (ms)        queue p50   queue p99   run p50   run p99\n");
  for (const std::string& t : types) {
    jobpact::HistogramSnapshot q = metrics->Histogram(m::kQueueLatency, t);
    jobpact::HistogramSnapshot d = metrics->Histogram(m::kDuration, t);
    std::printf("%s %11.2f %11.2f %9.2f %9.2f\n", Pad(t, 22).c_str(), q.Percentile(0.5) * 1e3,
                q.Percentile(0.99) * 1e3, d.Percentile(0.5) * 1e3, d.Percentile(0.99) * 1e3);
  }
  if (opt.role == Role::kWorkOnly) {
    // The jobs this process took to a final state (each job reaches one
    // once: a completion on a stale lease is refused), and the invoice
    // effects it performed, for scripts/demo --redis to add up.
    std::int64_t finalized = 0;
    for (std::string_view name : {m::kSucceeded, m::kFailed, m::kDeadLettered, m::kDiscarded}) {
      finalized += metrics->CounterTotal(name);
    }
    std::printf("\nDEMO_COUNTS worker=%s pid=%d finalized=%lld succeeded=%lld invoices=%d\n",
                opt.worker_name.c_str(), static_cast<int>(getpid()),
                static_cast<long long>(finalized),
                static_cast<long long>(metrics->CounterTotal(m::kSucceeded)), ledger.Issues());
  }
  if (!opt.metrics_out.empty()) {
    // What a Prometheus server would scrape from /metrics now.
    std::ofstream out(opt.metrics_out, std::ios::trunc);
    out << prometheus->Scrape();
    out.close();
    if (!out) {
      std::fprintf(stderr, "--metrics-out: cannot write %s\n", opt.metrics_out.c_str());
      return 1;
    }
    std::printf("\nmetrics: the Prometheus scrape is in %s\n", opt.metrics_out.c_str());
  }
#ifdef JOBPACT_DEMO_WITH_HTTP
  if (dashboard != nullptr && opt.serve) {
    // The runner has stopped: a job replayed from the dashboard now waits
    // queued (the page shows it in its queue's depth) for the next run.
    std::signal(SIGINT, StopServing);
    std::signal(SIGTERM, StopServing);
    std::printf("\ndashboard: serving %s/ until Ctrl-C (the runner has stopped; replayed jobs "
                "wait queued)\n",
                dashboard->url().c_str());
    std::fflush(stdout);
    while (g_stop_serving == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    dashboard->Stop();
    std::printf("dashboard: stopped\n");
  }
#endif
  return duplicate_effects == 0 ? 0 : 3;
}
