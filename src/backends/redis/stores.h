// Private: the lock, idempotency, rate limit and cache stores of the Redis backend, built by
// RedisBackend::Open on the backend's client and namespace, and what they
// share: how times of the store's Clock travel to the scripts.
//
// Times. Expiry follows the injected Clock, never the server's: the client
// passes `now` (and the computed expiry) to every script as integer
// microseconds since the Unix epoch, which Lua's doubles hold exactly until
// the year 2255, and the scripts compare those. Redis key TTLs (PEXPIRE)
// are only garbage collection, set generously (kGcSlack past the clock
// expiry), so that a key is never dropped while the store's clock still
// calls it live -- even under a ManualClock that runs slower than real time.
#ifndef JOBPACT_SRC_BACKENDS_REDIS_STORES_H_
#define JOBPACT_SRC_BACKENDS_REDIS_STORES_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "jobpact/cache_store.h"
#include "jobpact/clock.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/rate_limit_store.h"
#include "jobpact/status.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"

namespace jobpact {
namespace redis_internal {

std::shared_ptr<LockStore> MakeRedisLockStore(std::shared_ptr<RedisClient> client,
                                              const RedisKeys& keys, std::shared_ptr<Clock> clock);
std::shared_ptr<IdempotencyStore> MakeRedisIdempotencyStore(std::shared_ptr<RedisClient> client,
                                                            const RedisKeys& keys,
                                                            std::shared_ptr<Clock> clock);
std::shared_ptr<RateLimitStore> MakeRedisRateLimitStore(std::shared_ptr<RedisClient> client,
                                                        const RedisKeys& keys,
                                                        std::shared_ptr<Clock> clock);

std::shared_ptr<CacheStore> MakeRedisCacheStore(std::shared_ptr<RedisClient> client,
                                                const RedisKeys& keys,
                                                std::shared_ptr<Clock> clock);

// How long past its clock expiry a key is kept before Redis may drop it.
inline constexpr Duration kGcSlack = std::chrono::hours(1);

inline std::int64_t ToMicros(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}
inline std::int64_t ToMicros(Duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}
inline TimePoint FromMicros(std::int64_t us) {
  return TimePoint(std::chrono::duration_cast<Duration>(std::chrono::microseconds(us)));
}
// The PEXPIRE argument for a key live for `ttl` on the store's clock.
inline std::string GcMillis(Duration ttl) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(ttl + kGcSlack).count());
}

// kInternal for a reply the script should never give (an error reply, a
// wrong shape), naming the server and the operation.
Status UnexpectedReply(const RedisClient& client, std::string_view op, const Reply& reply);

// An integer from a string or integer reply element; nullopt-like false
// when it is neither.
bool ReplyInt(const Reply& r, std::int64_t* out);

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_STORES_H_
