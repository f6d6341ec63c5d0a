// Private: the argument checks every LockStore and IdempotencyStore makes,
// with one wording whatever the backend ("Acquire: key is empty").
#ifndef JOBPACT_SRC_INTERNAL_CHECKS_H_
#define JOBPACT_SRC_INTERNAL_CHECKS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

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

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_CHECKS_H_
