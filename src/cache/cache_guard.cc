// CacheGuard (see jobpact/cache.h for what a Get does).
//
// The steps, each a function below:
//   Get         validate, read the store, pick the path by the entry's window
//   Revalidate  a fresh-but-early (XFetch) or stale-while-revalidate entry:
//               one refresher per key, the others served what was found
//   Miss        no usable entry: one leader per key, the others coalesced
//   Refill      the leader's work: refill lock, re-read, load, store, release
//   WaitForPeer another process holds the refill lock: poll the store
//               (Clock::SleepUntil) until it is filled, the lock frees, or
//               lock_wait is over
//
// In-process coalescing is a table of flights (one per key being loaded)
// under one mutex; a flight's followers wait on its condition variable
// until the leader publishes the result. The leader re-reads the store once
// it holds the refill lock (or has none to take): a caller that read the
// old entry just before a previous flight stored the new one would
// otherwise load a second time.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "jobpact/cache.h"
#include "jobpact/failure.h"
#include "jobpact/job.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"
#include "src/internal/mutex.h"

namespace jobpact {

std::string_view CacheSourceName(CacheSource source) {
  switch (source) {
    case CacheSource::kHit:
      return "hit";
    case CacheSource::kLoaded:
      return "loaded";
    case CacheSource::kCoalesced:
      return "coalesced";
    case CacheSource::kPeerFilled:
      return "peer_filled";
    case CacheSource::kFallbackLoaded:
      return "fallback_loaded";
    case CacheSource::kStaleRevalidating:
      return "stale_revalidating";
    case CacheSource::kStaleOnError:
      return "stale_on_error";
    case CacheSource::kStaleAfterLockWait:
      return "stale_after_lock_wait";
  }
  return "unknown";
}

bool CacheValue::stale() const {
  return source == CacheSource::kStaleRevalidating || source == CacheSource::kStaleOnError ||
         source == CacheSource::kStaleAfterLockWait;
}

namespace {

// Stale-served reasons (metric::kCacheStaleServed) and lock failure
// reasons (metric::kCacheLockFailures).
constexpr std::string_view kStaleRevalidate = "revalidate";
constexpr std::string_view kStaleError = "error";
constexpr std::string_view kStaleLockWait = "lock_wait";
constexpr std::string_view kLockTimeout = "timeout";
constexpr std::string_view kLockStoreError = "lock_store_error";

Status CheckOptions(const CacheGetOptions& o) {
  auto bad = [](std::string_view field, std::string_view rule) {
    return Status::InvalidArgument("CacheGetOptions." + std::string(field) + " must be " +
                                   std::string(rule));
  };
  const Duration zero{0};
  if (o.ttl <= zero) return bad("ttl", "> 0");
  if (o.negative_ttl <= zero) return bad("negative_ttl", "> 0");
  if (o.stale_while_revalidate < zero) return bad("stale_while_revalidate", ">= 0");
  if (o.stale_if_error < zero) return bad("stale_if_error", ">= 0");
  if (!(o.ttl_jitter >= 0 && o.ttl_jitter < 1)) return bad("ttl_jitter", "in [0, 1)");
  if (!(o.xfetch_beta >= 0 && std::isfinite(o.xfetch_beta))) {
    return bad("xfetch_beta", ">= 0 and finite");
  }
  if (o.lock_ttl <= zero) return bad("lock_ttl", "> 0");
  if (o.lock_wait < zero) return bad("lock_wait", ">= 0");
  if (o.lock_poll_interval <= zero) return bad("lock_poll_interval", "> 0");
  return Status::Ok();
}

// Whether `now_entry` is another entry than `seen` (a refill landed since).
bool Replaced(const CacheEntry& now_entry, const std::optional<CacheEntry>& seen) {
  return !seen || now_entry.stored_at != seen->stored_at ||
         now_entry.fresh_until != seen->fresh_until;
}

CacheValue Serve(CacheEntry e, CacheSource source, TimePoint now) {
  CacheValue v;
  v.value = std::move(e.value);
  v.not_found = e.not_found;
  v.source = source;
  v.as_of = e.as_of;
  v.age = std::max(Duration{0}, now - e.as_of);
  v.fresh_until = e.fresh_until;
  return v;
}

// One key's load in progress in this process.
struct Flight {
  internal::PlainMutex mu;
  internal::CondVar done_cv;
  bool done JOBPACT_GUARDED_BY(mu) = false;
  std::optional<Result<CacheValue>> result JOBPACT_GUARDED_BY(mu);
};

}  // namespace

class CacheGuard::Impl : public std::enable_shared_from_this<CacheGuard::Impl> {
 public:
  explicit Impl(CacheGuardOptions o) : o_(std::move(o)) {}

