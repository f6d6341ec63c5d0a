// File: jobpact/in_memory/idempotency_store.h
//
// InMemoryIdempotencyStore is the reference IdempotencyStore: claims and
// completed results held in process memory, for tests and single-process
// services. A record is live while now < expires_at. Expired records behave
// as missing at once, are deleted by PurgeExpired, and are also swept lazily
// (amortized O(1) per call) so that memory stays bounded by the live keys.
//
// Example:
//   jobpact::InMemoryIdempotencyStore store(clock);
//   auto claim = store.Claim("invoice.generate:ord_987", "worker-1", jobpact::Seconds(45));
//   if (claim.ok() && claim->kind == jobpact::ClaimOutcome::Kind::kClaimed) { ... }
//
// Thread-safe.
#ifndef JOBPACT_IN_MEMORY_IDEMPOTENCY_STORE_H_
#define JOBPACT_IN_MEMORY_IDEMPOTENCY_STORE_H_

#include <cstddef>
#include <memory>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"

namespace jobpact {

class JOBPACT_EXPORT InMemoryIdempotencyStore final : public IdempotencyStore {
 public:
  explicit InMemoryIdempotencyStore(std::shared_ptr<Clock> clock = SystemClock::Default());
  ~InMemoryIdempotencyStore() override;

  std::string_view Name() const override { return "in_memory"; }
  Result<ClaimOutcome> Claim(std::string_view key, std::string_view owner,
                             Duration claim_ttl) override;
  Status Complete(std::string_view key, std::string_view owner, std::string_view result,
                  Duration retention) override;
  Status Release(std::string_view key, std::string_view owner) override;
  Status Extend(std::string_view key, std::string_view owner, Duration claim_ttl) override;
  Result<std::optional<IdempotencyRecord>> Get(std::string_view key) override;
  Result<int> PurgeExpired() override;

  // Records stored, live or expired but not yet purged.
  std::size_t Size() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobpact

#endif  // JOBPACT_IN_MEMORY_IDEMPOTENCY_STORE_H_
