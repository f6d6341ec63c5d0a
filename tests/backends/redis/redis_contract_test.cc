// The backend conformance suites (jobpact/testing/backend_contract.h) on the
// Redis backend's stores, against the test server (redis_test_server.h):
// every factory call opens a RedisBackend on a fresh namespace, so tests
// share one server without seeing each other's keys, and deletes that
// namespace's keys when the test lets go of the stores.
// Every suite runs: queue, admin side, DLQ, locks, idempotency, rate limits,
// concurrency.
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
  if (auto r = holder->backend->rate_limits()) {
    set.rate_limits = std::shared_ptr<jobpact::RateLimitStore>(holder, r.get());
  }
  return set;
}

}  // namespace

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(Redis,
                                     jobpact::testing::BackendFactory{"redis", MakeRedisSet});
