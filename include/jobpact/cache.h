// File: jobpact/cache.h
//
// CacheGuard is a cache-aside component that keeps a cache safe under load
// (SPEC 10): Get(key, loader) answers from a CacheStore while the entry is
// fresh and calls the loader (the origin) only when it must, so that a hot
// key expiring, a slow origin or a crashed refiller never turns into a
// stampede on the origin.
//
// What a Get does, for one key:
//   - fresh entry: served (a hit). With probability exp(-(fresh_until - now)
//     / (delta * beta)), delta the last load's duration, the caller instead
//     refreshes early (XFetch, Vattani et al., VLDB 2015): it refreshes when
//     now - delta * beta * ln(U) >= fresh_until, U uniform in (0, 1) from the
//     injected RandomSource. So a key that takes long to load is refreshed a
//     little before it expires, by one caller, and never expires under load.
//   - stale entry within its stale-while-revalidate window (RFC 5861): served
//     at once to every caller but one, which refreshes it (inline, or on
//     CacheGuardOptions::refresh_executor).
//   - no entry, or past that window: one caller per process calls the loader;
//     every other caller of this guard waits for it and shares its value or
//     its error (request coalescing). Across processes, the caller that
//     calls the loader first takes the key's refill lock in the LockStore;
//     the other processes wait for its value (polling the store, at most
//     lock_wait), then serve a stale entry if one is left, else load
//     themselves (a fallback, counted). A refill lock whose owner died
//     expires with its lock_ttl; the next caller then refills.
//   - the loader fails (an error Result or a throw): if the entry is within
//     its stale-if-error window, the stale value is served instead;
//     otherwise the caller (and every coalesced waiter) gets the error.
// A loader may say the origin has no such thing (CacheLoad::NotFound()):
// that is cached too, for negative_ttl (negative caching). Every TTL is
// jittered by ±ttl_jitter (default 10%, SPEC 11) from the RandomSource, so
// keys filled together do not expire together.
//
// Every value carries its age (now - as_of, as_of being when the origin
// produced the data: the loader may say, else when it was loaded) and where
// it came from (CacheSource), so a service can show how old its data is.
//
// Metrics (jobpact/metrics_sink.h, metric::kCache*), each labelled with the
// key's prefix in MetricLabels::cache: hits, misses, coalesced waits, stale
// values served (by reason), refill lock waits and failures, fallback
// loads, early refreshes, loader errors and loader duration.
//
// Time comes from the injected Clock only (waits use Clock::SleepUntil), so
// tests drive it with testing::ManualClock. No method throws; a loader's
// throw becomes its error (kUnknown, "loader threw <type>: <what>").
//
// Example:
//   jobpact::CacheGuardOptions opts;
//   opts.store = backend.cache;   // e.g. InMemoryBackend(clock).cache
//   opts.locks = backend.locks;   // cross-process refill lock (optional)
//   opts.metrics = metrics;
//   auto guard = jobpact::CacheGuard::Create(std::move(opts));
//   jobpact::CacheGetOptions get;
//   get.ttl = jobpact::Seconds(60);
//   get.stale_while_revalidate = jobpact::Seconds(30);
//   get.stale_if_error = jobpact::Seconds(600);
//   auto user = (*guard)->Get("user:42", [&]() -> jobpact::Result<jobpact::CacheLoad> {
//     JOBPACT_ASSIGN_OR_RETURN(std::optional<std::string> row, db.FindUser(42));
//     if (!row) return jobpact::CacheLoad::NotFound();
//     return jobpact::CacheLoad::Found(*row);
//   }, get);
//   if (user.ok() && !user->not_found) Show(user->value, user->age);
//
// Thread-safe.
#ifndef JOBPACT_CACHE_H_
#define JOBPACT_CACHE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jobpact/cache_store.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/lock_store.h"
#include "jobpact/metrics_sink.h"
#include "jobpact/random.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {

// What a loader returns: the value, or "no such thing", and optionally how
// fresh the data is and how long it may be cached.
struct CacheLoad {
  std::string value;
  // The origin has no such key: cached for CacheGetOptions::negative_ttl.
  bool not_found = false;
  // When the origin produced the data (e.g. a replica's last sync). Empty:
  // when the loader returned.
  std::optional<TimePoint> as_of;
  // This value's fresh window, instead of CacheGetOptions::ttl (or
  // negative_ttl); jittered like it. Must be > 0.
  std::optional<Duration> ttl;

  static CacheLoad Found(std::string value) {
    CacheLoad l;
    l.value = std::move(value);
    return l;
  }
  static CacheLoad NotFound() {
    CacheLoad l;
    l.not_found = true;
    return l;
  }
};

// Called by at most one caller per key at a time in a process, on the
// calling thread (or on the refresh executor for a background refresh),
// with no guard lock held. May throw: the throw is its error.
using CacheLoader = std::function<Result<CacheLoad>()>;

// Where a value came from.
enum class CacheSource {
  kHit,                 // A fresh entry in the store.
  kLoaded,              // This caller called the loader.
  kCoalesced,           // Another caller in this process called the loader; shared.
  kPeerFilled,          // Another process held the refill lock and filled the store
                        // while this caller waited.
  kFallbackLoaded,      // The refill lock could not be had (held past
                        // lock_wait, or the LockStore failed) and there was
                        // nothing stale to serve: loaded without it.
  kStaleRevalidating,   // Stale, within stale-while-revalidate, while
                        // another caller (or process) refreshes it.
  kStaleOnError,        // Stale, within stale-if-error: the loader failed.
  kStaleAfterLockWait,  // Stale: another process held the refill lock past
                        // lock_wait.
};

