// Private: the argument checks every CacheStore makes (jobpact/cache_store.h),
// with one wording whatever the store, so that the conformance suite
// (jobpact/testing/cache_store_contract.h) and operators read the same
// message from the in-memory store and from Redis.
#ifndef JOBPACT_SRC_INTERNAL_CACHE_CHECKS_H_
#define JOBPACT_SRC_INTERNAL_CACHE_CHECKS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "jobpact/cache_store.h"
#include "jobpact/status.h"

namespace jobpact {
namespace internal {

// The most bytes of a cache key (jobpact/cache_store.h).
inline constexpr std::size_t kMaxCacheKeyBytes = 1024;

// kInvalidArgument, prefixed "<op>: ", for an empty key, a key longer than
// kMaxCacheKeyBytes, or a key holding a NUL byte; each message names the
// problem ("empty", the byte count and the bound, "NUL" and its offset).
inline Status CheckCacheKey(std::string_view op, std::string_view key) {
  if (key.empty()) return Status::InvalidArgument(std::string(op) + ": the cache key is empty");
  if (key.size() > kMaxCacheKeyBytes) {
    return Status::InvalidArgument(
        std::string(op) + ": the cache key is " + std::to_string(key.size()) +
        " bytes long; a cache store takes at most " + std::to_string(kMaxCacheKeyBytes));
  }
  if (const std::size_t nul = key.find('\0'); nul != std::string_view::npos) {
    return Status::InvalidArgument(std::string(op) + ": the cache key holds a NUL byte at offset " +
                                   std::to_string(nul));
  }
  return Status::Ok();
}

// kInvalidArgument for windows out of order: stale_until or error_until
// before fresh_until, naming the field.
inline Status CheckCacheWindows(std::string_view op, const CacheEntry& entry) {
  if (entry.stale_until < entry.fresh_until) {
    return Status::InvalidArgument(std::string(op) +
                                   ": stale_until is before fresh_until (windows out of order)");
  }
  if (entry.error_until < entry.fresh_until) {
    return Status::InvalidArgument(std::string(op) +
                                   ": error_until is before fresh_until (windows out of order)");
  }
  return Status::Ok();
}

// kInvalidArgument for the empty prefix of EraseByPrefix: a whole flush is
// not a prefix invalidation.
inline Status CheckErasePrefix(std::string_view op, std::string_view prefix) {
  if (prefix.empty()) {
    return Status::InvalidArgument(std::string(op) +
                                   ": the prefix is empty (a whole flush is not a prefix "
                                   "invalidation; name the keys' prefix)");
  }
  return Status::Ok();
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_CACHE_CHECKS_H_
