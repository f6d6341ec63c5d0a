// The Redis LockStore. One hash per lock, jobpact:{ns}:lock:<key>, with
//   owner  the owner token
//   token  the fencing token of this acquisition
//   exp    the expiry, microseconds of the store's clock
// plus, per namespace, the fencing counter jobpact:{ns}:lock-fence (INCR,
// never reset, so tokens grow strictly across every process and every
// lock) and the index jobpact:{ns}:locks (sorted set of held lock keys
// scored by exp) for List(). Each operation is one Lua script: the
// compare-and-set on the owner and the clock comparison happen in the
// server, atomically with the write. This is SET key owner NX PX ttl with
// the expiry on the store's clock instead of the server's: a live lock of
// another owner is refused, an expired one is free. The key's real PEXPIRE
// is garbage collection only (stores.h).
#include "jobpact/lock_store.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/job.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/guards.h"
#include "src/backends/redis/keys.h"
#include "src/backends/redis/stores.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace redis_internal {
namespace {

// KEYS: lock, fence counter, index. ARGV: owner, now, exp, gc ms, lock key.
// -> lock_acquire's reply (guards.h).
const Script kAcquire(JOBPACT_REDIS_LOCK_ACQUIRE_LUA
                      "return lock_acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], "
                      "ARGV[3], ARGV[4], ARGV[5])\n");

// KEYS: lock, index. ARGV: owner, now, exp, gc ms, lock key.
// -> {1, owner, token, exp} renewed; {0} not held by owner (or expired).
const Script kRenew(R"lua(
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'exp')
if not h[1] or h[1] ~= ARGV[1] or tonumber(h[3]) <= tonumber(ARGV[2]) then return {0} end
redis.call('HSET', KEYS[1], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
return {1, h[1], h[2], ARGV[3]}
)lua");

// KEYS: lock, index. ARGV: owner, now, lock key.
// -> {1} released; {0} not held; {-1} had expired (dropped); {2, holder}.
const Script kRelease(R"lua(
local h = redis.call('HMGET', KEYS[1], 'owner', 'exp')
if not h[1] then
  redis.call('ZREM', KEYS[2], ARGV[3])
  return {0}
end
if tonumber(h[2]) <= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[3])
  return {-1}
end
if h[1] ~= ARGV[1] then return {2, h[1]} end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[3])
return {1}
)lua");

