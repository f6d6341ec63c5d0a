// Private: a LockLease from a stored lock row (key, owner, fencing token,
// expiry in integer nanoseconds), as the SQL lock stores read it back.
#ifndef JOBPACT_SRC_INTERNAL_LOCK_LEASE_H_
#define JOBPACT_SRC_INTERNAL_LOCK_LEASE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "jobpact/lock_store.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace internal {

inline LockLease MakeLockLease(std::string_view key, std::string owner, std::uint64_t token,
                               std::int64_t expires_ns) {
  LockLease l;
  l.key = std::string(key);
  l.owner = std::move(owner);
  l.fencing_token = token;
  l.expires_at = TimeFromNs(expires_ns);
  return l;
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_LOCK_LEASE_H_
