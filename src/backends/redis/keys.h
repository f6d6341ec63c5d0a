// Private: the key layout of the Redis backend, in one place. Every key of
// a namespace is
//
//   jobpact:{<namespace>}:<kind>             a fixed key of the namespace
//   jobpact:{<namespace>}:<kind>:<name>      one per job, queue, lock, ...
//
// so that all keys of one namespace share ONE Redis Cluster hash tag (the
// braces): every script touches one slot, and a cluster spreads load by
// namespace. Tenants are a field of a job, never part of the tag.
//
// Why no input can address another namespace or another kind of key:
//   - the namespace is checked here (1..64 of [A-Za-z0-9_.:-], so no brace,
//     space or control character) and the tag is the FIRST {...} of a key,
//     so what follows it never changes the slot or the namespace;
//   - a <kind> is a fixed word of [a-z_-] (never a ':'), so the first ':'
//     after the prefix ends it and a name can never make a key of another
//     kind ("lock:" + name is always a lock), nor equal a fixed key;
//   - names are checked before they go into a key: job ids, queues, job
//     types and rate limit keys with the safe-name set of
//     src/internal/names.h; lock, idempotency and dedup keys with its key
//     set (printable ASCII without space: braces and colons are allowed
//     there and harmless, see above); at most kMaxNameLength bytes of
//     either; cache keys may hold any byte but NUL (spaces, braces, '*'),
//     harmless for the same reasons. Names travel to scripts as
//     KEYS/ARGV, never inside script text.
#ifndef JOBPACT_SRC_BACKENDS_REDIS_KEYS_H_
#define JOBPACT_SRC_BACKENDS_REDIS_KEYS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {
namespace redis_internal {

// Immutable; thread-safe. Copyable.
class RedisKeys {
 public:
  static constexpr std::size_t kMaxNamespaceLength = 64;
  // Job ids, queues, types, lock / idempotency / dedup keys. Larger than
  // the envelope's default bound (255), so that a deployment raising
  // ValidationOptions::max_name_length still fits.
  static constexpr std::size_t kMaxNameLength = 1024;

  // kInvalidArgument naming what is wrong with `key_namespace`.
  static Result<RedisKeys> Create(std::string_view key_namespace);

  // kInvalidArgument unless `ns` is a valid namespace (see Create).
  static Status CheckNamespace(std::string_view ns);
  // kInvalidArgument unless `name` is a safe name ([A-Za-z0-9._:-], 1 to
  // kMaxNameLength), naming `what` ("job id", "queue") in the message.
  static Status CheckName(std::string_view what, std::string_view name);
  // kInvalidArgument unless `key` is printable ASCII without space, 1 to
  // kMaxNameLength, naming `what` ("lock key").
  static Status CheckKey(std::string_view what, std::string_view key);

  const std::string& key_namespace() const { return namespace_; }
  // "jobpact:{<namespace>}:", the start of every key.
  const std::string& prefix() const { return prefix_; }

  // --- Fixed keys of the namespace ---
  // The fencing-token counter of the lock store (INCR; never reset).
  std::string LockFence() const { return Fixed("lock-fence"); }
  // Sorted set of held lock keys (the names), scored by expiry in ms of
  // the store's clock: List() and garbage collection.
  std::string LockIndex() const { return Fixed("locks"); }
  // The start of every lock's key ("jobpact:{<namespace>}:lock:"), for
  // scripts that address the locks named in LockIndex().
  std::string LockKeyPrefix() const { return Fixed("lock") + ":"; }
  // Sorted set of idempotency keys (the names), scored by expiry in ms of
  // the store's clock: PurgeExpired().
  std::string IdempotencyIndex() const { return Fixed("idem-index"); }
  // The start of every idempotency record's key ("jobpact:{<namespace>}:idem:").
  std::string IdempotencyKeyPrefix() const { return Fixed("idem") + ":"; }
  // Sorted set of rate limit keys (the names, every score 0, so ZRANGE is
  // key order): RateLimitStore::List().
  std::string RateLimitIndex() const { return Fixed("rate-keys"); }
  // The start of every rate limiter's key ("jobpact:{<namespace>}:rate:").
  std::string RateLimitKeyPrefix() const { return Fixed("rate") + ":"; }
  // Control state (pause, concurrency) and its audit list, published
  // policies.
  std::string Control() const { return Fixed("control"); }
  std::string ControlAudit() const { return Fixed("control-audit"); }
  std::string Policies() const { return Fixed("policies"); }
  // The cache store's indexes: every cache key (the names) with score 0,
  // for exact prefix ranges (ZRANGEBYLEX compares bytes), and every cache
  // key scored by its expiry in us of the store's clock, for garbage
  // collection.
  std::string CacheIndex() const { return Fixed("cache-index"); }
  std::string CacheExpiryIndex() const { return Fixed("cache-expiry"); }
  // The start of every cache entry's key ("jobpact:{<namespace>}:cache:").
  std::string CacheKeyPrefix() const { return Fixed("cache") + ":"; }

  // --- Keys of one named thing (the name checked first) ---
  Result<std::string> Job(std::string_view job_id) const;
  Result<std::string> Queue(std::string_view queue) const;
  Result<std::string> Lock(std::string_view lock_key) const;
  Result<std::string> Idempotency(std::string_view key) const;
  Result<std::string> Dedup(std::string_view dedup_key) const;
  // A rate limiter ("type:<name>" or "dependency:<name>": a safe name).
  Result<std::string> RateLimit(std::string_view rate_key) const;
  // A cache entry. Cache keys are any bytes but NUL (jobpact/cache_store.h),
  // checked with internal::CheckCacheKey (src/internal/checks.h), not
  // CheckKey: whatever follows "cache:" cannot change the hash tag or the
  // kind (see above). `op` names the operation in the error.
  Result<std::string> Cache(std::string_view op, std::string_view cache_key) const;

  // For keys not listed above. REQUIRES: `kind` is a non-empty word of
  // [a-z_-], distinct from every other kind used in the namespace.
  std::string Fixed(std::string_view kind) const;
  // `kind` as above; `name` checked as a safe name (what: `what`).
  Result<std::string> Named(std::string_view kind, std::string_view what,
                            std::string_view name) const;
  // `kind` as above; `key` checked as a key (what: `what`).
  Result<std::string> Keyed(std::string_view kind, std::string_view what,
                            std::string_view key) const;

 private:
  explicit RedisKeys(std::string ns);

  std::string namespace_;
  std::string prefix_;
};

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_KEYS_H_
