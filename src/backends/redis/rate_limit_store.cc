// The Redis RateLimitStore. One hash per limiter, jobpact:{ns}:rate:<key>,
// with
//   tat   the GCRA's theoretical arrival time
//   bu    the end of the backoff (0: none)
//   hint  where the next refused start is told to come back
//   br    the backoff's reason
//   ops, ob   the operator's override: per second (shortest round-trip
//             text of the double) and burst; absent without an override
//   oa, or    the override's actor and reason
//   up    the last change
// times as integer microseconds of the store's clock, plus, per namespace,
// the index jobpact:{ns}:rate-keys (sorted set of the limiter keys, every
// score 0, so that ZRANGE is key order) for List(). Limiters never expire:
// there is one per job type or dependency with a rate, like the SQLite
// store's rows.
//
// Each operation is one Lua script, so every process takes from the same
// limiter atomically. The scripts apply the same GCRA step as every other
// store (src/internal/gcra.h: GcraTake, GcraBackoff, GcraClearBackoff) with
// `now` from the injected Clock, never the server's TIME. Resolution: Lua's
// numbers are doubles, which hold nanoseconds since the epoch exactly only
// up to 2^53 ns (104 days), so the scripts count in MICROSECONDS (exact
// until the year 2255): T = round(1e6 / per_second) us, `now` is the
// clock's time truncated to the microsecond, and a backoff's end is
// rounded UP to the microsecond (so nothing starts before it). A rate's
// interval thus differs from the nanosecond stores' by under half a
// microsecond; times in whole microseconds come out exactly as theirs.
// Every number a script stores is written with '%.0f' (an integer, never
// Lua's 14-digit tostring).
#include "jobpact/rate_limit_store.h"

#include <algorithm>
#include <charconv>
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
#include "src/internal/gcra.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace redis_internal {
namespace {

// KEYS: limiter, index. ARGV: now, per second, burst, key.
// -> {allowed 1|0, retry at, override 1|0, override per second, burst}.
const Script kTake(R"lua(
local h = redis.call('HMGET', KEYS[1], 'tat', 'bu', 'hint', 'ops', 'ob', 'up')
if not h[6] then redis.call('ZADD', KEYS[2], 0, ARGV[4]) end
local now = tonumber(ARGV[1])
local ps, burst, over = tonumber(ARGV[2]), tonumber(ARGV[3]), 0
if h[4] then ps, burst, over = tonumber(h[4]), tonumber(h[5]), 1 end
local tat = tonumber(h[1] or '0')
local t = 0
if ps > 0 then t = math.floor(1000000 / ps + 0.5) end
local earliest = math.max(tat - t * (burst - 1), tonumber(h[2] or '0'))
if earliest <= now then
  redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', math.max(tat, now) + t),
             'up', ARGV[1])
  return {1, ARGV[1], over, h[4] or '', h[5] or ''}
end
local at = math.max(earliest, tonumber(h[3] or '0'))
redis.call('HSET', KEYS[1], 'hint', string.format('%.0f', at + t), 'up', ARGV[1])
return {0, string.format('%.0f', at), over, h[4] or '', h[5] or ''}
)lua");

// KEYS: limiter, index. ARGV: until, reason, now, key. -> 1.
// A later end replaces the backoff and its reason; an earlier one is kept
// out.
const Script kBackoff(R"lua(
local h = redis.call('HMGET', KEYS[1], 'bu', 'up')
if not h[2] then redis.call('ZADD', KEYS[2], 0, ARGV[4]) end
if tonumber(ARGV[1]) > tonumber(h[1] or '0') then
  redis.call('HSET', KEYS[1], 'bu', ARGV[1], 'br', ARGV[2])
end
redis.call('HSET', KEYS[1], 'up', ARGV[3])
return 1
)lua");

// KEYS: limiter, index. ARGV: per second ('' clears), burst, actor,
// reason, now, key. -> 1.
const Script kSetOverride(R"lua(
if not redis.call('HGET', KEYS[1], 'up') then redis.call('ZADD', KEYS[2], 0, ARGV[6]) end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'ops', 'ob')
else
  redis.call('HSET', KEYS[1], 'ops', ARGV[1], 'ob', ARGV[2])
end
redis.call('HSET', KEYS[1], 'oa', ARGV[3], 'or', ARGV[4], 'up', ARGV[5])
return 1
)lua");

