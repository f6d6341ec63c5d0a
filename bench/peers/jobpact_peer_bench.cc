// jobpact's side of the peer benchmarks: the workloads of issue 8 ("Speed,
// side by side in one run", bench/peers/run.sh: Redis, against BullMQ and
// bee-queue), of issue 9 (bench/peers/run_postgres.sh: PostgreSQL,
// against graphile-worker and pg-boss) and of issue 12
// (bench/peers/run_sqlite.sh: SQLite, against plainjob), through jobpact
// used as a service would use it: one JobRunner with workers = 10 on the bundle
// OpenBackend(url) opens, jobs enqueued with JobRunner::EnqueueBatch.
// The node scripts beside this file run the same workloads through the
// peers; table.js prints the one table.
//
// Workloads (each on a fresh key namespace or schema of its own):
//   noop      N no-op jobs, pre-enqueued in batches of 1,000 (the enqueue
//             figure), then drained: jobs/s from Start() to the last
//             succeeded transition (a TransitionObserver sees it after the
//             ack is stored).
//   idem      the same with an idempotency_key and a dedup_key on every job.
//   full      the full contract: an idempotency_key, a dedup_key and a
//             lock_key (one per job, as bench/sqlite_bench.cc's
//             BM_SqliteRunnerFullContract) on every job. Not in the
//             default list (run_sqlite.sh asks for it).
//   failonce  F jobs whose first attempt throws TransientError and whose
//             second succeeds; the retry delay is 0 (a policy override) and
//             the retry budget is off (the peers have none).
//   latency   L jobs enqueued 5 ms apart to an idle runner, each by a
//             second JobRunner on a second bundle (as another process
//             would: no in-process wake-up); enqueue->start p50/p99.
//   latency_local  the same enqueued through the worker runner itself
//             (a service that enqueues and works in one process).
//   latency_poll1  as latency, with JobRunnerOptions::poll_interval 1 ms
//             instead of the default 100 ms.
//
// For each, one line: RESULT {json}, with the server's own figures over the
// measured phase. Redis, from INFO (redis-cli): CPU seconds, socket reads
// (about one per round trip; a pipeline counts once), commands (Lua's inner
// calls included), script calls and script time. PostgreSQL: the CPU
// seconds of the postmaster and its children (/proc; --pg-pid names the
// postmaster), the WAL bytes written (pg_current_wal_lsn) and the
// transaction ids assigned (pg_current_snapshot's xmax: one per writing
// transaction or writing subtransaction), read with psql. SQLite has no
// server: the library runs in this process, so the figure is this
// process's CPU seconds (getrusage, all threads).
//
// SQLite: --url sqlite:///DIR/NAME.db[?synchronous=normal|full&...] names
// the files: each workload opens a fresh DIR/NAME-WORKLOAD.db (removed
// first, with its -wal and -shm), with the URL's parameters and
// max_connections = workers + 2.
//
// Usage: jobpact_peer_bench --url redis://127.0.0.1:PORT/0 | postgres://USER@127.0.0.1:PORT/DB
//          | sqlite:///tmp/DIR/jobpact.db[?synchronous=normal|full]
//          [--pg-pid PID] [--workloads noop,idem,...] [--jobs 20000] [--fail-jobs 5000]
//          [--latency-jobs 500] [--workers 10] [--dequeue-batch 16] [--label TEXT]
#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/failure.h"
#include "jobpact/job_runner.h"
#include "jobpact/transition_event.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Args {
  std::string url;
  int pg_pid = 0;
  std::vector<std::string> workloads = {"noop",    "idem",          "failonce",
                                        "latency", "latency_local", "latency_poll1"};
  int jobs = 20000;
  int fail_jobs = 5000;
  int latency_jobs = 500;
  int workers = 10;
  int dequeue_batch = 0;  // 0: JobRunnerOptions' default.
  std::string label;
};

double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

