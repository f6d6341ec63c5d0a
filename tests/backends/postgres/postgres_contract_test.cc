// The backend conformance suites (jobpact/testing/backend_contract.h) on the
// PostgreSQL backend's stores, against the test server
// (postgres_test_server.h): every factory call opens a PostgresBackend on a
// fresh schema, so tests share one server without seeing each other's rows,
// and drops that schema when the test lets go of the stores.
// Every suite runs: queue, admin side, DLQ, locks, idempotency, rate limits,
// concurrency.
#include <memory>
#include <string>

#include "jobpact/postgres/postgres_backend.h"
#include "jobpact/testing/backend_contract.h"
#include "tests/backends/postgres/postgres_test_server.h"

namespace {

jobpact::testing::BackendSet MakePostgresSet(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  namespace pt = jobpact::postgres_testing;
  if (pt::PostgresTestUrl().empty()) {
    if (pt::PostgresRequired()) {
      ADD_FAILURE() << "JOBPACT_REQUIRE_POSTGRES=1 but no PostgreSQL server: "
                    << pt::PostgresUnavailableReason();
    }
    return {};  // Every test skips: "backend unavailable".
  }
  struct Holder {
    jobpact::postgres::PostgresOptions options;
    std::shared_ptr<jobpact::postgres::PostgresBackend> backend;
    ~Holder() {
      backend.reset();
      pt::DropSchema(options);
    }
  };
  auto holder = std::make_shared<Holder>();
  holder->options = pt::TestOptions();
  auto backend = jobpact::postgres::PostgresBackend::Open(holder->options, clock);
  if (!backend.ok()) {
    ADD_FAILURE() << "PostgresBackend::Open: " << backend.status();
    return {};
  }
  holder->backend = *backend;
  jobpact::testing::BackendSet set;
  set.queue = std::shared_ptr<jobpact::QueueBackend>(holder, holder->backend->queue().get());
  set.locks = std::shared_ptr<jobpact::LockStore>(holder, holder->backend->locks().get());
  set.idempotency =
      std::shared_ptr<jobpact::IdempotencyStore>(holder, holder->backend->idempotency().get());
  set.rate_limits =
      std::shared_ptr<jobpact::RateLimitStore>(holder, holder->backend->rate_limits().get());
  return set;
}

}  // namespace

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(Postgres, jobpact::testing::BackendFactory{
                                                   "postgres", MakePostgresSet});
