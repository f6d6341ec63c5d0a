// The Redis IdempotencyStore. One hash per key, jobpact:{ns}:idem:<key>,
// with
//   state   "p" (claimed, in progress) or "c" (completed)
//   owner   the claimant (for "c": the one that completed it)
//   result  the stored result ("c" only)
//   exp     the expiry, microseconds of the store's clock (the claim's, or
//           the end of the retention of a completed record)
// plus, per namespace, the index jobpact:{ns}:idem-index (sorted set of
// keys scored by exp) for PurgeExpired(). Each operation is one Lua script,
// so the check and the write are atomic against every other worker; the
// semantics are the in-memory reference's (InMemoryIdempotencyStore),
// times from the injected Clock as `now` arguments. The key's real PEXPIRE
// is garbage collection only (stores.h).
#include "jobpact/idempotency_store.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "src/backends/redis/client.h"
#include "src/backends/redis/guards.h"
#include "src/backends/redis/keys.h"
#include "src/backends/redis/stores.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace redis_internal {
namespace {

using State = IdempotencyRecord::State;

// KEYS: record, index. ARGV: owner, now, exp, gc ms, key.
// -> claim's reply (guards.h).
const Script kClaim(JOBPACT_REDIS_CLAIM_LUA
                    "return claim(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], "
                    "ARGV[5])\n");

// The owner's live claim, shared by Complete and Extend: 1 if h (HMGET
// state, owner, exp) is a claim by ARGV[1] live at ARGV[2].
#define JOBPACT_LIVE_CLAIM_LUA                                                      \
  "local h = redis.call('HMGET', KEYS[1], 'state', 'owner', 'exp')\n"               \
  "if h[1] ~= 'p' or h[2] ~= ARGV[1] or tonumber(h[3]) <= tonumber(ARGV[2]) then\n" \
  "  return 0\n"                                                                    \
  "end\n"

// KEYS: record, index. ARGV: owner, now, exp, gc ms, key, result.
// -> 1 completed; 0 no live claim of owner.
const Script kComplete(JOBPACT_LIVE_CLAIM_LUA R"lua(
redis.call('HSET', KEYS[1], 'state', 'c', 'result', ARGV[6], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
return 1
)lua");

// KEYS: record, index. ARGV: owner, now, exp, gc ms, key.
// -> 1 extended; 0 no live claim of owner.
const Script kExtend(JOBPACT_LIVE_CLAIM_LUA R"lua(
redis.call('HSET', KEYS[1], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
return 1
)lua");

#undef JOBPACT_LIVE_CLAIM_LUA

// KEYS: record, index. ARGV: owner, now, key.
// -> 1 released; 0 not held by owner; 2 completed (never released).
// An expired claim of the owner's own may still be dropped.
const Script kRelease(R"lua(
local h = redis.call('HMGET', KEYS[1], 'state', 'owner', 'exp')
if h[1] == 'c' and tonumber(h[3]) > tonumber(ARGV[2]) then return 2 end
if h[1] ~= 'p' or h[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[3])
return 1
)lua");

// KEYS: index. ARGV: now, key prefix of records ("jobpact:{ns}:idem:").
// -> how many expired records were deleted. Records are addressed from the
// prefix (same hash tag, so the same cluster slot as the declared key).
const Script kPurge(R"lua(
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local purged = 0
for _, name in ipairs(names) do
  local key = ARGV[2] .. name
  local exp = redis.call('HGET', key, 'exp')
  if exp and tonumber(exp) <= tonumber(ARGV[1]) then
    purged = purged + redis.call('DEL', key)
    redis.call('ZREM', KEYS[1], name)
  elseif not exp then
    redis.call('ZREM', KEYS[1], name)
  end
end
return purged
)lua");

class RedisIdempotencyStore final : public IdempotencyStore {
 public:
  RedisIdempotencyStore(std::shared_ptr<RedisClient> client, RedisKeys keys,
                        std::shared_ptr<Clock> clock)
      : client_(std::move(client)), keys_(std::move(keys)), clock_(std::move(clock)) {}

  std::string_view Name() const override { return "redis"; }

  Result<ClaimOutcome> Claim(std::string_view key, std::string_view owner,
                             Duration claim_ttl) override {
    return internal::Guarded("IdempotencyStore::Claim", [&]() -> Result<ClaimOutcome> {
      JOBPACT_RETURN_IF_ERROR(
          internal::CheckKeyOwnerTtl("IdempotencyStore::Claim", key, owner, claim_ttl));
      JOBPACT_ASSIGN_OR_RETURN(std::string record_key, keys_.Idempotency(key));
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kClaim, {record_key, keys_.IdempotencyIndex()},
                                 {std::string(owner), std::to_string(now),
                                  std::to_string(now + ToMicros(claim_ttl)), GcMillis(claim_ttl),
                                  std::string(key)}));
      return ParseClaimReply(*client_, "IdempotencyStore::Claim", key, r);
    });
  }

  Status Complete(std::string_view key, std::string_view owner, std::string_view result,
                  Duration retention) override {
    return internal::Guarded("IdempotencyStore::Complete", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(
          internal::CheckKeyOwnerTtl("IdempotencyStore::Complete", key, owner, retention));
      JOBPACT_ASSIGN_OR_RETURN(std::string record_key, keys_.Idempotency(key));
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kComplete, {record_key, keys_.IdempotencyIndex()},
                                 {std::string(owner), std::to_string(now),
                                  std::to_string(now + ToMicros(retention)), GcMillis(retention),
                                  std::string(key), std::string(result)}));
      return HeldOrNot("IdempotencyStore::Complete", key, owner, r);
    });
  }

  Status Release(std::string_view key, std::string_view owner) override {
    return internal::Guarded("IdempotencyStore::Release", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(internal::CheckKeyOwnerTtl("IdempotencyStore::Release", key, owner));
      JOBPACT_ASSIGN_OR_RETURN(std::string record_key, keys_.Idempotency(key));
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kRelease, {record_key, keys_.IdempotencyIndex()},
                                 {std::string(owner), std::to_string(now), std::string(key)}));
      if (r.type == Reply::Type::kInteger && r.integer == 2) {
        return Status::Aborted("idempotency key " + std::string(key) +
                               " is completed; completed records are never released");
      }
      return HeldOrNot("IdempotencyStore::Release", key, owner, r);
    });
  }

  Status Extend(std::string_view key, std::string_view owner, Duration claim_ttl) override {
    return internal::Guarded("IdempotencyStore::Extend", [&]() -> Status {
      JOBPACT_RETURN_IF_ERROR(
          internal::CheckKeyOwnerTtl("IdempotencyStore::Extend", key, owner, claim_ttl));
      JOBPACT_ASSIGN_OR_RETURN(std::string record_key, keys_.Idempotency(key));
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kExtend, {record_key, keys_.IdempotencyIndex()},
                                 {std::string(owner), std::to_string(now),
                                  std::to_string(now + ToMicros(claim_ttl)), GcMillis(claim_ttl),
                                  std::string(key)}));
      return HeldOrNot("IdempotencyStore::Extend", key, owner, r);
    });
  }

  Result<std::optional<IdempotencyRecord>> Get(std::string_view key) override {
    return internal::Guarded(
        "IdempotencyStore::Get", [&]() -> Result<std::optional<IdempotencyRecord>> {
          if (key.empty()) return Status::InvalidArgument("IdempotencyStore::Get: key is empty");
          JOBPACT_ASSIGN_OR_RETURN(std::string record_key, keys_.Idempotency(key));
          JOBPACT_ASSIGN_OR_RETURN(
              Reply r, client_->Command({"HMGET", record_key, "state", "owner", "result", "exp"}));
          if (r.type != Reply::Type::kArray || r.elements.size() != 4) {
            return UnexpectedReply(*client_, "IdempotencyStore::Get", r);
          }
          if (r.elements[0].is_nil()) return std::optional<IdempotencyRecord>();
          std::int64_t exp = 0;
          if (!ReplyInt(r.elements[3], &exp)) {
            return UnexpectedReply(*client_, "IdempotencyStore::Get", r);
          }
          IdempotencyRecord rec;
          rec.key = std::string(key);
          rec.state = r.elements[0].str == "c" ? State::kCompleted : State::kInProgress;
          rec.owner = r.elements[1].str;
          rec.result = r.elements[2].str;
          rec.expires_at = FromMicros(exp);
          if (clock_->Now() >= rec.expires_at) return std::optional<IdempotencyRecord>();
          return std::optional<IdempotencyRecord>(std::move(rec));
        });
  }

  Result<int> PurgeExpired() override {
    return internal::Guarded("IdempotencyStore::PurgeExpired", [&]() -> Result<int> {
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(Reply r,
                               client_->Eval(kPurge, {keys_.IdempotencyIndex()},
                                             {std::to_string(now), keys_.IdempotencyKeyPrefix()}));
      if (r.type != Reply::Type::kInteger) {
        return UnexpectedReply(*client_, "IdempotencyStore::PurgeExpired", r);
      }
      return static_cast<int>(r.integer);
    });
  }

 private:
  // 1: OK; 0: kAborted, the owner holds no live claim; else kInternal.
  Status HeldOrNot(std::string_view op, std::string_view key, std::string_view owner,
                   const Reply& r) const {
    if (r.type == Reply::Type::kInteger && r.integer == 1) return Status::Ok();
    if (r.type == Reply::Type::kInteger && r.integer == 0) {
      return Status::Aborted(std::string(owner) + " does not hold a live claim on " +
                             std::string(key));
    }
    return UnexpectedReply(*client_, op, r);
  }

  // Immutable after construction.
  const std::shared_ptr<RedisClient> client_;
  const RedisKeys keys_;
  const std::shared_ptr<Clock> clock_;
};

}  // namespace

std::shared_ptr<IdempotencyStore> MakeRedisIdempotencyStore(std::shared_ptr<RedisClient> client,
                                                            const RedisKeys& keys,
                                                            std::shared_ptr<Clock> clock) {
  return std::make_shared<RedisIdempotencyStore>(std::move(client), keys, std::move(clock));
}

}  // namespace redis_internal
}  // namespace jobpact