std::string Run(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen((cmd + " 2>&1").c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

// Single-quoted for sh.
std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string WithParams(const std::string& url, const std::string& params) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + params;
}

// --- The server: what a workload's namespace is, how to empty it, and the
// server's own figures over a measured phase ---
struct ServerInfo {
  std::map<std::string, double> v;
};

class Server {
 public:
  virtual ~Server() = default;
  // The URL of a bundle on namespace (Redis) or schema (PostgreSQL) `ns`
  // with `pool` connections.
  virtual std::string UrlFor(const std::string& ns, int pool) const = 0;
  // Empties what a workload on `ns` will use.
  virtual void Reset(const std::string& ns) const = 0;
  virtual ServerInfo Read() const = 0;
  // The figures between two reads, as a JSON object (table.js's columns).
  virtual std::string Delta(const ServerInfo& a, const ServerInfo& b) const = 0;
};

double Diff(const ServerInfo& a, const ServerInfo& b, const std::string& k) {
  auto f = [&](const ServerInfo& s) {
    auto it = s.v.find(k);
    return it == s.v.end() ? 0.0 : it->second;
  };
  return f(b) - f(a);
}

class RedisServer : public Server {
 public:
  // redis://HOST:PORT/DB (what scripts/lib.sh start_redis exports).
  explicit RedisServer(std::string url) : url_(std::move(url)) {
    const std::string rest = url_.substr(std::strlen("redis://"));
    const auto colon = rest.find(':'), slash = rest.find('/');
    host_ = rest.substr(0, colon);
    port_ = std::atoi(rest.c_str() + colon + 1);
    db_ = slash == std::string::npos ? 0 : std::atoi(rest.c_str() + slash + 1);
  }
  std::string UrlFor(const std::string& ns, int pool) const override {
    return WithParams(url_, "namespace=" + ns + "&pool_size=" + std::to_string(pool));
  }
  void Reset(const std::string&) const override { Cli("FLUSHDB"); }
  ServerInfo Read() const override {
    ServerInfo info;
    std::istringstream in(Cli("INFO all"));
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const auto colon = line.find(':');
      if (colon == std::string::npos || line[0] == '#') continue;
      const std::string key = line.substr(0, colon), value = line.substr(colon + 1);
      if (key.rfind("cmdstat_", 0) == 0) {
        // cmdstat_evalsha:calls=N,usec=U,...
        auto num = [&](const char* f) {
          const auto at = value.find(f);
          return at == std::string::npos ? 0.0 : std::atof(value.c_str() + at + std::strlen(f));
        };
        info.v[key + ".calls"] = num("calls=");
        info.v[key + ".usec"] = num("usec=");
      } else {
        char* end = nullptr;
        const double d = std::strtod(value.c_str(), &end);
        if (end != value.c_str()) info.v[key] = d;
      }
    }
    return info;
  }
  std::string Delta(const ServerInfo& a, const ServerInfo& b) const override {
    auto d = [&](const std::string& k) { return Diff(a, b, k); };
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "{\"cpu_s\":%.4f,\"reads\":%.0f,\"commands\":%.0f,\"script_calls\":%.0f,"
                  "\"script_usec\":%.0f}",
                  d("used_cpu_user") + d("used_cpu_sys"), d("total_reads_processed"),
                  d("total_commands_processed"),
                  d("cmdstat_evalsha.calls") + d("cmdstat_eval.calls") + d("cmdstat_fcall.calls"),
                  d("cmdstat_evalsha.usec") + d("cmdstat_eval.usec") + d("cmdstat_fcall.usec"));
    return buf;
  }

 private:
  std::string Cli(const std::string& command) const {
    return Run("redis-cli -h " + host_ + " -p " + std::to_string(port_) + " -n " +
               std::to_string(db_) + " " + command);
  }
  std::string url_, host_;
  int port_ = 6379, db_ = 0;
};

