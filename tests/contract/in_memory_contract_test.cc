// The in-memory reference backends run the backend conformance suite, as any
// backend does: jobpact/testing/backend_contract.h and one line; the
// in-memory CacheStore runs its own (jobpact/testing/cache_store_contract.h).
#include <memory>

#include "jobpact/in_memory.h"
#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/cache_store_contract.h"

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(
    InMemory, jobpact::testing::BackendFactory{
                  "in_memory", [](std::shared_ptr<jobpact::testing::ManualClock> clock) {
                    jobpact::testing::BackendSet set{
                        std::make_shared<jobpact::InMemoryQueueBackend>(clock),
                        std::make_shared<jobpact::InMemoryLockStore>(clock),
                        std::make_shared<jobpact::InMemoryIdempotencyStore>(clock)};
                    set.rate_limits = jobpact::MakeInMemoryRateLimitStore(clock);
                    return set;
                  }});

// And the in-memory CacheStore (jobpact/testing/cache_store_contract.h).
JOBPACT_INSTANTIATE_CACHE_STORE_CONTRACT(
    InMemory, jobpact::testing::CacheStoreFactory{
                  "in_memory", [](std::shared_ptr<jobpact::testing::ManualClock> clock) {
                    return jobpact::MakeInMemoryCacheStore(clock).value();
                  }});