// KEYS: index. ARGV: now, limit, key prefix of locks ("jobpact:{ns}:lock:").
// -> flat {key, owner, token, exp, ...} of live locks, by key, at most limit.
// The lock hashes are addressed from the prefix (same hash tag, so the same
// cluster slot as the declared key).
const Script kList(R"lua(
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf')
table.sort(names)
local out = {}
local limit = tonumber(ARGV[2])
local n = 0
for _, name in ipairs(names) do
  if n >= limit then break end
  local h = redis.call('HMGET', ARGV[3] .. name, 'owner', 'token', 'exp')
  if h[1] and tonumber(h[3]) > tonumber(ARGV[1]) then
    out[#out + 1] = name
    out[#out + 1] = h[1]
    out[#out + 1] = h[2]
    out[#out + 1] = h[3]
    n = n + 1
  end
end
return out
)lua");

class RedisLockStore final : public LockStore {
 public:
  RedisLockStore(std::shared_ptr<RedisClient> client, RedisKeys keys, std::shared_ptr<Clock> clock)
      : client_(std::move(client)), keys_(std::move(keys)), clock_(std::move(clock)) {}

  std::string_view Name() const override { return "redis"; }

  Result<LockLease> Acquire(std::string_view key, std::string_view owner, Duration ttl) override {
    return internal::Guarded("LockStore::Acquire", [&]() -> Result<LockLease> {
      JOBPACT_RETURN_IF_ERROR(internal::CheckKeyOwnerTtl("LockStore::Acquire", key, owner, ttl));
      JOBPACT_ASSIGN_OR_RETURN(std::string lock_key, keys_.Lock(key));
      const std::int64_t now = ToMicros(clock_->Now());
      const std::int64_t exp = now + ToMicros(ttl);
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kAcquire, {lock_key, keys_.LockFence(), keys_.LockIndex()},
                                 {std::string(owner), std::to_string(now), std::to_string(exp),
                                  GcMillis(ttl), std::string(key)}));
      return ParseAcquireReply(*client_, "LockStore::Acquire", key, r);
    });
  }

  Result<LockLease> Renew(std::string_view key, std::string_view owner, Duration ttl) override {
    return internal::Guarded("LockStore::Renew", [&]() -> Result<LockLease> {
      JOBPACT_RETURN_IF_ERROR(internal::CheckKeyOwnerTtl("LockStore::Renew", key, owner, ttl));
      JOBPACT_ASSIGN_OR_RETURN(std::string lock_key, keys_.Lock(key));
      const std::int64_t now = ToMicros(clock_->Now());
      const std::int64_t exp = now + ToMicros(ttl);
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kRenew, {lock_key, keys_.LockIndex()},
                                 {std::string(owner), std::to_string(now), std::to_string(exp),
                                  GcMillis(ttl), std::string(key)}));
      if (r.type == Reply::Type::kArray && r.elements.size() == 1 &&
          r.elements[0].type == Reply::Type::kInteger && r.elements[0].integer == 0) {
        return Status::Aborted("lock " + std::string(key) + " is no longer held by " +
                               std::string(owner));
      }
      return ParseLease("LockStore::Renew", key, r);
    });
  }

  Status Release(std::string_view key, std::string_view owner) override {
    return internal::Guarded("LockStore::Release", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(internal::CheckKeyOwnerTtl("LockStore::Release", key, owner));
      JOBPACT_ASSIGN_OR_RETURN(std::string lock_key, keys_.Lock(key));
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kRelease, {lock_key, keys_.LockIndex()},
                                 {std::string(owner), std::to_string(now), std::string(key)}));
      if (r.type != Reply::Type::kArray || r.elements.empty() ||
          r.elements[0].type != Reply::Type::kInteger) {
        return UnexpectedReply(*client_, "LockStore::Release", r);
      }
      switch (r.elements[0].integer) {
        case 1:
          return Status::Ok();
        case 0:
          return Status::NotFound("lock " + std::string(key) + " is not held");
        case -1:
          return Status::NotFound("lock " + std::string(key) + " had expired");
        case 2:
          if (r.elements.size() == 2) {
            return Status::Aborted("lock " + std::string(key) + " is held by " + r.elements[1].str);
          }
          break;
        default:
          break;
      }
      return UnexpectedReply(*client_, "LockStore::Release", r);
    });
  }

  Result<std::optional<LockLease>> Inspect(std::string_view key) override {
    return internal::Guarded("LockStore::Inspect", [&]() -> Result<std::optional<LockLease>> {
      if (key.empty()) return Status::InvalidArgument("LockStore::Inspect: key is empty");
      JOBPACT_ASSIGN_OR_RETURN(std::string lock_key, keys_.Lock(key));
      JOBPACT_ASSIGN_OR_RETURN(Reply r,
                               client_->Command({"HMGET", lock_key, "owner", "token", "exp"}));
      if (r.type != Reply::Type::kArray || r.elements.size() != 3) {
        return UnexpectedReply(*client_, "LockStore::Inspect", r);
      }
      if (r.elements[0].is_nil()) return std::optional<LockLease>();
      LockLease lease;
      JOBPACT_RETURN_IF_ERROR(FillLease("LockStore::Inspect", key, r, 0, &lease));
      if (clock_->Now() >= lease.expires_at) return std::optional<LockLease>();
      return std::optional<LockLease>(std::move(lease));
    });
  }

  Result<std::vector<LockLease>> List(std::size_t limit) override {
    return internal::Guarded("LockStore::List", [&]() -> Result<std::vector<LockLease>> {
      if (limit == 0) return Status::InvalidArgument("LockStore::List: limit must be >= 1");
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(Reply r, client_->Eval(kList, {keys_.LockIndex()},
                                                      {std::to_string(now), std::to_string(limit),
                                                       keys_.LockKeyPrefix()}));
      if (r.type != Reply::Type::kArray || r.elements.size() % 4 != 0) {
        return UnexpectedReply(*client_, "LockStore::List", r);
      }
      std::vector<LockLease> out;
      out.reserve(r.elements.size() / 4);
      Reply row;
      row.type = Reply::Type::kArray;
      for (std::size_t i = 0; i < r.elements.size(); i += 4) {
        row.elements.assign(r.elements.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                            r.elements.begin() + static_cast<std::ptrdiff_t>(i) + 4);
        LockLease lease;
        JOBPACT_RETURN_IF_ERROR(FillLease("LockStore::List", r.elements[i].str, row, 0, &lease));
        out.push_back(std::move(lease));
      }
      return out;
    });
  }

 private:
  // Reads owner, token, exp from r.elements[first..first+2].
  Status FillLease(std::string_view op, std::string_view key, const Reply& r, std::size_t first,
                   LockLease* lease) const {
    std::int64_t token = 0;
    std::int64_t exp = 0;
    if (r.elements.size() < first + 3 || r.elements[first].type != Reply::Type::kString ||
        !ReplyInt(r.elements[first + 1], &token) || token <= 0 ||
        !ReplyInt(r.elements[first + 2], &exp)) {
      return UnexpectedReply(*client_, op, r);
    }
    lease->key = std::string(key);
    lease->owner = r.elements[first].str;
    lease->fencing_token = static_cast<std::uint64_t>(token);
    lease->expires_at = FromMicros(exp);
    return Status::Ok();
  }

  // {status, owner, token, exp}: the lease in it.
  Result<LockLease> ParseLease(std::string_view op, std::string_view key, const Reply& r) const {
    if (r.type != Reply::Type::kArray || r.elements.size() != 4 ||
        r.elements[0].type != Reply::Type::kInteger) {
      return UnexpectedReply(*client_, op, r);
    }
    LockLease lease;
    JOBPACT_RETURN_IF_ERROR(FillLease(op, key, r, 1, &lease));
    return lease;
  }

  // Immutable after construction.
  const std::shared_ptr<RedisClient> client_;
  const RedisKeys keys_;
  const std::shared_ptr<Clock> clock_;
};

}  // namespace

std::shared_ptr<LockStore> MakeRedisLockStore(std::shared_ptr<RedisClient> client,
                                              const RedisKeys& keys, std::shared_ptr<Clock> clock) {
  return std::make_shared<RedisLockStore>(std::move(client), keys, std::move(clock));
}

}  // namespace redis_internal
}  // namespace jobpact