  const std::string& owner() const { return o_.owner; }
  const CacheGetOptions& defaults() const { return o_.defaults; }

  Result<CacheValue> Get(std::string_view key, const CacheLoader& loader,
                         const CacheGetOptions& opts) {
    JOBPACT_RETURN_IF_ERROR(internal::CheckCacheKey("CacheGuard::Get", key));
    if (!loader) return Status::InvalidArgument("CacheGuard::Get: loader is null");
    JOBPACT_RETURN_IF_ERROR(CheckOptions(opts));
    return internal::Guarded("CacheGuard::Get", [&]() -> Result<CacheValue> {
      // The hit path builds no Call (no copies of the key, no allocation
      // beyond the value's).
      std::string label_storage;
      const std::string_view label = LabelOf(key, &label_storage);
      const TimePoint now = o_.clock->Now();
      std::optional<CacheEntry> seen = ReadStore(key, label);
      const bool fresh = seen && now < seen->fresh_until;
      if (fresh) {
        Count(metric::kCacheHits, label);
        if (!RefreshEarly(*seen, now, opts)) return Serve(*std::move(seen), CacheSource::kHit, now);
      }
      auto call = std::make_shared<Call>(*this, key, opts);
      if (fresh) {
        Count(metric::kCacheEarlyRefreshes, *call);
        return Revalidate(call, loader, std::move(seen), now);
      }
      Count(metric::kCacheMisses, *call);
      if (seen && now < seen->stale_until) return Revalidate(call, loader, std::move(seen), now);
      return Miss(call, loader, std::move(seen));
    });
  }

  Result<bool> Invalidate(std::string_view key) {
    JOBPACT_RETURN_IF_ERROR(internal::CheckCacheKey("CacheGuard::Invalidate", key));
    return o_.store->Erase(key);
  }

  Result<std::size_t> InvalidatePrefix(std::string_view prefix) {
    return o_.store->EraseByPrefix(prefix);
  }

 private:
  // One Get's key, label and options; shared with a background refresh,
  // so it owns copies.
  struct Call {
    Call(const Impl& g, std::string_view k, const CacheGetOptions& o)
        : key(k), opts(o), lock_key(g.o_.lock_prefix + key) {
      label = g.LabelOf(key, &label_storage);
    }
    // Not copyable: `label` may view `label_storage` or `key`.
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    std::string key;
    CacheGetOptions opts;
    std::string lock_key;
    std::string label_storage;
    std::string_view label;
  };

  // Ends a flight exactly once: with Publish, or else (an exception, a
  // dropped background task) with an error when the last owner lets go, so
  // that followers never wait forever.
  class FlightLeader {
   public:
    FlightLeader(std::shared_ptr<Impl> guard, std::string key, std::shared_ptr<Flight> flight)
        : guard_(std::move(guard)), key_(std::move(key)), flight_(std::move(flight)) {}
    ~FlightLeader() {
      if (flight_) Publish(Status::Cancelled("cache refresh of \"" + key_ + "\" was abandoned"));
    }
    FlightLeader(const FlightLeader&) = delete;
    FlightLeader& operator=(const FlightLeader&) = delete;

    void Publish(const Result<CacheValue>& result) {
      guard_->EndFlight(key_, flight_, result);
      flight_.reset();
    }

   private:
    std::shared_ptr<Impl> guard_;
    std::string key_;
    std::shared_ptr<Flight> flight_;
  };

  enum class LockState { kNone, kHeld, kFallback };

  // The `cache` label of `key`: a view of `key`, or of *storage when
  // options.label_of made it.
  std::string_view LabelOf(std::string_view key, std::string* storage) const {
    if (!o_.label_of) return key.substr(0, key.find(':'));
    *storage = o_.label_of(key);
    return *storage;
  }

  void Count(std::string_view name, std::string_view label, std::string_view reason = {}) const {
    MetricLabels l;
    l.reason = reason;
    l.cache = label;
    o_.metrics->Increment(name, l, 1);
  }
  void Count(std::string_view name, const Call& c, std::string_view reason = {}) const {
    Count(name, c.label, reason);
  }

  std::optional<CacheEntry> ReadStore(std::string_view key, std::string_view label) const {
    Result<std::optional<CacheEntry>> r = o_.store->Get(key);
    if (!r.ok()) {
      Count(metric::kCacheStoreErrors, label);
      return std::nullopt;
    }
    return *std::move(r);
  }
  std::optional<CacheEntry> ReadStore(const Call& c) const { return ReadStore(c.key, c.label); }