// "hit", "loaded", "coalesced", "peer_filled", "fallback_loaded",
// "stale_revalidating", "stale_on_error", "stale_after_lock_wait".
JOBPACT_EXPORT std::string_view CacheSourceName(CacheSource source);

// A value as Get returns it.
struct CacheValue {
  std::string value;  // Empty when not_found.
  bool not_found = false;
  CacheSource source = CacheSource::kHit;
  // now - as_of (zero if as_of is in the future): how old the data is.
  Duration age{0};
  TimePoint as_of;
  TimePoint fresh_until;
  // True for the three kStale* sources.
  bool stale() const;
};

// Per-call settings (and CacheGuardOptions::defaults). Ranges are checked by
// Get (kInvalidArgument naming the field).
struct CacheGetOptions {
  // How long a loaded value is fresh. > 0.
  Duration ttl = Seconds(60);
  // After the fresh window: how long a stale value may be served while one
  // caller refreshes it (RFC 5861 stale-while-revalidate), and how long it
  // may be served when the refresh fails (stale-if-error). >= 0; 0: none.
  Duration stale_while_revalidate{0};
  Duration stale_if_error{0};
  // How long a "not found" is cached (no stale windows). > 0.
  Duration negative_ttl = Seconds(10);
  // Each TTL is multiplied by 1 + ttl_jitter * (2U - 1): in [0, 1), default
  // ±10% (SPEC 11). 0: no jitter.
  double ttl_jitter = 0.1;
  // XFetch's beta (>= 0; 1 in the paper and by default; larger refreshes
  // earlier; 0 turns early refresh off).
  double xfetch_beta = 1.0;
  // The refill lock across processes (with CacheGuardOptions::locks): held
  // for at most lock_ttl (a crashed holder's lock frees itself then; > 0);
  // a caller that finds it held waits at most lock_wait (>= 0) for the
  // holder's value, looking at the store every lock_poll_interval (> 0).
  Duration lock_ttl = Seconds(10);
  Duration lock_wait = Seconds(2);
  Duration lock_poll_interval = Millis(50);
};

struct CacheGuardOptions {
  // Where entries live. Required.
  std::shared_ptr<CacheStore> store;
  // The refill lock per key across processes. Null: none (coalescing only
  // within this process; right for a per-process store).
  std::shared_ptr<LockStore> locks;
  // Null: SystemClock::Default().
  std::shared_ptr<Clock> clock;
  // Jitter and XFetch samples. Null: a generator seeded from
  // std::random_device.
  std::shared_ptr<RandomSource> random;
  // Null: NullMetricsSink.
  std::shared_ptr<MetricsSink> metrics;
  // The refill lock's owner token: unique per guard. Empty: "cache-guard-"
  // and a fresh ULID.
  std::string owner;
  // The refill lock of key K is the LockStore key lock_prefix + K.
  std::string lock_prefix = "cache-refill:";
  // The `cache` metric label of a key. Null: the part of the key before its
  // first ':' (the whole key if it has none). Keep its values few: each is
  // a series per metric.
  std::function<std::string(std::string_view key)> label_of;
  // Runs background refreshes (stale-while-revalidate and early refreshes):
  // the caller that triggers one is served the entry it found at once, and
  // the refresh runs as the task given, on the executor's thread. Null
  // (default): that caller refreshes inline and gets the new value. The
  // task holds the loader (copied) and the guard's state, and may outlive
  // the guard. Run it once; a task destroyed unrun ends that refresh (the
  // next caller in the window starts another).
  std::function<void(std::function<void()> task)> refresh_executor;
  // What Get uses when given no options.
  CacheGetOptions defaults;
};

class JOBPACT_EXPORT CacheGuard {
 public:
  // kInvalidArgument for a null store or out-of-range defaults.
  static Result<std::unique_ptr<CacheGuard>> Create(CacheGuardOptions options);

  ~CacheGuard();
  CacheGuard(const CacheGuard&) = delete;
  CacheGuard& operator=(const CacheGuard&) = delete;

  // The value of `key` (see the file comment). Errors: kInvalidArgument for
  // a bad key (empty, over 1024 bytes, a NUL byte), a null loader or options
  // out of range, each named; otherwise the loader's error (shared with the
  // callers coalesced on it) when no stale value may be served. A store
  // failure counts as a miss (metric kCacheStoreErrors), never as the
  // caller's error. Blocks while another caller loads the key (coalescing)
  // and for at most lock_wait on another process's refill lock.
  Result<CacheValue> Get(std::string_view key, const CacheLoader& loader);
  Result<CacheValue> Get(std::string_view key, const CacheLoader& loader,
                         const CacheGetOptions& options);

  // Removes `key` from the store; whether a live entry was there.
  Result<bool> Invalidate(std::string_view key);
  // Removes every key starting with `prefix` (not empty); how many.
  Result<std::size_t> InvalidatePrefix(std::string_view prefix);

  // The refill lock's owner token of this guard.
  const std::string& owner() const;

 private:
  class Impl;
  explicit CacheGuard(std::shared_ptr<Impl> impl);
  // Shared with background refreshes still running.
  std::shared_ptr<Impl> impl_;
};

}  // namespace jobpact

#endif  // JOBPACT_CACHE_H_
