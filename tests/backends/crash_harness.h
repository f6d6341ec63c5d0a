// The harness of the backends' kill -9 crash tests (redis_crash_test.cc,
// postgres_crash_test.cc): worker processes that share one store, killed
// with SIGKILL at random moments and replaced, until no job is pending; then
// the survivors are stopped with SIGTERM and must exit cleanly. Also reads
// the delivery history to tell which workers lost a lease, so a test can
// check that every redelivery traces to a worker it killed.
#ifndef JOBPACT_TESTS_BACKENDS_CRASH_HARNESS_H_
#define JOBPACT_TESTS_BACKENDS_CRASH_HARNESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/result.h"

namespace jobpact {
namespace crash_testing {

// Forks and execs argv[0] with `argv`, its stderr to `stderr_path`.
inline pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& stderr_path) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `limit` for `pid`, then SIGKILLs it; its wait status.
inline int WaitBounded(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

struct KillLoopOptions {
  int workers = 3;
  int max_kills = 12;
  std::chrono::seconds budget{120};
};

struct KillLoopResult {
  bool done = false;    // pending() reached 0 within the budget.
  int kills = 0;
  double seconds = 0;   // Until done (or the budget).
  std::set<pid_t> killed;
  // Empty, or what went wrong (a worker that exited by itself, a store
  // error, a worker that did not shut down cleanly).
  std::string failure;
};

// Keeps opts.workers processes from spawn(seq) running; every 50-300 ms,
// up to opts.max_kills times, SIGKILLs one at random and spawns a
// replacement; stops when pending() (jobs not yet final or dead-lettered)
// is 0 or the budget is spent; then SIGTERMs the workers, each of which
// must exit with status 0 within 10 s.
inline KillLoopResult RunKillLoop(const KillLoopOptions& opts,
                                  const std::function<pid_t(int seq)>& spawn,
                                  const std::function<Result<std::int64_t>()>& pending) {
  KillLoopResult out;
  const auto started = std::chrono::steady_clock::now();
  std::mt19937 rng(std::random_device{}());
  std::vector<pid_t> workers;
  int seq = 0;
  for (int i = 0; i < opts.workers; ++i) workers.push_back(spawn(seq++));
  while (out.failure.empty() && std::chrono::steady_clock::now() - started < opts.budget) {
    Result<std::int64_t> left = pending();
    if (!left.ok()) {
      out.failure = "reading the store: " + left.status().ToString();
      break;
    }
    if (*left == 0) {
      out.done = true;
      break;
    }
    for (pid_t pid : workers) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) != 0) {
        out.failure = "worker " + std::to_string(pid) + " exited by itself, status " +
                      std::to_string(status);
      }
    }
    if (!out.failure.empty()) break;
    if (out.kills < opts.max_kills) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 250));
      const std::size_t victim = rng() % workers.size();
      const pid_t pid = workers[victim];
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      out.killed.insert(pid);
      ++out.kills;
      workers[victim] = spawn(seq++);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (pid_t pid : workers) kill(pid, SIGTERM);
  for (pid_t pid : workers) {
    const int status = WaitBounded(pid, std::chrono::milliseconds(10000));
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && out.failure.empty()) {
      out.failure = "worker " + std::to_string(pid) + " did not shut down cleanly, status " +
                    std::to_string(status);
    }
  }
  return out;
}

// Adds to *lost the workers named in a job's stored history entries (JSON
// objects with "worker" on deliveries, "reason" on every entry, in order)
// whose lease expired.
inline void NoteLostLeases(const std::vector<nlohmann::json>& entries,
                           std::set<std::string>* lost) {
  std::string last_worker;
  for (const nlohmann::json& e : entries) {
    if (!e.is_object()) continue;
    auto w = e.find("worker");
    if (w != e.end() && w->is_string()) last_worker = w->get<std::string>();
    auto r = e.find("reason");
    if (r != e.end() && r->is_string() &&
        r->get<std::string>().rfind("lease_expired", 0) == 0) {
      lost->insert(last_worker);
    }
  }
}

}  // namespace crash_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_BACKENDS_CRASH_HARNESS_H_