class PostgresServer : public Server {
 public:
  // postgres://USER@HOST:PORT/DB; postmaster_pid: the server's postmaster
  // (its CPU and its children's is the server's), 0 for none.
  PostgresServer(std::string url, int postmaster_pid)
      : url_(std::move(url)), postmaster_pid_(postmaster_pid) {}
  std::string UrlFor(const std::string& ns, int pool) const override {
    return WithParams(url_, "schema=" + ns + "&pool_size=" + std::to_string(pool));
  }
  void Reset(const std::string& ns) const override {
    Psql("DROP SCHEMA IF EXISTS " + ns + " CASCADE");
  }
  ServerInfo Read() const override {
    ServerInfo info;
    std::istringstream in(Psql(
        "SELECT pg_current_wal_lsn() - '0/0', pg_snapshot_xmax(pg_current_snapshot())::text"));
    std::string wal, xmax;
    std::getline(in, wal, '|');
    std::getline(in, xmax);
    info.v["wal_bytes"] = std::atof(wal.c_str());
    info.v["xids"] = std::atof(xmax.c_str());
    info.v["cpu_s"] = CpuSeconds();
    return info;
  }
  std::string Delta(const ServerInfo& a, const ServerInfo& b) const override {
    char buf[256];
    std::snprintf(buf, sizeof buf, "{\"cpu_s\":%.4f,\"wal_bytes\":%.0f,\"xids\":%.0f}",
                  Diff(a, b, "cpu_s"), Diff(a, b, "wal_bytes"), Diff(a, b, "xids"));
    return buf;
  }

 private:
  std::string Psql(const std::string& sql) const {
    return Run("psql " + ShellQuote(url_) + " -XAtqc " + ShellQuote(sql));
  }
  // utime + stime of the postmaster and its children, from /proc.
  double CpuSeconds() const {
    if (postmaster_pid_ <= 0) return 0;
    long ticks = 0;
    DIR* d = opendir("/proc");
    if (d == nullptr) return 0;
    while (dirent* e = readdir(d)) {
      const int pid = std::atoi(e->d_name);
      if (pid <= 0) continue;
      std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const auto close = stat.rfind(')');  // The command may hold spaces.
      if (close == std::string::npos) continue;
      std::istringstream fields(stat.substr(close + 2));
      std::string field;
      std::vector<std::string> v;
      while (v.size() < 13 && fields >> field) v.push_back(field);
      if (v.size() < 13) continue;
      // After the command: state(3) ppid(4) ... utime(14) stime(15).
      const int ppid = std::atoi(v[1].c_str());
      if (pid != postmaster_pid_ && ppid != postmaster_pid_) continue;
      ticks += std::atol(v[11].c_str()) + std::atol(v[12].c_str());
    }
    closedir(d);
    return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  std::string url_;
  int postmaster_pid_;
};

class SqliteServer : public Server {
 public:
  // sqlite:///DIR/NAME.db[?PARAMS] (an absolute path; see the file comment).
  explicit SqliteServer(const std::string& url) {
    const auto q = url.find('?');
    path_ = url.substr(std::strlen("sqlite://"), q == std::string::npos ? std::string::npos
                                                                       : q - std::strlen("sqlite://"));
    if (q != std::string::npos) params_ = url.substr(q + 1);
    if (path_.empty() || path_[0] != '/') {
      std::fprintf(stderr, "--url: sqlite:///absolute/path.db, not %s\n", url.c_str());
      std::exit(2);
    }
    if (path_.size() > 3 && path_.compare(path_.size() - 3, 3, ".db") == 0) {
      path_.resize(path_.size() - 3);
    }
  }
  std::string UrlFor(const std::string& ns, int pool) const override {
    std::string url = "sqlite://" + File(ns) + "?max_connections=" + std::to_string(pool);
    return params_.empty() ? url : url + "&" + params_;
  }
  void Reset(const std::string& ns) const override {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      std::remove((File(ns) + suffix).c_str());
    }
  }
  ServerInfo Read() const override {
    ServerInfo info;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    info.v["cpu_s"] = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                      static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    return info;
  }
  std::string Delta(const ServerInfo& a, const ServerInfo& b) const override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "{\"cpu_s\":%.4f}", Diff(a, b, "cpu_s"));
    return buf;
  }

 private:
  std::string File(const std::string& ns) const { return path_ + "-" + ns + ".db"; }
  std::string path_, params_;
};

