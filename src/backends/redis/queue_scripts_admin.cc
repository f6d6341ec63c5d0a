// The Redis queue store's operator-side scripts (queue_scripts_lua.h):
// cancel requests, record loads and listings, the dedup lookup, the age
// purge (DLQ and final jobs) and the count trim, stats, the control state.
#include "src/backends/redis/queue_scripts_lua.h"

namespace jobpact {
namespace redis_internal {

// RequestCancel. ARGV: id, expect status, epoch, token, updated_at, the
// audit line as a JSON string ('' none). Returns {0}, {5} or {10, st, ep}.
const char* const kCancel = R"lua(
local jk = P .. 'job:' .. ARGV[1]
local cur = redis.call('HMGET', jk, 'st', 'ep', 'tok', 'aud')
if not cur[1] then return {5} end
if cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3] or (cur[3] or '') ~= ARGV[4] then
  return {10, cur[1], cur[2]}
end
local aud = cur[4] or '[]'
if ARGV[6] ~= '' then
  if aud == '[]' then aud = '[' .. ARGV[6] .. ']' else aud = string.sub(aud, 1, -2) .. ',' .. ARGV[6] .. ']' end
end
redis.call('HSET', jk, 'cx', '1', 'upd', ARGV[5], 'aud', aud)
return {0}
)lua";

