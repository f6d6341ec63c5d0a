// The Lua scripts of the Redis queue store, and its part of the key table
// (docs/backends.md has the locks' and claims'), with P = "jobpact:{<ns>}:"
// (KEYS[1]):
//
//   P job:<id>          hash: the record. `env` (the envelope JSON, written
//                       once: no change alters it but attempt and
//                       max_attempts), `d` (every value only the C++ side
//                       reads, packed by queue_codec.cc: enqueued, ready and
//                       finished times, max_attempts, counters, failure,
//                       reason, result, raw input -- one opaque field each
//                       write replaces), the fields the scripts check or
//                       change on their own (st att ep upd tok lexp cp aud
//                       cx fin), the fixed ones they need (q t vis dk enq
//                       tn),
//                       and where the job is indexed (ixk: the index key
//                       after P, ixm: its member there; rk, rsc: its ready
//                       set and score, for the move from scheduled to
//                       ready). dk fin cp tok lexp aud cx tn may be absent,
//                       meaning '' / '' / '' / '' / '0' / '[]' / '0' / ''.
//                       tn: the tenant_id as TenantPart escapes it (bytes
//                       outside [A-Za-z0-9._:-] as %XX), written at enqueue
//                       for a job with a tenant; absent for none -- and for
//                       every job stored before tenants were kept, which
//                       so count as no tenant's: no migration.
//                       Its history is in it too: entry n is field `h<n>`
//                       (JSON), `hn` the count, the newest kMaxHistory kept
//                       -- appended as one more pair of the HSET every
//                       change makes anyway and never read back by a
//                       change, so a transition costs no extra call and a
//                       job one key.
//   P ready:<q>|<t>     zset per (queue, job type) -- '|' is in no safe name,
//                       so the pair is unambiguous: ready jobs of no tenant
//                       (the key every job had before tenants were kept).
//   P ready:<q>|<t>|<tn>  zset per (queue, job type, tenant): a tenant's
//                       ready jobs (tn escaped: no '|' in it either).
//   P tenants:<q>|<t>   zset: the tenants (tn) with ready jobs of (q, t),
//                       scored (priority band of the head) * 2^42 + turn.
//   P tenant-turns      hash: per queue its turn counter (field <q>) and
//                       the turn each tenant was last served at (<q>|<tn>,
//                       <q>| for no tenant): the lease step's rotation.
//   P tenant-running    hash: running jobs per "<q>|<tn>" and of all
//                       tenants per "<q>" (the per-tenant cap: no
//                       tenant's are running|<q> less "<q>"), a field
//                       removed at 0.
//   P scheduled         zset: queued / retry_scheduled jobs not ready yet.
//   P leases            zset: running jobs by lease expiry.
//   P dlq, P finished   zsets: DLQ entries and final jobs by finished_at.
//   P fin:<st>|<t>      zset per (final status, job type): its final jobs,
//                       member and score as in P finished (the count
//                       retention, TrimFinished, keeps the newest N of
//                       each). Written by the write script since session
//                       14: a job finished before is in P finished alone,
//                       so it is purged by age only (nothing else differs).
//   P fin-groups        set: the "<st>|<t>" of the P fin zsets (a group
//                       is dropped from it when the trim finds it empty).
//   P job-ids           zset (all scores 0): every job id, by id (listing).
//   P job-pairs         set: every "<q>|<t>" that has a ready zset.
//   P dedup:<key>       zset: the jobs carrying a dedup key, by enqueue time.
//   P queue-stats       hash: counters the scripts keep ("<status>|<queue>",
//                       "rt|<type>": running per type) -- Stats() never
//                       scans the jobs.
//   P lease-seq         counter: makes every lease token unique.
//   P wake              list: a token per job made ready (at most 256), which
//                       an idle worker's BLPOP takes (WaitForWork); cleared
//                       when a lease of every queue finds nothing ready.
//   P control, P control-audit, P control-paused-types,
//   P control-paused-queues, P control-limits (by type "<t>", and the
//   per-tenant caps by queue "|<q>"), P control-max-depth, P policies:
//   control state.
//   P app:<key>         the application's keys a transactional effect writes
//                       (jobpact/redis/redis_effect.h).
//
// Redis Cluster: a script declares only KEYS[1] (the prefix, which hashes
// by the namespace's tag) and addresses the rest from it; every key it
// builds carries the same tag, so it is in the same slot on the same node.
//
// Times are nanoseconds since the Unix epoch as decimal strings (Lua numbers
// are doubles: 2^53 ns is only 104 days). Zset scores are milliseconds
// (exact in a double until year 287396); every member starts with the six
// sub-millisecond digits of its time, and Redis orders equal scores by
// member bytes, so (score, member) orders by the exact time, then job id.
// A ready score is (1000 - priority) * 2^42 + ready_at in ms: 2001
// priorities times 2^42 ms (year 2109) stays below 2^53.
#include "src/backends/redis/queue_scripts.h"