std::unique_ptr<Server> ServerFor(const Args& a) {
  if (a.url.rfind("redis://", 0) == 0) return std::make_unique<RedisServer>(a.url);
  if (a.url.rfind("postgres://", 0) == 0 || a.url.rfind("postgresql://", 0) == 0) {
    return std::make_unique<PostgresServer>(a.url, a.pg_pid);
  }
  if (a.url.rfind("sqlite://", 0) == 0) return std::make_unique<SqliteServer>(a.url);
  std::fprintf(stderr, "--url: a redis://, postgres:// or sqlite:/// URL, not %s\n", a.url.c_str());
  std::exit(2);
}

// Counts succeeded transitions (seen after the ack is stored) and wakes the
// bench thread at a target.
class SucceededCounter : public jobpact::TransitionObserver {
 public:
  void OnTransition(const jobpact::TransitionEvent& e) override {
    if (e.to != jobpact::JobStatus::kSucceeded) return;
    if (done_.fetch_add(1) + 1 == target_) {
      std::lock_guard<std::mutex> l(mu_);
      cv_.notify_all();
    }
  }
  void Reset(std::int64_t target) {
    done_ = 0;
    target_ = target;
  }
  // False on timeout.
  bool Wait(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, limit, [&] { return done_.load() >= target_; });
  }
  std::int64_t done() const { return done_.load(); }

 private:
  std::atomic<std::int64_t> done_{0};
  std::int64_t target_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

struct Rig {
  std::shared_ptr<SucceededCounter> counter = std::make_shared<SucceededCounter>();
  std::unique_ptr<jobpact::JobRunner> runner;
};

// One connection per worker thread and a few for the runner's own calls
// (maintenance, enqueue), as a service would size it.
Rig MakeRig(const Server& server, const std::string& ns, int workers, int dequeue_batch = 0,
            jobpact::Duration poll_interval = jobpact::Millis(100)) {
  Rig rig;
  auto opened = jobpact::OpenBackend(server.UrlFor(ns, workers + 2));
  if (!opened.ok()) {
    std::fprintf(stderr, "cannot open the backend: %s\n", opened.status().ToString().c_str());
    std::exit(1);
  }
  jobpact::JobRunnerOptions ro;
  ro.backend = *opened;
  ro.workers = workers;
  if (dequeue_batch > 0) ro.dequeue_batch = dequeue_batch;
  ro.poll_interval = poll_interval;
  // Errors only: no line per transition or per retry (the peers log none).
  ro.log_level = jobpact::LogLevel::kError;
  ro.logger_name = "jobpact.peer_bench";
  // The peers have no retry budget; with one, the fail-once workload would
  // be deferred by design (20% of first attempts) instead of retried at once.
  ro.retry_budget_enabled = false;
  ro.transition_observers.push_back(rig.counter);
  auto created = jobpact::JobRunner::Create(ro);
  if (!created.ok()) {
    std::fprintf(stderr, "cannot create the runner: %s\n", created.status().ToString().c_str());
    std::exit(1);
  }
  rig.runner = std::move(created).value();
  return rig;
}

jobpact::HandlerOptions ImmediateRetry() {
  jobpact::HandlerOptions h;
  jobpact::RetryPolicy p;
  p.max_attempts = 3;
  p.backoff.base_delay = jobpact::Duration::zero();
  p.backoff.max_delay = jobpact::Duration::zero();
  h.policy = p;
  h.policy_reason = "peer bench: zero retry delay on every side";
  return h;
}

