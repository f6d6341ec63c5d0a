// The soak test: a bounded run of minutes on one SQLite file, with every
// kind of trouble at once, and an invariant checker at the end. Opt-in: it
// runs only when JOBPACT_SOAK_SECONDS is set (scripts/test sets it once;
// longer runs by hand), and skips saying so otherwise.
//
// For JOBPACT_SOAK_SECONDS, a producer process (tests/support/crash_worker.h,
// "produce-until") enqueues batches of 50 jobs every 100 ms, half with an
// idempotency key, each job's effect a row written in its completion
// transaction. Three worker processes (crash_worker.cc in "soak" mode) run
// them while:
//   - this test kills a worker (or the producer, three times, inside an
//     EnqueueBatch call) every 1-4 s and starts a replacement; once, every
//     worker but the first at once; the first lives through the whole run;
//   - each worker's queue meets a backend fault every 100 ms (a lease call
//     that fails, a completion that fails before or after it is written, a
//     lease recovery that fails: Chaos in tests/support/soak_worker.h);
//   - every 15 s each worker stalls twice the lease (3 s) before a
//     completion, so the leases it holds expire under it and another
//     worker takes the jobs over (its late completions are refused).
// Then the workers drain what is left, and the test checks:
//   - no job lost: every acknowledged enqueue is stored; a batch a kill cut
//     short is stored whole or not at all;
//   - no job stuck: every job is final or in the DLQ, and its lease
//     recoveries match the lease expiries of its history;
//   - no duplicate effect: exactly one effect row per succeeded job, none
//     for any other;
//   - the file passes PRAGMA integrity_check;
//   - memory flat: the first worker's resident anonymous memory (its heap,
//     sampled each second) grows by at most 10% + 16 MiB from the second
//     quarter of the run to the last.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
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

// One RSS log (RssLog in tests/support/soak_worker.h): (seconds, KiB).
std::vector<std::pair<double, long>> ReadRss(const std::string& path) {
  std::vector<std::pair<double, long>> out;
  std::ifstream in(path);
  double s = 0;
  long kib = 0;
  while (in >> s >> kib) out.emplace_back(s, kib);
  return out;
}

long MaxKib(const std::vector<std::pair<double, long>>& samples, std::size_t from, std::size_t to) {
  long out = 0;
  for (std::size_t i = from; i < to; ++i) out = std::max(out, samples[i].second);
  return out;
}

TEST(SqliteSoakTest, KillsFaultsAndStallsLoseNothingAndMemoryStaysFlat) {
  const char* seconds_env = std::getenv("JOBPACT_SOAK_SECONDS");
  if (seconds_env == nullptr || std::atoi(seconds_env) <= 0) {
    GTEST_SKIP() << "the soak test runs only with JOBPACT_SOAK_SECONDS set (scripts/test sets it)";
  }
  const int seconds = std::atoi(seconds_env);
  crash_testing::TempDir dir("jobpact_soak");
  ASSERT_FALSE(dir.path().empty());
  const std::string db = dir.path() + "/jobs.db";
  auto clock = SystemClock::Default();
  auto backend_or = SqliteBackend::Open(db, {}, clock);
  ASSERT_TRUE(backend_or.ok()) << backend_or.status();
  std::shared_ptr<SqliteBackend> backend = *backend_or;
  ASSERT_TRUE(CreateEffectsTable(*backend).ok());

  const auto until = std::chrono::system_clock::now() + std::chrono::seconds(seconds);
  const std::string until_arg =
      "produce-until:" +
      std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(until.time_since_epoch()).count() + 1);
  crash_testing::KillLoop loop;
  loop.binary = JOBPACT_CRASH_WORKER;
  loop.args = {db, dir.path(), "tx", "soak"};
  loop.producer_args = {db, dir.path(), "tx", until_arg};
  loop.dir = dir.path();
  loop.workers = 3;
  loop.spared = 1;
  loop.min_pause = std::chrono::milliseconds(1000);
  loop.max_pause = std::chrono::milliseconds(4000);
  loop.max_rounds = std::max(4, seconds * 2 / 5);  // Kills through the producer's time.
  loop.kill_all_round = 5;
  loop.producer_kills = 3;
  loop.budget = std::chrono::seconds(seconds + 180);  // And the drain.
  loop.pending = [&]() -> Result<std::int64_t> {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
    return crash_testing::Pending(stats);
  };
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> raw_closer(raw, sqlite3_close);
  const crash_testing::RawHistory history = StoredHistories(raw);
  const crash_testing::CrashOutcome run = crash_testing::RunKillLoopAndCheck(
      loop, *backend->admin(), {}, history, JobRunnerOptions{}.max_lease_recoveries,
      /*leases_lost_to_kills=*/false);
  for (const std::string& problem : run.problems) ADD_FAILURE() << problem;
  ASSERT_TRUE(run.run.done) << "see " << dir.path() << "/worker-*.stderr";
  EXPECT_GT(run.ids.size(), 0u);

  // --- No duplicate effect: one row per succeeded job, none for others ---
  std::map<std::string, int> rows;
  {
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT job_id FROM effects", -1, &st, nullptr), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      ++rows[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))];
    }
    sqlite3_finalize(st);
    ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
    sqlite3_finalize(st);
  }
  int duplicates = 0;
  for (const auto& [id, n] : rows) {
    EXPECT_EQ(run.succeeded.count(id), 1u) << "effect row for job " << id << " not succeeded";
    EXPECT_EQ(n, 1) << "job " << id << " has " << n << " effect rows";
    duplicates += n - 1;
  }
  for (const std::string& id : run.succeeded) {
    EXPECT_EQ(rows.count(id), 1u) << "succeeded job " << id << " has no effect row";
  }
  // Why the dead-lettered are there.
  std::map<std::string, int> dead_reasons;
  for (const std::string& id : run.ids) {
    auto rec = backend->admin()->Get(id);
    if (rec.ok() && rec->status == JobStatus::kDeadLettered) ++dead_reasons[rec->reason];
  }
  std::string dead;
  for (const auto& [why, n] : dead_reasons) dead += " " + why + "=" + std::to_string(n);

  // --- Memory flat: the worker that lived through the run ---
  std::vector<std::pair<double, long>> rss;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind("rss-", 0) != 0) continue;
    auto samples = ReadRss(entry.path().string());
    if (samples.size() > rss.size()) rss = std::move(samples);
  }
  ASSERT_GE(rss.size(), 8u) << "the long-lived worker's memory log is too short";
  const std::size_t q = rss.size() / 4;
  const long second_quarter = MaxKib(rss, q, 2 * q);
  const long last_quarter = MaxKib(rss, 3 * q, rss.size());
  EXPECT_LE(last_quarter, second_quarter + second_quarter / 10 + 16 * 1024)
      << "resident anonymous memory grew from " << second_quarter << " KiB to " << last_quarter
      << " KiB";

  std::printf(
      "[soak] %d s: %s; %d duplicate effects; dead-lettered:%s; RssAnon of the long-lived worker: "
      "%ld KiB at first, max %ld KiB in the second quarter, %ld KiB in the last\n",
      seconds, run.Summary().c_str(), duplicates, dead.empty() ? " none" : dead.c_str(),
      rss.front().second, second_quarter, last_quarter);
  RecordProperty("jobs", static_cast<int>(run.ids.size()));
  RecordProperty("kills", run.run.kills);
  RecordProperty("dead_lettered", run.dead_lettered);
}

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