  // XFetch: refresh when now - delta * beta * ln(U) >= fresh_until. U is
  // clamped to the least normal double, so -ln(U) <= kMaxMinusLnU: an entry
  // further than that many delta * beta from its end cannot be refreshed
  // early, and the hit path skips the draw (the rule is unchanged).
  bool RefreshEarly(const CacheEntry& e, TimePoint now, const CacheGetOptions& opts) const {
    static constexpr double kMaxMinusLnU = 708.4;  // -ln(2.2250738585072014e-308)
    if (opts.xfetch_beta <= 0 || e.load_duration <= Duration{0}) return false;
    const double scale = ToSeconds(e.load_duration) * opts.xfetch_beta;
    const double gap = ToSeconds(e.fresh_until - now);
    if (gap > scale * kMaxMinusLnU) return false;
    const double u = std::max(o_.random->NextUnit(), std::numeric_limits<double>::min());
    return -scale * std::log(u) >= gap;
  }

  Duration Jitter(Duration ttl, double jitter) const {
    if (jitter <= 0) return ttl;
    const double factor = 1 + jitter * (2 * o_.random->NextUnit() - 1);
    const auto d = std::chrono::round<Duration>(std::chrono::duration<double>(ttl) * factor);
    return std::max(d, Duration{1});
  }

  // Joins the key's flight, or starts one (then the caller leads it).
  std::pair<std::shared_ptr<Flight>, bool> JoinFlight(const std::string& key) {
    internal::MutexLock lock(flights_mu_);
    auto [it, inserted] = flights_.try_emplace(key, nullptr);
    if (inserted) it->second = std::make_shared<Flight>();
    return {it->second, inserted};
  }

  void EndFlight(const std::string& key, const std::shared_ptr<Flight>& flight,
                 const Result<CacheValue>& result) {
    {
      internal::MutexLock lock(flights_mu_);
      const auto it = flights_.find(key);
      if (it != flights_.end() && it->second == flight) flights_.erase(it);
    }
    {
      internal::MutexLock lock(flight->mu);
      flight->result.emplace(result);
      flight->done = true;
    }
    flight->done_cv.NotifyAll();
  }

  // A follower's copy of the leader's result: a value the leader got fresh
  // is "coalesced" here; a stale one keeps its source and counts as stale
  // served for this caller too.
  Result<CacheValue> Follow(const Call& c, Flight& flight) {
    Count(metric::kCacheCoalesced, c);
    Result<CacheValue> r = Status::Internal("unset");
    {
      internal::MutexLock lock(flight.mu);
      while (!flight.done) flight.done_cv.Wait(flight.mu);
      r = *flight.result;
    }
    if (r.ok()) {
      if (!r->stale()) r->source = CacheSource::kCoalesced;
      if (r->source == CacheSource::kStaleRevalidating)
        Count(metric::kCacheStaleServed, c, kStaleRevalidate);
      if (r->source == CacheSource::kStaleOnError) Count(metric::kCacheStaleServed, c, kStaleError);
      if (r->source == CacheSource::kStaleAfterLockWait)
        Count(metric::kCacheStaleServed, c, kStaleLockWait);
      r->age = std::max(Duration{0}, o_.clock->Now() - r->as_of);
    }
    return r;
  }

  Result<CacheValue> Miss(const std::shared_ptr<Call>& call, const CacheLoader& loader,
                          std::optional<CacheEntry> seen) {
    auto [flight, leader] = JoinFlight(call->key);
    if (!leader) return Follow(*call, *flight);
    FlightLeader lead(shared_from_this(), call->key, flight);
    Result<CacheValue> r = Refill(*call, loader, seen, /*revalidating=*/false);
    lead.Publish(r);
    return r;
  }

  // `seen` is fresh (an early refresh) or within stale-while-revalidate.
  Result<CacheValue> Revalidate(const std::shared_ptr<Call>& call, const CacheLoader& loader,
                                std::optional<CacheEntry> seen, TimePoint now) {
    const bool fresh = now < seen->fresh_until;
    auto served = [&] {
      if (fresh) return Serve(*seen, CacheSource::kHit, now);
      Count(metric::kCacheStaleServed, *call, kStaleRevalidate);
      return Serve(*seen, CacheSource::kStaleRevalidating, now);
    };
    auto [flight, leader] = JoinFlight(call->key);
    if (!leader) return served();  // Someone in this process refreshes it.
    auto lead = std::make_shared<FlightLeader>(shared_from_this(), call->key, flight);
    if (o_.refresh_executor) {
      // The task owns what it needs; if it is dropped unrun, `lead`'s last
      // owner ends the flight.
      o_.refresh_executor([self = shared_from_this(), call, loader, seen, lead]() {
        lead->Publish(self->Refill(*call, loader, seen, /*revalidating=*/true));
      });
      return served();
    }
    Result<CacheValue> r = Refill(*call, loader, seen, /*revalidating=*/true);
    lead->Publish(r);
    return r;
  }

