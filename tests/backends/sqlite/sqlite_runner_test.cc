// The JobRunner on the SQLite bundle: its locks and idempotency claims live
// in the job file, so the runner releases and records them with each
// completion (Completion::guards). The cases are shared with PostgreSQL
// (tests/support/guards_runner_cases.h).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "jobpact/sqlite/sqlite_backend.h"
#include "tests/backends/sqlite/sqlite_test_files.h"
#include "tests/support/guards_runner_cases.h"

namespace jobpact {
namespace sqlite {
namespace {

class SqliteRunnerTest : public ::testing::Test {
 protected:
  guards_testing::GuardsTarget Target() {
    guards_testing::GuardsTarget t;
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
  guards_testing::ExpectSameKeyJobsRunBackToBack(Target());
}

TEST_F(SqliteRunnerTest, AClaimLostWhileTheHandlerRanFailsTheAttemptInsteadOfAckingIt) {
  guards_testing::ExpectAClaimLostFailsTheAttemptInsteadOfAckingIt(Target());
}

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
