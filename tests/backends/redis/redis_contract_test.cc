// The backend conformance suite (jobpact/testing/backend_contract.h) on the
// Redis queue store: every factory call is a fresh, empty namespace on the
// shared test server (redis_test_server.h), whose keys are deleted when the
// test lets go of the last store.
#include <memory>
#include <string>
#include <vector>

#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "jobpact/testing/backend_contract.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"
#include "src/backends/redis/queue_backend.h"
#include "tests/backends/redis/redis_test_server.h"

namespace {

using jobpact::redis_internal::RedisClient;
using jobpact::redis_internal::RedisKeys;

// Deletes every key of a namespace (SCAN, so it never blocks the server).
void DeleteNamespace(RedisClient& client, const std::string& prefix) {
  std::string cursor = "0";
  do {
    auto r = client.Command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    if (!r.ok() || r->elements.size() != 2) return;
    cursor = r->elements[0].str;
    std::vector<std::string> del{"DEL"};
    for (const auto& k : r->elements[1].elements) del.push_back(k.str);
    if (del.size() > 1) (void)client.Command(del);
  } while (cursor != "0");
}

jobpact::testing::BackendSet MakeRedisSet(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  const std::string url = jobpact::redis_testing::RedisTestUrl();
  if (url.empty()) {
    if (jobpact::redis_testing::RedisRequired()) {
      ADD_FAILURE() << "JOBPACT_REQUIRE_REDIS=1 but no Redis server: "
                    << jobpact::redis_testing::RedisUnavailableReason();
    }
    return {};  // Every test skips: backend unavailable.
  }
  jobpact::redis::RedisOptions options = jobpact::redis_testing::TestOptions();
  auto client = RedisClient::Connect(options);
  if (!client.ok()) {
    ADD_FAILURE() << "RedisClient::Connect: " << client.status();
    return {};
  }
  auto keys = RedisKeys::Create(options.key_namespace);
  if (!keys.ok()) {
    ADD_FAILURE() << "RedisKeys::Create: " << keys.status();
    return {};
  }
  // Owns the stores; the pointers handed out alias it, so the namespace is
  // deleted when the test lets go of the last one.
  struct Holder {
    std::shared_ptr<RedisClient> client;
    std::string prefix;
    std::shared_ptr<jobpact::StoreBackend> queue;
    std::shared_ptr<jobpact::LockStore> locks;
    std::shared_ptr<jobpact::IdempotencyStore> idempotency;
    ~Holder() {
      queue.reset();
      DeleteNamespace(*client, prefix);
    }
  };
  auto holder = std::make_shared<Holder>();
  holder->client = *client;
  holder->prefix = keys->prefix();
  holder->queue = jobpact::redis_internal::MakeRedisQueueBackend(*client, *keys, clock);
  // TODO(redis-infra merge): the Redis lock and idempotency stores.
  holder->locks = std::make_shared<jobpact::InMemoryLockStore>(clock);
  holder->idempotency = std::make_shared<jobpact::InMemoryIdempotencyStore>(clock);
  if (holder->queue == nullptr) {
    ADD_FAILURE() << "MakeRedisQueueBackend returned null";
    return {};
  }
  return {std::shared_ptr<jobpact::QueueBackend>(holder, holder->queue.get()),
          std::shared_ptr<jobpact::LockStore>(holder, holder->locks.get()),
          std::shared_ptr<jobpact::IdempotencyStore>(holder, holder->idempotency.get())};
}

}  // namespace

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(Redis,
                                     jobpact::testing::BackendFactory{"redis", MakeRedisSet});
