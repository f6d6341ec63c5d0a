// The backend conformance suites (jobpact/testing/backend_contract.h) on the
// Redis backend's stores, against the test server (redis_test_server.h):
// every factory call opens a RedisBackend on a fresh namespace, so tests
// share one server without seeing each other's keys, and deletes that
// namespace's keys when the test lets go of the stores.
//
// Until the Redis queue store lands (branch redis-queue) the suites that
// need no queue are instantiated one by one; then this becomes one
// JOBPACT_INSTANTIATE_BACKEND_CONTRACT line.
#include <memory>
#include <string>
#include <vector>

#include "jobpact/redis/redis_backend.h"
#include "jobpact/testing/backend_contract.h"
#include "src/backends/redis/client.h"
#include "tests/backends/redis/redis_test_server.h"

namespace {

using jobpact::redis_internal::RedisClient;
using jobpact::redis_internal::Reply;

// Deletes every key of `ns` (SCAN, not KEYS: the server may be shared).
void DeleteNamespace(const jobpact::redis::RedisOptions& options) {
  auto client = RedisClient::Connect(options);
  if (!client.ok()) return;
  std::string cursor = "0";
  do {
    auto r = (*client)->Command(
        {"SCAN", cursor, "MATCH", "jobpact:{" + options.key_namespace + "}:*", "COUNT", "1000"});
    if (!r.ok() || r->type != Reply::Type::kArray || r->elements.size() != 2) return;
    cursor = r->elements[0].str;
    std::vector<std::string> del = {"DEL"};
    for (const Reply& k : r->elements[1].elements) del.push_back(k.str);
    if (del.size() > 1) (void)(*client)->Command(del);
  } while (cursor != "0");
}

jobpact::testing::BackendSet MakeRedisSet(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  if (jobpact::redis_testing::RedisTestUrl().empty()) {
    if (jobpact::redis_testing::RedisRequired()) {
      ADD_FAILURE() << "JOBPACT_REQUIRE_REDIS=1 but no Redis server: "
                    << jobpact::redis_testing::RedisUnavailableReason();
    }
    return {};  // Every test skips: "backend unavailable".
  }
  struct Holder {
    jobpact::redis::RedisOptions options;
    std::shared_ptr<jobpact::redis::RedisBackend> backend;
    ~Holder() {
      backend.reset();
      DeleteNamespace(options);
    }
  };
  auto holder = std::make_shared<Holder>();
  holder->options = jobpact::redis_testing::TestOptions();
  auto backend = jobpact::redis::RedisBackend::Open(holder->options, clock);
  if (!backend.ok()) {
    ADD_FAILURE() << "RedisBackend::Open: " << backend.status();
    return {};
  }
  holder->backend = *backend;
  jobpact::testing::BackendSet set;
  if (auto q = holder->backend->queue()) {
    set.queue = std::shared_ptr<jobpact::QueueBackend>(holder, q.get());
  }
  if (auto l = holder->backend->locks()) {
    set.locks = std::shared_ptr<jobpact::LockStore>(holder, l.get());
  }
  if (auto i = holder->backend->idempotency()) {
    set.idempotency = std::shared_ptr<jobpact::IdempotencyStore>(holder, i.get());
  }
  return set;
}

const jobpact::testing::BackendFactory kRedis{"redis", MakeRedisSet};

}  // namespace

namespace jobpact {
namespace testing {
// Pulls the suites' test bodies out of the static library (see
// backend_contract.h, "How the suite gets into your program").
[[maybe_unused]] static const int redis_contract_linked = contract_internal::LinkAllSuites();
INSTANTIATE_TEST_SUITE_P(Redis, LockStoreContract, ::testing::Values(kRedis), BackendFactoryName());
INSTANTIATE_TEST_SUITE_P(Redis, IdempotencyStoreContract, ::testing::Values(kRedis),
                         BackendFactoryName());
// Its lock and idempotency tests run; its queue tests skip ("no
// QueueBackend") until the queue store is there.
INSTANTIATE_TEST_SUITE_P(Redis, ConcurrencyContract, ::testing::Values(kRedis),
                         BackendFactoryName());
// Instantiated when the Redis queue store lands.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QueueBackendContract);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeadLetterContract);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QueueAdminContract);
}  // namespace testing
}  // namespace jobpact
