// Private: the one place where the Redis backend's queue store (the
// QueueBackend and its QueueAdmin side, a StoreBackend) is constructed.
// RedisBackend::Open (redis_backend.cc) calls this and nothing else of the
// queue.
//
// Defined in queue_backend.cc, the queue store (its scripts and key table:
// queue_scripts*.cc).
#ifndef JOBPACT_SRC_BACKENDS_REDIS_QUEUE_BACKEND_H_
#define JOBPACT_SRC_BACKENDS_REDIS_QUEUE_BACKEND_H_

#include <memory>

#include "jobpact/clock.h"
#include "jobpact/store_backend.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"

namespace jobpact {
namespace redis_internal {

// The queue store of namespace `keys` on `client`, following `clock`.
std::shared_ptr<StoreBackend> MakeRedisQueueBackend(std::shared_ptr<RedisClient> client,
                                                    const RedisKeys& keys,
                                                    std::shared_ptr<Clock> clock);

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_QUEUE_BACKEND_H_
