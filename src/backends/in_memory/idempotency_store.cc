// InMemoryIdempotencyStore: records in 16 shards by a hash of their key,
// each a hash table under its own mutex, keyed by string_views into each
// record's own key (with the key's hash beside it), so lookups by
// string_view never allocate. A record is held by value in its table's slot,
// its key and owner in one block (KeyAndOwner): a fresh claim allocates that
// block only.
//
// The table is abseil's flat_hash_map, not std::unordered_map: a lookup
// reads the slot's stored hash before it reads a key, where the node-based
// map chased a bucket, a node and the key's bytes, and at 2 workers that
// table was 44% of the workers' CPU (docs/benchmarks.md, the eighth pass).
#include "jobpact/in_memory/idempotency_store.h"

#include <algorithm>
#include <array>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "src/backends/in_memory/key_and_owner.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

using internal::Guarded;
using internal::KeyAndOwner;

using State = IdempotencyRecord::State;

// A stored record. A new owner (a fresh claim of an expired key) is a new
// Stored: the table's key views `ids`.
struct Stored {
  KeyAndOwner ids;
  State state = State::kInProgress;
  std::string result;
  TimePoint expires_at;
};

// A table key: a view of a record's own key and that key's hash, computed
// once per call (the shard is chosen by it too) and compared before the
// key's bytes are.
struct Key {
  std::string_view key;
  std::size_t hash;
};
struct KeyHash {
  std::size_t operator()(const Key& k) const { return k.hash; }
};
struct KeyEq {
  bool operator()(const Key& a, const Key& b) const { return a.hash == b.hash && a.key == b.key; }
};

IdempotencyRecord ToRecord(const Stored& s) {
  IdempotencyRecord r;
  r.key = std::string(s.ids.key());
  r.state = s.state;
  r.owner = std::string(s.ids.owner());
  r.result = s.result;
  r.expires_at = s.expires_at;
  return r;
}

// One of the store's shards: the records of the keys that hash to it,
// under its own mutex.
class Shard {
 public:
  // The store's clock; set once, before the store is shared.
  const Clock* clock_ = nullptr;

  Result<ClaimOutcome> Claim(Key key, std::string_view owner, Duration ttl) {
    JOBPACT_RETURN_IF_ERROR(
        internal::CheckKeyOwnerTtl("IdempotencyStore::Claim", key.key, owner, ttl));
    ClaimOutcome out;
    // Built before the lock: most claims are of new keys, which then take
    // one lookup (the insertion) and no allocation under the lock.
    Stored fresh{KeyAndOwner(key.key, owner), State::kInProgress, {}, TimePoint{}};
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    MaybeSweep(now);
    fresh.expires_at = now + ttl;
    const Key k{fresh.ids.key(), key.hash};  // Stays put when `fresh` moves.
    auto [it, inserted] = records_.try_emplace(k, std::move(fresh));
    if (inserted) {
      out.kind = ClaimOutcome::Kind::kClaimed;
      out.record = ToRecord(it->second);
      return out;
    }
    if (now < it->second.expires_at) {
      Stored& r = it->second;
      if (r.state == State::kCompleted) {
        out.kind = ClaimOutcome::Kind::kCompleted;
      } else if (r.ids.owner() != owner) {
        out.kind = ClaimOutcome::Kind::kInProgress;
      } else {
        r.expires_at = now + ttl;  // The owner's own claim: extended.
        out.kind = ClaimOutcome::Kind::kClaimed;
      }
      out.record = ToRecord(r);
      return out;
    }
    // Expired: as good as missing, so the fresh claim (not moved from by a
    // try_emplace that found the key) replaces it.
    records_.erase(it);
    it = records_.try_emplace(k, std::move(fresh)).first;
    out.kind = ClaimOutcome::Kind::kClaimed;
    out.record = ToRecord(it->second);
    return out;
  }

  Status Complete(Key key, std::string_view owner, std::string_view result, Duration retention) {
    JOBPACT_RETURN_IF_ERROR(
        internal::CheckKeyOwnerTtl("IdempotencyStore::Complete", key.key, owner, retention));
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    Stored* r = LiveClaimOf(key, owner, now);
    if (r == nullptr) return NotHeld(key, owner);
    r->state = State::kCompleted;
    r->result.assign(result.data(), result.size());
    r->expires_at = now + retention;
    return Status::Ok();
  }

  Status Release(Key key, std::string_view owner) {
    JOBPACT_RETURN_IF_ERROR(
        internal::CheckKeyOwnerTtl("IdempotencyStore::Release", key.key, owner));
    internal::MutexLock lock(mu_);
    auto it = records_.find(key);
    if (it != records_.end() && it->second.state == State::kCompleted &&
        clock_->Now() < it->second.expires_at) {
      return Status::Aborted("idempotency key " + std::string(key.key) +
                             " is completed; completed records are never released");
    }
    // An expired claim of the owner's own may still be dropped.
    if (it == records_.end() || it->second.state != State::kInProgress ||
        it->second.ids.owner() != owner) {
      return NotHeld(key, owner);
    }
    records_.erase(it);
    return Status::Ok();
  }

  Status Extend(Key key, std::string_view owner, Duration ttl) {
    JOBPACT_RETURN_IF_ERROR(
        internal::CheckKeyOwnerTtl("IdempotencyStore::Extend", key.key, owner, ttl));
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    Stored* r = LiveClaimOf(key, owner, now);
    if (r == nullptr) return NotHeld(key, owner);
    r->expires_at = now + ttl;
    return Status::Ok();
  }