void Die(const char* what, const jobpact::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// noop / idem / failonce: pre-enqueue, then drain.
void Drain(const Args& a, const Server& server, const std::string& workload) {
  const std::string ns = "peer_" + workload;
  server.Reset(ns);
  const bool fail_once = workload == "failonce";
  const bool full = workload == "full";
  const bool keys = workload == "idem" || full;
  const int jobs = fail_once ? a.fail_jobs : a.jobs;
  Rig rig = MakeRig(server, ns, a.workers, a.dequeue_batch);
  jobpact::Status s = rig.runner->Handle(
      "bench.job",
      [fail_once](jobpact::JobContext& ctx) -> jobpact::Status {
        if (fail_once && ctx.attempt() == 1) throw jobpact::TransientError("first attempt fails");
        return jobpact::Status::Ok();
      },
      fail_once ? ImmediateRetry() : jobpact::HandlerOptions{});
  if (!s.ok()) Die("Handle", s);

  const ServerInfo e0 = server.Read();
  const auto t_enq = SteadyClock::now();
  constexpr int kBatch = 1000;
  for (int first = 0; first < jobs; first += kBatch) {
    std::vector<jobpact::Envelope> batch;
    for (int i = first; i < std::min(jobs, first + kBatch); ++i) {
      jobpact::Envelope e;
      e.job_type = "bench.job";
      e.payload = "{\"i\":" + std::to_string(i) + "}";
      if (keys) {
        e.idempotency_key = "bench.job:" + std::to_string(i);
        e.dedup_key = "bench.job:" + std::to_string(i);
      }
      if (full) e.lock_key = "order:ord_" + std::to_string(i);
      batch.push_back(std::move(e));
    }
    auto r = rig.runner->EnqueueBatch(std::move(batch));
    if (!r.ok()) Die("EnqueueBatch", r.status());
  }
  const double enqueue_s = SecondsSince(t_enq);
  const ServerInfo e1 = server.Read();

  rig.counter->Reset(jobs);
  const ServerInfo d0 = server.Read();
  const auto t0 = SteadyClock::now();
  s = rig.runner->Start();
  if (!s.ok()) Die("Start", s);
  const bool finished = rig.counter->Wait(std::chrono::seconds(600));
  const double drain_s = SecondsSince(t0);
  const ServerInfo d1 = server.Read();
  rig.runner->Shutdown(jobpact::Seconds(10)).IgnoreError();
  if (!finished) {
    std::fprintf(stderr, "%s: only %lld of %d jobs succeeded in 600 s\n", workload.c_str(),
                 static_cast<long long>(rig.counter->done()), jobs);
    std::exit(1);
  }
  std::printf(
      "RESULT {\"lib\":\"jobpact\",\"label\":%s,\"workload\":%s,\"jobs\":%d,\"seconds\":%.4f,"
      "\"jobs_per_s\":%.1f,\"server\":%s}\n",
      Json(a.label).c_str(), Json(workload).c_str(), jobs, drain_s, jobs / drain_s,
      server.Delta(d0, d1).c_str());
  std::printf(
      "RESULT {\"lib\":\"jobpact\",\"label\":%s,\"workload\":%s,\"jobs\":%d,\"seconds\":%.4f,"
      "\"jobs_per_s\":%.1f,\"server\":%s}\n",
      Json(a.label).c_str(), Json("enqueue_" + workload).c_str(), jobs, enqueue_s,
      jobs / enqueue_s, server.Delta(e0, e1).c_str());
  std::fflush(stdout);
}

// latency / latency_local / latency_poll1: an idle runner, jobs 5 ms apart.
void Latency(const Args& a, const Server& server, const std::string& workload) {
  const bool local = workload == "latency_local";
  const std::string ns = "peer_" + workload;
  server.Reset(ns);
  Rig rig = MakeRig(server, ns, a.workers, a.dequeue_batch,
                    workload == "latency_poll1" ? jobpact::Millis(1) : jobpact::Millis(100));
  const int n = a.latency_jobs;
  std::vector<std::atomic<std::int64_t>> enq_ns(n), start_ns(n);
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               SteadyClock::now().time_since_epoch())
        .count();
  };
  jobpact::Status s = rig.runner->Handle("bench.job", [&](jobpact::JobContext& ctx) {
    const std::int64_t t = now_ns();
    const int i = std::atoi(ctx.payload().c_str() + 5);  // {"i":N}
    if (i >= 0 && i < n) start_ns[i].store(t);
    return jobpact::Status::Ok();
  });
  if (!s.ok()) Die("Handle", s);
  rig.counter->Reset(n);
  s = rig.runner->Start();
  if (!s.ok()) Die("Start", s);
  // The producer: the worker runner itself, or a runner of its own on a
  // backend of its own (never started), as another process would be.
  Rig producer;
  jobpact::JobRunner* enqueuer = rig.runner.get();
  if (!local) {
    producer = MakeRig(server, ns, 1);
    enqueuer = producer.runner.get();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Idle workers.
  const ServerInfo i0 = server.Read();
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < n; ++i) {
    jobpact::Envelope e;
    e.job_type = "bench.job";
    e.payload = "{\"i\":" + std::to_string(i) + "}";
    enq_ns[i].store(now_ns());
    auto r = enqueuer->Enqueue(std::move(e));
    if (!r.ok()) Die("Enqueue", r.status());
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(5) * (i + 1));
  }
  const bool finished = rig.counter->Wait(std::chrono::seconds(60));
  const double secs = SecondsSince(t0);
  const ServerInfo i1 = server.Read();
  rig.runner->Shutdown(jobpact::Seconds(10)).IgnoreError();
  if (!finished) {
    std::fprintf(stderr, "%s: only %lld of %d jobs ran\n", workload.c_str(),
                 static_cast<long long>(rig.counter->done()), n);
    std::exit(1);
  }
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) ms.push_back((start_ns[i].load() - enq_ns[i].load()) / 1e6);
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double q) { return ms[std::min<std::size_t>(ms.size() - 1, q * ms.size())]; };
  std::printf(
      "RESULT {\"lib\":\"jobpact\",\"label\":%s,\"workload\":%s,\"jobs\":%d,\"seconds\":%.4f,"
      "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"server\":%s}\n",
      Json(a.label).c_str(), Json(workload).c_str(), n, secs, pct(0.50), pct(0.99), ms.back(),
      server.Delta(i0, i1).c_str());
  std::fflush(stdout);
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) -> const char* {
      if (std::strcmp(argv[i], flag) != 0) return nullptr;
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (const char* u = value("--url")) {
      a.url = u;
    } else if (const char* w = value("--workloads")) {
      a.workloads.clear();
      std::stringstream ss(w);
      std::string item;
      while (std::getline(ss, item, ',')) a.workloads.push_back(item);
    } else if (const char* j = value("--jobs")) {
      a.jobs = std::max(1, std::atoi(j));
    } else if (const char* f = value("--fail-jobs")) {
      a.fail_jobs = std::max(1, std::atoi(f));
    } else if (const char* l = value("--latency-jobs")) {
      a.latency_jobs = std::max(1, std::atoi(l));
    } else if (const char* k = value("--workers")) {
      a.workers = std::max(1, std::atoi(k));
    } else if (const char* db = value("--dequeue-batch")) {
      a.dequeue_batch = std::max(1, std::atoi(db));
    } else if (const char* pid = value("--pg-pid")) {
      a.pg_pid = std::atoi(pid);
    } else if (const char* b = value("--label")) {
      a.label = b;
    } else {
      std::fprintf(stderr,
                   "usage: jobpact_peer_bench --url redis://HOST:PORT/DB|postgres://USER@HOST:PORT/DB"
                   "|sqlite:///DIR/NAME.db[?synchronous=normal|full] "
                   "[--pg-pid PID] [--workloads "
                   "noop,idem,full,failonce,latency,latency_local,latency_poll1] [--jobs N] [--fail-jobs N] "
                   "[--latency-jobs N] [--workers N] [--dequeue-batch N] [--label TEXT]\n");
      std::exit(2);
    }
  }
  if (a.url.empty()) {
    std::fprintf(stderr, "--url is required\n");
    std::exit(2);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  const std::unique_ptr<Server> server = ServerFor(a);
  for (const std::string& w : a.workloads) {
    if (w == "noop" || w == "idem" || w == "full" || w == "failonce") {
      Drain(a, *server, w);
    } else if (w == "latency" || w == "latency_local" || w == "latency_poll1") {
      Latency(a, *server, w);
    } else {
      std::fprintf(stderr, "unknown workload %s\n", w.c_str());
      return 2;
    }
  }
  return 0;
}
