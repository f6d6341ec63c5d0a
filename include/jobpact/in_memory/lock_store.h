// File: jobpact/in_memory/lock_store.h
//
// InMemoryLockStore is the reference LockStore: locks held in process
// memory, for tests and single-process services. Fencing tokens come from one
// store-wide counter, so they are strictly increasing across every key and
// every acquisition. Expired locks count as free at once and are swept
// lazily (amortized O(1) per call), so abandoned keys do not accumulate.
//
// Semantics the interface leaves open, chosen here (the contract suite checks
// them): a lock is live while now < expires_at. Once expired it is lost, even
// if nobody has taken it yet: Renew is kAborted, Release is kNotFound, and an
// Acquire by the same owner is a new acquisition with a new token. (A remote
// store such as Redis drops the key at expiry, so this is what every backend
// can promise.)
//
// Example:
//   jobpact::InMemoryLockStore locks(clock);
//   auto lease = locks.Acquire("order:ord_987", "worker-1", jobpact::Seconds(30));
//   if (lease.ok()) Write(lease->fencing_token);
//
// Thread-safe.
#ifndef JOBPACT_IN_MEMORY_LOCK_STORE_H_
#define JOBPACT_IN_MEMORY_LOCK_STORE_H_

#include <cstddef>
#include <memory>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/lock_store.h"

namespace jobpact {

class JOBPACT_EXPORT InMemoryLockStore final : public LockStore {
 public:
  explicit InMemoryLockStore(std::shared_ptr<Clock> clock = SystemClock::Default());
  ~InMemoryLockStore() override;

  std::string_view Name() const override { return "in_memory"; }
  Result<LockLease> Acquire(std::string_view key, std::string_view owner, Duration ttl) override;
  Result<LockLease> Renew(std::string_view key, std::string_view owner, Duration ttl) override;
  Status Release(std::string_view key, std::string_view owner) override;
  Result<std::optional<LockLease>> Inspect(std::string_view key) override;
  Result<std::vector<LockLease>> List(std::size_t limit) override;

  // Locks currently held (live ones only).
  std::size_t HeldCount() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobpact

#endif  // JOBPACT_IN_MEMORY_LOCK_STORE_H_
