// Out-of-line pieces of the backend interfaces: their virtual destructors
// (one home for each vtable) and the defaults of non-pure methods.
#include <utility>
#include <vector>

#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/metrics_sink.h"
#include "jobpact/queue_backend.h"
#include "src/internal/guarded.h"

namespace jobpact {

QueueBackend::~QueueBackend() = default;
LockStore::~LockStore() = default;
IdempotencyStore::~IdempotencyStore() = default;
MetricsSink::~MetricsSink() = default;

Result<std::vector<EnqueueResult>> QueueBackend::EnqueueBatch(const std::vector<Envelope>& envs,
                                                              const EnqueueOptions& options) {
  // Not atomic: a failure leaves the jobs before it stored. StoreBackend
  // does better (one atomic insert).
  return internal::Guarded("EnqueueBatch", [&]() -> Result<std::vector<EnqueueResult>> {
    std::vector<EnqueueResult> results;
    results.reserve(envs.size());
    for (const Envelope& env : envs) {
      Result<EnqueueResult> r = Enqueue(env, options);
      if (!r.ok()) return r.status();
      results.push_back(std::move(*r));
    }
    return results;
  });
}

Status QueueBackend::DequeueInto(const DequeueRequest& request, std::vector<Delivery>* out) {
  out->clear();
  Result<std::vector<Delivery>> batch = Dequeue(request);
  if (!batch.ok()) return batch.status();
  *out = std::move(*batch);
  return Status::Ok();
}

Result<bool> QueueBackend::WaitForWork(Duration) {
  return Status::Unimplemented("WaitForWork: this backend cannot wait for work");
}

bool QueueBackend::CompletesGuards(const LockStore&, const IdempotencyStore&) const {
  return false;
}

Result<LockLease> QueueBackend::AcquireLockAndClaim(std::string_view, std::string_view,
                                                    std::string_view, Duration, ClaimOutcome*) {
  return Status::Unimplemented(
      "AcquireLockAndClaim: this backend keeps no locks or claims beside its jobs");
}

Status QueueBackend::Complete(Delivery&& delivery, const Completion& completion) {
  return Complete(static_cast<const Delivery&>(delivery), completion);
}

std::vector<Status> QueueBackend::CompleteBatch(const std::vector<CompletionRequest>& requests) {
  std::vector<Status> out;
  out.reserve(requests.size());
  for (const CompletionRequest& r : requests) out.push_back(Complete(r.delivery, r.completion));
  return out;
}

}  // namespace jobpact
