// The SQLite crash test: real worker processes (crash_worker.cc, a JobRunner
// each) share one database file while this test kills them with SIGKILL
// (tests/support/crash_rig.h, shared with the other crash tests):
//   - first while they open the fresh file, and so while they create its
//     schema (KillDuringStartup);
//   - then at random moments while they run 10,000 jobs (half with an
//     idempotency key) and a producer process enqueues more in big batches:
//     the producer twice, every worker at once in one round, one worker at
//     random in the others, each replaced; 20 rounds, 150 s at most.
//     The workers keep the runner's default recovery cap.
//
// Afterwards, from the database and the workers' logs:
//   - the file passes PRAGMA integrity_check;
//   - every acknowledged enqueue is stored; a batch a kill cut short is
//     stored whole or not at all;
//   - every job is in a final status or the DLQ; each redelivery traces to
//     a killed worker (the delivery history entries in the database name
//     the worker, and so its pid), and each dead-lettered job to as many
//     killed workers as the recovery cap allows, plus one;
//   - transactional completion ("tx"): every succeeded job has exactly one
//     effect row, written by the process that completed it; no effect row for
//     any other job;
//   - an outside effect (a file append, "outside"): every succeeded job has
//     at least one effect line, and every extra line was written by a killed
//     process that had started the job (the at-least-once bound).
//
// Figures (kills, redeliveries, duplicates, time) are printed and recorded as
// test properties.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "tests/backends/sqlite/crash_support.h"
#include "tests/support/crash_rig.h"

#ifndef JOBPACT_CRASH_WORKER
#error "JOBPACT_CRASH_WORKER must name the crash worker binary"
#endif

namespace jobpact {
namespace sqlite {
namespace {

constexpr int kJobs = 10000;
constexpr int kWorkers = 3;
constexpr int kMaxRounds = 20;
constexpr auto kTimeBudget = std::chrono::seconds(150);

std::set<std::string> ReadLines(const std::string& path) {
  std::set<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.insert(line);
  }
  return out;
}

class CrashTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CrashTest, SurvivesRandomKills) {
  const std::string mode = GetParam();
  const bool transactional = mode == "tx";
  crash_testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string db = dir.path() + "/jobs.db";

  // Workers killed while they open the fresh file, creating its schema.
  crash_testing::StartupKillsResult opened;
  ASSERT_EQ(crash_testing::KillWhileOpening(JOBPACT_CRASH_WORKER, {db, dir.path(), mode},
                                            dir.path(), &opened),
            "");

  auto clock = SystemClock::Default();
  auto backend_or = SqliteBackend::Open(db, {}, clock);
  ASSERT_TRUE(backend_or.ok()) << backend_or.status();
  std::shared_ptr<SqliteBackend> backend = *backend_or;
  ASSERT_TRUE(CreateEffectsTable(*backend).ok());
  auto ids = crash_testing::EnqueueJobs(*backend->queue(), *clock, kJobs,
                                        [](int) { return "crash.effect"; });
  ASSERT_TRUE(ids.ok()) << ids.status();

  crash_testing::KillLoop loop;
  loop.binary = JOBPACT_CRASH_WORKER;
  loop.args = {db, dir.path(), mode};
  loop.producer_args = {db, dir.path(), mode, "produce"};
  loop.dir = dir.path();
  loop.workers = kWorkers;
  loop.max_rounds = kMaxRounds;
  loop.budget = kTimeBudget;
  loop.pending = [&]() -> Result<std::int64_t> {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
    return crash_testing::Pending(stats);
  };
  // The test's own connection: the stored histories and the checks below.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> raw_closer(raw, sqlite3_close);
  const crash_testing::RawHistory history = StoredHistories(raw);
  const crash_testing::CrashOutcome run = crash_testing::RunKillLoopAndCheck(
      loop, *backend->admin(), *std::move(ids), history, JobRunnerOptions{}.max_lease_recoveries);
  for (const std::string& problem : run.problems) ADD_FAILURE() << problem;
  ASSERT_TRUE(run.run.done);
  // The run must actually have exercised recovery.
  EXPECT_GT(run.cut_stored + run.cut_absent, 0) << "no kill landed inside an EnqueueBatch call";
  EXPECT_TRUE(run.run.killed_all_at_once);
  EXPECT_GT(run.redeliveries, 0);
  const std::set<pid_t>& killed = run.run.killed;
  int duplicate_effects = 0;

  {
    // Not corrupted by any of the kills.
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
    sqlite3_finalize(st);
  }
  if (transactional) {
    // --- Exactly once: one effect row per succeeded job, by its completer ---
    std::map<std::string, std::vector<pid_t>> rows;
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT job_id, pid FROM effects", -1, &st, nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      rows[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))].push_back(
          static_cast<pid_t>(sqlite3_column_int64(st, 1)));
    }
    sqlite3_finalize(st);
    for (const auto& [id, pids] : rows) {
      EXPECT_TRUE(run.succeeded.count(id) == 1) << "effect row for job " << id << " not succeeded";
      EXPECT_EQ(pids.size(), 1u) << "job " << id << " has " << pids.size() << " effect rows";
      if (pids.size() > 1) duplicate_effects += static_cast<int>(pids.size()) - 1;
      auto completer = run.last_deliverer.find(id);
      ASSERT_TRUE(completer != run.last_deliverer.end()) << id;
      EXPECT_EQ(pids.front(), completer->second) << id;
    }
    for (const std::string& id : run.succeeded) {
      EXPECT_EQ(rows.count(id), 1u) << "succeeded job " << id << " has no effect row";
    }
    EXPECT_EQ(duplicate_effects, 0);
  } else {
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
    for (const std::string& id : run.succeeded) {
      auto it = lines.find(id);
      ASSERT_TRUE(it != lines.end()) << "succeeded job " << id << " has no effect line";
      const std::vector<pid_t>& pids = it->second;
      duplicate_effects += static_cast<int>(pids.size()) - 1;
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
  std::printf("[crash %s] startup: %d kills, %d inside Open; run: %s; %d duplicate effects\n",
              mode.c_str(), opened.kills, opened.inside_open, run.Summary().c_str(),
              duplicate_effects);
  RecordProperty("kills", run.run.kills);
  RecordProperty("redelivered_jobs", run.redelivered_jobs);
  RecordProperty("redeliveries", run.redeliveries);
  RecordProperty("duplicate_effects", duplicate_effects);
  RecordProperty("dead_lettered", run.dead_lettered);
}

std::string ModeName(const ::testing::TestParamInfo<std::string>& param) {
  return param.param == "tx" ? "TransactionalEffect" : "OutsideEffect";
}

INSTANTIATE_TEST_SUITE_P(Sqlite, CrashTest, ::testing::Values("tx", "outside"), ModeName);

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
