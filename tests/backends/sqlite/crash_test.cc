// The SQLite crash test: real worker processes (crash_worker.cc, a JobRunner
// each) share one database file while this test kills them with SIGKILL at
// random moments and starts replacements. 10,000 jobs, a bounded number of
// kills (20) and a bounded time (150 s).
//
// Afterwards, from the database and the workers' logs:
//   - the file passes PRAGMA integrity_check;
//   - no job is missing, and every job is in a final status or the DLQ;
//   - each redelivery traces to a killed worker: every delivery of a job
//     except its last was taken by a process this test killed (the delivery
//     history entries in the database name the worker, and so its pid);
//   - transactional completion ("tx"): every succeeded job has exactly one
//     effect row, written by the process that completed it; no effect row for
//     any other job;
//   - an outside effect (a file append, "outside"): every succeeded job has
//     at least one effect line, and every extra line was written by a killed
//     process that had started the job (the at-least-once bound).
//
// Figures (kills, redeliveries, duplicates, time) are printed and recorded as
// test properties.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "tests/support/crash_rig.h"

#ifndef JOBPACT_CRASH_WORKER
#error "JOBPACT_CRASH_WORKER must name the crash worker binary"
#endif

namespace jobpact {
namespace sqlite {
namespace {

constexpr int kJobs = 10000;
constexpr int kWorkers = 3;
constexpr int kMaxKills = 20;
constexpr auto kTimeBudget = std::chrono::seconds(150);

struct Figures {
  int kills = 0;
  int redelivered_jobs = 0;   // Jobs delivered more than once.
  int redeliveries = 0;       // Deliveries beyond the first, over all jobs.
  int duplicate_effects = 0;  // Effect lines/rows beyond the first.
  int dead_lettered = 0;
  double seconds = 0;
};

std::set<std::string> ReadLines(const std::string& path) {
  std::set<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.insert(line);
  }
  return out;
}

class CrashTest : public ::testing::TestWithParam<std::string> {
 protected:
  void Run(Figures* figures);
};

void CrashTest::Run(Figures* figures) {
  const std::string mode = GetParam();
  const bool transactional = mode == "tx";
  crash_testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string db = dir.path() + "/jobs.db";
  auto clock = SystemClock::Default();
  auto opened = SqliteBackend::Open(db, {}, clock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<SqliteBackend> backend = *opened;
  // The business table of the transactional effect: no unique constraint,
  // so a second commit of the effect would show as a second row.
  ASSERT_TRUE(backend
                  ->RunInTransaction([](sqlite3* h) -> Status {
                    return sqlite3_exec(h, "CREATE TABLE effects (job_id TEXT, pid TEXT)", nullptr,
                                        nullptr, nullptr) == SQLITE_OK
                               ? Status::Ok()
                               : Status::Internal(sqlite3_errmsg(h));
                  })
                  .ok());

  std::vector<std::string> ids;
  ids.reserve(kJobs);
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
    auto r = backend->queue()->EnqueueBatch(envs, {});
    ASSERT_TRUE(r.ok()) << r.status();
  }

  crash_testing::KillLoop loop;
  loop.binary = JOBPACT_CRASH_WORKER;
  loop.args = {db, dir.path(), mode};
  loop.dir = dir.path();
  loop.workers = kWorkers;
  loop.max_kills = kMaxKills;
  loop.budget = kTimeBudget;
  loop.pending = [&]() -> Result<std::int64_t> {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
    return crash_testing::Pending(stats);
  };
  const crash_testing::KillLoopResult run = crash_testing::RunKillLoop(loop);
  figures->kills = run.kills;
  figures->seconds = run.seconds;
  ASSERT_EQ(run.failure, "");
  ASSERT_TRUE(run.done) << "jobs still pending after " << run.seconds << " s";
  const std::set<pid_t>& killed = run.killed;

  // --- Every job present, final or dead-lettered; redeliveries traced ---
  std::map<std::string, pid_t> final_deliverer;  // job -> pid of its last delivery
  std::set<std::string> succeeded;
  for (const std::string& id : ids) {
    auto rec = backend->admin()->Get(id);
    ASSERT_TRUE(rec.ok()) << id << ": " << rec.status();
    ASSERT_TRUE(IsFinal(rec->status) || rec->status == JobStatus::kDeadLettered)
        << id << " is " << JobStatusName(rec->status);
    if (rec->status == JobStatus::kSucceeded) succeeded.insert(id);
    if (rec->status == JobStatus::kDeadLettered) ++figures->dead_lettered;
  }
  EXPECT_EQ(succeeded.size() + static_cast<std::size_t>(figures->dead_lettered), ids.size());
  {
    // The delivery entries of the stored history name the worker.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    // Not corrupted by any of the kills.
    ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
    sqlite3_finalize(st);
    ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT job_id, history, lease_recoveries FROM jobpact_jobs",
                                 -1, &st, nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const std::string id = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      auto history =
          nlohmann::json::parse(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
      const int recoveries = sqlite3_column_int(st, 2);
      std::vector<pid_t> deliverers;
      int expired = 0;
      for (const auto& e : history) {
        if (e.value("to", "") == "running") {
          deliverers.push_back(crash_testing::PidOfWorker(e.value("worker", "")));
        }
        if (e.value("reason", "") == "lease_expired" ||
            e.value("reason", "") == "lease_expired_repeatedly") {
          ++expired;
        }
      }
      ASSERT_FALSE(deliverers.empty()) << id << " was never delivered";
      EXPECT_EQ(expired, recoveries) << id;
      // Every delivery but the last ended in a lease expiry: it must have
      // been taken by a killed process.
      for (std::size_t i = 0; i + 1 < deliverers.size(); ++i) {
        EXPECT_TRUE(killed.count(deliverers[i]) == 1)
            << id << ": delivery " << i + 1 << " by live process " << deliverers[i]
            << " was redelivered";
      }
      if (deliverers.size() > 1) {
        ++figures->redelivered_jobs;
        figures->redeliveries += static_cast<int>(deliverers.size()) - 1;
      }
      final_deliverer[id] = deliverers.back();
    }
    sqlite3_finalize(st);

    if (transactional) {
      // --- Exactly once: one effect row per succeeded job, by its completer ---
      std::map<std::string, std::vector<pid_t>> rows;
      ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT job_id, pid FROM effects", -1, &st, nullptr),
                SQLITE_OK);
      while (sqlite3_step(st) == SQLITE_ROW) {
        rows[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))].push_back(
            static_cast<pid_t>(sqlite3_column_int64(st, 1)));
      }
      sqlite3_finalize(st);
      for (const auto& [id, pids] : rows) {
        EXPECT_TRUE(succeeded.count(id) == 1) << "effect row for job " << id << " not succeeded";
        EXPECT_EQ(pids.size(), 1u) << "job " << id << " has " << pids.size() << " effect rows";
        if (pids.size() > 1) figures->duplicate_effects += static_cast<int>(pids.size()) - 1;
        EXPECT_EQ(pids.front(), final_deliverer[id]) << id;
      }
      for (const std::string& id : succeeded) {
        EXPECT_EQ(rows.count(id), 1u) << "succeeded job " << id << " has no effect row";
      }
    }
    sqlite3_close(raw);
  }

  if (!transactional) {
    // --- At least once, duplicates only from killed workers ---
    std::map<std::string, std::vector<pid_t>> lines;
    {
      std::ifstream in(dir.path() + "/effects.txt");
      std::string id;
      long pid = 0;
      while (in >> id >> pid) lines[id].push_back(static_cast<pid_t>(pid));
    }
    std::map<pid_t, std::set<std::string>> starts;
    for (pid_t pid : killed) {
      starts[pid] = ReadLines(dir.path() + "/start-" + std::to_string(pid) + ".log");
    }
    for (const std::string& id : succeeded) {
      auto it = lines.find(id);
      ASSERT_TRUE(it != lines.end()) << "succeeded job " << id << " has no effect line";
      const std::vector<pid_t>& pids = it->second;
      figures->duplicate_effects += static_cast<int>(pids.size()) - 1;
      // All lines but one come from killed processes that had started it.
      int from_live = 0;
      for (pid_t pid : pids) {
        if (killed.count(pid) == 0) {
          ++from_live;
        } else {
          EXPECT_TRUE(starts[pid].count(id) == 1)
              << id << ": effect by killed " << pid << " without a start record";
        }
      }
      EXPECT_LE(from_live, 1) << id << " has effects from " << from_live << " live processes";
    }
  }
}

