// InMemoryLockStore: locks in a hash table keyed by string_views into each
// entry's own key, so lookups by string_view never allocate. An entry is
// held by value in its table node, its key and owner in one block
// (KeyAndOwner): an acquisition allocates that block and the node, where it
// took four allocations (the entry, its key, its owner, the node).
#include "jobpact/in_memory/lock_store.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

#include "jobpact/job.h"
#include "src/backends/in_memory/key_and_owner.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

using internal::Guarded;
using internal::KeyAndOwner;

// A held (or expired, not yet swept) lock. A new owner is a new entry: the
// table's key views `ids`.
struct LockEntry {
  KeyAndOwner ids;
  std::uint64_t token = 0;
  TimePoint expires_at;
};

LockLease ToLease(const LockEntry& e) {
  return LockLease{std::string(e.ids.key()), std::string(e.ids.owner()), e.token, e.expires_at};
}


}  // namespace

class InMemoryLockStore::Impl {
 public:
  explicit Impl(std::shared_ptr<Clock> clock)
      : clock_(clock ? std::move(clock) : SystemClock::Default()) {}

  Result<LockLease> Acquire(std::string_view key, std::string_view owner, Duration ttl) {
    JOBPACT_RETURN_IF_ERROR(internal::CheckKeyOwnerTtl("LockStore::Acquire", key, owner, ttl));
    // Built before the lock: most acquisitions are of free keys, which then
    // take one lookup (the insertion) and no allocation under the lock.
    LockEntry fresh{KeyAndOwner(key, owner), 0, TimePoint{}};
    const std::string_view k = fresh.ids.key();  // Stays put when `fresh` moves.
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    MaybeSweep(now);
    fresh.expires_at = now + ttl;
    auto [it, inserted] = locks_.try_emplace(k, std::move(fresh));
    if (inserted) {
      it->second.token = ++last_token_;
      return ToLease(it->second);
    }
    {
      LockEntry& e = it->second;
      if (now < e.expires_at) {
        if (e.ids.owner() != owner) {
          return Status::Aborted("lock " + std::string(e.ids.key()) + " is held by " +
                                 std::string(e.ids.owner()) + " until " +
                                 FormatRfc3339(e.expires_at));
        }
        e.expires_at = now + ttl;  // Re-entrant for its owner: same token.
        return ToLease(e);
      }
      // Expired: free. A new acquisition, even by the same owner, gets a new
      // token, since someone may have written in between with a newer one.
      if (e.ids.owner() == owner) {
        e.token = ++last_token_;
        e.expires_at = now + ttl;
        return ToLease(e);
      }
    }
    // Another owner: the fresh entry (not moved from by a try_emplace that
    // found the key) replaces the expired one.
    locks_.erase(it);
    fresh.token = ++last_token_;
    it = locks_.try_emplace(k, std::move(fresh)).first;
    return ToLease(it->second);
  }

  Result<LockLease> Renew(std::string_view key, std::string_view owner, Duration ttl) {
    JOBPACT_RETURN_IF_ERROR(internal::CheckKeyOwnerTtl("LockStore::Renew", key, owner, ttl));
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    auto it = locks_.find(key);
    // An expired lock is lost even if nobody has taken it yet: the owner's
    // writes may already have been fenced off by a newer token elsewhere,
    // and a remote store (Redis) would have dropped the key anyway.
    if (it == locks_.end() || it->second.ids.owner() != owner || now >= it->second.expires_at) {
      return Status::Aborted("lock " + std::string(key) + " is no longer held by " +
                             std::string(owner));
    }
    it->second.expires_at = now + ttl;
    return ToLease(it->second);
  }

  Status Release(std::string_view key, std::string_view owner) {
    JOBPACT_RETURN_IF_ERROR(internal::CheckKeyOwnerTtl("LockStore::Release", key, owner));
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    auto it = locks_.find(key);
    if (it == locks_.end()) return Status::NotFound("lock " + std::string(key) + " is not held");
    if (now >= it->second.expires_at) {
      locks_.erase(it);
      return Status::NotFound("lock " + std::string(key) + " had expired");
    }
    if (it->second.ids.owner() != owner) {
      return Status::Aborted("lock " + std::string(key) + " is held by " +
                             std::string(it->second.ids.owner()));
    }
    locks_.erase(it);
    return Status::Ok();
  }

  Result<std::optional<LockLease>> Inspect(std::string_view key) {
    std::optional<LockLease> out;
    internal::MutexLock lock(mu_);
    auto it = locks_.find(key);
    if (it != locks_.end() && clock_->Now() < it->second.expires_at) out = ToLease(it->second);
    return out;
  }

  Result<std::vector<LockLease>> List(std::size_t limit) {
    if (limit == 0) return Status::InvalidArgument("LockStore::List: limit must be >= 1");
    std::vector<LockLease> out;
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    for (const auto& [key, e] : locks_) {
      if (now < e.expires_at) out.push_back(ToLease(e));
    }
    std::sort(out.begin(), out.end(),
              [](const LockLease& a, const LockLease& b) { return a.key < b.key; });
    if (out.size() > limit) out.resize(limit);
    return out;
  }

  std::size_t HeldCount() const {
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    return static_cast<std::size_t>(std::count_if(
        locks_.begin(), locks_.end(), [now](const auto& kv) { return now < kv.second.expires_at; }));
  }

 private:
  // Drops expired entries once per (table size) acquisitions: amortized
  // O(1), and memory stays bounded by the locks actually held.
  void MaybeSweep(TimePoint now) JOBPACT_REQUIRES(mu_) {
    if (++ops_since_sweep_ < std::max<std::size_t>(1024, locks_.size())) return;
    ops_since_sweep_ = 0;
    for (auto it = locks_.begin(); it != locks_.end();) {
      it = now >= it->second.expires_at ? locks_.erase(it) : std::next(it);
    }
  }

  // Immutable after construction.
  const std::shared_ptr<Clock> clock_;

  mutable internal::Mutex mu_;
  // Keyed by views of each entry's own key (LockEntry::ids).
  std::unordered_map<std::string_view, LockEntry> locks_ JOBPACT_GUARDED_BY(mu_);
  std::uint64_t last_token_ JOBPACT_GUARDED_BY(mu_) = 0;
  std::size_t ops_since_sweep_ JOBPACT_GUARDED_BY(mu_) = 0;
};

InMemoryLockStore::InMemoryLockStore(std::shared_ptr<Clock> clock)
    : impl_(std::make_unique<Impl>(std::move(clock))) {}
InMemoryLockStore::~InMemoryLockStore() = default;

Result<LockLease> InMemoryLockStore::Acquire(std::string_view key, std::string_view owner,
                                             Duration ttl) {
  return Guarded("Acquire", [&] { return impl_->Acquire(key, owner, ttl); });
}
Result<LockLease> InMemoryLockStore::Renew(std::string_view key, std::string_view owner,
                                           Duration ttl) {
  return Guarded("Renew", [&] { return impl_->Renew(key, owner, ttl); });
}
Status InMemoryLockStore::Release(std::string_view key, std::string_view owner) {
  return Guarded("Release", [&] { return impl_->Release(key, owner); });
}
Result<std::optional<LockLease>> InMemoryLockStore::Inspect(std::string_view key) {
  return Guarded("Inspect", [&] { return impl_->Inspect(key); });
}
Result<std::vector<LockLease>> InMemoryLockStore::List(std::size_t limit) {
  return Guarded("List", [&] { return impl_->List(limit); });
}
std::size_t InMemoryLockStore::HeldCount() const { return impl_->HeldCount(); }

}  // namespace jobpact
