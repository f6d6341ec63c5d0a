// The backend conformance suites (jobpact/testing/backend_contract.h) on the
// Redis backend's stores, against the test server (redis_test_server.h):
// every factory call opens a RedisBackend on a fresh namespace, so tests
// share one server without seeing each other's keys, and deletes that
// namespace's keys when the test lets go of the stores.
// Every suite runs: queue, admin side, DLQ, locks, idempotency, rate limits,
// concurrency; and the cache store suites
// (jobpact/testing/cache_store_contract.h) on RedisBackend::cache(),
// likewise a fresh namespace per test.
#include <memory>
#include <string>
#include <vector>

#include "jobpact/redis/redis_backend.h"
#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/cache_store_contract.h"
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

// A RedisBackend on a fresh namespace that deletes the namespace's keys
// when the last store made from it is let go; null if there is no server
// (the tests skip) or it cannot be opened (a test failure too).
struct Holder {
  jobpact::redis::RedisOptions options;
  std::shared_ptr<jobpact::redis::RedisBackend> backend;
  ~Holder() {
    backend.reset();
    DeleteNamespace(options);
  }
};

std::shared_ptr<Holder> OpenFresh(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  if (jobpact::redis_testing::RedisTestUrl().empty()) {
    if (jobpact::redis_testing::RedisRequired()) {
      ADD_FAILURE() << "JOBPACT_REQUIRE_REDIS=1 but no Redis server: "
                    << jobpact::redis_testing::RedisUnavailableReason();
    }
    return nullptr;  // Every test skips: "backend unavailable".
  }
  auto holder = std::make_shared<Holder>();
  holder->options = jobpact::redis_testing::TestOptions();
  auto backend = jobpact::redis::RedisBackend::Open(holder->options, clock);
  if (!backend.ok()) {
    ADD_FAILURE() << "RedisBackend::Open: " << backend.status();
    return nullptr;
  }
  holder->backend = *backend;
  return holder;
}

jobpact::testing::BackendSet MakeRedisSet(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  std::shared_ptr<Holder> holder = OpenFresh(std::move(clock));
  if (holder == nullptr) return {};
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
  if (auto r = holder->backend->rate_limits()) {
    set.rate_limits = std::shared_ptr<jobpact::RateLimitStore>(holder, r.get());
  }
  return set;
}

std::shared_ptr<jobpact::CacheStore> MakeRedisCache(
    std::shared_ptr<jobpact::testing::ManualClock> clock) {
  std::shared_ptr<Holder> holder = OpenFresh(std::move(clock));
  if (holder == nullptr) return nullptr;
  auto cache = holder->backend->cache();
  if (cache == nullptr) {
    ADD_FAILURE() << "RedisBackend::cache() is null";
    return nullptr;
  }
  return std::shared_ptr<jobpact::CacheStore>(holder, cache.get());
}

}  // namespace

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(Redis,
                                     jobpact::testing::BackendFactory{"redis", MakeRedisSet});
JOBPACT_INSTANTIATE_CACHE_STORE_CONTRACT(Redis, jobpact::testing::CacheStoreFactory{
                                                    "redis", MakeRedisCache});
