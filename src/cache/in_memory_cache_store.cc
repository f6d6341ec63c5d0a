// The in-memory CacheStore (MakeInMemoryCacheStore, jobpact/cache_store.h):
// one table under one lock, entries in a recency list, the least recently
// used evicted first once either bound is passed.
//
// Layout: the entries live in a std::list (most recently used at the
// front), which never moves a node, and an absl::flat_hash_map indexes them
// by a view of the key each node owns. A Get is one hashed lookup and a
// splice to the front; a Put at most a few pops from the back. Prefix
// operations scan every entry (O(n)): they are operator actions, not the
// hit path.
//
// Expiry: an entry is dropped when a Get or a count meets it past its
// expires_at(), and each Put also drops expired entries it finds at the
// least recently used end, so a store that is written keeps shedding them.
#include <cstddef>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "jobpact/cache_store.h"
#include "src/internal/checks.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

// What an entry costs beyond its key and value bytes: the list node, the
// index slot and the CacheEntry's fixed fields, rounded up.
constexpr std::size_t kEntryOverheadBytes = 160;

// Expired entries a Put drops from the least recently used end, at most.
constexpr int kExpiredSweepPerPut = 2;

std::size_t SizeOf(std::string_view key, const CacheEntry& entry) {
  return key.size() + entry.value.size() + kEntryOverheadBytes;
}

class InMemoryCacheStore final : public CacheStore {
 public:
  InMemoryCacheStore(std::shared_ptr<Clock> clock, InMemoryCacheStoreOptions options)
      : clock_(std::move(clock)), options_(options) {}

  std::string_view Name() const override { return "in_memory"; }

  Result<std::optional<CacheEntry>> Get(std::string_view key) override {
    JOBPACT_RETURN_IF_ERROR(internal::CheckCacheKey("Get", key));
    const TimePoint now = clock_->Now();
    internal::MutexLock lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return std::optional<CacheEntry>();
    const auto node = it->second;
    if (now >= node->entry.expires_at()) {
      RemoveLocked(node);
      return std::optional<CacheEntry>();
    }
    lru_.splice(lru_.begin(), lru_, node);
    return std::optional<CacheEntry>(node->entry);
  }

  Status Put(std::string_view key, const CacheEntry& entry) override {
    JOBPACT_RETURN_IF_ERROR(internal::CheckCacheKey("Put", key));
    JOBPACT_RETURN_IF_ERROR(internal::CheckCacheEntry("Put", entry));
    const std::size_t bytes = SizeOf(key, entry);
    if (bytes > options_.max_bytes) {
      return Status::ResourceExhausted("Put: the entry of \"" + std::string(key) + "\" takes " +
                                       std::to_string(bytes) + " bytes; the store holds at most " +
                                       std::to_string(options_.max_bytes));
    }
    const TimePoint now = clock_->Now();
    if (entry.expires_at() <= now) return Status::Ok();  // Already over: not kept.
    internal::MutexLock lock(mu_);
    if (const auto it = index_.find(key); it != index_.end()) RemoveLocked(it->second);
    lru_.push_front(Item{std::string(key), entry, bytes});
    index_.emplace(lru_.front().key, lru_.begin());
    bytes_ += bytes;
    SweepExpiredLocked(now);
    // The new entry fits alone (checked above) and sits at the front, so
    // eviction stops before reaching it.
    while (lru_.size() > options_.max_entries || bytes_ > options_.max_bytes) {
      RemoveLocked(std::prev(lru_.end()));
    }
    return Status::Ok();
  }

  Result<bool> Erase(std::string_view key) override {
    JOBPACT_RETURN_IF_ERROR(internal::CheckCacheKey("Erase", key));
    internal::MutexLock lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return false;
    const bool live = clock_->Now() < it->second->entry.expires_at();
    RemoveLocked(it->second);
    return live;
  }

  Result<std::size_t> EraseByPrefix(std::string_view prefix) override {
    if (prefix.empty()) {
      return Status::InvalidArgument(
          "EraseByPrefix: prefix is empty (a whole flush is not a prefix invalidation)");
    }
    const TimePoint now = clock_->Now();
    internal::MutexLock lock(mu_);
    std::size_t removed = 0;
    for (auto it = lru_.begin(); it != lru_.end();) {
      const auto next = std::next(it);
      if (StartsWith(it->key, prefix)) {
        if (now < it->entry.expires_at()) ++removed;
        RemoveLocked(it);
      }
      it = next;
    }
    return removed;
  }

  Result<std::size_t> CountByPrefix(std::string_view prefix) override {
    const TimePoint now = clock_->Now();
    internal::MutexLock lock(mu_);
    std::size_t count = 0;
    for (const Item& item : lru_) {
      if (StartsWith(item.key, prefix) && now < item.entry.expires_at()) ++count;
    }
    return count;
  }

 private:
  struct Item {
    std::string key;
    CacheEntry entry;
    std::size_t bytes = 0;
  };
  using Node = std::list<Item>::iterator;

  static bool StartsWith(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
  }

  void RemoveLocked(Node node) JOBPACT_REQUIRES(mu_) {
    index_.erase(std::string_view(node->key));
    bytes_ -= node->bytes;
    lru_.erase(node);
  }

  void SweepExpiredLocked(TimePoint now) JOBPACT_REQUIRES(mu_) {
    for (int i = 0; i < kExpiredSweepPerPut && lru_.size() > 1; ++i) {
      const Node last = std::prev(lru_.end());
      if (now < last->entry.expires_at()) return;
      RemoveLocked(last);
    }
  }

  // Immutable after construction.
  const std::shared_ptr<Clock> clock_;
  const InMemoryCacheStoreOptions options_;

  internal::Mutex mu_;
  std::list<Item> lru_ JOBPACT_GUARDED_BY(mu_);  // Most recently used first.
  absl::flat_hash_map<std::string_view, Node> index_
      JOBPACT_GUARDED_BY(mu_);  // Views of keys in lru_.
  std::size_t bytes_ JOBPACT_GUARDED_BY(mu_) = 0;
};

}  // namespace

Result<std::shared_ptr<CacheStore>> MakeInMemoryCacheStore(std::shared_ptr<Clock> clock,
                                                           InMemoryCacheStoreOptions options) {
  if (options.max_entries == 0) {
    return Status::InvalidArgument("InMemoryCacheStoreOptions.max_entries must be > 0");
  }
  if (options.max_bytes == 0) {
    return Status::InvalidArgument("InMemoryCacheStoreOptions.max_bytes must be > 0");
  }
  if (clock == nullptr) clock = SystemClock::Default();
  return std::shared_ptr<CacheStore>(
      std::make_shared<InMemoryCacheStore>(std::move(clock), options));
}

}  // namespace jobpact
