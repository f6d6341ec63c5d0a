// The PostgreSQL crash test: real worker processes (postgres_crash_worker.cc,
// a JobRunner each) share one schema of the test server while this test
// kills them with SIGKILL at random moments and starts replacements
// (tests/support/crash_rig.h, the kill loop every backend's crash test
// shares). 3000
// jobs, a bounded number of kills (12) and a bounded time (120 s).
//
// Afterwards, from the store:
//   - no job is missing, and every job is in a final status or the DLQ;
//   - each redelivery traces to a killed worker (the delivery history
//     entries name the worker, and so its pid);
//   - the effect committed in the completion transaction (a row in
//     <schema>.effects) exists exactly once for every succeeded job and
//     never for any other.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/postgres/postgres_backend.h"
#include "jobpact/testing/matchers.h"
#include <nlohmann/json.hpp>

#include "tests/support/crash_rig.h"
#include "tests/backends/postgres/postgres_test_server.h"

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
  const std::string dir = tmp.path();
  auto clock = SystemClock::Default();
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto backend, postgres::PostgresBackend::Open(options, clock));
  postgres_testing::PgConnPtr raw = postgres_testing::Connect(options);
  ASSERT_NE(raw, nullptr);
  const std::string schema = "\"" + options.schema + "\"";
  ASSERT_EQ(postgres_testing::Query(raw.get(), "CREATE TABLE " + schema + ".effects (job_id text)"),
            "");

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

  crash_testing::KillLoop loop;
  loop.binary = JOBPACT_POSTGRES_CRASH_WORKER;
  loop.args = {url, options.schema, dir};
  loop.dir = dir;
  loop.pending = [&]() -> Result<std::int64_t> {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats stats, backend->admin()->Stats());
    return crash_testing::Pending(stats);
  };
  const crash_testing::KillLoopResult run = crash_testing::RunKillLoop(loop);
  ASSERT_TRUE(run.failure.empty()) << run.failure << " (see " << dir << "/worker-*.stderr)";
  ASSERT_TRUE(run.done) << "jobs still pending after " << run.seconds << " s";

  // The effects, per job, in one query.
  std::map<std::string, int> effects;
  {
    PGresult* r = PQexec(raw.get(), ("SELECT job_id, count(*) FROM " + schema +
                                     ".effects GROUP BY job_id").c_str());
    ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
    for (int i = 0; i < PQntuples(r); ++i) effects[PQgetvalue(r, i, 0)] = std::atoi(PQgetvalue(r, i, 1));
    PQclear(r);
  }
  int redelivered = 0, dead_lettered = 0, succeeded = 0;
  for (const std::string& id : ids) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, backend->admin()->Get(id));
    ASSERT_TRUE(IsFinal(rec.status) || rec.status == JobStatus::kDeadLettered)
        << id << " is " << JobStatusName(rec.status);
    int deliveries = 0;
    for (const Transition& t : rec.history) deliveries += t.to == JobStatus::kRunning ? 1 : 0;
    ASSERT_GT(deliveries, 0) << id << " was never delivered";
    if (deliveries > 1) ++redelivered;
    EXPECT_EQ(deliveries - 1, rec.lease_recoveries) << id << ": a redelivery without a lost lease";
    const int n = effects.count(id) > 0 ? effects[id] : 0;
    if (rec.status == JobStatus::kSucceeded) {
      ++succeeded;
      EXPECT_EQ(n, 1) << id << ": the completion effect did not commit exactly once";
    } else {
      ++dead_lettered;
      EXPECT_EQ(n, 0) << id << " is " << JobStatusName(rec.status) << " but its effect committed";
    }
  }
  // Every worker that lost a lease was one this test killed (the stored
  // history names the worker of each delivery).
  std::set<std::string> lost;
  {
    PGresult* r = PQexec(raw.get(), ("SELECT history FROM " + schema +
                                     ".jobs WHERE lease_recoveries > 0").c_str());
    ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
    for (int i = 0; i < PQntuples(r); ++i) {
      nlohmann::json h = nlohmann::json::parse(PQgetvalue(r, i, 0), nullptr, false);
      ASSERT_TRUE(h.is_array());
      // The worker of each delivery; a lease_expired entry blames the last.
      std::string last_worker;
      for (const nlohmann::json& e : h) {
        if (!e.is_object()) continue;
        auto w = e.find("worker");
        if (w != e.end() && w->is_string()) last_worker = w->get<std::string>();
        auto why = e.find("reason");
        if (why != e.end() && why->is_string() &&
            why->get<std::string>().rfind("lease_expired", 0) == 0) {
          lost.insert(last_worker);
        }
      }
    }
    PQclear(r);
  }
  for (const std::string& worker : lost) {
    EXPECT_EQ(run.killed.count(crash_testing::PidOfWorker(worker)), 1u)
        << worker << " lost a lease but was never killed";
  }
  std::printf("postgres crash test: %d jobs, %d kills, %d redelivered, %d succeeded, %d DLQ, "
              "%.1f s\n",
              kJobs, run.kills, redelivered, succeeded, dead_lettered, run.seconds);
  EXPECT_EQ(succeeded + dead_lettered, kJobs);
  backend.reset();
  postgres_testing::DropSchema(options);
}

}  // namespace
}  // namespace jobpact
