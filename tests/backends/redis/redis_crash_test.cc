// The Redis crash test: real worker processes (redis_crash_worker.cc, a
// JobRunner each) share one namespace of the test server while this test
// kills them with SIGKILL (tests/support/crash_rig.h, shared with the other
// crash tests):
//   - first while they open the fresh namespace (connect, load the
//     scripts: KillDuringStartup);
//   - then at random moments while they run 3000 jobs (half with an
//     idempotency key) and a producer process enqueues more in big batches:
//     the producer twice, every worker at once in one round, one worker at
//     random in the others, each replaced; 12 rounds, 120 s at most. The
//     workers keep the runner's default recovery cap.
//
// Afterwards, from the store and the workers' logs:
//   - every acknowledged enqueue is stored; a batch a kill cut short is
//     stored whole or not at all;
//   - every job is in a final status or the DLQ; each redelivery traces to
//     a killed worker (the delivery history entries name the worker, and so
//     its pid), and each dead-lettered job to as many killed workers as the
//     recovery cap allows, plus one (RunKillLoopAndCheck);
//   - the effect attached to the completion (INCR of a per-job counter,
//     RedisEffect) happened exactly once for every succeeded job and never
//     for any other;
//   - a plain effect (the handler's own INCR) happened at least once for
//     every succeeded job, and each duplicate is explained: every run of the
//     effect but one was by a worker this test killed (between the effect
//     and the ack; with an idempotency key, the record skips a redelivery
//     once it is written).
// Figures (kills, redeliveries, time) are printed.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/queue_backend.h"
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
constexpr int kMaxRounds = 12;
constexpr auto kTimeBudget = std::chrono::seconds(120);

TEST(RedisCrashTest, KilledWorkersLoseNoJobAndEveryDuplicateEffectIsExplained) {
  JOBPACT_REDIS_URL_OR_SKIP(url);
  redis::RedisOptions options = redis_testing::TestOptions();
  crash_testing::TempDir tmp("jobpact_rcrash");
  ASSERT_FALSE(tmp.path().empty());
  const std::string& dir = tmp.path();

  // Workers killed while they open the fresh namespace.
  crash_testing::StartupKillsResult opened;
  ASSERT_EQ(crash_testing::KillWhileOpening(JOBPACT_REDIS_CRASH_WORKER,
                                            {url, options.key_namespace, dir}, dir, &opened),
            "");

  auto clock = SystemClock::Default();
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto backend, redis::RedisBackend::Open(options, clock));
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto client, redis_internal::RedisClient::Connect(options));
  const std::string prefix = "jobpact:{" + options.key_namespace + "}:";
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      std::vector<std::string> ids,
      crash_testing::EnqueueJobs(*backend->queue(), *clock, kJobs, [](int n) {
        return n < kPlainJobs ? "crash.plain" : "crash.effect";
      }));

  crash_testing::KillLoop loop;
  loop.binary = JOBPACT_REDIS_CRASH_WORKER;
  loop.args = {url, options.key_namespace, dir};
  loop.producer_args = {url, options.key_namespace, dir, "produce"};
  loop.dir = dir;
  loop.workers = kWorkers;
  loop.max_rounds = kMaxRounds;
  loop.budget = kTimeBudget;
  loop.pending = [&]() -> Result<std::int64_t> {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
    return crash_testing::Pending(stats);
  };
  // The stored history: JSON entries, entry n in field "h<n>", "hn" their
  // count (queue_scripts.cc).
  auto history = [&](const std::string& id) -> Result<std::vector<nlohmann::json>> {
    JOBPACT_ASSIGN_OR_RETURN(redis_internal::Reply hn,
                             client->Command({"HGET", prefix + "job:" + id, "hn"}));
    std::vector<std::string> hmget{"HMGET", prefix + "job:" + id};
    const long count = std::atol(hn.str.c_str());
    for (long n = std::max(1L, count - static_cast<long>(kMaxHistory) + 1); n <= count; ++n) {
      hmget.push_back("h" + std::to_string(n));
    }
    if (hmget.size() == 2) return Status::NotFound(id + " has no stored history");
    JOBPACT_ASSIGN_OR_RETURN(redis_internal::Reply h, client->Command(hmget));
    std::vector<nlohmann::json> entries;
    for (const redis_internal::Reply& entry : h.elements) {
      entries.push_back(nlohmann::json::parse(entry.str, nullptr, false));
    }
    return entries;
  };
  const crash_testing::CrashOutcome run = crash_testing::RunKillLoopAndCheck(
      loop, *backend->admin(), std::move(ids), history, JobRunnerOptions{}.max_lease_recoveries);
  for (const std::string& problem : run.problems) ADD_FAILURE() << problem;
  ASSERT_TRUE(run.run.done) << "see " << dir << "/worker-*.stderr";
  EXPECT_GT(run.cut_stored + run.cut_absent, 0) << "no kill landed inside an EnqueueBatch call";
  EXPECT_TRUE(run.run.killed_all_at_once);
  const std::set<pid_t>& killed = run.run.killed;

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

  for (const std::string& id : run.ids) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, backend->admin()->Get(id));
    const bool succeeded = rec.status == JobStatus::kSucceeded;
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
      if (succeeded) {
        EXPECT_GE(effects, 1) << id << " succeeded without its effect";
        plain_duplicates += effects > 1 ? effects - 1 : 0;
      }
      continue;
    }
    JOBPACT_ASSERT_OK_AND_ASSIGN(redis_internal::Reply n,
                                 client->Command({"GET", prefix + "app:effect:" + id}));
    if (succeeded) {
      EXPECT_EQ(n.str, "1") << id << ": the completion effect did not happen exactly once";
    } else {
      EXPECT_TRUE(n.is_nil()) << id << " is " << JobStatusName(rec.status)
                              << " but its effect happened " << n.str << " times";
    }
  }
  std::printf(
      "redis crash test: startup: %d kills, %d inside Open; run: %s; %d duplicate plain effects "
      "(each by a killed worker)\n",
      opened.kills, opened.inside_open, run.Summary().c_str(), plain_duplicates);
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
