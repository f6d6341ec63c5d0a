// File: jobpact/cache_store.h
//
// CacheStore is where the cache guard (jobpact/cache.h, SPEC 10) keeps its
// entries: a key-value store whose entries carry their freshness windows
// and the age of their data, and expire on their own once the last window
// is over. The guard adds what makes a cache safe under load (coalescing,
// a refill lock per key through LockStore, stale-while-revalidate,
// stale-if-error, TTL jitter, early refresh); a store only keeps entries.
//
// Implementations: InMemoryCacheStore (below; one process, bounded by
// entries and bytes) and redis::RedisCacheStore (shared by every process
// on one Redis server, jobpact/redis/redis_backend.h). A backend bundle
// carries its cache store in BackendBundle::cache where it has one.
//
// Contract for every implementation: all methods may be called
// concurrently (from threads, and for shared stores from processes);
// methods must not throw; time comes from the injected Clock; kUnavailable
// means the store is unreachable (retryable). Keys are non-empty strings of
// at most 1024 bytes with no NUL (kInvalidArgument otherwise, naming the
// key's problem). The conformance suite every store passes is
// jobpact/testing/cache_store_contract.h.
#ifndef JOBPACT_CACHE_STORE_H_
#define JOBPACT_CACHE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

// One cached value and its windows (RFC 5861 terms). A reader at time t:
//   t <  fresh_until                 fresh: serve it;
//   fresh_until <= t < stale_until   stale: may be served while one caller
//                                    refreshes it (stale-while-revalidate);
//   t < error_until                  may be served if the refresh fails
//                                    (stale-if-error);
// The store keeps the entry until expires_at() and no longer.
struct CacheEntry {
  std::string value;
  // A cached "the origin has no such thing" (negative caching); value is
  // empty then.
  bool not_found = false;
  TimePoint fresh_until;
  TimePoint stale_until;  // >= fresh_until
  TimePoint error_until;  // >= fresh_until
  // How old the data is: when the origin produced it (the loader may say;
  // else when it was loaded). A service shows now - as_of as "data age".
  TimePoint as_of;
  // When the guard stored it, and how long the loader took (XFetch's delta).
  TimePoint stored_at;
  Duration load_duration{0};

  // The end of the last window: max(fresh_until, stale_until, error_until).
  TimePoint expires_at() const;
};

class JOBPACT_EXPORT CacheStore {
 public:
  CacheStore() = default;
  CacheStore(const CacheStore&) = delete;
  CacheStore& operator=(const CacheStore&) = delete;
  virtual ~CacheStore();

  // "in_memory", "redis".
  virtual std::string_view Name() const = 0;

  // The entry of `key` if it is still kept (now < expires_at()), else empty.
  virtual Result<std::optional<CacheEntry>> Get(std::string_view key) = 0;
  // Stores `entry` for `key`, replacing what is there, kept until
  // entry.expires_at(). kInvalidArgument for a bad key or for windows out of
  // order (stale_until or error_until before fresh_until). An entry whose
  // expires_at() is not after now is not stored (and replaces nothing).
  // A bounded store may evict other entries to make room (least recently
  // used first); kResourceExhausted if the entry alone exceeds the bound.
  virtual Status Put(std::string_view key, const CacheEntry& entry) = 0;
  // Removes `key`. Returns whether an entry was there.
  virtual Result<bool> Erase(std::string_view key) = 0;
  // Removes every key starting with `prefix` (a partial rebuild instead of
  // a global flush). kInvalidArgument for an empty prefix: a whole flush is
  // not a prefix invalidation. Returns how many entries were removed.
  virtual Result<std::size_t> EraseByPrefix(std::string_view prefix) = 0;
  // How many live entries start with `prefix` (empty: all), for a dry run
  // before EraseByPrefix and for operators.
  virtual Result<std::size_t> CountByPrefix(std::string_view prefix) = 0;
};

struct InMemoryCacheStoreOptions {
  // Bounds; past either, least recently used entries are evicted. The size
  // of an entry counts its key and value bytes plus a fixed overhead.
  std::size_t max_entries = 100000;
  std::size_t max_bytes = std::size_t{256} << 20;  // 256 MiB
};

// The reference CacheStore: one process, bounded, LRU eviction (a Get makes
// an entry the most recently used), expired entries dropped as they are met
// and by Put. Erase and EraseByPrefix count live entries only. `clock` null:
// SystemClock::Default(). kInvalidArgument for a bound of 0. Thread-safe.
JOBPACT_EXPORT Result<std::shared_ptr<CacheStore>> MakeInMemoryCacheStore(
    std::shared_ptr<Clock> clock, InMemoryCacheStoreOptions options = {});

}  // namespace jobpact

#endif  // JOBPACT_CACHE_STORE_H_
