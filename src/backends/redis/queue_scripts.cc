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
//                       tn lk ik: lk and ik the lock and idempotency keys,
//                       for the lease step to take them, absent for none),
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
//
// The scripts' text is in one file per group (queue_scripts_lua.h); this
// file has the library every script starts with (kLib) and assembles them.
#include "src/backends/redis/queue_scripts.h"

#include <string>

#include "jobpact/queue_backend.h"
#include "src/backends/redis/guards.h"
#include "src/backends/redis/queue_scripts_lua.h"

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
      Script(WithLib(std::string(JOBPACT_REDIS_LOCK_ACQUIRE_LUA JOBPACT_REDIS_CLAIM_LUA) + kLease)),    Script(WithLib(kRenew)),
      Script(WithLib(kExpired)),  Script(WithLib(kCancel)),
      Script(WithLib(kLoad)),     Script(WithLib(kScanIds)),
      Script(WithLib(kScanTime)), Script(WithLib(kFindDup)),
      Script(WithLib(kPurge)),    Script(WithLib(kStats)),
      Script(WithLib(kControl)),  Script(WithLib(std::string(kWrite) + kWriteMany)),
      Script(WithLib(kTrim)),
  };
  return *scripts;
}

}  // namespace redis_internal
}  // namespace jobpact
