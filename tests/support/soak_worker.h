// What a crash-test worker process adds in the soak test
// (tests/backends/sqlite/soak_test.cc): backend faults injected at random
// through the testing kit's FailingQueueBackend, stalls that make leases
// expire under a live worker, and a log of the process's own memory.
// Header only, like crash_worker.h; the worker links jobpact::testing.
#ifndef JOBPACT_TESTS_SUPPORT_SOAK_WORKER_H_
#define JOBPACT_TESTS_SUPPORT_SOAK_WORKER_H_

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/testing/failing_backends.h"
#include "tests/support/crash_worker.h"

namespace jobpact {
namespace crash_testing {

// A thread that runs `tick` every `period` until destruction.
class Ticker {
 public:
  Ticker(std::chrono::milliseconds period, std::function<void()> tick)
      : thread_([this, period, tick = std::move(tick)] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
            lock.unlock();
            tick();
            lock.lock();
          }
        }) {}
  ~Ticker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Backend faults at random: wraps bundle->queue in a FailingQueueBackend
// and, every 100 ms, drops what is still pending and commands one fault:
//   - a lease call that fails (nothing leased);
//   - a completion that fails before it is written (the job stays running
//     until its lease expires and is delivered again);
//   - a completion written whose reply is lost;
//   - a lease recovery that fails;
//   - every 15 s, a stall of twice `lease` right before a completion, so
//     that the leases of the jobs the process holds expire under it and
//     another worker takes them over (their late completions are refused).
// Each is for the completion call the runner actually makes (Complete, or
// CompleteBatch when it groups them).
class Chaos {
 public:
  Chaos(BackendBundle* bundle, Duration lease)
      : faulty_(std::make_shared<testing::FailingQueueBackend>(bundle->queue)),
        lease_(lease),
        ticker_(std::chrono::milliseconds(100), [this] { Tick(); }) {
    bundle->queue = faulty_;
  }

 private:
  void Tick() {
    const QueueMethod complete = faulty_->Calls(QueueMethod::kCompleteBatch) > 0
                                     ? QueueMethod::kCompleteBatch
                                     : QueueMethod::kComplete;
    faulty_->Clear();
    if (++ticks_ % 150 == 0) {
      const Duration stall = lease_ * 2;
      faulty_->BeforeNext(complete, [stall] { std::this_thread::sleep_for(stall); });
      return;
    }
    const Status fault = Status::Unavailable("soak: injected fault");
    switch (rng_() % 4) {
      case 0:
        faulty_->FailNext(QueueMethod::kDequeue, fault);
        break;
      case 1:
        faulty_->FailNext(complete, fault);
        break;
      case 2:
        faulty_->FailNextAfterApplying(complete, fault);
        break;
      default:
        faulty_->FailNext(QueueMethod::kRecoverExpiredLeases, fault);
        break;
    }
  }

  std::shared_ptr<testing::FailingQueueBackend> faulty_;
  Duration lease_;
  std::minstd_rand rng_{std::random_device{}()};
  long ticks_ = 0;
  Ticker ticker_;  // Last: stopped before the members it uses go.
};

// The process's resident anonymous memory (RssAnon of /proc/self/status,
// in KiB: the heap and the stacks, without the pages of files it maps,
// such as SQLite's WAL index, which grow with the file, not with a leak),
// 0 if unreadable.
inline long ResidentAnonKib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "RssAnon:") {
      long kib = 0;
      in >> kib;
      return kib;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

// Every second, appends "<seconds since start> <RssAnon KiB>" to
// <log_dir>/rss-<pid>.log.
class RssLog {
 public:
  explicit RssLog(const std::string& log_dir)
      : log_{OpenAppend(log_dir + "/rss-" + std::to_string(getpid()) + ".log")},
        start_(std::chrono::steady_clock::now()),
        ticker_(std::chrono::milliseconds(1000), [this] {
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
          AppendLine(log_.fd, std::to_string(s) + " " + std::to_string(ResidentAnonKib()) + "\n");
        }) {}

 private:
  struct Fd {
    int fd;
    ~Fd() { close(fd); }
  } log_;
  std::chrono::steady_clock::time_point start_;
  Ticker ticker_;  // Last: stopped before the log is closed.
};

}  // namespace crash_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_SUPPORT_SOAK_WORKER_H_