  // The leader's work for `c.key`, `seen` being the entry the Get found.
  Result<CacheValue> Refill(const Call& c, const CacheLoader& loader,
                            const std::optional<CacheEntry>& seen, bool revalidating) {
    LockState lock = LockState::kNone;
    if (o_.locks) {
      Result<LockLease> acquired = o_.locks->Acquire(c.lock_key, o_.owner, c.opts.lock_ttl);
      if (acquired.ok()) {
        lock = LockState::kHeld;
      } else if (acquired.status().code() == StatusCode::kAborted) {
        const TimePoint now = o_.clock->Now();
        // Another process is refreshing: a revalidating caller has a value.
        if (revalidating && now < seen->stale_until) {
          if (now < seen->fresh_until) return Serve(*seen, CacheSource::kHit, now);
          Count(metric::kCacheStaleServed, c, kStaleRevalidate);
          return Serve(*seen, CacheSource::kStaleRevalidating, now);
        }
        Count(metric::kCacheLockWaits, c);
        Result<std::optional<CacheEntry>> waited = WaitForPeer(c, seen, &lock);
        if (waited.ok() && *waited) {
          return Serve(**waited, CacheSource::kPeerFilled, o_.clock->Now());
        }
        if (lock != LockState::kHeld) {
          const TimePoint after = o_.clock->Now();
          if (seen && after < std::max(seen->stale_until, seen->error_until)) {
            Count(metric::kCacheStaleServed, c, kStaleLockWait);
            return Serve(*seen, CacheSource::kStaleAfterLockWait, after);
          }
          lock = LockState::kFallback;
        }
      } else {
        Count(metric::kCacheLockFailures, c, kLockStoreError);
        lock = LockState::kFallback;
      }
    }
    // A refill may have landed since the first read (a previous flight of
    // this process, or the lock's previous holder).
    if (std::optional<CacheEntry> now_entry = ReadStore(c);
        now_entry && Replaced(*now_entry, seen)) {
      const TimePoint now = o_.clock->Now();
      if (now < now_entry->fresh_until) {
        ReleaseLock(c, lock);
        return Serve(*now_entry, CacheSource::kHit, now);
      }
    }
    if (lock == LockState::kFallback) Count(metric::kCacheFallbackLoads, c);
    Result<CacheValue> r = LoadAndStore(c, loader, seen, lock);
    ReleaseLock(c, lock);
    return r;
  }

  // Polls the store until another process's refill lands (returned), the
  // lock frees and is taken (*lock = kHeld, empty returned), or lock_wait
  // is over (empty; kCacheLockFailures counted). An error is returned when
  // the lock store fails (counted too).
  Result<std::optional<CacheEntry>> WaitForPeer(const Call& c,
                                                const std::optional<CacheEntry>& seen,
                                                LockState* lock) {
    const TimePoint deadline = o_.clock->Now() + c.opts.lock_wait;
    for (bool first = true;; first = false) {
      // The store first: a holder that just stored has also released.
      if (std::optional<CacheEntry> e = ReadStore(c); e && Replaced(*e, seen)) {
        if (o_.clock->Now() < e->fresh_until) return e;
      }
      if (!first) {  // The first try was the caller's.
        Result<LockLease> acquired = o_.locks->Acquire(c.lock_key, o_.owner, c.opts.lock_ttl);
        if (acquired.ok()) {
          *lock = LockState::kHeld;
          return std::optional<CacheEntry>();
        }
        if (acquired.status().code() != StatusCode::kAborted) {
          Count(metric::kCacheLockFailures, c, kLockStoreError);
          return acquired.status();
        }
      }
      const TimePoint now = o_.clock->Now();
      if (now >= deadline) {
        Count(metric::kCacheLockFailures, c, kLockTimeout);
        return std::optional<CacheEntry>();
      }
      o_.clock->SleepUntil(std::min(deadline, now + c.opts.lock_poll_interval));
    }
  }

  void ReleaseLock(const Call& c, LockState lock) {
    if (lock != LockState::kHeld) return;
    // A failed release (the lock expired meanwhile) leaves nothing to undo:
    // the lock frees itself with its TTL.
    o_.locks->Release(c.lock_key, o_.owner).IgnoreError();
  }

