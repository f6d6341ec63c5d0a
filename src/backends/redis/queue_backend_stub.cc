// TEMPORARY STUB, the only one of the Redis backend: the queue store is
// written in parallel (branch redis-queue) and lands as queue_backend.cc,
// which replaces this file (delete it, and list queue_backend.cc in
// CMakeLists.txt instead). Until then RedisBackend has locks and
// idempotency but no queue: bundle().queue and .admin are null.
#include "src/backends/redis/queue_backend.h"

namespace jobpact {
namespace redis_internal {

std::shared_ptr<StoreBackend> MakeRedisQueueBackend(std::shared_ptr<RedisClient> /*client*/,
                                                    const RedisKeys& /*keys*/,
                                                    std::shared_ptr<Clock> /*clock*/) {
  return nullptr;
}

}  // namespace redis_internal
}  // namespace jobpact
