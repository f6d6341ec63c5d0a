// What every backend's crash-test worker process shares (header only: the
// workers link no test framework): the runner settings, the append-only
// logs that survive SIGKILL, and the run until SIGTERM.
#ifndef JOBPACT_TESTS_SUPPORT_CRASH_WORKER_H_
#define JOBPACT_TESTS_SUPPORT_CRASH_WORKER_H_

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/job_runner.h"

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

// The runner of a crash worker on `backend`: runner id "crash-worker-<pid>"
// (PidOfWorker reads it back from the history), short polls and
// maintenance, the visibility buffer relaxed for the tests' short leases
// (3 s, set per job), and room for a job to lose its worker more than the
// default 3 times in a run with many kills (the tests still accept the DLQ).
inline JobRunnerOptions CrashWorkerOptions(BackendBundle backend, std::shared_ptr<Clock> clock) {
  JobRunnerOptions o;
  o.backend = std::move(backend);
  o.clock = std::move(clock);
  o.workers = 2;
  o.dequeue_batch = 8;
  o.poll_interval = Millis(20);
  o.maintenance_interval = Millis(200);
  o.validation.visibility_buffer = Millis(500);
  o.max_lease_recoveries = 10;
  o.runner_id = "crash-worker-" + std::to_string(getpid());
  o.log_level = LogLevel::kWarn;
  return o;
}

inline volatile std::sig_atomic_t g_sigterm = 0;
inline void OnSigterm(int) { g_sigterm = 1; }

// First thing in main: from then on SIGTERM asks for a clean stop (the test
// may send it while a fresh worker is still setting up).
inline void CatchSigterm() { std::signal(SIGTERM, OnSigterm); }

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
