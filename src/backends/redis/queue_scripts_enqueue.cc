// The Redis queue store's enqueue script (queue_scripts_lua.h): InsertJobs,
// a batch stored all or nothing, with dedup and the maximum queue depths.
#include "src/backends/redis/queue_scripts_lua.h"

namespace jobpact {
namespace redis_internal {

// InsertJobs. ARGV: window_start ('' no dedup), n, then per job 19 values
//   id dk env q t vis enq st att upd ep d ixk ixm ixscore rsc
//   history_entry tn flag
// and, where flag has bit 1, 6 more: fin cp tok lexp aud cx; then, where
// it has bit 2, 2 more: lk ik (the lock and idempotency keys, '' none,
// kept for the lease step to take them: DequeueRequest::take_guards; absent
// for none, and for every job stored before they were kept, whose guards
// the runner takes the usual way). tn: the tenant
// (TenantPart, '' none), which also picks the ready set (ixk is
// ready:<q>|<t> for every tenant; the script adds |<tn>). Flag '0': those
// are at their defaults ('' '' '' '0' '[]' '0'), as for almost every new
// job, and left absent (every reader takes absent as the default), as are
// dk, enq and rsc where not needed (no dedup key; ready at once). Returns
// {6, id} if an id is taken (nothing stored), else {0, then per job
// dup(0/1), id, status}, or {8, queue, depth, adding, limit} if a queue's
// maximum depth refuses the call (nothing stored).
const char* const kInsert = R"lua(
local ws = ARGV[1]
local n = tonumber(ARGV[2])
-- Where each job's values start.
local at = {}
do
  local o = 3
  for i = 1, n do
    at[i] = o
    local fl = tonumber(ARGV[o + 18])
    o = o + 19
    if fl % 2 == 1 then o = o + 6 end
    if fl >= 2 then o = o + 2 end
  end
end
-- One EXISTS per 256 ids; only where one is taken, which.
for c = 1, n, 256 do
  local ks = {}
  for i = c, math.min(n, c + 255) do ks[#ks + 1] = P .. 'job:' .. ARGV[at[i]] end
  if redis.call('EXISTS', unpack(ks)) > 0 then
    for i = c, math.min(n, c + 255) do
      local id = ARGV[at[i]]
      if redis.call('EXISTS', P .. 'job:' .. id) == 1 then return {6, id} end
    end
  end
end
-- Backpressure: a queue with a maximum depth (control-max-depth) refuses
-- the whole call if its waiting jobs (queued and retry_scheduled, from
-- queue-stats) plus this call's would pass it; nothing is stored then.
if redis.call('EXISTS', P .. 'control-max-depth') == 1 then
  local qs, adding = {}, {}
  for i = 1, n do
    local q = ARGV[at[i] + 3]
    if q ~= '' then
      if not adding[q] then
        adding[q] = 0
        qs[#qs + 1] = q
      end
      adding[q] = adding[q] + 1
    end
  end
  for _, q in ipairs(qs) do
    local max = redis.call('HGET', P .. 'control-max-depth', q)
    if max then
      local d = redis.call('HMGET', P .. 'queue-stats', 'queued|' .. q, 'retry_scheduled|' .. q)
      local depth = (tonumber(d[1]) or 0) + (tonumber(d[2]) or 0)
      if depth + adding[q] > tonumber(max) then
        return {8, q, tostring(depth), tostring(adding[q]), max}
      end
    end
  end
end
local out = {0}
local seen = {}
for i = 1, n do
  local o = at[i]
  local id, dk = ARGV[o], ARGV[o + 1]
  local dup = nil
  if ws ~= '' and dk ~= '' then
    local wm, wsub = msof(ws), tonumber(sub6(ws))
    local r = redis.call('ZREVRANGEBYSCORE', P .. 'dedup:' .. dk, '+inf', fmt(wm), 'WITHSCORES')
    for j = 1, #r, 2 do
      local m = r[j]
      if tonumber(r[j + 1]) == wm and tonumber(string.sub(m, 1, 6)) <= wsub then break end
      local other = string.sub(m, 7)
      local st = redis.call('HGET', P .. 'job:' .. other, 'st')
      if st and st ~= 'discarded' and st ~= 'failed' and st ~= 'dead_lettered' then
        dup = {other, st}
        break
      end
    end
  end
  if dup then
    out[#out + 1] = 1
    out[#out + 1] = dup[1]
    out[#out + 1] = dup[2]
  else
    local jk = P .. 'job:' .. id
    local q, t, enq, st = ARGV[o + 3], ARGV[o + 4], ARGV[o + 6], ARGV[o + 7]
    local ixk, tn = ARGV[o + 12], ARGV[o + 17]
    local ready = string.sub(ixk, 1, 6) == 'ready:'
    if ready and tn ~= '' then ixk = ixk .. '|' .. tn end
    redis.call('HSET', jk, 'env', ARGV[o + 2], 'q', q, 't', t, 'vis', ARGV[o + 5],
      'st', st, 'att', ARGV[o + 8], 'upd', ARGV[o + 9], 'ep', ARGV[o + 10], 'd', ARGV[o + 11],
      'ixk', ixk, 'ixm', ARGV[o + 13], 'h1', ARGV[o + 16], 'hn', '1')
    -- Ready at once: rsc is only read to move the job from the scheduled
    -- set, and every write that schedules it sends its own.
    if dk ~= '' then redis.call('HSET', jk, 'dk', dk, 'enq', enq) end
    if not ready then redis.call('HSET', jk, 'rsc', ARGV[o + 15]) end
    if tn ~= '' then
      redis.call('HSET', jk, 'tn', tn)
      if ready then touch(q, t, tn) end
    end
    local fl = tonumber(ARGV[o + 18])
    local g = o + 19
    if fl % 2 == 1 then
      redis.call('HSET', jk, 'fin', ARGV[o + 19], 'cp', ARGV[o + 20], 'tok', ARGV[o + 21],
        'lexp', ARGV[o + 22], 'aud', ARGV[o + 23], 'cx', ARGV[o + 24])
      g = o + 25
    end
    if fl >= 2 then
      local kv = {}
      if ARGV[g] ~= '' then kv[#kv + 1] = 'lk'; kv[#kv + 1] = ARGV[g] end
      if ARGV[g + 1] ~= '' then kv[#kv + 1] = 'ik'; kv[#kv + 1] = ARGV[g + 1] end
      redis.call('HSET', jk, unpack(kv))
    end
    if ixk ~= '' then
      zset(P .. ixk, ARGV[o + 13], ARGV[o + 14])
      if ready then WOKEN = WOKEN + 1 end
    end
    zset(P .. 'job-ids', id, '0')
    if q ~= '' and not seen[q .. '|' .. t] then
      seen[q .. '|' .. t] = true
      redis.call('SADD', P .. 'job-pairs', q .. '|' .. t)
    end
    if dk ~= '' then redis.call('ZADD', P .. 'dedup:' .. dk, fmt(msof(enq)), sub6(enq) .. id) end
    count(st, q, t, 1)
    out[#out + 1] = 0
    out[#out + 1] = id
    out[#out + 1] = st
  end
end
flush()
return out
)lua";

}  // namespace redis_internal
}  // namespace jobpact
