-- lib.lua is prepended to every other script of this directory (wave.lua,
-- the wave machinery, follows it in the scripts that start waves; poll and
-- the lease scripts do without, since defining functions costs time on
-- every call).
--
-- Calling convention of every script:
--   KEYS[1] epoch (fencing counter)   KEYS[2] lease (hash)
--   KEYS[3] version (change counter)  KEYS[4] fleet counters (hash)
--   ARGV[1] key prefix "fw{p}:"       ARGV[2] caller's fence ("" when unfenced)
--   ARGV[3] now in unix ms (from the engine's clock; scripts never read time)
--   then the script's own records, read by field name through the tables
--   the engine prepends (see args.go: ARGV[SH.grace], ARGV[b + IF.node])
-- Every other key a script touches is built from ARGV[1] and so carries the
-- same hash tag as KEYS: all keys live in one Cluster slot.
-- Numbers are written with int() so timestamps never turn into 1.7e+12.

local P = ARGV[1]
local FENCE = ARGV[2]
local NOW = tonumber(ARGV[3])

local function int(n)
  return string.format('%d', n)
end

-- now_s is int(NOW), formatted once per script (and again only when
-- advance_clock moves NOW): a result's script writes the time four times.
local NOW_S = nil
local function now_s()
  if not NOW_S then
    NOW_S = int(NOW)
  end
  return NOW_S
end

-- advance_clock makes NOW the engine's time in Redis, which never goes
-- backwards: the later of the caller's now and the latest now a script
-- used (key clock). A caller takes its now before its call waits (for a
-- connection, for Redis, for a core), so scripts do not run in the order
-- of their nows: a step whose now was taken before a rollout was created
-- could run after the creation and stamp its items dispatched before it.
-- The scripts that record times call it first (scriptSource); the lease
-- scripts keep their caller's clock.
local function advance_clock()
  local last = tonumber(redis.call('GET', P .. 'clock')) or 0
  if last > NOW then
    NOW, NOW_S = last, nil
  elseif NOW > last then
    redis.call('SET', P .. 'clock', now_s())
  end
end

local function hgetall(key)
  local r = redis.call('HGETALL', key)
  local t = {}
  for i = 1, #r, 2 do
    t[r[i]] = r[i + 1]
  end
  return t
end

local function num(x)
  return tonumber(x) or 0
end

-- check_fence: the caller's fence must be the current epoch and the lease's.
local function check_fence()
  local cur = redis.call('GET', KEYS[1])
  if not cur or cur ~= FENCE then
    return false
  end
  return redis.call('HGET', KEYS[2], 'fence') == FENCE
end


local ACTIVE = { pending = true, in_progress = true, retrying = true, ambiguous = true }

-- status -> counter bucket (fleetwave.Counters)
local BUCKET = {
  completed = 'done',
  in_progress = 'in_progress', retrying = 'in_progress', ambiguous = 'in_progress',
  pending = 'pending',
  failed = 'failed', blocked = 'failed',
  skipped = 'skipped',
}

local function k_r(rid) return P .. 'r:' .. rid end
local function k_i(id) return P .. 'i:' .. id end
-- an attempt id is "<item id>.<n>"
local function item_of(aid) return string.match(aid, '^(.+)%.%d+$') end
local function attempt_no(aid) return tonumber(string.match(aid, '%.(%d+)$')) end
local function k_inst(node, block) return P .. 'inst:' .. node .. ':' .. block end
-- lanes: an item's lane is its managed_by ('' = the default lane)
local function k_lanes(rid) return P .. 'r:' .. rid .. ':lanes' end
local function k_lp(rid, lane) return P .. 'r:' .. rid .. ':p:' .. (lane or '') end
local function k_lf(rid, lane) return P .. 'r:' .. rid .. ':f:' .. (lane or '') end
-- the item ids of a split group
local function k_g(rid, grp) return P .. 'r:' .. rid .. ':g:' .. grp end

-- Counter deltas are gathered in DELTA and written by flush(): per
-- rollout one HMGET and one HSET (with updated_at), per fleet bucket one
-- HINCRBY, however many items changed (a wave of 200 dispatches costs a
-- handful of writes, not four per item). Every script calls flush() before
-- it returns (bump does) and before it reads a rollout's counters
-- (maybe_complete does), so no counter is ever read stale.
local DELTA = {} -- rollout id -> bucket -> delta; FLEET: bucket -> delta
local FLEET = {}
-- Lane depths (fleet-wide, per lane: 'p:<lane>' items in the lanes'
-- pending sets, 'f:<lane>' in their in-flight sets) follow set membership:
-- every add or remove below counts what Redis says it added or removed, so
-- the depths stay exact even where a script heals a set.
local LDELTA = {}
-- The items counted by status and reason (isr:<rollout>) and the items'
-- change marks (ichg:<rollout>), which hset_i keeps, are gathered the same
-- way and written by flush(): per item written they were two HINCRBYs and
-- a ZADD, a third of the calls of a wave's start. ISR: rollout id ->
-- "<status>\n<reason>" -> delta; ICHG: rollout id -> ZADD's score/member
-- pairs.
local ISR, ICHG = {}, {}

-- gather_add appends a (and b, when given) to the list t[key], made on
-- its first use.
local function gather_add(t, key, a, b)
  local l = t[key]
  if not l then
    l = {}
    t[key] = l
  end
  l[#l + 1] = a
  if b then
    l[#l + 1] = b
  end
end

-- call_chunked runs cmd on key with the arguments of list l, 1,000 at a
-- time (unpack has limits; even, for ZADD's pairs), and returns the sum of
-- the replies.
local function call_chunked(cmd, key, l)
  local n = 0
  for i = 1, #l, 1000 do
    n = n + redis.call(cmd, key, unpack(l, i, math.min(i + 999, #l)))
  end
  return n
end

-- keep_answer keeps entries from.. of list l under key for a minute, each
-- after a NUL (no entry holds one), for a script the Redis client sends
-- again (its reply late) to answer what the first sending did. Joined in
-- parts: one table.concat of thousands of entries overflows the embedded
-- Redis's Lua registry.
local function keep_answer(key, l, from)
  local parts = {}
  for i = from, #l, 256 do
    parts[#parts + 1] = table.concat(l, '\0', i, math.min(i + 255, #l))
  end
  redis.call('SET', key, '\0' .. table.concat(parts, '\0'), 'PX', '60000')
end

-- kept_answer appends the entries keep_answer kept under key to list l and
-- returns it, or returns nil when none are kept.
local function kept_answer(key, l)
  local kept = redis.call('GET', key)
  if not kept then
    return nil
  end
  for v in string.gmatch(kept, '%z([^%z]*)') do
    l[#l + 1] = v
  end
  return l
end

local function lane_count(kind, lane, n)
  if n ~= 0 then
    local f = kind .. ':' .. (lane or '')
    LDELTA[f] = (LDELTA[f] or 0) + n
  end
end

local function lp_add(rid, lane, pos, id)
  lane_count('p', lane, redis.call('ZADD', k_lp(rid, lane), pos, id))
end

local function lp_rem(rid, lane, id)
  lane_count('p', lane, -redis.call('ZREM', k_lp(rid, lane), id))
end

-- GATHER, when a table, collects the removals from the in-flight sets and
-- the deadlines of a script handling many results (complete.lua), written
-- by gathered() in one command per key. It stays a script-wide mode, not
-- an argument: lf_rem and close_attempt are reached through finish,
-- transient and set_status from every script.
local GATHER = nil

local function lf_rem(rid, lane, id)
  if GATHER then
    local k = k_lf(rid, lane)
    local l = GATHER.lf[k]
    if not l then
      l = { lane = lane }
      GATHER.lf[k] = l
    end
    l[#l + 1] = id
    return
  end
  lane_count('f', lane, -redis.call('SREM', k_lf(rid, lane), id))
end

local RSTAT = {} -- rollout id -> {status, c_pending, c_in_progress} as of the last flush

-- per-lane counters ('<bucket>:<lane>' in hash 'lanecount'), summed like
-- the others and written once per script
local LCOUNT = {}

local LKEY = {} -- lane -> bucket -> '<bucket>:<lane>'

local function count(rid, status, delta, lane)
  local b = BUCKET[status]
  local d = DELTA[rid]
  if not d then
    d = {}
    DELTA[rid] = d
  end
  d[b] = (d[b] or 0) + delta
  FLEET[b] = (FLEET[b] or 0) + delta
  local lk = LKEY[lane or '']
  if not lk then
    lk = {}
    LKEY[lane or ''] = lk
  end
  local lf = lk[b]
  if not lf then
    lf = b .. ':' .. (lane or '')
    lk[b] = lf
  end
  LCOUNT[lf] = (LCOUNT[lf] or 0) + delta
end

local function flush()
  RSTAT = {}
  for rid, d in pairs(DELTA) do
    local rk = k_r(rid)
    local f = { 'status', 'c_pending', 'c_in_progress' }
    for b, n in pairs(d) do
      if n ~= 0 and b ~= 'pending' and b ~= 'in_progress' then
        f[#f + 1] = 'c_' .. b
      end
    end
    local v = redis.call('HMGET', rk, unpack(f))
    local set = { 'updated_at', now_s() }
    for i = 2, #f do
      local n = d[string.sub(f[i], 3)] or 0
      if n ~= 0 then
        v[i] = int(num(v[i]) + n)
        set[#set + 1] = f[i]
        set[#set + 1] = v[i]
      end
    end
    redis.call('HSET', rk, unpack(set))
    RSTAT[rid] = v
  end
  for b, n in pairs(FLEET) do
    if n ~= 0 then
      redis.call('HINCRBY', KEYS[4], b, n)
    end
  end
  for f, n in pairs(LDELTA) do
    if n ~= 0 then
      redis.call('HINCRBY', P .. 'lanedepth', f, n)
    end
  end
  for f, n in pairs(LCOUNT) do
    if n ~= 0 then
      redis.call('HINCRBY', P .. 'lanecount', f, n)
    end
  end
  for rid, d in pairs(ISR) do
    local k = P .. 'isr:' .. rid
    for f, n in pairs(d) do
      if n ~= 0 then
        redis.call('HINCRBY', k, f, n)
      end
    end
  end
  for rid, l in pairs(ICHG) do
    call_chunked('ZADD', P .. 'ichg:' .. rid, l)
  end
  DELTA, FLEET, LDELTA, LCOUNT, ISR, ICHG = {}, {}, {}, {}, {}, {}
end

-- The outbox (stream 'outbox') records, in the same script as the change,
-- every transition that Git status must show: a rollout created or
-- changing status, an item reaching a terminal status. Entries stay until
-- the leader acknowledges them (AckOutbox), so they are delivered at least
-- once, across restarts. The stream id orders them; 'at' is the engine
-- clock.
local function outbox(...)
  redis.call('XADD', P .. 'outbox', '*', 'at', now_s(), ...)
end

local function outbox_rollout(rid, status, reason)
  outbox('kind', 'rollout', 'rollout', rid, 'status', status, 'reason', reason or '')
end

local function outbox_item(it, status, reason)
  outbox('kind', 'item', 'rollout', it.rollout, 'item', it.id, 'status', status,
    'reason', reason or '', 'node', it.node or '', 'block', it.block or '',
    'generation', it.generation or '0')
end

-- version_after is the change counter this script leaves (it bumps it
-- once, at its end): an instance records it with its last outcome, so a
-- plan made on observations read before that outcome (ObservedVersion
-- below it) is recognised as stale whatever the clocks say.
local VERSION_AFTER, VERSION_AFTER_S = nil, nil
local function version_after()
  if not VERSION_AFTER then
    VERSION_AFTER = num(redis.call('GET', KEYS[3])) + 1
    VERSION_AFTER_S = int(VERSION_AFTER)
  end
  return VERSION_AFTER
end

-- version_after_s is int(version_after()), formatted once per script.
local function version_after_s()
  if not VERSION_AFTER_S then
    version_after()
  end
  return VERSION_AFTER_S
end

-- observed marks node's observation changed (a report, or an instance a
-- result recorded) at the change counter this script leaves: Observe reads
-- again only the nodes marked since the counter it last read.
local function observed(node)
  redis.call('SADD', P .. 'obs_nodes', node)
  redis.call('ZADD', P .. 'obs_changed', version_after_s(), node)
end

-- hset_i writes fields of item id and marks it changed at the change
-- counter this script leaves (zset ichg:<rollout>): Rollout reads again
-- only the items of a rollout marked since the counter its last read saw.
-- Every write of an item goes through it, so it also keeps the rollout's
-- items counted by status and reason (hash isr:<rollout>, field
-- "<status>\n<reason>"): the gauges read that instead of every item.
-- SRS and SRR hold the status and reason of the items this script read
-- (load_item with both fields) or wrote (hset_i), false when absent, so
-- that hset_i need not read them again.
local SRS, SRR = {}, {}

-- mark_i keeps what hset_i keeps for a write of item id that sets its
-- status to st and its reason to rs (nil: not written), before the write.
local function mark_i(id, st, rs)
  local rid = item_of(id) -- "<rollout>.<position>" splits as an attempt id does
  if not rid then
    return
  end
  if st or rs then
    local ost, ors = SRS[id], SRR[id]
    if ost == nil then
      local old = redis.call('HMGET', k_i(id), 'status', 'reason')
      ost, ors = old[1], old[2]
    end
    ost, ors = ost or nil, ors or nil -- false: known absent
    SRS[id], SRR[id] = st or ost or false, rs or ors or false
    local was = ost and (ost .. '\n' .. (ors or ''))
    local now = (st or ost or '') .. '\n' .. (rs or ors or '')
    if was ~= now then
      local d = ISR[rid]
      if not d then
        d = {}
        ISR[rid] = d
      end
      if was then
        d[was] = (d[was] or 0) - 1
      end
      d[now] = (d[now] or 0) + 1
    end
  end
  gather_add(ICHG, rid, version_after_s(), id)
end

local function hset_i(id, ...)
  local st, rs
  local a = { ... }
  for i = 1, #a - 1, 2 do
    local f = a[i]
    if f == 'status' then
      st = a[i + 1]
    elseif f == 'reason' then
      rs = a[i + 1]
    end
  end
  mark_i(id, st, rs)
  redis.call('HSET', k_i(id), ...)
end

local function bump()
  flush()
  local v = redis.call('INCR', KEYS[3])
  if VERSION_AFTER and VERSION_AFTER > v then
    redis.call('SET', KEYS[3], int(VERSION_AFTER)) -- never below what was recorded
  end
end

-- Item fields the scripts use (HMGET: an item hash has some 30 fields and
-- most transitions need a third of them).
local ITEM_F = { 'rollout', 'pos', 'node', 'block', 'action', 'generation', 'target_version',
  'config_hash', 'desired_state', 'managed_by', 'one_shot', 'timeout_ms', 'wset', 'grp', 'req',
  'status', 'reason', 'retry_count', 'retry_after', 'dispatched_at', 'attempts', 'last_attempt', 'op',
  'a_state', 'wave', 'q' }
-- what a result needs (complete.lua: the attempt check, finish, transient,
-- set_status)
local COMPLETE_F = { 'rollout', 'node', 'block', 'generation', 'config_hash', 'desired_state',
  'managed_by', 'status', 'reason', 'retry_count', 'attempts', 'last_attempt', 'op', 'a_fence', 'a_state',
  'target_version', 'one_shot' }
-- what a wave scan needs of an item it may dispatch (a placement reject
-- loads the rest)
local ITEM_RUN_F = { 'rollout', 'node', 'block', 'managed_by', 'status', 'reason', 'retry_after', 'attempts',
  'timeout_ms', 'wset', 'grp', 'req', 'q' }
-- what a wave scan needs of an item it will not dispatch
local ITEM_SCAN_F = { 'node', 'block', 'status', 'reason', 'retry_after', 'wset', 'grp', 'q' }

-- the lists above that read both status and reason (SRS, SRR)
local WITH_SR = { [ITEM_F] = true, [COMPLETE_F] = true, [ITEM_RUN_F] = true, [ITEM_SCAN_F] = true }

-- load_item returns item id's fields (ITEM_F, or the given list) as a
-- table; a missing item yields a table without status.
local function load_item(id, fields)
  fields = fields or ITEM_F
  local v = redis.call('HMGET', k_i(id), unpack(fields))
  local t = { id = id }
  for i, f in ipairs(fields) do
    if v[i] then
      t[f] = v[i]
    end
  end
  if WITH_SR[fields] then
    SRS[id], SRR[id] = t.status or false, t.reason or false
  end
  return t
end

-- set_status moves an item to status new, keeping both counter sets exact;
-- extra field/value pairs of the item are written with it, and so are
-- those close_attempt left in it.more.
local function set_status(it, new, reason, ...)
  if it.status ~= new then
    count(it.rollout, it.status, -1, it.managed_by)
    count(it.rollout, new, 1, it.managed_by)
    it.status = new
  end
  -- its status and reason are known: hset_i's look for them is skipped
  -- (the extra pairs never set them)
  mark_i(it.id, new, reason or '')
  if not it.more then
    redis.call('HSET', k_i(it.id), 'status', new, 'reason', reason or '', 'updated_at', now_s(), ...)
    return
  end
  local args = { 'status', new, 'reason', reason or '', 'updated_at', now_s(), ... }
  for _, v in ipairs(it.more) do
    args[#args + 1] = v
  end
  it.more = nil
  redis.call('HSET', k_i(it.id), unpack(args))
end

-- maybe_complete marks an active rollout completed once every item is
-- terminal; returns 1 when it did.
local function maybe_complete(rid)
  flush()
  local rk = k_r(rid)
  local r = RSTAT[rid] or redis.call('HMGET', rk, 'status', 'c_pending', 'c_in_progress')
  if r[1] == 'active' and num(r[2]) == 0 and num(r[3]) == 0 then
    redis.call('HSET', rk, 'status', 'completed', 'reason', '', 'updated_at', now_s())
    redis.call('ZREM', P .. 'active', rid)
    outbox_rollout(rid, 'completed', '')
    return 1
  end
  return 0
end

-- leave takes an item out of the set or sorted set its status keeps it in
-- (pending: the lane's pending zset; in flight: the lane's in-flight set,
-- plus retry for retrying and the node's amb set for ambiguous).
local function leave(it)
  local s = it.status
  if s == 'pending' then
    lp_rem(it.rollout, it.managed_by, it.id)
  elseif s == 'in_progress' or s == 'retrying' or s == 'ambiguous' then
    lf_rem(it.rollout, it.managed_by, it.id)
    if s == 'retrying' then
      redis.call('ZREM', P .. 'retry', it.id)
    elseif s == 'ambiguous' then
      redis.call('SREM', P .. 'amb:' .. it.node, it.id)
    end
  end
end

-- DEFER, when a table, collects the rollouts whose items finish instead of
-- looking at once whether they completed: a script handling many results
-- (complete.lua) then calls maybe_complete once per rollout at its end.
-- Like GATHER, a script-wide mode: finish has callers in every script.
local DEFER = nil

-- finish moves an item to a terminal status, frees its block instance and
-- records the outcome there; returns 1 when that completed the rollout
-- (always 0 while DEFER is set).
-- Extra field/value pairs of the item are written with its status.
-- The payload (rendered config) goes with it: no attempt needs it any more.
local function finish(it, status, reason, ...)
  leave(it)
  set_status(it, status, reason, 'completed_at', now_s(), 'retry_after', '0', ...)
  outbox_item(it, status, reason)
  redis.call('DEL', P .. 'ip:' .. it.id)
  local ik = k_inst(it.node, it.block)
  if redis.call('HGET', ik, 'active') == it.id then
    redis.call('HDEL', ik, 'active')
  end
  local op = it.op
  if op == nil then
    op = redis.call('HGET', k_i(it.id), 'op')
  end
  if op ~= '1' then
    -- an operational item (backup, restart) leaves the instance's record
    -- alone: the last converging item's outcome still decides what the
    -- reconciler may re-create
    redis.call('HSET', ik, 'last_item', it.id, 'last_status', status,
      'last_gen', it.generation, 'last_hash', it.config_hash or '', 'last_at', now_s(),
      'last_ver', version_after_s())
  end
  if DEFER then
    DEFER[it.rollout] = true
    return 0
  end
  return maybe_complete(it.rollout)
end

-- lanes_of returns the rollout's lane names, sorted.
local function lanes_of(rid)
  local names = redis.call('HKEYS', k_lanes(rid))
  table.sort(names)
  return names
end

-- transient handles a transient failure: retrying with exponential backoff
-- and jitter, or failed once retry_count reached the rollout's max_retries.
-- The rollout's own backoff_ms (the config's backoff), when set, replaces
-- the engine's base (and raises the cap when larger). Returns 1 when that
-- completed the rollout.
local function transient(it, base, maxb, jitter)
  local rc = num(it.retry_count)
  local mr, rb = unpack(redis.call('HMGET', k_r(it.rollout), 'max_retries', 'backoff_ms'))
  mr, rb = num(mr), num(rb)
  if rb > 0 then
    base = rb
    if maxb < base then
      maxb = base
    end
  end
  if rc >= mr then
    return finish(it, 'failed', 'retries_exhausted', 'last_class', 'transient')
  end
  local d = base * (2 ^ rc)
  if d > maxb then
    d = maxb
  end
  d = math.floor(d / 2 + (d / 2) * jitter)
  local at = NOW + d
  set_status(it, 'retrying', 'backoff', 'last_class', 'transient',
    'retry_count', int(rc + 1), 'retry_after', int(at))
  redis.call('ZADD', P .. 'retry', int(at), it.id)
  return 0
end

-- q_take removes attempt aid from its node's queue, where it waits as
-- "<aid>\n..." until a Poll pops it (a queue holds a handful of entries);
-- returns true when it was there, i.e. never delivered.
local function q_take(node, aid)
  local q = P .. 'q:' .. node
  local head = aid .. '\n'
  for _, v in ipairs(redis.call('LRANGE', q, 0, -1)) do
    if string.sub(v, 1, #head) == head then
      redis.call('LREM', q, 0, v)
      return true
    end
  end
  return false
end

-- An attempt lives in its item: last_attempt is its id, a_fence and
-- a_state (queued until it ends: done, expired, lost; or undelivered when
-- a Poll popped it too late) and a_exit describe it, and the deadlines
-- zset holds it (by deadline) while it is open. Every path that moves an
-- item on closes its open attempt first, so an open attempt is always its
-- item's last one.
--
-- close_attempt ends attempt aid of item it, which no queue holds any
-- more (popped by a Poll, or taken out by the caller with q_take): out of
-- the deadlines, and its state (with extra field/value pairs) left in
-- it.more for the caller's next set_status (finish, transient) to write
-- with the item's.
local function close_attempt(it, aid, state, ...)
  it.more = { 'a_state', state, ... }
  if GATHER then
    GATHER.dl[#GATHER.dl + 1] = aid
  else
    redis.call('ZREM', P .. 'deadlines', aid)
  end
end

-- gathered writes what GATHER collected (in chunks: unpack has limits)
-- and keeps gathering.
local function gathered()
  local function each(l, f)
    for i = 1, #l, 1000 do
      f(unpack(l, i, math.min(i + 999, #l)))
    end
  end
  each(GATHER.dl, function(...) redis.call('ZREM', P .. 'deadlines', ...) end)
  for k, l in pairs(GATHER.lf) do
    each(l, function(...) lane_count('f', l.lane, -redis.call('SREM', k, ...)) end)
  end
  GATHER.dl, GATHER.lf = {}, {}
end

-- agrees is the health gate: whether an instance an agent reports (igen
-- -1 = none; its version and state) shows item it in effect. Operational
-- items (backup, restart) leave no trace on the instance and always agree.
-- Desired absent wants no instance (or one in state absent); otherwise
-- the instance must be at the item's generation or newer (a status left
-- from an earlier revision never counts), at its target version (when it
-- has one) and in its desired state (installed: any state but absent).
local function agrees(it, igen, iver, istate)
  if it.op == '1' then
    return true
  end
  local ds = it.desired_state or ''
  if ds == 'absent' then
    return igen < 0 or istate == 'absent'
  end
  if igen < 0 or igen < num(it.generation) or istate == 'absent' then
    return false
  end
  if (it.target_version or '') ~= '' and iver ~= it.target_version then
    return false
  end
  if (ds == 'running' or ds == 'stopped') and istate ~= ds then
    return false
  end
  return true
end
