#include "tests/support/crash_rig.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

namespace jobpact {
namespace crash_testing {
namespace {

pid_t Spawn(const KillLoop& loop, int seq) {
  const std::string err = loop.dir + "/worker-" + std::to_string(seq) + ".stderr";
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(loop.binary.c_str()));
  for (const std::string& a : loop.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    execv(loop.binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `limit` for `pid` to exit; SIGKILLs it after that.
int WaitBounded(pid_t pid, std::chrono::milliseconds limit) {
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

}  // namespace

TempDir::TempDir(std::string_view name) {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / (std::string(name) + "_XXXXXX")).string();
  if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty() && getenv("JOBPACT_KEEP_CRASH_DIR") == nullptr) {
    std::filesystem::remove_all(path_, ec);
  }
}

pid_t PidOfWorker(std::string_view worker) {
  constexpr std::string_view kPrefix = "crash-worker-";
  if (worker.substr(0, kPrefix.size()) != kPrefix) return -1;
  return static_cast<pid_t>(std::atol(std::string(worker.substr(kPrefix.size())).c_str()));
}

std::int64_t Pending(const QueueStats& stats) {
  auto count = [&](JobStatus s) {
    auto it = stats.by_status.find(s);
    return it == stats.by_status.end() ? std::int64_t{0} : it->second;
  };
  return count(JobStatus::kQueued) + count(JobStatus::kRunning) +
         count(JobStatus::kRetryScheduled);
}

KillLoopResult RunKillLoop(const KillLoop& loop) {
  KillLoopResult out;
  const auto started = std::chrono::steady_clock::now();
  std::mt19937 rng(std::random_device{}());
  std::vector<pid_t> workers;
  // Whatever happens, no worker outlives the loop.
  struct Reaper {
    std::vector<pid_t>* workers;
    ~Reaper() {
      for (pid_t pid : *workers) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{&workers};
  int seq = 0;
  for (int i = 0; i < loop.workers; ++i) workers.push_back(Spawn(loop, seq++));
  while (std::chrono::steady_clock::now() - started < loop.budget) {
    Result<std::int64_t> pending = loop.pending();
    if (!pending.ok()) {
      out.failure = "reading the pending jobs: " + pending.status().ToString();
      return out;
    }
    if (*pending == 0) {
      out.done = true;
      break;
    }
    // A worker that died on its own is a failure of the test subject.
    for (pid_t pid : workers) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) != 0) {
        out.failure = "worker " + std::to_string(pid) + " exited by itself, status " +
                      std::to_string(status) + " (see " + loop.dir + "/worker-*.stderr)";
        return out;
      }
    }
    if (out.kills < loop.max_kills) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 250));
      const std::size_t victim = rng() % workers.size();
      const pid_t pid = workers[victim];
      if (kill(pid, SIGKILL) != 0 || waitpid(pid, nullptr, 0) != pid) {
        out.failure = "could not kill worker " + std::to_string(pid);
        return out;
      }
      out.killed.insert(pid);
      ++out.kills;
      workers[victim] = Spawn(loop, seq++);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (pid_t pid : workers) kill(pid, SIGTERM);
  std::vector<pid_t> stopping;
  stopping.swap(workers);
  for (pid_t pid : stopping) {
    const int status = WaitBounded(pid, std::chrono::milliseconds(10000));
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && out.failure.empty()) {
      out.failure = "worker " + std::to_string(pid) + " did not shut down cleanly, status " +
                    std::to_string(status);
    }
  }
  return out;
}

}  // namespace crash_testing
}  // namespace jobpact
