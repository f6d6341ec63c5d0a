// What every backend's crash-test worker process shares (header only: the
// workers link no test framework): the runner settings, the jobs, the
// append-only logs that survive SIGKILL, the producer, and the run until
// SIGTERM.
#ifndef JOBPACT_TESTS_SUPPORT_CRASH_WORKER_H_
#define JOBPACT_TESTS_SUPPORT_CRASH_WORKER_H_

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/queue_backend.h"

namespace jobpact {
namespace crash_testing {

// An O_APPEND log: a line written with one write(2) is in the kernel once
// write returns, so it survives SIGKILL of the process. -1 on failure.
inline int OpenAppend(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

// Appends `line` whole with one write(2).
inline bool AppendLine(int fd, const std::string& line) {
  return write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

// A little work (up to 2 ms), so that kills land inside handlers too.
inline void RandomPause() {
  thread_local std::minstd_rand rng(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
}

inline volatile std::sig_atomic_t g_sigterm = 0;
inline void OnSigterm(int) { g_sigterm = 1; }

// First thing in main: from then on SIGTERM asks for a clean stop (the test
// may send it while a fresh worker is still setting up).
inline void CatchSigterm() { std::signal(SIGTERM, OnSigterm); }

// The runner of a crash worker on `backend`: runner id "crash-worker-<pid>"
// (PidOfWorker reads it back from the history), short polls and
// maintenance, and the visibility buffer relaxed for the tests' short
// leases (3 s, set per job). The recovery cap stays the default
// (max_lease_recoveries 3): a job that loses its worker a fourth time is
// dead-lettered, and the tests check that each such job was held by that
// many workers they killed.
inline JobRunnerOptions CrashWorkerOptions(BackendBundle backend, std::shared_ptr<Clock> clock) {
  JobRunnerOptions o;
  o.backend = std::move(backend);
  o.clock = std::move(clock);
  o.workers = 2;
  o.dequeue_batch = 8;
  o.poll_interval = Millis(20);
  o.maintenance_interval = Millis(200);
  o.validation.visibility_buffer = Millis(500);
  o.runner_id = "crash-worker-" + std::to_string(getpid());
  o.log_level = LogLevel::kWarn;
  return o;
}

// A job of the crash tests, ready to enqueue: `type`, payload {"n": n}, a
// 1 s timeout and a 3 s lease (short leases: quick recovery). Every even n
// carries an idempotency key of its own ("idem-<job id>"), so that the
// claim, the record and their recovery after a kill are under test too.
inline Envelope CrashJob(const std::string& type, std::int64_t n, TimePoint now) {
  Envelope env;
  env.job_type = type;
  env.payload = "{\"n\":" + std::to_string(n) + "}";
  env.timeout = Seconds(1);
  env.visibility_timeout = Seconds(3);
  PrepareForEnqueue(env, now);
  if (n % 2 == 0) env.idempotency_key = "idem-" + env.job_id;
  return env;
}

// Brackets the opening of the worker's store with two lines in
// <log_dir>/open-<pid>.log, "opening" and "opened", so that the test can
// tell a kill inside Open (and so inside a schema migration) from one
// before or after it (KillDuringStartup, crash_rig.h).
class OpenLog {
 public:
  explicit OpenLog(const std::string& log_dir)
      : fd_(OpenAppend(log_dir + "/open-" + std::to_string(getpid()) + ".log")) {
    AppendLine(fd_, "opening\n");
  }
  ~OpenLog() { close(fd_); }
  OpenLog(const OpenLog&) = delete;
  OpenLog& operator=(const OpenLog&) = delete;
  void Opened() { AppendLine(fd_, "opened\n"); }

 private:
  int fd_;
};

// How a producer enqueues (RunProducer): `batches` batches of `size`, or,
// with `until` set, batches until that wall-clock time (the soak test's
// producer, whose replacements keep to the same end), each `pause` apart.
struct ProducerPlan {
  int batches = 10;
  int size = 200;
  std::chrono::milliseconds pause{50};
  std::optional<std::chrono::system_clock::time_point> until;
};

// The producer's plan from a worker's last argument: "produce" (the crash
// tests': 10 batches of 200, 50 ms apart, so that a producer lives through
// a few kill rounds on every store) or "produce-until:<unix seconds>" (the
// soak test's: batches of 50 every 100 ms until then). nullopt for any
// other argument.
inline std::optional<ProducerPlan> ParseProducerPlan(const std::string& arg) {
  if (arg == "produce") return ProducerPlan{};
  constexpr std::string_view kUntil = "produce-until:";
  if (arg.rfind(kUntil, 0) != 0) return std::nullopt;
  ProducerPlan plan;
  plan.size = 50;
  plan.pause = std::chrono::milliseconds(100);
  plan.until = std::chrono::system_clock::time_point(
      std::chrono::seconds(std::atoll(arg.c_str() + kUntil.size())));
  return plan;
}

// The producer's share of a crash test: EnqueueBatch calls of CrashJob
// jobs of `type` as `plan` says, each logged in
// <log_dir>/produce-<pid>.log as "sent <job id> <job id> ..." before the
// call and "acked" once it returned OK, so that a kill inside a call shows
// as a "sent" line without its "acked". Returns the process's exit code:
// 0 when every batch was acknowledged, 2 on an error.
inline int RunProducer(QueueBackend& queue, Clock& clock, const std::string& log_dir,
                       const std::string& type, const ProducerPlan& plan) {
  const int fd = OpenAppend(log_dir + "/produce-" + std::to_string(getpid()) + ".log");
  if (fd < 0) {
    std::perror("open produce log");
    return 2;
  }
  std::int64_t n = 0;
  for (int b = 0; !g_sigterm; ++b) {
    if (plan.until ? std::chrono::system_clock::now() >= *plan.until : b >= plan.batches) break;
    std::vector<Envelope> envs;
    std::string sent = "sent";
    for (int i = 0; i < plan.size; ++i) {
      envs.push_back(CrashJob(type, n++, clock.Now()));
      sent += " " + envs.back().job_id;
    }
    if (!AppendLine(fd, sent + "\n")) return 2;
    Result<std::vector<EnqueueResult>> r = queue.EnqueueBatch(envs, {});
    if (!r.ok()) {
      std::fprintf(stderr, "enqueue: %s\n", r.status().ToString().c_str());
      return 2;
    }
    if (!AppendLine(fd, "acked\n")) return 2;
    std::this_thread::sleep_for(plan.pause);
  }
  close(fd);
  return 0;
}

// Starts `runner` and runs it until SIGTERM (see CatchSigterm), then shuts
// it down: the process's exit code (2 if it could not start).
inline int RunUntilSigterm(JobRunner& runner) {
  Status started = runner.Start();
  if (!started.ok()) {
    std::fprintf(stderr, "start: %s\n", started.ToString().c_str());
    return 2;
  }
  while (!g_sigterm) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Status stopped = runner.Shutdown(Seconds(5));
  if (!stopped.ok()) std::fprintf(stderr, "shutdown: %s\n", stopped.ToString().c_str());
  return 0;
}

}  // namespace crash_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_SUPPORT_CRASH_WORKER_H_
