// Private: a LockLease from a stored lock row (key, owner, fencing token,
// expiry in integer nanoseconds), as the SQL lock stores read it back, and
// the ClaimOutcome of an idempotency claim just taken.
#ifndef JOBPACT_SRC_INTERNAL_LOCK_LEASE_H_
#define JOBPACT_SRC_INTERNAL_LOCK_LEASE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "jobpact/idempotency_store.h"
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

// kClaimed: `owner` holds `key` in progress until `expires_ns`.
inline ClaimOutcome MakeClaimed(std::string_view key, std::string_view owner,
                                std::int64_t expires_ns) {
  ClaimOutcome out;
  out.kind = ClaimOutcome::Kind::kClaimed;
  out.record.key = std::string(key);
  out.record.state = IdempotencyRecord::State::kInProgress;
  out.record.owner = std::string(owner);
  out.record.expires_at = TimeFromNs(expires_ns);
  return out;
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_LOCK_LEASE_H_
