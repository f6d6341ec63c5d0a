// Private: the argument checks every LockStore, IdempotencyStore and
// CacheStore makes, with one wording whatever the backend ("Acquire: key is
// empty").
#ifndef JOBPACT_SRC_INTERNAL_CHECKS_H_
#define JOBPACT_SRC_INTERNAL_CHECKS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "jobpact/cache_store.h"
#include "jobpact/clock.h"
#include "jobpact/status.h"

namespace jobpact {
namespace internal {

// The most bytes of a lock or idempotency key any store takes: PostgreSQL
// keeps each as a B-tree primary key, whose rows cannot exceed about 2700
// bytes (a longer key failed there as INTERNAL, "index row requires 12024
// bytes"), and every store refuses the same keys. Far above the 255
// characters an envelope's keys may have.
inline constexpr std::size_t kMaxStoreKeyBytes = 1024;

// kInvalidArgument, naming `what`, for an empty key or owner, a key longer
// than kMaxStoreKeyBytes, or a ttl <= 0.
inline Status CheckKeyOwnerTtl(std::string_view what, std::string_view key,
                               std::string_view owner, std::optional<Duration> ttl = {}) {
  if (key.empty()) return Status::InvalidArgument(std::string(what) + ": key is empty");
  if (key.size() > kMaxStoreKeyBytes) {
    return Status::InvalidArgument(std::string(what) + ": key is " + std::to_string(key.size()) +
                                   " bytes; a store takes at most " +
                                   std::to_string(kMaxStoreKeyBytes));
  }
  if (owner.empty()) return Status::InvalidArgument(std::string(what) + ": owner is empty");
  if (ttl && *ttl <= Duration::zero()) {
    return Status::InvalidArgument(std::string(what) + ": ttl must be > 0");
  }
  return Status::Ok();
}

// QueueBackend::AcquireLockAndClaim's arguments: both keys, the owner and
// the ttl as CheckKeyOwnerTtl takes them.
inline Status CheckLockAndClaim(std::string_view what, std::string_view lock_key,
                                std::string_view idempotency_key, std::string_view owner,
                                Duration ttl) {
  Status s = CheckKeyOwnerTtl(what, lock_key, owner, ttl);
  if (s.ok()) s = CheckKeyOwnerTtl(what, idempotency_key, owner);
  return s;
}

// kInvalidArgument, naming `what`, for a cache key that is empty, longer
// than kMaxStoreKeyBytes or holds a NUL byte (jobpact/cache_store.h): the
// same keys for every CacheStore and the cache guard.
inline Status CheckCacheKey(std::string_view what, std::string_view key) {
  if (key.empty()) return Status::InvalidArgument(std::string(what) + ": key is empty");
  if (key.size() > kMaxStoreKeyBytes) {
    return Status::InvalidArgument(std::string(what) + ": key is " + std::to_string(key.size()) +
                                   " bytes; a cache key has at most " +
                                   std::to_string(kMaxStoreKeyBytes));
  }
  if (key.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(std::string(what) + ": key holds a NUL byte");
  }
  return Status::Ok();
}

// kInvalidArgument, naming `what`, for an entry whose windows are out of
// order (stale_until or error_until before fresh_until).
inline Status CheckCacheEntry(std::string_view what, const CacheEntry& entry) {
  if (entry.stale_until < entry.fresh_until) {
    return Status::InvalidArgument(std::string(what) + ": stale_until is before fresh_until");
  }
  if (entry.error_until < entry.fresh_until) {
    return Status::InvalidArgument(std::string(what) + ": error_until is before fresh_until");
  }
  return Status::Ok();
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_CHECKS_H_
