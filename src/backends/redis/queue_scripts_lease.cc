// The Redis queue store's lease scripts (queue_scripts_lua.h): the lease
// step (in turn across tenants, within the control state's limits), lease
// renewal, and the expired leases lease recovery reclaims.
#include "src/backends/redis/queue_scripts_lua.h"

namespace jobpact {
namespace redis_internal {

// LeaseJobs. ARGV: 1 now, 2 max_jobs, 3 worker (for the token), 4 the
// worker as a JSON string, 5 the delivery reason as a JSON string, 6 the
// start of the dedup window ('': no dedup check), 7 '1' to take the guards
// ('' not), 8.. the queues (none: all). Returns per job {id, token, lease
// expiry, the record's fields (F) as they were before the delivery, the
// duplicate FindDuplicate would name once this job is leased ('' none, or
// no dedup window; the delivery-time check, SPEC 3 step 4, in the lease's
// own step), the guards taken ('' none; else the lock's fencing token, '0'
// for a job with no lock key: SPEC 3 steps 5 and 6 in the lease's step,
// both or neither, owned by the lease token until the lease expires)}.
// Per job: one HMGET, one HSET (the history entry in it), ZREM, ZADD; the
// counters once per call; with guards, their calls (lock_acquire, claim).
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
local DW = ARGV[6]
local TG = ARGV[7] == '1'
local want = nil
if #ARGV >= 8 then
  want = {}
  for i = 8, #ARGV do want[ARGV[i]] = true end
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

-- SPEC 3 steps 5 and 6 for a job just leased: its lock (key lk) and its
-- idempotency claim (key ik), either may be nil, for its lease token until
-- its lease expires, both or neither: nothing is written if the lock is
-- live or the key has a live record. The lock and claim hashes keep
-- microseconds (lock_store.cc, idempotency_store.cc); the jobs keep ns.
-- Returns '' (not taken) or the lock's fencing token ('0': no lock).
local function us(ns)
  if #ns <= 3 then return '0' end
  return string.sub(ns, 1, -4)
end
local function take_guards(lk, ik, tok, now_ns, exp_ns, vis)
  local now, exp = us(now_ns), us(exp_ns)
  local lkey, ikey
  if lk then
    lkey = P .. 'lock:' .. lk
    local h = redis.call('HMGET', lkey, 'owner', 'exp')
    if h[1] and tonumber(h[2]) > tonumber(now) then return '' end
  end
  if ik then
    ikey = P .. 'idem:' .. ik
    local h = redis.call('HMGET', ikey, 'state', 'exp')
    if h[1] and tonumber(h[2]) > tonumber(now) then return '' end
  end
  local gc = fmt(msof(vis) + 3600000)
  local fence = '0'
  if lkey then
    fence = lock_acquire(lkey, P .. 'lock-fence', P .. 'locks', tok, now, exp, gc, lk)[3]
  end
  if ikey then claim(ikey, P .. 'idem-index', tok, now, exp, gc, ik) end
  return tostring(fence)
end
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
                         'tok', 'lexp', 'aud', 'cx', 'vis', 'hn', 'dk', 'lk', 'ik')
    local dk, lk, ik = f[16], f[17], f[18]
    f[16], f[17], f[18] = nil, nil, nil
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
    local dup = ''
    if DW ~= '' then
      -- As kFindDup, after this job's lease and before the next one's.
      if dk and dk ~= '' then
        for _, dm in ipairs(redis.call('ZRANGE', P .. 'dedup:' .. dk, 0, -1)) do
          local oid = string.sub(dm, 7)
          if oid ~= id then
            local g = redis.call('HMGET', PJ .. oid, 'st', 'fin')
            if g[1] == 'running' or (g[1] == 'succeeded' and g[2] and g[2] ~= '' and le(DW, g[2])) then
              dup = oid
              break
            end
          end
        end
      end
    end
    local gt = ''
    if TG and dup == '' and (lk or ik) then gt = take_guards(lk, ik, tok, now, lexp, vis) end
    out[#out + 1] = {id, tok, lexp, f, dup, gt}
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

}  // namespace redis_internal
}  // namespace jobpact
