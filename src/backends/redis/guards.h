// Private: what the Redis lock and idempotency stores share with the queue
// store, which takes a job's lock and claim in one script
// (QueueBackend::AcquireLockAndClaim) and releases and records them in its
// completion script (Completion::guards; the Lua of that is the write
// script's, queue_scripts_write.cc). One home for the Lua of taking a lock
// and a claim, and for reading its replies, so every path applies the same
// rules (layout of the hashes: lock_store.cc, idempotency_store.cc).
#ifndef JOBPACT_SRC_BACKENDS_REDIS_GUARDS_H_
#define JOBPACT_SRC_BACKENDS_REDIS_GUARDS_H_

#include <string_view>

#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/result.h"
#include "src/backends/redis/client.h"

// Lua: lock_acquire(lock, fence, index, owner, now, exp, gc_ms, name) takes
// the lock hash `lock` for `owner` until `exp` if free or expired (a new
// fencing token from the counter `fence`), or extends the owner's own live
// lock (same token); it indexes `name` in `index` by exp.
// -> {1, owner, token, exp} taken; {0, holder, token, exp} another owner's.
#define JOBPACT_REDIS_LOCK_ACQUIRE_LUA                                          \
  "local function lock_acquire(lk, fence, index, owner, now, exp, gc, name)\n" \
  "  local h = redis.call('HMGET', lk, 'owner', 'token', 'exp')\n"               \
  "  if h[1] and tonumber(h[3]) > tonumber(now) then\n"                         \
  "    if h[1] ~= owner then return {0, h[1], h[2], h[3]} end\n"                \
  "    redis.call('HSET', lk, 'exp', exp)\n"                                    \
  "    redis.call('PEXPIRE', lk, gc)\n"                                         \
  "    redis.call('ZADD', index, exp, name)\n"                                  \
  "    return {1, h[1], h[2], exp}\n"                                           \
  "  end\n"                                                                     \
  "  -- Free or expired: a new acquisition, with a new token even for the\n"    \
  "  -- same owner (someone may have written with a newer token between).\n"   \
  "  local token = redis.call('INCR', fence)\n"                                 \
  "  redis.call('HSET', lk, 'owner', owner, 'token', token, 'exp', exp)\n"      \
  "  redis.call('PEXPIRE', lk, gc)\n"                                           \
  "  redis.call('ZADD', index, exp, name)\n"                                    \
  "  redis.call('ZREMRANGEBYSCORE', index, '-inf', now)\n"                      \
  "  return {1, owner, token, exp}\n"                                           \
  "end\n"

// Lua: claim(record, index, owner, now, exp, gc_ms, key) claims the
// idempotency record hash `record` for `owner` until `exp` if missing or
// expired, or extends the owner's own live claim; it indexes `key` in
// `index` by exp.
// -> {kind, state, owner, result, exp}; kind 0 claimed, 1 completed,
//    2 in progress (another owner).
#define JOBPACT_REDIS_CLAIM_LUA                                                   \
  "local function claim(rk, index, owner, now, exp, gc, key)\n"                   \
  "  local h = redis.call('HMGET', rk, 'state', 'owner', 'result', 'exp')\n"      \
  "  if h[1] and tonumber(h[4]) > tonumber(now) then\n"                           \
  "    if h[1] == 'c' then return {1, h[1], h[2], h[3] or '', h[4]} end\n"        \
  "    if h[2] ~= owner then return {2, h[1], h[2], '', h[4]} end\n"              \
  "    redis.call('HSET', rk, 'exp', exp)\n"                                      \
  "    redis.call('PEXPIRE', rk, gc)\n"                                           \
  "    redis.call('ZADD', index, exp, key)\n"                                     \
  "    return {0, 'p', owner, '', exp}\n"                                         \
  "  end\n"                                                                       \
  "  -- Missing or expired: a fresh claim.\n"                                     \
  "  redis.call('DEL', rk)\n"                                                     \
  "  redis.call('HSET', rk, 'state', 'p', 'owner', owner, 'exp', exp)\n"          \
  "  redis.call('PEXPIRE', rk, gc)\n"                                             \
  "  redis.call('ZADD', index, exp, key)\n"                                       \
  "  return {0, 'p', owner, '', exp}\n"                                           \
  "end\n"

namespace jobpact {
namespace redis_internal {

// A lock_acquire reply for `key`: the lease, or kAborted naming the holder.
// `op` names the operation in an unexpected reply's error.
Result<LockLease> ParseAcquireReply(const RedisClient& client, std::string_view op,
                                    std::string_view key, const Reply& r);
// A claim reply for `key`.
Result<ClaimOutcome> ParseClaimReply(const RedisClient& client, std::string_view op,
                                     std::string_view key, const Reply& r);

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_GUARDS_H_
