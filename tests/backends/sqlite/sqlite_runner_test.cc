// The JobRunner on the SQLite bundle: its locks and idempotency claims live
// in the job file, so the runner releases and records them with each
// completion (Completion::guards; the cases are shared with PostgreSQL,
// tests/support/durable_runner_cases.h); and its idle workers are woken by
// other processes' commits (QueueBackend::WaitForWork).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "jobpact/sqlite/sqlite_backend.h"
#include "tests/backends/sqlite/sqlite_test_files.h"
#include "tests/support/durable_runner_cases.h"

namespace jobpact {
namespace sqlite {
namespace {

class SqliteRunnerTest : public ::testing::Test {
 protected:
  durable_runner_testing::StoreTarget Target() {
    durable_runner_testing::StoreTarget t;
    const std::string path = dir_.File("jobs.db");
    t.open = [path](std::shared_ptr<Clock> clock) -> Result<BackendBundle> {
      JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<SqliteBackend> b,
                               SqliteBackend::Open(path, {}, std::move(clock)));
      return b->bundle();
    };
    t.drop_claims = [path] {
      RawDb raw(path);
      EXPECT_EQ(raw.Exec("DELETE FROM jobpact_idempotency"), SQLITE_OK);
    };
    return t;
  }

  TempDir dir_;
};

TEST_F(SqliteRunnerTest, SameKeyJobsRunBackToBackAsIfReleasedAtOnce) {
  durable_runner_testing::ExpectSameKeyJobsRunBackToBack(Target());
}

TEST_F(SqliteRunnerTest, AClaimLostWhileTheHandlerRanFailsTheAttemptInsteadOfAckingIt) {
  durable_runner_testing::ExpectAClaimLostFailsTheAttemptInsteadOfAckingIt(Target());
}

// A burst spreads over the idle workers. SQLite's watch wakes on every
// commit to the file (the runner's own leases and acks too), so here the
// lease commits also bring the next worker, and the one-worker-per-wake-up
// case is PostgreSQL's only.
TEST_F(SqliteRunnerTest, AFullLeaseWakesTheNextIdleWorker) {
  durable_runner_testing::ExpectAFullLeaseWakesTheNextIdleWorker(Target());
}

TEST_F(SqliteRunnerTest, TheLeaseStepAnswersTheDedupCheck) {
  durable_runner_testing::ExpectTheLeaseStepAnswersTheDedupCheck(Target());
}

TEST_F(SqliteRunnerTest, TheLeaseStepTakesTheGuardsTheRunnerNeeds) {
  durable_runner_testing::ExpectTheLeaseStepTakesTheGuardsTheRunnerNeeds(Target());
}

TEST_F(SqliteRunnerTest, ADuplicateDropsTheClaimItsLeaseTook) {
  durable_runner_testing::ExpectADuplicateDropsTheClaimItsLeaseTook(Target());
}

TEST_F(SqliteRunnerTest, GuardsTakenWithTheLeaseAreRenewedWithIt) {
  durable_runner_testing::ExpectGuardsTakenWithTheLeaseAreRenewedWithIt(Target());
}

TEST_F(SqliteRunnerTest, ShutdownGivesBackTheGuardsOfJobsThatDidNotStart) {
  durable_runner_testing::ExpectShutdownGivesBackTheGuardsOfJobsThatDidNotStart(Target());
}

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
