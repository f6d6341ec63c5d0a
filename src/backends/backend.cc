// The in-memory bundle (jobpact/backend.h). OpenBackend() itself is in the
// jobpact::backends target (src/backends/url), which can link the optional
// backends; the core cannot.
#include "jobpact/backend.h"

#include <memory>
#include <utility>

#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "jobpact/in_memory/queue_backend.h"

namespace jobpact {

BackendBundle InMemoryBackend(std::shared_ptr<Clock> clock) {
  if (clock == nullptr) clock = SystemClock::Default();
  BackendBundle b;
  auto queue = std::make_shared<InMemoryQueueBackend>(clock);
  b.queue = queue;
  b.admin = queue;
  b.locks = std::make_shared<InMemoryLockStore>(clock);
  b.rate_limits = MakeInMemoryRateLimitStore(clock);
  b.idempotency = std::make_shared<InMemoryIdempotencyStore>(clock);
  // The default bounds cannot be refused, so this always holds a store.
  Result<std::shared_ptr<CacheStore>> cache = MakeInMemoryCacheStore(std::move(clock));
  if (cache.ok()) b.cache = *std::move(cache);
  b.name = "in_memory";
  b.url = "memory:";
  return b;
}

}  // namespace jobpact
