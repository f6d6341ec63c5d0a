// RedisBackend: one client (connection pool) and namespace, and the stores
// built on them.
#include "jobpact/redis/redis_backend.h"

#include <memory>
#include <string>
#include <utility>

#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"
#include "src/backends/redis/queue_backend.h"
#include "src/backends/redis/stores.h"
#include "src/internal/guarded.h"
#include "src/internal/percent_encoding.h"

namespace jobpact {
namespace redis {

using redis_internal::RedisClient;
using redis_internal::RedisKeys;

class RedisBackend::Impl {
 public:
  Impl(std::shared_ptr<RedisClient> client, RedisKeys keys, std::shared_ptr<Clock> clock)
      : client(std::move(client)), keys(std::move(keys)), clock(std::move(clock)) {}

  // Immutable after construction.
  const std::shared_ptr<RedisClient> client;
  const RedisKeys keys;
  const std::shared_ptr<Clock> clock;
  std::shared_ptr<StoreBackend> queue;
  std::shared_ptr<LockStore> locks;
  std::shared_ptr<IdempotencyStore> idempotency;
  std::shared_ptr<RateLimitStore> rate_limits;
  std::shared_ptr<CacheStore> cache;
};

Result<std::shared_ptr<RedisBackend>> RedisBackend::Open(const RedisOptions& options,
                                                         std::shared_ptr<Clock> clock) {
  return internal::Guarded("RedisBackend::Open", [&]() -> Result<std::shared_ptr<RedisBackend>> {
    if (!clock) return Status::InvalidArgument("RedisBackend::Open: the clock is null");
    JOBPACT_ASSIGN_OR_RETURN(RedisKeys keys, RedisKeys::Create(options.key_namespace));
    JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<RedisClient> client, RedisClient::Connect(options));
    auto impl = std::make_unique<Impl>(client, keys, clock);
    // The queue store: the one place it is constructed (queue_backend.h).
    impl->locks = redis_internal::MakeRedisLockStore(client, keys, clock);
    impl->idempotency = redis_internal::MakeRedisIdempotencyStore(client, keys, clock);
    impl->queue = redis_internal::MakeRedisQueueBackend(client, keys, clock, impl->locks.get(),
                                                        impl->idempotency.get());
    impl->rate_limits = redis_internal::MakeRedisRateLimitStore(client, keys, clock);
    impl->cache = redis_internal::MakeRedisCacheStore(client, keys, clock);
    return std::shared_ptr<RedisBackend>(new RedisBackend(std::move(impl)));
  });
}

RedisBackend::RedisBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisBackend::~RedisBackend() = default;

std::shared_ptr<QueueBackend> RedisBackend::queue() const { return impl_->queue; }
std::shared_ptr<QueueAdmin> RedisBackend::admin() const { return impl_->queue; }
std::shared_ptr<LockStore> RedisBackend::locks() const { return impl_->locks; }
std::shared_ptr<IdempotencyStore> RedisBackend::idempotency() const { return impl_->idempotency; }
std::shared_ptr<RateLimitStore> RedisBackend::rate_limits() const { return impl_->rate_limits; }
std::shared_ptr<CacheStore> RedisBackend::cache() const { return impl_->cache; }
const RedisOptions& RedisBackend::options() const { return impl_->client->options(); }

BackendBundle RedisBackend::bundle() const {
  BackendBundle b;
  b.queue = impl_->queue;
  b.admin = impl_->queue;
  b.locks = impl_->locks;
  b.idempotency = impl_->idempotency;
  b.rate_limits = impl_->rate_limits;
  b.cache = impl_->cache;
  b.name = "redis";
  b.url = url();
  return b;
}

namespace {

// Userinfo and query values: everything but unreserved characters encoded.
std::string EncodeComponent(const std::string& s) {
  std::string out = internal::PercentEncodePath(s);
  std::string no_slash;
  for (char c : out) {
    if (c == '/') {
      no_slash += "%2F";
    } else {
      no_slash.push_back(c);
    }
  }
  return no_slash;
}

}  // namespace

std::string RedisBackend::url() const {
  const RedisOptions& o = impl_->client->options();
  const std::string user = o.user.empty() ? "" : EncodeComponent(o.user) + "@";
  const std::string ns = "namespace=" + EncodeComponent(o.key_namespace);
  if (!o.unix_socket.empty()) {
    return "redis+unix://" + user + internal::PercentEncodePath(o.unix_socket) +
           "?db=" + std::to_string(o.database) + "&" + ns;
  }
  const bool v6 = o.host.find(':') != std::string::npos;
  const std::string host = v6 ? "[" + o.host + "]" : EncodeComponent(o.host);
  return "redis://" + user + host + ":" + std::to_string(o.port) + "/" +
         std::to_string(o.database) + "?" + ns;
}

}  // namespace redis
}  // namespace jobpact
