// The in-memory reference backends run the backend contract suite.
#include <memory>

#include "jobpact/in_memory.h"
#include "tests/contract/backend_contract.h"

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(
    InMemory, BackendFactory{"in_memory", [](std::shared_ptr<jobpact::testing::ManualClock> clock) {
                               return BackendSet{
                                   std::make_shared<InMemoryQueueBackend>(clock),
                                   std::make_shared<InMemoryLockStore>(clock),
                                   std::make_shared<InMemoryIdempotencyStore>(clock)};
                             }});
