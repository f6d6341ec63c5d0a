// The Redis CacheStore (jobpact/cache_store.h), shared by every process on
// one namespace. One hash per entry, jobpact:{ns}:cache:<key>, with
//   v                    the value (binary safe)
//   nf                   "1" for a cached not-found, else "0"
//   fu, su, eu           fresh_until, stale_until, error_until
//   ao, sa, ld           as_of, stored_at, load_duration
//   x                    expires_at() = max(fu, su, eu)
// every time in integer microseconds of the store's clock (stores.h), and
// two indexes per namespace:
//   jobpact:{ns}:cache-index    sorted set of every cache key, all scored 0,
//                               so ZRANGEBYLEX gives exact prefix ranges;
//   jobpact:{ns}:cache-expiry   the same keys scored by x, for garbage
//                               collection.
//
// Why an index and not SCAN ... MATCH: SCAN walks the whole keyspace of the
// database (every job and lock too) for each prefix operation, may return a
// key twice and needs every glob character of the prefix escaped; a lexical
// range of a sorted set is exact (bytes compared with memcmp, so '*', '?',
// '[', '%' and '_' mean nothing), costs O(log n + matches), and can be
// walked in bounded batches with a cursor. The cost is two ZADDs per Put.
//
// Expiry is decided by the client's `now` from the injected Clock, compared
// in the scripts (Get compares it in the client); an entry's PEXPIRE is
// garbage collection only (kGcSlack past x). Entries Redis drops that way,
// and entries that expired on the clock, leave their index members behind;
// every Put removes up to kGcBatch entries whose x is more than kGcSlack
// past, hashes and index members, so the indexes do not grow with keys
// never touched again. The slack is there because processes' clocks differ:
// one running ahead must not delete what the others still serve (the same
// slack Redis's own PEXPIRE gives). CountByPrefix deletes nothing but index
// members whose hash is gone, so a count from an operator's laptop with a
// wrong clock cannot remove live entries.
//
// Atomicity: Put, Erase and each batch of EraseByPrefix and CountByPrefix
// are one Lua script each, so an entry and its index members change
// together and a Get never sees half an entry. EraseByPrefix and
// CountByPrefix over many keys run as several batches of kBatch keys (so
// that no script blocks the server long); an entry Put under the prefix
// while they run may or may not be counted or removed.
#include "jobpact/cache_store.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"
#include "src/backends/redis/stores.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace redis_internal {
namespace {

// Keys per batch of EraseByPrefix and CountByPrefix.
constexpr int kBatch = 500;
// Entries past the GC slack (and their index members) a Put collects at most.
constexpr int kGcBatch = 64;

// KEYS: entry, index, expiry index. ARGV: collect entries whose x is at or
// before this, x, gc ms, cache key, entry key prefix, v, nf, fu, su, eu, ao,
// sa, ld, gc batch. -> 1.
const Script kPut(R"lua(
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[6], 'nf', ARGV[7], 'fu', ARGV[8], 'su', ARGV[9],
           'eu', ARGV[10], 'ao', ARGV[11], 'sa', ARGV[12], 'ld', ARGV[13], 'x', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[14]))
for _, name in ipairs(dead) do
  redis.call('DEL', ARGV[5] .. name)
  redis.call('ZREM', KEYS[2], name)
  redis.call('ZREM', KEYS[3], name)
end
return 1
)lua");

// KEYS: entry, index, expiry index. ARGV: now, cache key.
// -> 1 a live entry was removed; 0 none (or only an expired one).
const Script kErase(R"lua(
local x = redis.call('HGET', KEYS[1], 'x')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
if x and tonumber(x) > tonumber(ARGV[1]) then return 1 end
return 0
)lua");

