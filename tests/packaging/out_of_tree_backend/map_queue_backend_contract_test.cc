// The conformance suite on a backend built outside jobpact, from the
// installed package: MapQueueBackend for the queue and, since it brings no
// lock or idempotency store of its own, jobpact's in-memory ones for those
// suites.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "jobpact/in_memory.h"
#include "jobpact/testing/backend_contract.h"
#include "map_queue_backend.h"

namespace {

// Each test gets a fresh, empty set on its ManualClock.
jobpact::testing::BackendSet MakeMapStore(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  return {std::make_shared<example::MapQueueBackend>(clock),
          std::make_shared<jobpact::InMemoryLockStore>(clock),
          std::make_shared<jobpact::InMemoryIdempotencyStore>(clock)};
}

}  // namespace

// The one line: every suite, on this backend.
JOBPACT_INSTANTIATE_BACKEND_CONTRACT(MapStore,
                                     jobpact::testing::BackendFactory{"map_store", MakeMapStore});

namespace {

// Not part of the suite: a program whose suites the linker had left in the
// static library would run no contract test at all, so check they are here.
TEST(OutOfTreeBackend, EverySuiteOfTheInstalledLibraryIsLinkedIn) {
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  std::set<std::string> suites;
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    if (std::string(suite.name()).rfind("MapStore/", 0) != 0) continue;
    if (suite.total_test_count() > 0) suites.insert(suite.name());
  }
  EXPECT_THAT(suites, ::testing::ElementsAre(
                          "MapStore/CompletionGuardsContract",
                          "MapStore/ConcurrencyContract", "MapStore/DeadLetterContract",
                          "MapStore/FinishedRetentionContract",
                          "MapStore/IdempotencyStoreContract", "MapStore/LockStoreContract",
                          "MapStore/QueueAdminContract", "MapStore/QueueBackendContract",
                          "MapStore/RateLimitStoreContract"));
}

}  // namespace