TEST_P(CrashTest, SurvivesRandomKills) {
  Figures f;
  Run(&f);
  std::printf(
      "[crash %s] %d jobs, %d kills, %d jobs redelivered (%d redeliveries), %d duplicate "
      "effects, %d dead-lettered, %.1f s\n",
      GetParam().c_str(), kJobs, f.kills, f.redelivered_jobs, f.redeliveries, f.duplicate_effects,
      f.dead_lettered, f.seconds);
  RecordProperty("kills", f.kills);
  RecordProperty("redelivered_jobs", f.redelivered_jobs);
  RecordProperty("redeliveries", f.redeliveries);
  RecordProperty("duplicate_effects", f.duplicate_effects);
  RecordProperty("dead_lettered", f.dead_lettered);
  // The run must actually have exercised recovery.
  EXPECT_GT(f.kills, 0);
  EXPECT_GT(f.redeliveries, 0);
  if (GetParam() == "tx") {
    EXPECT_EQ(f.duplicate_effects, 0);
  }
}

std::string ModeName(const ::testing::TestParamInfo<std::string>& param) {
  return param.param == "tx" ? "TransactionalEffect" : "OutsideEffect";
}

INSTANTIATE_TEST_SUITE_P(Sqlite, CrashTest, ::testing::Values("tx", "outside"), ModeName);

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