// One batch of a prefix walk. KEYS: index, expiry index. ARGV: now, min,
// max (ZRANGEBYLEX bounds), limit, entry key prefix, "1" to remove the
// entries (else only index members whose entry Redis dropped).
// -> {live entries in the batch, keys in the batch, the last key}.
// The entries are addressed from the prefix (same hash tag, so the same
// cluster slot as the declared keys).
const Script kPrefixBatch(R"lua(
local names = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
local now = tonumber(ARGV[1])
local live = 0
for _, name in ipairs(names) do
  local k = ARGV[5] .. name
  local x = redis.call('HGET', k, 'x')
  if x and tonumber(x) > now then live = live + 1 end
  if ARGV[6] == '1' or not x then
    redis.call('DEL', k)
    redis.call('ZREM', KEYS[1], name)
    redis.call('ZREM', KEYS[2], name)
  end
end
return {live, #names, names[#names] or ''}
)lua");

// The ZRANGEBYLEX bounds of the keys starting with `prefix`: from the
// prefix itself (inclusive) to its successor (exclusive): the shortest
// string greater than every string it starts, i.e. the prefix without its
// trailing 0xFF bytes and with the last remaining byte incremented ("+",
// the top, when nothing remains).
std::pair<std::string, std::string> PrefixRange(std::string_view prefix) {
  if (prefix.empty()) return {"-", "+"};
  std::string succ(prefix);
  while (!succ.empty() && static_cast<unsigned char>(succ.back()) == 0xFF) succ.pop_back();
  std::string max = "+";
  if (!succ.empty()) {
    succ.back() = static_cast<char>(static_cast<unsigned char>(succ.back()) + 1);
    max = "(" + succ;
  }
  return {"[" + std::string(prefix), max};
}

std::string Micros(TimePoint t) { return std::to_string(ToMicros(t)); }
std::string Micros(Duration d) { return std::to_string(ToMicros(d)); }

class RedisCacheStore final : public CacheStore {
 public:
  RedisCacheStore(std::shared_ptr<RedisClient> client, RedisKeys keys, std::shared_ptr<Clock> clock)
      : client_(std::move(client)), keys_(std::move(keys)), clock_(std::move(clock)) {}

  std::string_view Name() const override { return "redis"; }

  Result<std::optional<CacheEntry>> Get(std::string_view key) override {
    return internal::Guarded("CacheStore::Get", [&]() -> Result<std::optional<CacheEntry>> {
      JOBPACT_ASSIGN_OR_RETURN(std::string entry_key, keys_.Cache("CacheStore::Get", key));
      JOBPACT_ASSIGN_OR_RETURN(Reply r, client_->Command({"HMGET", entry_key, "v", "nf", "fu", "su",
                                                          "eu", "ao", "sa", "ld", "x"}));
      if (r.type != Reply::Type::kArray || r.elements.size() != 9) {
        return UnexpectedReply(*client_, "CacheStore::Get", r);
      }
      if (r.elements[0].is_nil()) return std::optional<CacheEntry>();
      std::int64_t t[7];  // fu, su, eu, ao, sa, ld, x
      for (int i = 0; i < 7; ++i) {
        if (!ReplyInt(r.elements[2 + i], &t[i])) {
          return UnexpectedReply(*client_, "CacheStore::Get", r);
        }
      }
      if (ToMicros(clock_->Now()) >= t[6]) return std::optional<CacheEntry>();
      CacheEntry e;
      e.value = std::move(r.elements[0].str);
      e.not_found = r.elements[1].str == "1";
      e.fresh_until = FromMicros(t[0]);
      e.stale_until = FromMicros(t[1]);
      e.error_until = FromMicros(t[2]);
      e.as_of = FromMicros(t[3]);
      e.stored_at = FromMicros(t[4]);
      e.load_duration = std::chrono::duration_cast<Duration>(std::chrono::microseconds(t[5]));
      return std::optional<CacheEntry>(std::move(e));
    });
  }

  Status Put(std::string_view key, const CacheEntry& entry) override {
    return internal::Guarded("CacheStore::Put", [&]() -> Status {
      JOBPACT_ASSIGN_OR_RETURN(std::string entry_key, keys_.Cache("CacheStore::Put", key));
      JOBPACT_RETURN_IF_ERROR(internal::CheckCacheEntry("CacheStore::Put", entry));
      const TimePoint now = clock_->Now();
      const TimePoint expires = entry.expires_at();
      if (ToMicros(expires) <= ToMicros(now)) return Status::Ok();  // Stores nothing.
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kPut, {entry_key, keys_.CacheIndex(), keys_.CacheExpiryIndex()},
                                 {Micros(now - kGcSlack), Micros(expires), GcMillis(expires - now),
                                  std::string(key), keys_.CacheKeyPrefix(), entry.value,
                                  entry.not_found ? "1" : "0", Micros(entry.fresh_until),
                                  Micros(entry.stale_until), Micros(entry.error_until),
                                  Micros(entry.as_of), Micros(entry.stored_at),
                                  Micros(entry.load_duration), std::to_string(kGcBatch)}));
      if (r.type != Reply::Type::kInteger || r.integer != 1) {
        return UnexpectedReply(*client_, "CacheStore::Put", r);
      }
      return Status::Ok();
    });
  }

  Result<bool> Erase(std::string_view key) override {
    return internal::Guarded("CacheStore::Erase", [&]() -> Result<bool> {
      JOBPACT_ASSIGN_OR_RETURN(std::string entry_key, keys_.Cache("CacheStore::Erase", key));
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kErase, {entry_key, keys_.CacheIndex(), keys_.CacheExpiryIndex()},
                                 {Micros(clock_->Now()), std::string(key)}));
      if (r.type != Reply::Type::kInteger || (r.integer != 0 && r.integer != 1)) {
        return UnexpectedReply(*client_, "CacheStore::Erase", r);
      }
      return r.integer == 1;
    });
  }

  Result<std::size_t> EraseByPrefix(std::string_view prefix) override {
    return internal::Guarded("CacheStore::EraseByPrefix", [&]() -> Result<std::size_t> {
      if (prefix.empty()) {
        return Status::InvalidArgument(
            "CacheStore::EraseByPrefix: prefix is empty (a whole flush is not a prefix "
            "invalidation)");
      }
      return WalkPrefix("CacheStore::EraseByPrefix", prefix, /*erase=*/true);
    });
  }

  Result<std::size_t> CountByPrefix(std::string_view prefix) override {
    return internal::Guarded("CacheStore::CountByPrefix", [&]() -> Result<std::size_t> {
      return WalkPrefix("CacheStore::CountByPrefix", prefix, /*erase=*/false);
    });
  }

 private:
  // Walks the keys starting with `prefix` in batches of kBatch, counting
  // the live entries and, with `erase`, removing every entry met. One `now`
  // for the whole walk.
  Result<std::size_t> WalkPrefix(std::string_view op, std::string_view prefix, bool erase) {
    const std::string now = Micros(clock_->Now());
    auto [min, max] = PrefixRange(prefix);
    std::size_t live = 0;
    for (;;) {
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kPrefixBatch, {keys_.CacheIndex(), keys_.CacheExpiryIndex()},
                                 {now, min, max, std::to_string(kBatch), keys_.CacheKeyPrefix(),
                                  erase ? "1" : "0"}));
      std::int64_t batch_live = 0;
      std::int64_t batch_keys = 0;
      if (r.type != Reply::Type::kArray || r.elements.size() != 3 ||
          !ReplyInt(r.elements[0], &batch_live) || !ReplyInt(r.elements[1], &batch_keys) ||
          batch_live < 0 || batch_live > batch_keys) {
        return UnexpectedReply(*client_, op, r);
      }
      live += static_cast<std::size_t>(batch_live);
      if (batch_keys < kBatch) return live;
      // Members up to the last one were read (and maybe removed): go on
      // after it, so the walk ends even while others keep putting keys.
      min = "(" + r.elements[2].str;
    }
  }

  // Immutable after construction.
  const std::shared_ptr<RedisClient> client_;
  const RedisKeys keys_;
  const std::shared_ptr<Clock> clock_;
};

}  // namespace

std::shared_ptr<CacheStore> MakeRedisCacheStore(std::shared_ptr<RedisClient> client,
                                                const RedisKeys& keys,
                                                std::shared_ptr<Clock> clock) {
  return std::make_shared<RedisCacheStore>(std::move(client), keys, std::move(clock));
}

}  // namespace redis_internal
}  // namespace jobpact
