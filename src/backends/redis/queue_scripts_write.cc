// The Redis queue store's write scripts (queue_scripts_lua.h): one
// conditional write of a JobChange -- a completion, a retry, a lease
// recovery's write -- with its transactional effect and idempotency claim,
// alone or several in one call (WriteJobs).
#include "src/backends/redis/queue_scripts_lua.h"

namespace jobpact {
namespace redis_internal {

// One conditional write. ARGV:
//   1 id, 2 expect status ('': a quarantine -- unconditional, queue and
//   type cleared, history replaced), 3 expect epoch, 4 expect token, 5
//   expired_by ('' or a time: the stored lease must have expired by then),
//   6..16 st att upd fin ep cp tok lexp aud cx d, 17 ixk, 18 ixm,
//   19 ixscore, 20 rsc ('' keep), 21 history entry ('' none), 22 number of
//   effect ops, then 4 per op: name key a1 a2, then the idempotency claim
//   to complete with the write (a transactional success): its record key
//   ('' none), now and expiry in microseconds, gc ms, the index key, the
//   key's name, the result.
// Then the completion's guards (Completion::guards), applied by
// guarded(): '' none, or '1' and: the claim's action ('' keep, 'r' record,
// 'd' drop), its record key, the lock key to release ('' none), now in
// microseconds, the record's expiry and gc ms, the result, the idempotency
// index and the key's name, the lock index and the lock's name. The owner
// of both is the lease token (ARGV 4).
// Returns {0}; {5} unknown job; {10, status, epoch[, 'renewed']} stale;
// {9, message} an effect op that cannot apply (nothing written); {11,
// state, owner} the claim is another owner's (nothing written); {12,
// state, owner, key} the claim to record is no longer this delivery's
// (nothing of the job written).
const char* const kWrite = R"lua(
local TYPES = nil
local FG = {}  -- The fin-groups this call added to already.
local function one(base)
local A = ARGV
local id = A[base + 1]
local jk = P .. 'job:' .. id
local cur = redis.call('HMGET', jk, 'st', 'ep', 'tok', 'lexp', 'q', 't', 'hn', 'cx', 'aud', 'tn')
if not cur[1] then return {5} end
-- A quarantine (no status expected) is unconditional: no state machine to
-- consult; the job keeps no queue and no type, so it can never run.
local quar = A[base + 2] == ''
if not quar then
  if cur[1] ~= A[base + 2] or cur[2] ~= A[base + 3] or (cur[3] or '') ~= A[base + 4] then
    return {10, cur[1], cur[2]}
  end
  if A[base + 5] ~= '' and not le(cur[4] or '0', A[base + 5]) then return {10, cur[1], cur[2], 'renewed'} end
end
local nops = tonumber(A[base + 22])
-- The claim of a transactional success, held by this delivery (the lease
-- token is the claim's owner): completed in this step, so no crash can
-- separate the effect from the record. Another owner's: nothing written.
local io = 23 + nops * 4
local ik = A[base + io]
local claim = nil
if ik and ik ~= '' then
  claim = redis.call('HMGET', ik, 'state', 'owner')
  if claim[1] and claim[2] ~= A[base + 4] then return {11, claim[1], claim[2]} end
end
-- The transactional effect: every op is checked before anything is written
-- (a script is not rolled back on an error), then applied with the write.
if nops > 0 and not TYPES then
  TYPES = {set = true, del = true, pexpire = true, incrby = 'string', hset = 'hash',
           hincrby = 'hash', sadd = 'set', srem = 'set', rpush = 'list'}
end
for i = 0, nops - 1 do
  local o = 23 + i * 4
  local op, key = A[base + o], A[base + o + 1]
  local want = TYPES[op]
  if not want then return {9, 'effect op ' .. (i + 1) .. ': unknown op ' .. op} end
  if want ~= true then
    local ty = redis.call('TYPE', key)['ok']
    if ty ~= 'none' and ty ~= want then
      return {9, 'effect op ' .. (i + 1) .. ' (' .. op .. '): key ' .. key .. ' holds a ' .. ty}
    end
    local num = nil
    if op == 'incrby' then num = redis.call('GET', key) end
    if op == 'hincrby' then num = redis.call('HGET', key, A[base + o + 2]) end
    if num and not string.match(num, '^%-?%d+$') then
      return {9, 'effect op ' .. (i + 1) .. ' (' .. op .. '): key ' .. key .. ' is not an integer'}
    end
  end
end
if claim and claim[1] == 'p' then
  redis.call('HSET', ik, 'state', 'c', 'result', A[base + io + 6], 'exp', A[base + io + 2])
  redis.call('PEXPIRE', ik, A[base + io + 3])
  redis.call('ZADD', A[base + io + 4], A[base + io + 2], A[base + io + 5])
end
for i = 0, nops - 1 do
  local o = 23 + i * 4
  local op, key, a1, a2 = A[base + o], A[base + o + 1], A[base + o + 2], A[base + o + 3]
  if op == 'set' then
    if a2 ~= '' then redis.call('SET', key, a1, 'PX', a2) else redis.call('SET', key, a1) end
  elseif op == 'del' then redis.call('DEL', key)
  elseif op == 'pexpire' then redis.call('PEXPIRE', key, a1)
  elseif op == 'incrby' then redis.call('INCRBY', key, a1)
  elseif op == 'hset' then redis.call('HSET', key, a1, a2)
  elseif op == 'hincrby' then redis.call('HINCRBY', key, a1, a2)
  elseif op == 'sadd' then redis.call('SADD', key, a1)
  elseif op == 'srem' then redis.call('SREM', key, a1)
  elseif op == 'rpush' then redis.call('RPUSH', key, a1)
  end
end
-- Where it is indexed: a running job in the lease set by its expiry (the
-- lease script writes no ixk and ixm), any other where ixk and ixm say.
local ixk, ixm
if cur[1] == 'running' then
  ixk = 'leases'
  ixm = sub6(cur[4] or '0') .. id
else
  local ix = redis.call('HMGET', jk, 'ixk', 'ixm')
  ixk, ixm = ix[1], ix[2]
end
local aud, cx = A[base + 14], A[base + 15]
if not quar and A[base + 2] == 'running' then
  -- An operator's cancel may have added to them since the change was read.
  aud = cur[9] or '[]'
  if cur[8] == '1' then cx = '1' end
end
local q, t, tn = cur[5], cur[6], cur[10]
-- A ready set is the job's tenant's (the job's tn: absent for no tenant).
local nixk = A[base + 17]
local nready = string.sub(nixk, 1, 6) == 'ready:'
if nready and tn then nixk = nixk .. '|' .. tn end
local kv = {'st', A[base + 6], 'att', A[base + 7], 'upd', A[base + 8], 'fin', A[base + 9],
            'tok', A[base + 12], 'lexp', A[base + 13], 'd', A[base + 16], 'ixk', nixk,
            'ixm', A[base + 18]}
if A[base + 10] ~= cur[2] then kv[#kv + 1] = 'ep'; kv[#kv + 1] = A[base + 10] end
-- Written only where they change (Lua strings are interned: == is cheap).
if aud ~= cur[9] then kv[#kv + 1] = 'aud'; kv[#kv + 1] = aud end
if cx ~= cur[8] then kv[#kv + 1] = 'cx'; kv[#kv + 1] = cx end
if A[base + 11] ~= '' then kv[#kv + 1] = 'cp'; kv[#kv + 1] = A[base + 11] end
if A[base + 20] ~= '' then kv[#kv + 1] = 'rsc'; kv[#kv + 1] = A[base + 20] end
local hn = cur[7]
if quar then
  -- The history is replaced: the quarantine's entry is the first.
  local old = hfields(hn)
  if #old > 0 then redis.call('HDEL', jk, unpack(old)) end
  hn = '0'
  q, t = '', ''
  kv[#kv + 1] = 'q'; kv[#kv + 1] = q
  kv[#kv + 1] = 't'; kv[#kv + 1] = t
end
local drop = nil
if A[base + 21] ~= '' then drop = hpush(kv, hn, A[base + 21]) end
redis.call('HSET', jk, unpack(kv))
if drop then redis.call('HDEL', jk, drop) end
if ixk and ixk ~= '' then
  zset(P .. ixk, ixm, false)
  if tn and string.sub(ixk, 1, 6) == 'ready:' then touch(cur[5], cur[6], tn) end
end
if ixk == 'finished' then zset(P .. 'fin:' .. cur[1] .. '|' .. (cur[6] or ''), ixm, false) end
if nixk == 'finished' then
  local g = A[base + 6] .. '|' .. t
  zset(P .. 'fin:' .. g, A[base + 18], A[base + 19])
  if not FG[g] then
    FG[g] = true
    redis.call('SADD', P .. 'fin-groups', g)
  end
end
if nixk ~= '' then
  zset(P .. nixk, A[base + 18], A[base + 19])
  if nready then
    WOKEN = WOKEN + 1
    if tn then touch(q, t, tn) end
  end
end
count(cur[1], cur[5], cur[6], -1, tn)
count(A[base + 6], q, t, 1, tn)
return {0}
end
-- one() with the write's guards: the claim recorded first (so a stale
-- write still leaves it recorded; a claim no longer held stops the write),
-- then the lock released and a dropped claim deleted whatever became of
-- the write.
local function guarded(base)
local A = ARGV
local io = 23 + tonumber(A[base + 22]) * 4
local g = base + io + ((A[base + io] ~= '') and 7 or 1)
if (A[g] or '') == '' then return one(base) end
local owner = A[base + 4]
local act, rk, lk = A[g + 1], A[g + 2], A[g + 3]
local r = nil
if act == 'r' then
  local h = redis.call('HMGET', rk, 'state', 'owner', 'exp')
  if h[1] ~= 'p' or h[2] ~= owner or tonumber(h[3]) <= tonumber(A[g + 4]) then
    r = {12, h[1] or '', h[2] or '', A[g + 9]}
  else
    redis.call('HSET', rk, 'state', 'c', 'result', A[g + 7], 'exp', A[g + 5])
    redis.call('PEXPIRE', rk, A[g + 6])
    redis.call('ZADD', A[g + 8], A[g + 5], A[g + 9])
  end
end
if not r then r = one(base) end
if lk ~= '' and redis.call('HGET', lk, 'owner') == owner then
  redis.call('DEL', lk)
  redis.call('ZREM', A[g + 10], A[g + 11])
end
if act == 'd' then
  local h = redis.call('HMGET', rk, 'state', 'owner')
  if h[1] == 'p' and h[2] == owner then
    redis.call('DEL', rk)
    redis.call('ZREM', A[g + 8], A[g + 9])
  end
end
return r
end
)lua";

// One write: ARGV as above.
const char* const kWriteOne = R"lua(
local r = guarded(0)
flush()
return r
)lua";

// Several writes in one call, each checked and written alone (a refused
// one leaves the others as they are). ARGV: n, then per write the number
// of its arguments and its arguments as above. Returns one reply per write.
const char* const kWriteMany = R"lua(
local out = {}
local pos = 2
for i = 1, tonumber(ARGV[1]) do
  out[i] = guarded(pos)
  pos = pos + 1 + tonumber(ARGV[pos])
end
flush()
return out
)lua";

}  // namespace redis_internal
}  // namespace jobpact
