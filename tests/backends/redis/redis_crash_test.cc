// The Redis crash test: real worker processes (redis_crash_worker.cc, a
// JobRunner each) share one namespace of the test server while this test
// kills them with SIGKILL at random moments and starts replacements. 3000
// jobs, a bounded number of kills (12) and a bounded time (120 s).
//
// Afterwards, from the store and the workers' logs:
//   - no job is missing, and every job is in a final status or the DLQ;
//   - each redelivery traces to a killed worker: every delivery of a job
//     except its last was taken by a process this test killed (the delivery
//     history entries name the worker, and so its pid);
//   - the effect attached to the completion (INCR of a per-job counter,
//     RedisEffect) happened exactly once for every succeeded job and never
//     for any other.
// Figures (kills, redeliveries, time) are printed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/queue_backend.h"
#include "jobpact/redis/redis_backend.h"
#include "jobpact/testing/matchers.h"
#include "src/backends/redis/client.h"
#include "tests/backends/redis/redis_test_server.h"

#ifndef JOBPACT_REDIS_CRASH_WORKER
#error "JOBPACT_REDIS_CRASH_WORKER must name the crash worker binary"
#endif

namespace jobpact {
namespace {

constexpr int kJobs = 3000;
constexpr int kWorkers = 3;
constexpr int kMaxKills = 12;
constexpr auto kTimeBudget = std::chrono::seconds(120);

pid_t SpawnWorker(const std::string& url, const std::string& ns, const std::string& dir, int seq) {
  const std::string err = dir + "/worker-" + std::to_string(seq) + ".stderr";
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    execl(JOBPACT_REDIS_CRASH_WORKER, JOBPACT_REDIS_CRASH_WORKER, url.c_str(), ns.c_str(),
          dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

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

TEST(RedisCrashTest, KilledWorkersLoseNoJobAndTheCompletionEffectHappensOnce) {
  JOBPACT_REDIS_URL_OR_SKIP(url);
  redis::RedisOptions options = redis_testing::TestOptions();
  std::string tmpl = (std::filesystem::temp_directory_path() / "jobpact_rcrash_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  auto clock = SystemClock::Default();
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto backend, redis::RedisBackend::Open(options, clock));
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto client, redis_internal::RedisClient::Connect(options));
  const std::string prefix = "jobpact:{" + options.key_namespace + "}:";

  std::vector<std::string> ids;
  for (int batch = 0; batch < kJobs / 500; ++batch) {
    std::vector<Envelope> envs;
    for (int i = 0; i < 500; ++i) {
      Envelope env;
      env.job_type = "crash.effect";
      env.payload = "{\"n\":" + std::to_string(batch * 500 + i) + "}";
      env.timeout = Seconds(1);
      env.visibility_timeout = Seconds(3);  // Short leases: quick recovery.
      PrepareForEnqueue(env, clock->Now());
      ids.push_back(env.job_id);
      envs.push_back(std::move(env));
    }
    ASSERT_TRUE(backend->queue()->EnqueueBatch(envs, {}).ok());
  }

  const auto started = std::chrono::steady_clock::now();
  std::mt19937 rng(std::random_device{}());
  std::vector<pid_t> workers;
  std::set<pid_t> killed;
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
  int kills = 0;
  for (int i = 0; i < kWorkers; ++i) {
    workers.push_back(SpawnWorker(url, options.key_namespace, dir, seq++));
  }
  bool done = false;
  while (std::chrono::steady_clock::now() - started < kTimeBudget) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats stats, backend->admin()->Stats());
    const std::int64_t pending = stats.by_status[JobStatus::kQueued] +
                                 stats.by_status[JobStatus::kRunning] +
                                 stats.by_status[JobStatus::kRetryScheduled];
    if (pending == 0) {
      done = true;
      break;
    }
    for (pid_t pid : workers) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0)
          << "worker " << pid << " exited by itself, status " << status << " (see " << dir
          << "/worker-*.stderr)";
    }
    if (kills < kMaxKills) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 250));
      const std::size_t victim = rng() % workers.size();
      const pid_t pid = workers[victim];
      ASSERT_EQ(kill(pid, SIGKILL), 0);
      ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
      killed.insert(pid);
      ++kills;
      workers[victim] = SpawnWorker(url, options.key_namespace, dir, seq++);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (pid_t pid : workers) kill(pid, SIGTERM);
  for (pid_t pid : workers) {
    int status = WaitBounded(pid, std::chrono::milliseconds(10000));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "worker " << pid << " did not shut down cleanly, status " << status;
  }
  workers.clear();
  ASSERT_TRUE(done) << "jobs still pending after " << seconds << " s";

  int redelivered = 0, dead_lettered = 0, succeeded = 0;
  for (const std::string& id : ids) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, backend->admin()->Get(id));
    ASSERT_TRUE(IsFinal(rec.status) || rec.status == JobStatus::kDeadLettered)
        << id << " is " << JobStatusName(rec.status);
    // Every delivery but the last ended in a recovered lease (its worker
    // was lost: which one, below).
    int deliveries = 0;
    for (const Transition& t : rec.history) deliveries += t.to == JobStatus::kRunning ? 1 : 0;
    ASSERT_GT(deliveries, 0) << id << " was never delivered";
    if (deliveries > 1) ++redelivered;
    EXPECT_EQ(deliveries - 1, rec.lease_recoveries) << id << ": a redelivery without a lost lease";
    JOBPACT_ASSERT_OK_AND_ASSIGN(redis_internal::Reply n,
                                 client->Command({"GET", prefix + "app:effect:" + id}));
    if (rec.status == JobStatus::kSucceeded) {
      ++succeeded;
      EXPECT_EQ(n.str, "1") << id << ": the completion effect did not happen exactly once";
    } else {
      ++dead_lettered;
      EXPECT_TRUE(n.is_nil()) << id << " is " << JobStatusName(rec.status)
                              << " but its effect happened " << n.str << " times";
    }
  }
  // The lease recoveries name the dead: every worker that lost a lease was
  // one this test killed (the delivery entries of the raw history).
  std::set<std::string> lost;
  for (const std::string& id : ids) {
    // The stored history: JSON entries, entry n in field "h<n>", "hn"
    // their count (queue_scripts.cc).
    JOBPACT_ASSERT_OK_AND_ASSIGN(redis_internal::Reply hn,
                                 client->Command({"HGET", prefix + "job:" + id, "hn"}));
    std::vector<std::string> hmget{"HMGET", prefix + "job:" + id};
    const long entries = std::atol(hn.str.c_str());
    for (long n = std::max(1L, entries - static_cast<long>(kMaxHistory) + 1); n <= entries; ++n) {
      hmget.push_back("h" + std::to_string(n));
    }
    ASSERT_GT(hmget.size(), 2u) << id << " has no stored history";
    JOBPACT_ASSERT_OK_AND_ASSIGN(redis_internal::Reply h, client->Command(hmget));
    std::string last_worker;
    for (const redis_internal::Reply& entry : h.elements) {
      const std::string& e = entry.str;
      const std::size_t w = e.find("\"worker\":\"");
      if (w != std::string::npos) last_worker = e.substr(w + 10, e.find('"', w + 10) - w - 10);
      if (e.find("\"reason\":\"lease_expired") != std::string::npos) lost.insert(last_worker);
    }
  }
  for (const std::string& worker : lost) {
    const pid_t pid = static_cast<pid_t>(std::atol(worker.c_str() + std::string("crash-worker-").size()));
    EXPECT_EQ(killed.count(pid), 1u) << worker << " lost a lease but was never killed";
  }
  std::printf("redis crash test: %d jobs, %d kills, %d redelivered, %d succeeded, %d DLQ, %.1f s\n",
              kJobs, kills, redelivered, succeeded, dead_lettered, seconds);
  EXPECT_EQ(succeeded + dead_lettered, kJobs);
  std::vector<std::string> del{"DEL"};
  std::string cursor = "0";
  do {
    auto r = client->Command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    if (!r.ok() || r->elements.size() != 2) break;
    cursor = r->elements[0].str;
    for (const auto& k : r->elements[1].elements) (void)client->Command({"DEL", k.str});
  } while (cursor != "0");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace jobpact
