// File: jobpact/lock_store.h
//
// LockStore limits concurrency on a resource (SPEC 6): a lock always has a
// TTL, only its owner (by owner token) may renew or release it, and each
// acquisition hands out a fencing token that is strictly greater than every
// token handed out before by the same store, so a resource can refuse writes
// from a stale owner (lost-update protection).
//
// The JobRunner acquires the envelope's lock_key before running a handler,
// renews it with the lease, and releases it after the outcome is written.
//
// Contract for every implementation: all methods may be called concurrently
// (from threads, and for shared stores from processes); methods must not
// throw; time comes from the injected Clock; kUnavailable means the store is
// unreachable (retryable).
#ifndef JOBPACT_LOCK_STORE_H_
#define JOBPACT_LOCK_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

struct LockLease {
  std::string key;
  std::string owner;
  // Strictly increasing across all acquisitions of this store.
  std::uint64_t fencing_token = 0;
  TimePoint expires_at;
};

class JOBPACT_EXPORT LockStore {
 public:
  LockStore() = default;
  LockStore(const LockStore&) = delete;
  LockStore& operator=(const LockStore&) = delete;
  virtual ~LockStore();

  virtual std::string_view Name() const = 0;

  // Takes `key` for `owner` until now + ttl. An expired lock counts as free.
  // If `owner` already holds it, extends it and keeps its fencing token.
  // kAborted if another owner holds a live lock (the message names the
  // holder); kInvalidArgument for an empty key/owner or ttl <= 0.
  virtual Result<LockLease> Acquire(std::string_view key, std::string_view owner,
                                    Duration ttl) = 0;

  // Extends the lock to now + ttl. kAborted if `owner` no longer holds it
  // (expired and taken, or released): the caller has lost the lock.
  virtual Result<LockLease> Renew(std::string_view key, std::string_view owner, Duration ttl) = 0;

  // Releases the lock if `owner` holds it. kAborted if someone else holds
  // it; kNotFound if nobody holds it (already expired or released).
  virtual Status Release(std::string_view key, std::string_view owner) = 0;

  // The live holder of `key`, or empty.
  virtual Result<std::optional<LockLease>> Inspect(std::string_view key) = 0;

  // The live locks (key, owner, expiry, fencing token), by key, at most
  // `limit` (an operator's listing, SPEC 10 "stuck lock"). kInvalidArgument
  // for a limit of 0.
  virtual Result<std::vector<LockLease>> List(std::size_t limit) = 0;
};

}  // namespace jobpact

#endif  // JOBPACT_LOCK_STORE_H_
