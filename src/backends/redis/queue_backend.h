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
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/store_backend.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"

namespace jobpact {
namespace redis_internal {

// The queue store of namespace `keys` on `client`, following `clock`.
// `own_locks` and `own_idempotency` are the bundle's stores of the same
// namespace, whose release and record the queue's completion applies
// (QueueBackend::CompletesGuards); they must outlive the queue's use with
// them (the bundle holds all three). Null: none (a queue on its own).
std::shared_ptr<StoreBackend> MakeRedisQueueBackend(std::shared_ptr<RedisClient> client,
                                                    const RedisKeys& keys,
                                                    std::shared_ptr<Clock> clock,
                                                    const LockStore* own_locks = nullptr,
                                                    const IdempotencyStore* own_idempotency = nullptr);

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_QUEUE_BACKEND_H_
