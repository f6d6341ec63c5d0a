// Private: the argument checks every LockStore and IdempotencyStore makes,
// with one wording whatever the backend ("Acquire: key is empty").
#ifndef JOBPACT_SRC_INTERNAL_CHECKS_H_
#define JOBPACT_SRC_INTERNAL_CHECKS_H_

#include <optional>
#include <string>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/status.h"

namespace jobpact {
namespace internal {

// kInvalidArgument, naming `what`, for an empty key or owner or a ttl <= 0.
inline Status CheckKeyOwnerTtl(std::string_view what, std::string_view key,
                               std::string_view owner, std::optional<Duration> ttl = {}) {
  if (key.empty()) return Status::InvalidArgument(std::string(what) + ": key is empty");
  if (owner.empty()) return Status::InvalidArgument(std::string(what) + ": owner is empty");
  if (ttl && *ttl <= Duration::zero()) {
    return Status::InvalidArgument(std::string(what) + ": ttl must be > 0");
  }
  return Status::Ok();
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_CHECKS_H_