#include <string>

#include "jobpact/queue_backend.h"

namespace jobpact {
namespace redis_internal {
namespace {

// Shared by every script (prepended to each).
const char* const kLib = R"lua(
local P = KEYS[1]
local BAND = 4398046511104
local function fmt(x) return string.format('%d', x) end
-- The last six digits (sub-millisecond part) of a time, zero-padded.
local function sub6(ns)
  local n = #ns
  if n >= 6 then return string.sub(ns, n - 5) end
  return string.rep('0', 6 - n) .. ns
end
-- The whole milliseconds of a time.
local function msof(ns)
  local n = #ns
  if n <= 6 then return 0 end
  return tonumber(string.sub(ns, 1, n - 6))
end
-- The time (ns string) of a zset entry: score ms and member's six digits.
local function mns(ms, m)
  if ms == 0 then return fmt(tonumber(string.sub(m, 1, 6))) end
  return fmt(ms) .. string.sub(m, 1, 6)
end
-- a <= b, both times.
local function le(a, b)
  local am, bm = msof(a), msof(b)
  if am ~= bm then return am < bm end
  return tonumber(sub6(a)) <= tonumber(sub6(b))
end
-- a + b, both times (or durations).
local function addns(a, b)
  local ms = msof(a) + msof(b)
  local s = tonumber(sub6(a)) + tonumber(sub6(b))
  if s >= 1000000 then ms = ms + 1; s = s - 1000000 end
  if ms == 0 then return fmt(s) end
  return fmt(ms) .. string.format('%06d', s)
end
-- a < b by bytes (Lua's < follows the server's locale collation).
local function bless(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
-- Counters: "<status>|<queue>" per status and queue ('' for quarantined
-- input), "rt|<type>" running jobs per type (concurrency limits), and in
-- tenant-running "<queue>|<tn>" running jobs per tenant of a queue and
-- "<queue>" all tenants' (the per-tenant cap; no tenant's are the queue's
-- running less those, so a job without one costs no count; a field at 0
-- is removed). Summed here and applied by
-- flush() before the script returns: one HINCRBY per counter a call
-- changes, not two or three per job.
local DELTA, TDELTA = {}, {}
local CK = {}  -- CK[st][q]: the counter "<st>|<q>", built once a call.
local TK = {}  -- TK[q][tn]: "<q>|<tn>", likewise.
local function count(st, q, t, d, tn)
  local byq = CK[st]
  if not byq then
    byq = {}
    CK[st] = byq
  end
  local qq = q or ''
  local k = byq[qq]
  if not k then
    k = st .. '|' .. qq
    byq[qq] = k
  end
  DELTA[k] = (DELTA[k] or 0) + d
  if st == 'running' and q and q ~= '' then
    k = 'rt|' .. t
    DELTA[k] = (DELTA[k] or 0) + d
    if tn and tn ~= '' then
      local tq = TK[q]
      if not tq then
        tq = {}
        TK[q] = tq
      end
      k = tq[tn]
      if not k then
        k = q .. '|' .. tn
        tq[tn] = k
      end
      TDELTA[k] = (TDELTA[k] or 0) + d
      TDELTA[q] = (TDELTA[q] or 0) + d
    end
  end
end
-- Tenants (fairness and the per-tenant cap, issue 11). A job's tenant as
-- the scripts hold it is its field tn (TenantPart: safe-name bytes, the
-- rest %XX), absent for no tenant -- as for every job stored before
-- tenants were kept, which so stay in the ready sets they are in. Ready
-- jobs of no tenant are in ready:<q>|<t>, a tenant's in ready:<q>|<t>|<tn>
-- (q and t hold no '|', tn none either: unambiguous).
-- tenants:<q>|<t> holds each tenant (not '') with ready jobs of (q, t),
-- scored (head's priority band) * BAND + turn; tenant-turns holds per
-- queue its turn counter (field <q>) and the turn each tenant was last
-- served at (<q>|<tn>; <q>| for no tenant): the tenant served least
-- recently goes first within a priority, across every process.
local function rkey(q, t, tn)
  if tn and tn ~= '' then return 'ready:' .. q .. '|' .. t .. '|' .. tn end
  return 'ready:' .. q .. '|' .. t
end
local TT = P .. 'tenant-turns'
-- Per-tenant ready sets whose head may have changed: flush() recomputes
-- their entry in tenants:<q>|<t> once the index changes are applied.
local TOUCH, TOUCHK = {}, {}
local function touch(q, t, tn)
  local rk = rkey(q, t, tn)
  if not TOUCH[rk] then
    TOUCH[rk] = {q, t, tn}
    TOUCHK[#TOUCHK + 1] = rk
  end
end
-- Turns this call knows ("<q>|<tn>": last served at) and queues' counters.
local TURN, CTR = {}, {}
local function counter(q)
  local c = CTR[q]
  if not c then
    c = tonumber(redis.call('HGET', TT, q)) or 0
    CTR[q] = c
  end
  return c
end
-- A tenant entering the set joins at the queue's current turn (behind
-- every tenant waiting since an earlier one); one staying keeps its turn
-- (raised to the one this call knows) with its head's band.
local function retenant()
  for _, rk in ipairs(TOUCHK) do
    local u = TOUCH[rk]
    local q, t, tn = u[1], u[2], u[3]
    local tk = P .. 'tenants:' .. q .. '|' .. t
    local h = redis.call('ZRANGE', P .. rk, 0, 0, 'WITHSCORES')
    if #h == 0 then
      redis.call('ZREM', tk, tn)
    else
      local band = math.floor(tonumber(h[2]) / BAND)
      local old = tonumber(redis.call('ZSCORE', tk, tn))
      local turn
      if old then turn = old % BAND else turn = counter(q) end
      local a = TURN[q .. '|' .. tn]
      if a and a > turn then turn = a end
      local sc = band * BAND + turn
      if sc ~= old then redis.call('ZADD', tk, fmt(sc), tn) end
    end
  end
  TOUCH, TOUCHK = {}, {}
end
-- Index changes: zset(key, member, score) adds (or moves) a member,
-- zset(key, member, false) removes it; only the last change of a member
-- counts. Applied by flush() in one ZREM and one ZADD per key, not a call
-- per job: no script reads an index it changed this way before flush().
local ZP, ZPK = {}, {}
local function zset(key, member, score)
  local z = ZP[key]
  if not z then
    z = {}
    ZP[key] = z
    ZPK[#ZPK + 1] = key
  end
  z[member] = score
end
local WOKEN = 0
local wake
local function flush()
  for _, key in ipairs(ZPK) do
    local rem, add = {}, {}
    for m, sc in pairs(ZP[key]) do
      if sc then
        add[#add + 1] = sc
        add[#add + 1] = m
      else
        rem[#rem + 1] = m
      end
    end
    for j = 1, #rem, 512 do redis.call('ZREM', key, unpack(rem, j, math.min(#rem, j + 511))) end
    for j = 1, #add, 512 do redis.call('ZADD', key, unpack(add, j, math.min(#add, j + 511))) end
  end
  ZP, ZPK = {}, {}
  if #TOUCHK > 0 then retenant() end
  local S = P .. 'queue-stats'
  for k, d in pairs(DELTA) do
    if d ~= 0 then redis.call('HINCRBY', S, k, d) end
  end
  DELTA = {}
  local TR = P .. 'tenant-running'
  for k, d in pairs(TDELTA) do
    if d ~= 0 and redis.call('HINCRBY', TR, k, d) <= 0 then redis.call('HDEL', TR, k) end
  end
  TDELTA = {}
  if WOKEN > 0 then wake(WOKEN) end
  WOKEN = 0
end
-- Deletes a DLQ or final job taken out of its time index: its record, its
-- id and dedup entries, its count. Returns its {st, q, t, dk, enq}.
local function dropjob(id)
  local jk = P .. 'job:' .. id
  local f = redis.call('HMGET', jk, 'st', 'q', 't', 'dk', 'enq')
  redis.call('ZREM', P .. 'job-ids', id)
  if f[4] and f[4] ~= '' then redis.call('ZREM', P .. 'dedup:' .. f[4], sub6(f[5]) .. id) end
  if f[1] then count(f[1], f[2], f[3], -1) end
  redis.call('DEL', jk)
  return f
end
-- History: entry n (1, 2, ...) of a job is its field 'h<n>', 'hn' the
-- count; appended as two more field-value pairs of the HSET the change
-- makes anyway (into kv), never read back. Returns the field that falls
-- out of the kMaxHistory window (to HDEL), or nil.
local function hpush(kv, hn, entry, inc)
  local n = (tonumber(hn) or 0) + 1
  local ns
  if inc then ns = inc(hn or '0') else ns = fmt(n) end
  kv[#kv + 1] = 'h' .. ns
  kv[#kv + 1] = entry
  kv[#kv + 1] = 'hn'
  kv[#kv + 1] = ns
  if n > MAXH then return 'h' .. fmt(n - MAXH) end
  return nil
end
-- The history fields of a job with `hn` entries, oldest first.
local function hfields(hn)
  local n = tonumber(hn) or 0
  local names = {}
  for i = math.max(1, n - MAXH + 1), n do names[#names + 1] = 'h' .. fmt(i) end
  return names
end
-- Members of a time zset whose time is <= now, oldest first (at most limit).
local function due(key, now, limit)
  local nm, nsub = msof(now), tonumber(sub6(now))
  local r
  if limit then
    r = redis.call('ZRANGEBYSCORE', key, '-inf', fmt(nm), 'WITHSCORES', 'LIMIT', 0, limit)
  else
    r = redis.call('ZRANGEBYSCORE', key, '-inf', fmt(nm), 'WITHSCORES')
  end
  local out = {}
  for i = 1, #r, 2 do
    local m = r[i]
    if tonumber(r[i + 1]) == nm and tonumber(string.sub(m, 1, 6)) > nsub then break end
    out[#out + 1] = m
  end
  return out
end
-- Moves the scheduled jobs whose time has come to their ready sets, oldest
-- first, at most PROMOTE per call so that a burst of due retries cannot hold
-- the server: the rest follow on the next lease (or Stats) call.
-- Wake-up tokens for idle workers (WaitForWork: BLPOP on P wake): one per
-- job made ready, at most WAKE kept, so a burst cannot pile them up.
local WAKE = 256
function wake(n)
  if n <= 0 then return end
  local t = {}
  for i = 1, math.min(n, WAKE) do t[i] = '1' end
  redis.call('RPUSH', P .. 'wake', unpack(t))
  redis.call('LTRIM', P .. 'wake', -WAKE, -1)
end

local function promote(now)
  for _, m in ipairs(due(P .. 'scheduled', now, PROMOTE)) do
    local id = string.sub(m, 7)
    local jk = P .. 'job:' .. id
    local f = redis.call('HMGET', jk, 'q', 't', 'rsc', 'tn')
    redis.call('ZREM', P .. 'scheduled', m)
    -- Its ready set (none for quarantined input, which has no queue).
    if f[1] and f[1] ~= '' then
      local rk = rkey(f[1], f[2], f[4])
      redis.call('ZADD', P .. rk, f[3], m)
      redis.call('HSET', jk, 'ixk', rk)
      if f[4] and f[4] ~= '' then touch(f[1], f[2], f[4]) end
    end
  end
end
-- The fields a record is read with (queue_codec.h: RecordField).
local F = {'env', 'd', 'q', 't', 'st', 'att', 'ep', 'upd', 'cp', 'tok', 'lexp', 'aud', 'cx'}
)lua";

// InsertJobs. ARGV: window_start ('' no dedup), n, then per job 19 values
//   id dk env q t vis enq st att upd ep d ixk ixm ixscore rsc
//   history_entry tn flag
// and, where flag is '1', 6 more: fin cp tok lexp aud cx. tn: the tenant
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
    if ARGV[o + 18] == '1' then o = o + 25 else o = o + 19 end
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
    if ARGV[o + 18] == '1' then
      redis.call('HSET', jk, 'fin', ARGV[o + 19], 'cp', ARGV[o + 20], 'tok', ARGV[o + 21],
        'lexp', ARGV[o + 22], 'aud', ARGV[o + 23], 'cx', ARGV[o + 24])
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
// Returns {0}; {5} unknown job; {10, status, epoch[, 'renewed']} stale;
// {9, message} an effect op that cannot apply (nothing written); {11,
// state, owner} the claim is another owner's (nothing written).
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
)lua";

// LeaseJobs. ARGV: 1 now, 2 max_jobs, 3 worker (for the token), 4 the
// worker as a JSON string, 5 the delivery reason as a JSON string, 6.. the
// queues (none: all). Returns per job {id, token, lease expiry, the record's
// fields (F) as they were before the delivery}. Per job: one HMGET, one
// HSET (the history entry in it), ZREM, ZADD; the counters once per call.
//
// The order: the ready jobs of every (queue, type, tenant) set not held
// (its type or queue paused, its type at its concurrency limit, its tenant
// at the queue's per-tenant cap) are units; per queue the unit whose head
// has the highest priority goes first, then the one whose tenant was
// served least recently (its turn), then the older head; across queues
// priority, then the older head. Serving a tenant gives it the queue's
// next turn -- stored, so the turn is every process's. Where a queue has
// no tenant units (no job of it carries a tenant_id) turns are neither
// read nor written: no tenant is waiting for one.
const char* const kLease = R"lua(
local now = ARGV[1]
local max = tonumber(ARGV[2])
promote(now)
if #TOUCHK > 0 then retenant() end
local want = nil
if #ARGV >= 6 then
  want = {}
  for i = 6, #ARGV do want[ARGV[i]] = true end
end
local pt, pq = {}, {}
for _, x in ipairs(redis.call('SMEMBERS', P .. 'control-paused-types')) do pt[x] = true end
for _, x in ipairs(redis.call('SMEMBERS', P .. 'control-paused-queues')) do pq[x] = true end
-- Concurrency limits by type ("<type>") and per-tenant caps by queue
-- ("|<queue>": '|' is in no type), with the room they leave a type, and a
-- tenant ("<q>|<tn>", read when first needed; nil: no cap).
local room, tcap = {}, {}
local lim = redis.call('HGETALL', P .. 'control-limits')
for i = 1, #lim, 2 do
  local x = lim[i]
  if string.byte(x, 1) == 124 then
    tcap[string.sub(x, 2)] = tonumber(lim[i + 1])
  else
    local running = redis.call('HGET', P .. 'queue-stats', 'rt|' .. x) or '0'
    room[x] = tonumber(lim[i + 1]) - tonumber(running)
  end
end
local TROOM = {}
local function troom(q, tn, qt)
  if not tcap[q] then return nil end
  local r = TROOM[qt]
  if not r then
    local TR = P .. 'tenant-running'
    local n
    if tn == '' then
      n = (tonumber(redis.call('HGET', P .. 'queue-stats', 'running|' .. q)) or 0) -
          (tonumber(redis.call('HGET', TR, q)) or 0)
    else
      n = tonumber(redis.call('HGET', TR, qt)) or 0
    end
    r = tcap[q] - n
    TROOM[qt] = r
  end
  return r
end
-- Units: {k = ready set, q, t, tn, qt = "<q>|<tn>", r = entries fetched
-- (member, score, ...), i = the head's index in r, off = entries fetched,
-- sc = the head's score, band (its priority band), turn, done}. A unit's entries are fetched CH at a time, as needed.
local units = {}
local byqt = {}  -- "<q>|<tn>" -> its units (one per type).
local comp = {}  -- q -> true: the queue has tenant units (turns kept).
local CH = max
if CH > 64 then CH = 64 end
local function fetch(u, n)
  u.r = redis.call('ZRANGE', u.k, u.off, u.off + n - 1, 'WITHSCORES')
  u.i = 1
  u.off = u.off + #u.r / 2
  u.full = #u.r == 2 * n
end
-- Makes u's entry at u.i its head (fetching more if needed, so never
-- for a call already full); false at its end.
local function head(u)
  u.stale = false
  if u.i > #u.r then
    if not u.full then
      u.done = true
      return false
    end
    fetch(u, CH)
    if #u.r == 0 then
      u.done = true
      return false
    end
  end
  u.sc = tonumber(u.r[u.i + 1])
  u.band = math.floor(u.sc / BAND)
  return true
end
local function add(q, t, tn, k, turn)
  local u = {k = k, q = q, t = t, tn = tn, qt = q .. '|' .. tn, off = 0, turn = turn}
  units[#units + 1] = u
  local l = byqt[u.qt]
  if not l then
    l = {}
    byqt[u.qt] = l
  end
  l[#l + 1] = u
  return u
end
-- Per (queue, type) tenant window: the first W tenants of
-- tenants:<q>|<t> in turn order (one job each fills the call); more only
-- if those cannot fill it. A tenant's first fetch is sized for its share.
local W = math.min(max, 1000)
local windows = {}
local function load_window(w)
  local r = redis.call('ZRANGE', w.tk, w.off, w.off + W - 1, 'WITHSCORES')
  w.off = w.off + #r / 2
  w.more = #r == 2 * W
  if #r == 0 then return end
  local n0 = math.min(CH, math.max(4, math.ceil(2 * max / (#r / 2))))
  w.last = tonumber(r[#r])
  local f = {}
  for i = 1, #r, 2 do f[#f + 1] = w.q .. '|' .. r[i] end
  local a = redis.call('HMGET', TT, unpack(f))
  for i = 1, #r, 2 do
    local tn, sc = r[i], tonumber(r[i + 1])
    local qt = f[(i + 1) / 2]
    local turn = sc % BAND
    local known = TURN[qt] or tonumber(a[(i + 1) / 2])
    if known and known > turn then
      turn = known
      touch(w.q, w.t, tn)  -- Its entry is behind its turn (served in another type).
    end
    if known then TURN[qt] = known end
    local u = add(w.q, w.t, tn, P .. rkey(w.q, w.t, tn), turn)
    fetch(u, n0)
    -- An entry whose set is empty (none should be) is dropped by flush().
    if not head(u) then touch(w.q, w.t, tn) end
  end
  comp[w.q] = true
end
for _, p in ipairs(redis.call('SMEMBERS', P .. 'job-pairs')) do
  local bar = string.find(p, '|', 1, true)
  local q, t = string.sub(p, 1, bar - 1), string.sub(p, bar + 1)
  if (want == nil or want[q]) and not pq[q] and not pt[t] and (room[t] == nil or room[t] > 0) then
    local u = add(q, t, '', P .. 'ready:' .. p, 0)
    fetch(u, max)
    if not head(u) then u.done = true end
    local w = {q = q, t = t, tk = P .. 'tenants:' .. p, off = 0}
    load_window(w)
    if w.more then windows[#windows + 1] = w end
  end
end
-- The turn of no tenant in a queue that has tenants too.
for _, u in ipairs(units) do
  if u.tn == '' and comp[u.q] then
    if TURN[u.qt] == nil then TURN[u.qt] = tonumber(redis.call('HGET', TT, u.qt)) or 0 end
    u.turn = TURN[u.qt]
  end
end
local out = {}
-- Nothing ready for a worker that takes from every queue: the wake-up
-- tokens left are stale (their jobs were taken), so no idle worker spins
-- on them.
local any = false
for _, u in ipairs(units) do if not u.done then any = true end end
if not any then
  flush()
  if want == nil then redis.call('DEL', P .. 'wake') end
  return out
end
-- Tokens "<worker>#<n>", n unique in the namespace (some numbers unused).
local seq = redis.call('INCRBY', P .. 'lease-seq', max) - max
local nm, nsub = msof(now), tonumber(sub6(now))
-- n + 1 as text (epoch, attempt, history count), formatted once per
-- distinct n in a call: a batch's jobs mostly share their counts. Filled
-- as needed, never ahead: a table of the first hundred built up front
-- cost more than a whole one-job lease (255 k instructions in the server,
-- measured with callgrind).
local INC = {}
local function inc(x)
  x = x or '0'
  local y = INC[x]
  if not y then
    y = fmt((tonumber(x) or 0) + 1)
    INC[x] = y
  end
  return y
end
-- The lease expiry for a visibility timeout: {ms text, six digits, expiry}.
local EXP = {}
local LK, PJ = P .. 'leases', P .. 'job:'
-- a's head before b's: score (priority, then ready time), then member.
local function older(a, b)
  local x, y = a.sc, b.sc
  return x < y or (x == y and bless(a.r[a.i], b.r[b.i]))
end
local function open(u)
  if u.stale then head(u) end
  if u.done then return false end
  if room[u.t] ~= nil and room[u.t] <= 0 then return false end
  local tr = troom(u.q, u.tn, u.qt)
  return tr == nil or tr > 0
end
local turned = {}  -- "<q>|<tn>" whose turn this call changed.

local tail = '","to":"running","at_ns":' .. now .. ',"reason":' .. ARGV[5] .. ',"worker":' ..
             ARGV[4] .. '}'
-- The next unit to serve, nil for none. Per queue: priority, turn, age;
-- across queues: priority, age. Without tenants anywhere (every unit no
-- tenant's, turn 0) that is one pass over the units.
local tenants = next(comp) ~= nil
local function pick()
  if not tenants then
    local best = nil
    for _, u in ipairs(units) do
      if open(u) and (best == nil or older(u, best)) then
        best = u
      end
    end
    return best
  end
  while true do
    local qbest = {}
    for _, u in ipairs(units) do
      if open(u) then
        local b = qbest[u.q]
        if b == nil or u.band < b.band or
           (u.band == b.band and (u.turn < b.turn or (u.turn == b.turn and older(u, b)))) then
          qbest[u.q] = u
        end
      end
    end
    -- A tenant not yet in a window may come before the best of its queue.
    local grew = false
    for _, w in ipairs(windows) do
      local b = qbest[w.q]
      if w.more and (b == nil or b.band * BAND + b.turn > w.last) then
        load_window(w)
        grew = true
      end
    end
    if not grew then
      local best = nil
      for _, u in pairs(qbest) do
        if best == nil or u.band < best.band or (u.band == best.band and older(u, best)) then
          best = u
        end
      end
      return best
    end
  end
end
while #out < max do
  local best = pick()
  if best == nil then break end
  local m, q, t, tn, rk = best.r[best.i], best.q, best.t, best.tn, best.k
  local rms = best.sc % BAND
  best.i = best.i + 2
  best.stale = true
  -- Passed over if ready only from a time after this call's now: made
  -- ready by a process whose clock is ahead, or enqueued between the
  -- caller's clock read and this call. engine::Deliver would refuse it; a
  -- later lease takes it. The ready time is the entry's: its score's
  -- milliseconds and its member's six sub-millisecond digits.
  if rms < nm or (rms == nm and tonumber(string.sub(m, 1, 6)) <= nsub) then
    local id = string.sub(m, 7)
    local jk = PJ .. id
    -- q and t (F's 3rd and 4th; '_' is no field) are the ready set's.
    local f = redis.call('HMGET', jk, 'env', 'd', '_', '_', 'st', 'att', 'ep', 'upd', 'cp',
                         'tok', 'lexp', 'aud', 'cx', 'vis', 'hn')
    if f[5] ~= 'queued' and f[5] ~= 'retry_scheduled' then
      flush()
      return redis.error_reply('jobpact: index out of step: job ' .. id ..
                               ' in a ready set is ' .. tostring(f[5]))
    end
    if room[t] then room[t] = room[t] - 1 end
    if TROOM[best.qt] then TROOM[best.qt] = TROOM[best.qt] - 1 end
    -- The tenant's turn: the queue's next, for all its units.
    if comp[q] then
      local c = counter(q) + 1
      CTR[q] = c
      TURN[best.qt] = c
      turned[best.qt] = true
      for _, v in ipairs(byqt[best.qt]) do v.turn = c end
    end
    if tn ~= '' then touch(q, t, tn) end
    seq = seq + 1
    local tok = ARGV[3] .. '#' .. fmt(seq)
    -- The expiry: now + the visibility timeout, as ms and six digits.
    local vis = f[14]
    local e = EXP[vis]
    if not e then
      local ms, sub = nm + msof(vis), nsub + tonumber(sub6(vis))
      if sub >= 1000000 then ms = ms + 1; sub = sub - 1000000 end
      local s6 = string.format('%06d', sub)
      if ms == 0 then e = {fmt(ms), s6, fmt(sub)} else e = {fmt(ms), s6, fmt(ms) .. s6} end
      EXP[vis] = e
    end
    local msx, lexp = e[1], e[3]
    local lm = e[2] .. id
    -- Not ixk and ixm: a running job is in the lease set by its expiry.
    local kv = {'st', 'running', 'ep', inc(f[7]), 'att', inc(f[6]), 'tok', tok, 'lexp', lexp,
                'upd', now}
    local drop = hpush(kv, f[15], '{"from":"' .. f[5] .. tail, inc)
    redis.call('HSET', jk, unpack(kv))
    if drop then redis.call('HDEL', jk, drop) end
    zset(rk, m, false)
    zset(LK, lm, msx)
    f[3] = q
    f[4] = t
    count(f[5], q, t, -1, tn)
    count('running', q, t, 1, tn)
    f[15] = nil
    f[14] = nil
    out[#out + 1] = {id, tok, lexp, f}
  end
end
-- The turns served, and each queue's counter, for the next lease anywhere.
local tv = {}
for qt in pairs(turned) do
  tv[#tv + 1] = qt
  tv[#tv + 1] = fmt(TURN[qt])
end
if #tv > 0 then
  for q, c in pairs(CTR) do
    tv[#tv + 1] = q
    tv[#tv + 1] = fmt(c)
  end
  redis.call('HSET', TT, unpack(tv))
end
flush()
if #out < max and want == nil then redis.call('DEL', P .. 'wake') end
return out
)lua";

// RenewLease. ARGV: id, epoch, token, new expiry, now, checkpoint ('' keep).
// Returns {0, cancel_requested}, {5}, or {10, status, epoch}.
const char* const kRenew = R"lua(
local jk = P .. 'job:' .. ARGV[1]
local cur = redis.call('HMGET', jk, 'st', 'ep', 'tok', 'lexp', 'cx')
if not cur[1] then return {5} end
if cur[1] ~= 'running' or cur[2] ~= ARGV[2] or cur[3] ~= ARGV[3] then return {10, cur[1], cur[2]} end
-- A running job's lease entry is named by its expiry (no ixm kept).
redis.call('ZREM', P .. 'leases', sub6(cur[4] or '0') .. ARGV[1])
redis.call('ZADD', P .. 'leases', fmt(msof(ARGV[4])), sub6(ARGV[4]) .. ARGV[1])
local kv = {'lexp', ARGV[4], 'upd', ARGV[5]}
if ARGV[6] ~= '' then kv[#kv + 1] = 'cp'; kv[#kv + 1] = ARGV[6] end
redis.call('HSET', jk, unpack(kv))
return {0, cur[5]}
)lua";

// The expired leases (time <= ARGV[1]), at most ARGV[2]: {id, fields} each.
const char* const kExpired = R"lua(
local out = {}
for _, m in ipairs(due(P .. 'leases', ARGV[1], tonumber(ARGV[2]))) do
  local id = string.sub(m, 7)
  out[#out + 1] = {id, redis.call('HMGET', P .. 'job:' .. id, unpack(F))}
end
return out
)lua";

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

// One write: ARGV as above.
const char* const kWriteOne = R"lua(
local r = one(0)
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
  out[i] = one(pos)
  pos = pos + 1 + tonumber(ARGV[pos])
end
flush()
return out
)lua";

// The script: the library, then `body` as a function run under pcall, so
// that a command failing midway (Redis rolls nothing back) still applies
// the counter and index changes held for flush() of the steps done before
// it, which are written: no job is left without its index entry.
std::string WithLib(const std::string& body) {
  std::string lua = "local MAXH = " + std::to_string(kMaxHistory) + "\nlocal PROMOTE = 10000\n";
  lua += kLib;
  lua += "local function main()\n";
  lua += body;
  lua += R"lua(
end
local ok, r = pcall(main)
if ok then return r end
flush()
if type(r) == 'table' and r.err then return redis.error_reply(r.err) end
return redis.error_reply(tostring(r))
)lua";
  return lua;
}

}  // namespace

const QueueScripts& Scripts() {
  static const QueueScripts* const scripts = new QueueScripts{
      Script(WithLib(kInsert)),   Script(WithLib(std::string(kWrite) + kWriteOne)),
      Script(WithLib(kLease)),
      Script(WithLib(kRenew)),    Script(WithLib(kExpired)),  Script(WithLib(kCancel)),
      Script(WithLib(kLoad)),     Script(WithLib(kScanIds)),  Script(WithLib(kScanTime)),
      Script(WithLib(kFindDup)),  Script(WithLib(kPurge)),    Script(WithLib(kStats)),
      Script(WithLib(kControl)),  Script(WithLib(std::string(kWrite) + kWriteMany)),
      Script(WithLib(kTrim)),
  };
  return *scripts;
}

}  // namespace redis_internal
}  // namespace jobpact