  // The loader's result, its throw caught, its time observed.
  Result<CacheLoad> CallLoader(const Call& c, const CacheLoader& loader, Duration* took) {
    const TimePoint start = o_.clock->Now();
    Result<CacheLoad> r = [&]() -> Result<CacheLoad> {
      try {
        return loader();
      } catch (...) {
        return Status::Unknown("loader threw " + DescribeException(std::current_exception()));
      }
    }();
    *took = o_.clock->Now() - start;
    MetricLabels l;
    l.cache = c.label;
    o_.metrics->Observe(metric::kCacheLoaderDuration, l, ToSeconds(*took));
    if (r.ok() && r->ttl && *r->ttl <= Duration{0}) {
      r = Status::InvalidArgument("CacheLoad.ttl must be > 0 (key \"" + c.key + "\")");
    }
    if (!r.ok()) Count(metric::kCacheLoaderErrors, c);
    return r;
  }

  Result<CacheValue> LoadAndStore(const Call& c, const CacheLoader& loader,
                                  const std::optional<CacheEntry>& seen, LockState lock) {
    Duration took{0};
    Result<CacheLoad> loaded = CallLoader(c, loader, &took);
    const TimePoint now = o_.clock->Now();
    if (!loaded.ok()) {
      if (seen && now < seen->fresh_until) return Serve(*seen, CacheSource::kHit, now);
      if (seen && now < seen->error_until) {
        Count(metric::kCacheStaleServed, c, kStaleError);
        return Serve(*seen, CacheSource::kStaleOnError, now);
      }
      return loaded.status();
    }
    CacheEntry e;
    e.value = std::move(loaded->value);
    e.not_found = loaded->not_found;
    const Duration ttl =
        loaded->ttl ? *loaded->ttl : (e.not_found ? c.opts.negative_ttl : c.opts.ttl);
    e.fresh_until = now + Jitter(ttl, c.opts.ttl_jitter);
    e.stale_until = e.not_found ? e.fresh_until : e.fresh_until + c.opts.stale_while_revalidate;
    e.error_until = e.not_found ? e.fresh_until : e.fresh_until + c.opts.stale_if_error;
    e.as_of = loaded->as_of.value_or(now);
    e.stored_at = now;
    e.load_duration = took;
    if (!o_.store->Put(c.key, e).ok()) Count(metric::kCacheStoreErrors, c);
    return Serve(
        e, lock == LockState::kFallback ? CacheSource::kFallbackLoaded : CacheSource::kLoaded, now);
  }

  // Immutable after construction (defaults filled in by Create).
  const CacheGuardOptions o_;

  internal::Mutex flights_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Flight>> flights_
      JOBPACT_GUARDED_BY(flights_mu_);
};

Result<std::unique_ptr<CacheGuard>> CacheGuard::Create(CacheGuardOptions options) {
  if (options.store == nullptr) {
    return Status::InvalidArgument("CacheGuardOptions.store is null");
  }
  if (Status s = CheckOptions(options.defaults); !s.ok()) {
    return Status::InvalidArgument("CacheGuardOptions.defaults: " + s.message());
  }
  return internal::Guarded("CacheGuard::Create", [&]() -> Result<std::unique_ptr<CacheGuard>> {
    if (options.clock == nullptr) options.clock = SystemClock::Default();
    if (options.metrics == nullptr) options.metrics = std::make_shared<NullMetricsSink>();
    if (options.random == nullptr) {
      options.random = MakeSeededRandomSource(std::random_device{}());
    }
    if (options.owner.empty()) {
      // NewJobId is "job_" and a ULID: unique per process and across hosts.
      options.owner = "cache-guard-" + NewJobId(options.clock->Now()).substr(4);
    }
    return std::unique_ptr<CacheGuard>(new CacheGuard(std::make_shared<Impl>(std::move(options))));
  });
}

CacheGuard::CacheGuard(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
CacheGuard::~CacheGuard() = default;

Result<CacheValue> CacheGuard::Get(std::string_view key, const CacheLoader& loader) {
  return Get(key, loader, impl_->defaults());
}

Result<CacheValue> CacheGuard::Get(std::string_view key, const CacheLoader& loader,
                                   const CacheGetOptions& options) {
  return impl_->Get(key, loader, options);
}

Result<bool> CacheGuard::Invalidate(std::string_view key) { return impl_->Invalidate(key); }

Result<std::size_t> CacheGuard::InvalidatePrefix(std::string_view prefix) {
  return impl_->InvalidatePrefix(prefix);
}

const std::string& CacheGuard::owner() const { return impl_->owner(); }

}  // namespace jobpact