// Records. ARGV: with_history ('1'), then ids. Per id: false (none) or
// {fields, history (entries joined by newlines)}.
const char* const kLoad = R"lua(
local FH = {unpack(F)}
FH[#FH + 1] = 'hn'
local out = {}
for i = 2, #ARGV do
  local jk = P .. 'job:' .. ARGV[i]
  local f = redis.call('HMGET', jk, unpack(FH))
  if not f[5] then
    out[#out + 1] = false
  else
    local h = ''
    local names = hfields(f[#FH])
    if ARGV[1] == '1' and #names > 0 then
      local e = {}
      for _, x in ipairs(redis.call('HMGET', jk, unpack(names))) do
        if x then e[#e + 1] = x end
      end
      h = table.concat(e, '\n')
    end
    f[#FH] = nil
    out[#out + 1] = {f, h}
  end
end
return out
)lua";

// A page of job ids. ARGV: after ('' from the start), page size, status,
// type, queue ('' any). Returns {ids scanned, last id scanned, matches...}.
const char* const kScanIds = R"lua(
local min = '-'
if ARGV[1] ~= '' then min = '(' .. ARGV[1] end
local ids = redis.call('ZRANGEBYLEX', P .. 'job-ids', min, '+', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {#ids, ids[#ids] or ''}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', P .. 'job:' .. id, 'st', 't', 'q')
  if (ARGV[3] == '' or f[1] == ARGV[3]) and (ARGV[4] == '' or f[2] == ARGV[4]) and
     (ARGV[5] == '' or f[3] == ARGV[5]) then
    out[#out + 1] = id
  end
end
return out
)lua";

// A page of a finished_at index. ARGV: index ('dlq' / 'finished'), from
// (inclusive, '' none), before (exclusive, '' none), offset, count, status
// ('' any). Returns {entries scanned, matching ids...} in time order.
const char* const kScanTime = R"lua(
local lo, hi = '-inf', '+inf'
if ARGV[2] ~= '' then lo = fmt(msof(ARGV[2])) end
if ARGV[3] ~= '' then hi = fmt(msof(ARGV[3])) end
local r = redis.call('ZRANGEBYSCORE', P .. ARGV[1], lo, hi, 'WITHSCORES', 'LIMIT',
                     tonumber(ARGV[4]), tonumber(ARGV[5]))
local out = {#r / 2}
for i = 1, #r, 2 do
  local m = r[i]
  local at = mns(tonumber(r[i + 1]), m)
  if (ARGV[2] == '' or le(ARGV[2], at)) and (ARGV[3] == '' or not le(ARGV[3], at)) then
    local id = string.sub(m, 7)
    if ARGV[6] == '' or redis.call('HGET', P .. 'job:' .. id, 'st') == ARGV[6] then
      out[#out + 1] = id
    end
  end
end
return out
)lua";

// FindDuplicateJob. ARGV: dedup key, self id, since. The oldest other job
// with the key that is running, or succeeded at or after `since`; or false.
const char* const kFindDup = R"lua(
for _, m in ipairs(redis.call('ZRANGE', P .. 'dedup:' .. ARGV[1], 0, -1)) do
  local id = string.sub(m, 7)
  if id ~= ARGV[2] then
    local f = redis.call('HMGET', P .. 'job:' .. id, 'st', 'fin')
    if f[1] == 'running' or (f[1] == 'succeeded' and f[2] and f[2] ~= '' and le(ARGV[3], f[2])) then
      return id
    end
  end
end
return false
)lua";

// DeleteJobs, one chunk. ARGV: index ('dlq' / 'finished'), cutoff
// (exclusive), chunk. Returns {deleted, entries looked at}.
const char* const kPurge = R"lua(
local key = P .. ARGV[1]
local cm, cs = msof(ARGV[2]), tonumber(sub6(ARGV[2]))
local r = redis.call('ZRANGEBYSCORE', key, '-inf', fmt(cm), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local n = 0
for i = 1, #r, 2 do
  local m = r[i]
  if tonumber(r[i + 1]) == cm and tonumber(string.sub(m, 1, 6)) >= cs then break end
  redis.call('ZREM', key, m)
  local f = dropjob(string.sub(m, 7))
  if ARGV[1] == 'finished' and f[1] then
    redis.call('ZREM', P .. 'fin:' .. f[1] .. '|' .. (f[3] or ''), m)
  end
  n = n + 1
end
flush()
return {n, #r / 2}
)lua";

// DeleteSurplusJobs, one chunk. ARGV: status, keep, limit, dedup_floor.
// Per job type of the status (P fin-groups), deletes the oldest of
// P fin:<st>|<t> past its `keep` newest (ZRANGE from the front: by
// finished_at, then job id), at most `limit` in all, passing over a job
// with a dedup key not finished before `dedup_floor` (compared in whole
// ms: a job of that ms is kept). Returns how many.
const char* const kTrim = R"lua(
local pre, keep, limit = ARGV[1] .. '|', tonumber(ARGV[2]), tonumber(ARGV[3])
local floor = msof(ARGV[4])
local GS = P .. 'fin-groups'
local n = 0
for _, g in ipairs(redis.call('SMEMBERS', GS)) do
  if n >= limit then break end
  if string.sub(g, 1, #pre) == pre then
    local gk = P .. 'fin:' .. g
    local card = redis.call('ZCARD', gk)
    if card == 0 then
      redis.call('SREM', GS, g)
    elseif card > keep then
      local r = redis.call('ZRANGE', gk, 0, math.min(card - keep, limit - n) - 1, 'WITHSCORES')
      for i = 1, #r, 2 do
        local m = r[i]
        local id = string.sub(m, 7)
        local dk = nil
        if tonumber(r[i + 1]) >= floor then dk = redis.call('HGET', P .. 'job:' .. id, 'dk') end
        if not dk or dk == '' then
          redis.call('ZREM', gk, m)
          redis.call('ZREM', P .. 'finished', m)
          dropjob(id)
          n = n + 1
        end
      end
    end
  end
end
flush()
return n
)lua";

// ReadStats. ARGV: now. Promotes due jobs, then returns {the counters
// (flat), the pairs, per pair the time of its oldest ready job ('' none)}.
// The oldest of a pair is the first of some priority band of one of its
// ready sets (no tenant's and each tenant's with ready jobs): one seek per
// band in use per set, never a scan of the jobs.
const char* const kStats = R"lua(
promote(ARGV[1])
flush()
local ps = redis.call('SMEMBERS', P .. 'job-pairs')
local oldest = {}
for _, p in ipairs(ps) do
  local keys = {P .. 'ready:' .. p}
  for _, tn in ipairs(redis.call('ZRANGE', P .. 'tenants:' .. p, 0, -1)) do
    keys[#keys + 1] = P .. 'ready:' .. p .. '|' .. tn
  end
  local best = ''
  for _, key in ipairs(keys) do
    local lo = '-inf'
    for _ = 1, 2001 do
      local r = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      if #r == 0 then break end
      local sc = tonumber(r[2])
      local band = math.floor(sc / BAND)
      local at = mns(sc - band * BAND, r[1])
      if best == '' or le(at, best) then best = at end
      lo = fmt((band + 1) * BAND)
    end
  end
  oldest[#oldest + 1] = best
end
return {redis.call('HGETALL', P .. 'queue-stats'), ps, oldest}
)lua";

// WriteControl. ARGV: 'set' / 'clear', the rule's field, its JSON, kind,
// subject, limit, audit line, audit lines kept. {0} or {5} (no such rule).
const char* const kControl = R"lua(
local C = P .. 'control'
local kind, subject = ARGV[4], ARGV[5]
if ARGV[1] == 'set' then
  redis.call('HSET', C, ARGV[2], ARGV[3])
  if kind == 'pause_type' then redis.call('SADD', P .. 'control-paused-types', subject)
  elseif kind == 'pause_queue' then redis.call('SADD', P .. 'control-paused-queues', subject)
  elseif kind == 'concurrency_limit' then redis.call('HSET', P .. 'control-limits', subject, ARGV[6])
  elseif kind == 'max_queue_depth' then redis.call('HSET', P .. 'control-max-depth', subject, ARGV[6])
  elseif kind == 'tenant_concurrency_limit' then
    redis.call('HSET', P .. 'control-limits', '|' .. subject, ARGV[6])
  end
else
  if redis.call('HDEL', C, ARGV[2]) == 0 then return {5} end
  if kind == 'pause_type' then redis.call('SREM', P .. 'control-paused-types', subject)
  elseif kind == 'pause_queue' then redis.call('SREM', P .. 'control-paused-queues', subject)
  elseif kind == 'concurrency_limit' then redis.call('HDEL', P .. 'control-limits', subject)
  elseif kind == 'max_queue_depth' then redis.call('HDEL', P .. 'control-max-depth', subject)
  elseif kind == 'tenant_concurrency_limit' then
    redis.call('HDEL', P .. 'control-limits', '|' .. subject)
  end
end
redis.call('RPUSH', P .. 'control-audit', ARGV[7])
redis.call('LTRIM', P .. 'control-audit', -tonumber(ARGV[8]), -1)
return {0}
)lua";

}  // namespace redis_internal
}  // namespace jobpact
