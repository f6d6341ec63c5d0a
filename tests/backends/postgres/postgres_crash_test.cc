// The PostgreSQL crash test: real worker processes (postgres_crash_worker.cc,
// a JobRunner each) share one schema of the test server while this test
// kills them with SIGKILL (tests/support/crash_rig.h, shared with the other
// crash tests):
//   - first while they open the fresh schema, and so while they run its
//     migrations (KillDuringStartup);
//   - then at random moments while they run 3000 jobs (half with an
//     idempotency key) and a producer process enqueues more in big batches:
//     the producer twice, every worker at once in one round, one worker at
//     random in the others, each replaced; 12 rounds, 120 s at most. The
//     workers keep the runner's default recovery cap.
//
// Afterwards, from the store (RunKillLoopAndCheck):
//   - every acknowledged enqueue is stored; a batch a kill cut short is
//     stored whole or not at all;
//   - every job is in a final status or the DLQ; each redelivery traces to
//     a killed worker (the delivery history entries name the worker, and so
//     its pid), and each dead-lettered job to as many killed workers as the
//     recovery cap allows, plus one;
//   - the effect committed in the completion transaction (a row in
//     <schema>.effects) exists exactly once for every succeeded job and
//     never for any other.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/postgres/postgres_backend.h"
#include "jobpact/testing/matchers.h"
#include "tests/backends/postgres/postgres_test_server.h"
#include "tests/support/crash_rig.h"

#ifndef JOBPACT_POSTGRES_CRASH_WORKER
#error "JOBPACT_POSTGRES_CRASH_WORKER must name the crash worker binary"
#endif

namespace jobpact {
namespace {

constexpr int kJobs = 3000;

TEST(PostgresCrashTest, KilledWorkersLoseNoJobAndTheCompletionEffectHappensOnce) {
  JOBPACT_POSTGRES_URL_OR_SKIP(url);
  postgres::PostgresOptions options = postgres_testing::TestOptions();
  crash_testing::TempDir tmp("jobpact_pgcrash");
  ASSERT_FALSE(tmp.path().empty());
  const std::string& dir = tmp.path();

  // Workers killed while they open the fresh schema, migrating it.
  crash_testing::StartupKillsResult opened;
  ASSERT_EQ(crash_testing::KillWhileOpening(JOBPACT_POSTGRES_CRASH_WORKER,
                                            {url, options.schema, dir}, dir, &opened),
            "");

  auto clock = SystemClock::Default();
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto backend, postgres::PostgresBackend::Open(options, clock));
  postgres_testing::PgConnPtr raw = postgres_testing::Connect(options);
  ASSERT_NE(raw, nullptr);
  const std::string schema = "\"" + options.schema + "\"";
  ASSERT_EQ(postgres_testing::Query(raw.get(), "CREATE TABLE " + schema + ".effects (job_id text)"),
            "");
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> ids,
                               crash_testing::EnqueueJobs(*backend->queue(), *clock, kJobs,
                                                          [](int) { return "crash.effect"; }));

  crash_testing::KillLoop loop;
  loop.binary = JOBPACT_POSTGRES_CRASH_WORKER;
  loop.args = {url, options.schema, dir};
  loop.producer_args = {url, options.schema, dir, "produce"};
  loop.dir = dir;
  loop.pending = [&]() -> Result<std::int64_t> {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
    return crash_testing::Pending(stats);
  };
  auto history = [&](const std::string& id) -> Result<std::vector<nlohmann::json>> {
    const char* values[1] = {id.c_str()};
    PGresult* r = PQexecParams(
        raw.get(), ("SELECT history FROM " + schema + ".jobs WHERE job_id = $1").c_str(), 1,
        nullptr, values, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    nlohmann::json h =
        ok ? nlohmann::json::parse(PQgetvalue(r, 0, 0), nullptr, false) : nlohmann::json();
    const std::string error = PQresultErrorMessage(r);
    PQclear(r);
    if (!h.is_array()) return Status::Internal("the history of " + id + " is unreadable " + error);
    return h.get<std::vector<nlohmann::json>>();
  };
  const crash_testing::CrashOutcome run = crash_testing::RunKillLoopAndCheck(
      loop, *backend->admin(), std::move(ids), history, JobRunnerOptions{}.max_lease_recoveries);
  for (const std::string& problem : run.problems) ADD_FAILURE() << problem;
  ASSERT_TRUE(run.run.done) << "see " << dir << "/worker-*.stderr";
  EXPECT_GT(run.cut_stored + run.cut_absent, 0) << "no kill landed inside an EnqueueBatch call";
  EXPECT_TRUE(run.run.killed_all_at_once);

  // The effects, per job, in one query.
  std::map<std::string, int> effects;
  {
    PGresult* r = PQexec(
        raw.get(), ("SELECT job_id, count(*) FROM " + schema + ".effects GROUP BY job_id").c_str());
    ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
    for (int i = 0; i < PQntuples(r); ++i)
      effects[PQgetvalue(r, i, 0)] = std::atoi(PQgetvalue(r, i, 1));
    PQclear(r);
  }
  for (const std::string& id : run.ids) {
    const int n = effects.count(id) > 0 ? effects[id] : 0;
    if (run.succeeded.count(id) == 1) {
      EXPECT_EQ(n, 1) << id << ": the completion effect did not commit exactly once";
    } else {
      EXPECT_EQ(n, 0) << id << " did not succeed but its effect committed";
    }
  }
  std::printf("postgres crash test: startup: %d kills, %d inside Open; run: %s\n", opened.kills,
              opened.inside_open, run.Summary().c_str());
  backend.reset();
  postgres_testing::DropSchema(options);
}

}  // namespace
}  // namespace jobpact