  Result<std::optional<IdempotencyRecord>> Get(Key key) {
    std::optional<IdempotencyRecord> out;
    internal::MutexLock lock(mu_);
    auto it = records_.find(key);
    if (it != records_.end() && clock_->Now() < it->second.expires_at) out = ToRecord(it->second);
    return out;
  }

  int PurgeExpired() {
    internal::MutexLock lock(mu_);
    return Sweep(clock_->Now());
  }

  std::size_t Size() const {
    internal::MutexLock lock(mu_);
    return records_.size();
  }

 private:
  Stored* LiveClaimOf(Key key, std::string_view owner, TimePoint now) JOBPACT_REQUIRES(mu_) {
    auto it = records_.find(key);
    if (it == records_.end()) return nullptr;
    Stored* r = &it->second;
    if (r->state != State::kInProgress || r->ids.owner() != owner || now >= r->expires_at) {
      return nullptr;
    }
    return r;
  }

  static Status NotHeld(Key key, std::string_view owner) {
    return Status::Aborted(std::string(owner) + " does not hold a live claim on " +
                           std::string(key.key));
  }

  int Sweep(TimePoint now) JOBPACT_REQUIRES(mu_) {
    int purged = 0;
    // flat_hash_map's erase(iterator) returns nothing: erase(it++) is its
    // erase-while-iterating idiom (erasing does not move the other slots).
    for (auto it = records_.begin(); it != records_.end();) {
      if (now >= it->second.expires_at) {
        records_.erase(it++);
        ++purged;
      } else {
        ++it;
      }
    }
    return purged;
  }

  // Sweeps once per (table size) claims: amortized O(1), so memory stays
  // bounded by the live records even if nobody calls PurgeExpired.
  void MaybeSweep(TimePoint now) JOBPACT_REQUIRES(mu_) {
    if (++ops_since_sweep_ < std::max<std::size_t>(1024, records_.size())) return;
    ops_since_sweep_ = 0;
    Sweep(now);
  }

  mutable internal::Mutex mu_;
  // Keyed by views of each record's own key (Stored::ids).
  absl::flat_hash_map<Key, Stored, KeyHash, KeyEq> records_ JOBPACT_GUARDED_BY(mu_);
  std::size_t ops_since_sweep_ JOBPACT_GUARDED_BY(mu_) = 0;
};

}  // namespace

// The records are split over shards by a hash of their key, each under its
// own mutex: the workers claim and complete different keys on every job, and
// with one mutex they met there on every job (docs/benchmarks.md).
class InMemoryIdempotencyStore::Impl {
 public:
  explicit Impl(std::shared_ptr<Clock> clock)
      : clock_(clock ? std::move(clock) : SystemClock::Default()) {
    for (Shard& s : shards_) s.clock_ = clock_.get();
  }

  // The key with its hash, and the shard that hash picks (its top bits:
  // the table's own probing uses the low ones).
  static Key KeyOf(std::string_view key) { return Key{key, absl::Hash<std::string_view>{}(key)}; }
  Shard& Of(const Key& key) { return shards_[key.hash >> (64 - 4)]; }

  Result<int> PurgeExpired() {
    int purged = 0;
    for (Shard& s : shards_) purged += s.PurgeExpired();
    return purged;
  }

  std::size_t Size() const {
    std::size_t n = 0;
    for (const Shard& s : shards_) n += s.Size();
    return n;
  }

 private:
  // Immutable after construction.
  const std::shared_ptr<Clock> clock_;
  static_assert(sizeof(std::size_t) == 8, "the shard index takes a 64-bit hash's top 4 bits");
  std::array<Shard, 16> shards_;
};

InMemoryIdempotencyStore::InMemoryIdempotencyStore(std::shared_ptr<Clock> clock)
    : impl_(std::make_unique<Impl>(std::move(clock))) {}
InMemoryIdempotencyStore::~InMemoryIdempotencyStore() = default;

Result<ClaimOutcome> InMemoryIdempotencyStore::Claim(std::string_view key, std::string_view owner,
                                                     Duration claim_ttl) {
  return Guarded("Claim", [&] {
    const Key k = Impl::KeyOf(key);
    return impl_->Of(k).Claim(k, owner, claim_ttl);
  });
}
Status InMemoryIdempotencyStore::Complete(std::string_view key, std::string_view owner,
                                          std::string_view result, Duration retention) {
  return Guarded("Complete", [&] {
    const Key k = Impl::KeyOf(key);
    return impl_->Of(k).Complete(k, owner, result, retention);
  });
}
Status InMemoryIdempotencyStore::Release(std::string_view key, std::string_view owner) {
  return Guarded("Release", [&] {
    const Key k = Impl::KeyOf(key);
    return impl_->Of(k).Release(k, owner);
  });
}
Status InMemoryIdempotencyStore::Extend(std::string_view key, std::string_view owner,
                                        Duration claim_ttl) {
  return Guarded("Extend", [&] {
    const Key k = Impl::KeyOf(key);
    return impl_->Of(k).Extend(k, owner, claim_ttl);
  });
}
Result<std::optional<IdempotencyRecord>> InMemoryIdempotencyStore::Get(std::string_view key) {
  return Guarded("Get", [&] {
    const Key k = Impl::KeyOf(key);
    return impl_->Of(k).Get(k);
  });
}
Result<int> InMemoryIdempotencyStore::PurgeExpired() {
  return Guarded("PurgeExpired", [&] { return impl_->PurgeExpired(); });
}
std::size_t InMemoryIdempotencyStore::Size() const { return impl_->Size(); }

}  // namespace jobpact