// KEYS: limiter. ARGV: now. -> 1 cleared; 0 no such limiter.
// The backoff ends now and the rate starts afresh: tat = min(tat, now).
const Script kClearBackoff(R"lua(
local h = redis.call('HMGET', KEYS[1], 'tat', 'up')
if not h[2] then return 0 end
if tonumber(h[1] or '0') > tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'tat', ARGV[1]) end
redis.call('HSET', KEYS[1], 'bu', '0', 'hint', '0', 'br', '', 'up', ARGV[1])
return 1
)lua");

constexpr std::size_t kListFields = 8;

// KEYS: index. ARGV: limit, key prefix of limiters ("jobpact:{ns}:rate:").
// -> flat {key, tat, bu, br, ops, ob, oa, or, up, ...} by key, at most
// limit. The limiter hashes are addressed from the prefix (same hash tag,
// so the same cluster slot as the declared key).
const Script kList(R"lua(
local names = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, name in ipairs(names) do
  local h = redis.call('HMGET', ARGV[2] .. name, 'tat', 'bu', 'br', 'ops', 'ob', 'oa', 'or', 'up')
  if h[8] then
    out[#out + 1] = name
    for i = 1, 8 do out[#out + 1] = h[i] or '' end
  end
end
return out
)lua");

// A backoff's end in microseconds, rounded up: no start before `until`.
std::int64_t CeilMicros(TimePoint until) {
  const auto us = std::chrono::ceil<std::chrono::microseconds>(until.time_since_epoch());
  return us.count();
}

// A double from a string reply element.
bool ReplyDouble(const Reply& r, double* out) {
  if (r.type != Reply::Type::kString || r.str.empty()) return false;
  const char* end = r.str.data() + r.str.size();
  auto [ptr, ec] = std::from_chars(r.str.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// The override in (per second, burst) reply elements; nullopt for empty
// ones, false for a malformed one.
bool ReplyOverride(const Reply& per_second, const Reply& burst, std::optional<RateLimit>* out) {
  if (per_second.type == Reply::Type::kString && per_second.str.empty()) {
    out->reset();
    return true;
  }
  RateLimit limit;
  std::int64_t b = 0;
  if (!ReplyDouble(per_second, &limit.per_second) || !ReplyInt(burst, &b)) return false;
  limit.burst = static_cast<int>(b);
  *out = limit;
  return true;
}

class RedisRateLimitStore final : public RateLimitStore {
 public:
  RedisRateLimitStore(std::shared_ptr<RedisClient> client, RedisKeys keys,
                      std::shared_ptr<Clock> clock)
      : client_(std::move(client)), keys_(std::move(keys)), clock_(std::move(clock)) {}

  Result<RateDecision> Take(std::string_view key, const RateLimit& limit) override {
    return internal::Guarded("RateLimitStore::Take", [&]() -> Result<RateDecision> {
      JOBPACT_ASSIGN_OR_RETURN(std::string rate_key, Key(key));
      JOBPACT_RETURN_IF_ERROR(limit.Validate());
      const TimePoint now = clock_->Now();
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kTake, {rate_key, keys_.RateLimitIndex()},
                                 {std::to_string(ToMicros(now)),
                                  internal::RateText(limit.per_second),
                                  std::to_string(limit.burst), std::string(key)}));
      std::int64_t allowed = 0;
      std::int64_t at = 0;
      std::int64_t overridden = 0;
      RateDecision d;
      std::optional<RateLimit> override_limit;
      if (r.type != Reply::Type::kArray || r.elements.size() != 5 ||
          !ReplyInt(r.elements[0], &allowed) || !ReplyInt(r.elements[1], &at) ||
          !ReplyInt(r.elements[2], &overridden) ||
          !ReplyOverride(r.elements[3], r.elements[4], &override_limit) ||
          (overridden != 0) != override_limit.has_value()) {
        return UnexpectedReply(*client_, "RateLimitStore::Take", r);
      }
      d.allowed = allowed != 0;
      d.retry_at = d.allowed ? now : FromMicros(at);
      d.applied = override_limit ? *override_limit : limit;
      return d;
    });
  }

  Status Backoff(std::string_view key, TimePoint until, std::string_view reason) override {
    return internal::Guarded("RateLimitStore::Backoff", [&]() -> Status {
      JOBPACT_ASSIGN_OR_RETURN(std::string rate_key, Key(key));
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kBackoff, {rate_key, keys_.RateLimitIndex()},
                                 {std::to_string(CeilMicros(until)), std::string(reason),
                                  std::to_string(ToMicros(clock_->Now())), std::string(key)}));
      return ExpectOne("RateLimitStore::Backoff", r);
    });
  }

  Status SetOverride(std::string_view key, std::optional<RateLimit> limit, std::string_view actor,
                     std::string_view reason) override {
    return internal::Guarded("RateLimitStore::SetOverride", [&]() -> Status {
      JOBPACT_ASSIGN_OR_RETURN(std::string rate_key, Key(key));
      JOBPACT_RETURN_IF_ERROR(internal::CheckRateOverride(limit, actor, reason));
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r,
          client_->Eval(kSetOverride, {rate_key, keys_.RateLimitIndex()},
                        {limit ? internal::RateText(limit->per_second) : std::string(),
                         limit ? std::to_string(limit->burst) : std::string(), std::string(actor),
                         std::string(reason), std::to_string(ToMicros(clock_->Now())),
                         std::string(key)}));
      return ExpectOne("RateLimitStore::SetOverride", r);
    });
  }

  Status ClearBackoff(std::string_view key) override {
    return internal::Guarded("RateLimitStore::ClearBackoff", [&]() -> Status {
      JOBPACT_ASSIGN_OR_RETURN(std::string rate_key, Key(key));
      JOBPACT_ASSIGN_OR_RETURN(Reply r, client_->Eval(kClearBackoff, {rate_key},
                                                      {std::to_string(ToMicros(clock_->Now()))}));
      if (r.type == Reply::Type::kInteger && r.integer == 0) return internal::NoRateLimiter(key);
      return ExpectOne("RateLimitStore::ClearBackoff", r);
    });
  }

  Result<std::vector<RateLimiterState>> List(std::size_t limit) override {
    using Out = std::vector<RateLimiterState>;
    return internal::Guarded("RateLimitStore::List", [&]() -> Result<Out> {
      if (limit == 0) return Status::InvalidArgument("RateLimitStore::List: limit must be >= 1");
      const std::int64_t now = ToMicros(clock_->Now());
      JOBPACT_ASSIGN_OR_RETURN(
          Reply r, client_->Eval(kList, {keys_.RateLimitIndex()},
                                 {std::to_string(std::min<std::size_t>(limit, 1u << 30)),
                                  keys_.RateLimitKeyPrefix()}));
      constexpr std::size_t kRow = 1 + kListFields;
      if (r.type != Reply::Type::kArray || r.elements.size() % kRow != 0) {
        return UnexpectedReply(*client_, "RateLimitStore::List", r);
      }
      Out out;
      out.reserve(r.elements.size() / kRow);
      for (std::size_t i = 0; i < r.elements.size(); i += kRow) {
        const Reply* f = &r.elements[i];
        RateLimiterState s;
        std::int64_t tat = 0;
        std::int64_t backoff_until = 0;
        std::int64_t updated = 0;
        if (f[0].type != Reply::Type::kString || !IntOrEmpty(f[1], &tat) ||
            !IntOrEmpty(f[2], &backoff_until) || !ReplyOverride(f[4], f[5], &s.override_limit) ||
            !ReplyInt(f[8], &updated)) {
          return UnexpectedReply(*client_, "RateLimitStore::List", r);
        }
        s.key = f[0].str;
        s.tat = FromMicros(tat);
        if (backoff_until > now) {
          s.backoff_until = FromMicros(backoff_until);
          s.backoff_reason = f[3].str;
        }
        s.override_actor = f[6].str;
        s.override_reason = f[7].str;
        s.updated_at = FromMicros(updated);
        out.push_back(std::move(s));
      }
      return out;
    });
  }

 private:
  // The limiter's Redis key, after ValidateRateLimitKey (whose message the
  // caller gets for a bad key).
  Result<std::string> Key(std::string_view key) const {
    JOBPACT_RETURN_IF_ERROR(ValidateRateLimitKey(key));
    return keys_.RateLimit(key);
  }

  // An integer field, 0 when the field is absent (empty).
  static bool IntOrEmpty(const Reply& r, std::int64_t* out) {
    if (r.type == Reply::Type::kString && r.str.empty()) {
      *out = 0;
      return true;
    }
    return ReplyInt(r, out);
  }

  Status ExpectOne(std::string_view op, const Reply& r) const {
    if (r.type == Reply::Type::kInteger && r.integer == 1) return Status::Ok();
    return UnexpectedReply(*client_, op, r);
  }

  // Immutable after construction.
  const std::shared_ptr<RedisClient> client_;
  const RedisKeys keys_;
  const std::shared_ptr<Clock> clock_;
};

}  // namespace

std::shared_ptr<RateLimitStore> MakeRedisRateLimitStore(std::shared_ptr<RedisClient> client,
                                                        const RedisKeys& keys,
                                                        std::shared_ptr<Clock> clock) {
  return std::make_shared<RedisRateLimitStore>(std::move(client), keys, std::move(clock));
}

}  // namespace redis_internal
}  // namespace jobpact
