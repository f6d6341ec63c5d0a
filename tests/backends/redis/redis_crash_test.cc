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
#include "jobpact/redis/redis_backend.h"
#include "jobpact/testing/matchers.h"
#include "src/backends/redis/client.h"
#include "tests/backends/crash_harness.h"
#include "tests/backends/redis/redis_test_server.h"

#ifndef JOBPACT_REDIS_CRASH_WORKER
#error "JOBPACT_REDIS_CRASH_WORKER must name the crash worker binary"
#endif

namespace jobpact {
namespace {

constexpr int kJobs = 3000;

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

  crash_testing::KillLoopResult run = crash_testing::RunKillLoop(
      crash_testing::KillLoopOptions{},
      [&](int seq) {
        return crash_testing::SpawnProcess(
            {JOBPACT_REDIS_CRASH_WORKER, url, options.key_namespace, dir},
            dir + "/worker-" + std::to_string(seq) + ".stderr");
      },
      [&]() -> Result<std::int64_t> {
        JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
        return stats.by_status[JobStatus::kQueued] + stats.by_status[JobStatus::kRunning] +
               stats.by_status[JobStatus::kRetryScheduled];
      });
  ASSERT_TRUE(run.failure.empty()) << run.failure << " (see " << dir << "/worker-*.stderr)";
  ASSERT_TRUE(run.done) << "jobs still pending after " << run.seconds << " s";
  const int kills = run.kills;
  const double seconds = run.seconds;
  const std::set<pid_t>& killed = run.killed;

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
    // The stored history: JSON entries, one per line.
    JOBPACT_ASSERT_OK_AND_ASSIGN(redis_internal::Reply h,
                                 client->Command({"HGET", prefix + "job:" + id, "h"}));
    std::vector<nlohmann::json> entries;
    std::size_t at = 0;
    while (at < h.str.size()) {
      std::size_t nl = h.str.find('\n', at);
      if (nl == std::string::npos) nl = h.str.size();
      entries.push_back(nlohmann::json::parse(h.str.substr(at, nl - at), nullptr, false));
      at = nl + 1;
    }
    crash_testing::NoteLostLeases(entries, &lost);
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
