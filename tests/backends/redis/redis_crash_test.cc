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
//     for any other;
//   - a plain effect (the handler's own INCR, of jobs with an idempotency
//     key) happened at least once for every succeeded job, and each
//     duplicate is explained: every run of the effect but one was by a
//     worker this test killed (between the effect and the ack, since the
//     idempotency record skips a redelivery once it is written).
// Figures (kills, redeliveries, time) are printed.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/redis/redis_backend.h"
#include "jobpact/testing/matchers.h"
#include "src/backends/redis/client.h"
#include "tests/backends/redis/redis_test_server.h"
#include "tests/support/crash_rig.h"

#ifndef JOBPACT_REDIS_CRASH_WORKER
#error "JOBPACT_REDIS_CRASH_WORKER must name the crash worker binary"
#endif

namespace jobpact {
namespace {

constexpr int kJobs = 3000;
constexpr int kPlainJobs = 1000;  // Of kJobs: "crash.plain"; the rest "crash.effect".
constexpr int kWorkers = 3;
constexpr int kMaxKills = 12;
constexpr auto kTimeBudget = std::chrono::seconds(120);

TEST(RedisCrashTest, KilledWorkersLoseNoJobAndEveryDuplicateEffectIsExplained) {
  JOBPACT_REDIS_URL_OR_SKIP(url);
  redis::RedisOptions options = redis_testing::TestOptions();
  crash_testing::TempDir tmp("jobpact_rcrash");
  ASSERT_FALSE(tmp.path().empty());
  const std::string& dir = tmp.path();
  auto clock = SystemClock::Default();
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto backend, redis::RedisBackend::Open(options, clock));
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto client, redis_internal::RedisClient::Connect(options));
  const std::string prefix = "jobpact:{" + options.key_namespace + "}:";

  std::vector<std::string> ids;
  for (int batch = 0; batch < kJobs / 500; ++batch) {
    std::vector<Envelope> envs;
    for (int i = 0; i < 500; ++i) {
      const int n = batch * 500 + i;
      Envelope env;
      env.job_type = n < kPlainJobs ? "crash.plain" : "crash.effect";
      if (n < kPlainJobs) env.idempotency_key = "plain-" + std::to_string(n);
      env.payload = "{\"n\":" + std::to_string(n) + "}";
      env.timeout = Seconds(1);
      env.visibility_timeout = Seconds(3);  // Short leases: quick recovery.
      PrepareForEnqueue(env, clock->Now());
      ids.push_back(env.job_id);
      envs.push_back(std::move(env));
    }
    ASSERT_TRUE(backend->queue()->EnqueueBatch(envs, {}).ok());
  }

  crash_testing::KillLoop loop;
  loop.binary = JOBPACT_REDIS_CRASH_WORKER;
  loop.args = {url, options.key_namespace, dir};
  loop.dir = dir;
  loop.workers = kWorkers;
  loop.max_kills = kMaxKills;
  loop.budget = kTimeBudget;
  loop.pending = [&]() -> Result<std::int64_t> {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
    return crash_testing::Pending(stats);
  };
  const crash_testing::KillLoopResult run = crash_testing::RunKillLoop(loop);
  ASSERT_EQ(run.failure, "");
  ASSERT_TRUE(run.done) << "jobs still pending after " << run.seconds << " s";
  const std::set<pid_t>& killed = run.killed;

  // Who ran each plain effect: "<job id>" lines of plain-<pid>.log.
  std::map<std::string, std::vector<pid_t>> plain_runs;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("plain-", 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + 6));
    std::FILE* f = std::fopen(entry.path().c_str(), "r");
    ASSERT_NE(f, nullptr);
    char line[128];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      std::string id(line);
      if (!id.empty() && id.back() == '\n') id.pop_back();
      plain_runs[id].push_back(pid);
    }
    std::fclose(f);
  }
  int plain_duplicates = 0;

  int redelivered = 0, dead_lettered = 0, succeeded = 0;
  for (const std::string& id : ids) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, backend->admin()->Get(id));
    ASSERT_TRUE(IsFinal(rec.status) || rec.status == JobStatus::kDeadLettered)
        << id << " is " << JobStatusName(rec.status);
    // Every delivery but the last ended in a recovered lease (its worker
    // was lost: which one, below).
    // A plain job's delivery may also end requeued because the claim of
    // the killed worker that ran it still held its key
    // (idempotency_in_progress): that, too, traces to the lost worker.
    int deliveries = 0, claim_waits = 0;
    for (const Transition& t : rec.history) {
      deliveries += t.to == JobStatus::kRunning ? 1 : 0;
      claim_waits += t.reason == reason::kIdempotencyInProgress ? 1 : 0;
    }
    ASSERT_GT(deliveries, 0) << id << " was never delivered";
    if (deliveries > 1) ++redelivered;
    EXPECT_EQ(deliveries - 1, rec.lease_recoveries + claim_waits)
        << id << ": a redelivery without a lost lease";
    if (claim_waits > 0) {
      EXPECT_GT(rec.lease_recoveries, 0) << id << ": a claim held by no lost worker";
    }
    if (rec.envelope.job_type == "crash.plain") {
      JOBPACT_ASSERT_OK_AND_ASSIGN(redis_internal::Reply n,
                                   client->Command({"GET", prefix + "app:plain:" + id}));
      const int effects = n.is_nil() ? 0 : std::atoi(n.str.c_str());
      const std::vector<pid_t>& runs = plain_runs[id];
      // Each INCR was preceded by its line (a kill may fall between them).
      EXPECT_LE(effects, static_cast<int>(runs.size())) << id;
      int by_survivors = 0;
      for (pid_t pid : runs) by_survivors += killed.count(pid) == 0 ? 1 : 0;
      EXPECT_LE(by_survivors, 1) << id << ": a worker that was not killed ran the effect again";
      if (rec.status == JobStatus::kSucceeded) {
        ++succeeded;
        EXPECT_GE(effects, 1) << id << " succeeded without its effect";
        plain_duplicates += effects > 1 ? effects - 1 : 0;
      } else {
        ++dead_lettered;
      }
      continue;
    }
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
    std::string last_worker;
    std::size_t at = 0;
    while (at < h.str.size()) {
      std::size_t nl = h.str.find('\n', at);
      if (nl == std::string::npos) nl = h.str.size();
      const std::string e = h.str.substr(at, nl - at);
      at = nl + 1;
      const std::size_t w = e.find("\"worker\":\"");
      if (w != std::string::npos) last_worker = e.substr(w + 10, e.find('"', w + 10) - w - 10);
      if (e.find("\"reason\":\"lease_expired") != std::string::npos) lost.insert(last_worker);
    }
  }
  for (const std::string& worker : lost) {
    EXPECT_EQ(killed.count(crash_testing::PidOfWorker(worker)), 1u)
        << worker << " lost a lease but was never killed";
  }
  std::printf(
      "redis crash test: %d jobs, %d kills, %d redelivered, %d succeeded, %d DLQ, %d duplicate "
      "plain effects (each by a killed worker), %.1f s\n",
      kJobs, run.kills, redelivered, succeeded, dead_lettered, plain_duplicates, run.seconds);
  EXPECT_EQ(succeeded + dead_lettered, kJobs);
  std::vector<std::string> del{"DEL"};
  std::string cursor = "0";
  do {
    auto r = client->Command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    if (!r.ok() || r->elements.size() != 2) break;
    cursor = r->elements[0].str;
    for (const auto& k : r->elements[1].elements) (void)client->Command({"DEL", k.str});
  } while (cursor != "0");
}

}  // namespace
}  // namespace jobpact
