-- lib.lua is prepended to every other script of this directory.
--
-- Calling convention of every script:
--   KEYS[1] epoch (fencing counter)   KEYS[2] lease (hash)
--   KEYS[3] version (outbox cursor)   KEYS[4] fleet counters (hash)
--   ARGV[1] key prefix "fw{p}:"       ARGV[2] caller's fence ("" when unfenced)
--   ARGV[3] now in unix ms (from the engine's clock; scripts never read time)
-- Every other key a script touches is built from ARGV[1] and so carries the
-- same hash tag as KEYS: all keys live in one Cluster slot.
-- Numbers are written with int() so timestamps never turn into 1.7e+12.

local P = ARGV[1]
local FENCE = ARGV[2]
local NOW = tonumber(ARGV[3])

local function int(n)
  return string.format('%d', n)
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

local function bump()
  redis.call('INCR', KEYS[3])
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
local function k_a(aid) return P .. 'a:' .. aid end
local function k_inst(node, block) return P .. 'inst:' .. node .. ':' .. block end
-- lanes: an item's lane is its managed_by ('' = the default lane)
local function k_lanes(rid) return P .. 'r:' .. rid .. ':lanes' end
local function k_lp(rid, lane) return P .. 'r:' .. rid .. ':p:' .. (lane or '') end
local function k_lf(rid, lane) return P .. 'r:' .. rid .. ':f:' .. (lane or '') end

local function count(rid, status, delta)
  local b = BUCKET[status]
  redis.call('HINCRBY', k_r(rid), 'c_' .. b, delta)
  redis.call('HINCRBY', KEYS[4], b, delta)
end

-- set_status moves an item to status new, keeping both counter sets exact.
local function set_status(it, new, reason)
  if it.status ~= new then
    count(it.rollout, it.status, -1)
    count(it.rollout, new, 1)
    it.status = new
  end
  redis.call('HSET', k_i(it.id), 'status', new, 'reason', reason or '', 'updated_at', int(NOW))
  redis.call('HSET', k_r(it.rollout), 'updated_at', int(NOW))
end

-- maybe_complete marks an active rollout completed once every item is
-- terminal; returns 1 when it did.
local function maybe_complete(rid)
  local rk = k_r(rid)
  local r = redis.call('HMGET', rk, 'status', 'c_pending', 'c_in_progress')
  if r[1] == 'active' and num(r[2]) == 0 and num(r[3]) == 0 then
    redis.call('HSET', rk, 'status', 'completed', 'reason', '', 'updated_at', int(NOW))
    redis.call('ZREM', P .. 'active', rid)
    return 1
  end
  return 0
end

-- finish moves an item to a terminal status, frees its block instance and
-- records the outcome there; returns 1 when that completed the rollout.
local function finish(it, status, reason)
  set_status(it, status, reason)
  redis.call('HSET', k_i(it.id), 'completed_at', int(NOW), 'retry_after', '0')
  redis.call('SREM', k_lf(it.rollout, it.managed_by), it.id)
  redis.call('ZREM', k_lp(it.rollout, it.managed_by), it.id)
  redis.call('ZREM', P .. 'retry', it.id)
  redis.call('SREM', P .. 'amb:' .. it.node, it.id)
  local ik = k_inst(it.node, it.block)
  if redis.call('HGET', ik, 'active') == it.id then
    redis.call('HDEL', ik, 'active')
  end
  redis.call('HSET', ik, 'last_item', it.id, 'last_status', status,
    'last_gen', it.generation, 'last_hash', it.config_hash or '', 'last_at', int(NOW))
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
-- Returns 1 when that completed the rollout.
local function transient(it, base, maxb, jitter)
  local rc = num(it.retry_count)
  local mr = num(redis.call('HGET', k_r(it.rollout), 'max_retries'))
  redis.call('HSET', k_i(it.id), 'last_class', 'transient')
  if rc >= mr then
    return finish(it, 'failed', 'retries_exhausted')
  end
  local d = base * (2 ^ rc)
  if d > maxb then
    d = maxb
  end
  d = math.floor(d / 2 + (d / 2) * jitter)
  local at = NOW + d
  set_status(it, 'retrying', 'backoff')
  redis.call('HSET', k_i(it.id), 'retry_count', int(rc + 1), 'retry_after', int(at))
  redis.call('ZADD', P .. 'retry', int(at), it.id)
  return 0
end

-- close_attempt records an attempt's end and drops its payload (the rendered
-- config must not outlive the attempt); the hash expires later (garbage
-- collection only: no logic depends on that TTL).
local function close_attempt(aid, node, state, class)
  local ak = k_a(aid)
  redis.call('HSET', ak, 'state', state, 'class', class, 'finished_at', int(NOW))
  redis.call('HDEL', ak, 'payload')
  redis.call('PEXPIRE', ak, 604800000)
  redis.call('ZREM', P .. 'deadlines', aid)
  redis.call('LREM', P .. 'q:' .. node, 0, aid)
end

-- Wave machinery, shared by step (every lane, every call) and complete (the
-- lane of the item that just finished). WV holds the caller's settings and
-- what this call did: grace and default timeout (ms) for new deadlines, the
-- window states (id -> 0 open, else next opening ms, -1 unknown; nil = the
-- caller was not told any: a windowed item then leaves the wave to Step),
-- the fence new attempts carry and the scan limit.
local WV = { grace = 0, def_timeout = 600000, win = nil, fence = FENCE, limit = 1000,
  dispatched = 0, touched = 0, completed = 0, events = {} }

local function event(kind, rid, detail)
  WV.events[#WV.events + 1] = { kind, rid, detail }
end

-- closed_until returns nil when the item may run now (no windows, or one
-- of them open), else the next opening time in ms (0 = not known: a set
-- this call was not told about, or one that never opens); false when the
-- caller knows no window state at all.
local function closed_until(it)
  local ws = it.wset or ''
  if ws == '' then
    return nil
  end
  if WV.win == nil then
    return false
  end
  local w = WV.win[ws]
  if w == 0 then
    return nil
  end
  if w == nil or w < 0 then
    return 0
  end
  return w
end

-- set_reason records why a waiting item was not dispatched (written only
-- when it changed, so a quiet call stays cheap).
local function set_reason(it, reason, at)
  if (it.reason or '') ~= reason or num(it.retry_after) ~= at then
    redis.call('HSET', k_i(it.id), 'reason', reason, 'retry_after', int(at))
    it.reason, it.retry_after = reason, int(at)
    WV.touched = WV.touched + 1
  end
end

-- dispatch starts a new attempt of item it, queued for its node.
local function dispatch(it, wave)
  local n = num(it.attempts) + 1
  local aid = it.id .. '.' .. n
  local tmo = num(it.timeout_ms)
  if tmo <= 0 then
    tmo = WV.def_timeout
  end
  local deadline = NOW + tmo + WV.grace
  local payload = redis.call('GET', P .. 'ip:' .. it.id) or '{}'
  redis.call('HSET', k_a(aid), 'id', aid, 'item', it.id, 'rollout', it.rollout,
    'node', it.node, 'block', it.block, 'action', it.action, 'generation', it.generation,
    'target_version', it.target_version or '', 'config_hash', it.config_hash or '',
    'desired_state', it.desired_state or '', 'managed_by', it.managed_by or '',
    'fence', WV.fence, 'deadline', int(deadline), 'dispatched_at', int(NOW),
    'state', 'queued', 'payload', payload)
  redis.call('RPUSH', P .. 'q:' .. it.node, aid)
  -- wake a Poll blocked on the node (BLPOP): one token is enough, and one
  -- left over only costs a waiter an extra look at its queue; the TTL is
  -- garbage collection only (the token is useless once the attempt is due)
  local wk = P .. 'wake:' .. it.node
  redis.call('RPUSH', wk, '1')
  redis.call('LTRIM', wk, 0, 0)
  redis.call('PEXPIRE', wk, int(tmo + WV.grace))
  redis.call('ZADD', P .. 'deadlines', int(deadline), aid)
  redis.call('SADD', k_lf(it.rollout, it.managed_by), it.id)
  redis.call('ZREM', k_lp(it.rollout, it.managed_by), it.id)
  redis.call('ZREM', P .. 'retry', it.id)
  set_status(it, 'in_progress', '')
  redis.call('HSET', k_i(it.id), 'attempts', int(n), 'last_attempt', aid,
    'dispatched_at', int(NOW), 'retry_after', '0')
  if wave then
    redis.call('HSET', k_i(it.id), 'wave', int(wave))
  end
  WV.dispatched = WV.dispatched + 1
end

-- Placement. A node's capabilities and data addresses come from its last
-- full report (obs); a node that never reported has none.
local PLACE = {} -- node -> {caps = set, addr = set} or false (no report)
local function placement_of(node)
  local p = PLACE[node]
  if p == nil then
    p = false
    local raw = redis.call('HGET', P .. 'obs', node)
    if raw then
      local ok, rep = pcall(cjson.decode, raw)
      if ok and type(rep) == 'table' then
        p = { caps = {}, addr = {} }
        if type(rep.capabilities) == 'table' then
          for _, c in ipairs(rep.capabilities) do
            if type(c) == 'string' then
              p.caps[c] = true
            end
          end
        end
        if type(rep.data_addresses) == 'table' then
          for k, v in pairs(rep.data_addresses) do
            if type(k) == 'string' and type(v) == 'string' and v ~= '' then
              p.addr[k] = true
            end
          end
        end
      end
    end
    PLACE[node] = p
  end
  return p
end

-- placeable reports whether node advertises every requirement: a
-- capability, or "address:<name>" for a data address.
local function placeable(node, reqs)
  if #reqs == 0 then
    return true
  end
  local p = placement_of(node)
  if not p then
    return false
  end
  for _, r in ipairs(reqs) do
    local name = string.match(r, '^address:(.*)$')
    if name then
      if not p.addr[name] then
        return false
      end
    elseif not p.caps[r] then
      return false
    end
  end
  return true
end

-- requires_of returns an item's requirements (stored newline-separated).
local function requires_of(it, into, seen)
  into, seen = into or {}, seen or {}
  for r in string.gmatch(it.req or '', '[^\n]+') do
    if not seen[r] then
      seen[r] = true
      into[#into + 1] = r
    end
  end
  return into, seen
end

local function k_g(rid, grp) return P .. 'r:' .. rid .. ':g:' .. grp end

-- lane_wave starts the next wave of a lane of active rollout rid (record r)
-- when the lane has nothing in flight and something pending: the first
-- max_concurrent pending items in dispatch order whose window is open. A
-- split group leaves pending as a whole (its pending items count together
-- against max_concurrent; one larger than max_concurrent runs alone in its
-- wave) or waits; an item or group whose nodes do not advertise its
-- requirements is blocked (placement_rejected) before any attempt exists.
-- The scan is decided first and applied after, so a caller without window
-- states (complete) changes nothing when it meets a windowed item.
-- Returns -1 when the failure threshold halted the rollout, else the number
-- of items dispatched.
local function lane_wave(rid, r, lane)
  local rk = k_r(rid)
  local lp, lf = k_lp(rid, lane), k_lf(rid, lane)
  if redis.call('SCARD', lf) ~= 0 or redis.call('ZCARD', lp) == 0 then
    return 0
  end
  -- the threshold counts failures since the last resume
  local thr = num(r.failure_threshold_percent)
  local failed = num(r.c_failed) - num(r.thr_failed0)
  local base = num(r.c_total) - num(r.thr_total0)
  if thr > 0 and failed * 100 > thr * base then
    redis.call('HSET', rk, 'status', 'blocked', 'reason', 'failure_threshold', 'updated_at', int(NOW))
    redis.call('ZREM', P .. 'active', rid)
    event('halted', rid, 'failure_threshold')
    return -1
  end
  local mc = num(r.max_concurrent)
  if mc < 1 then
    mc = 1
  end
  local plan = {} -- {'run', items} | {'wait', items, reason, ats} | {'reject', items}
  local started, peeked = 0, 0
  local groups = {}
  local ids = redis.call('ZRANGE', lp, 0, WV.limit - 1)
  for _, id in ipairs(ids) do
    local it = hgetall(k_i(id))
    local unit = nil
    if it.status ~= 'pending' then
      redis.call('ZREM', lp, id) -- not pending any more: heal
    elseif (it.grp or '') == '' then
      unit = { it }
    elseif not groups[it.grp] then
      groups[it.grp] = true
      unit = {}
      local reqs, seen = {}, {}
      for _, mid in ipairs(redis.call('LRANGE', k_g(rid, it.grp), 0, -1)) do
        local m = it
        if mid ~= id then
          m = hgetall(k_i(mid))
        end
        requires_of(m, reqs, seen)
        if m.status == 'pending' then
          unit[#unit + 1] = m
        end
      end
      unit.reqs = reqs
    end
    if unit and #unit > 0 then
      local closed, ats = false, {}
      for i, m in ipairs(unit) do
        local at = closed_until(m)
        if at == false then
          return 0 -- window state unknown here: the next Step decides
        end
        ats[i] = at
        if at ~= nil then
          closed = true
        end
      end
      local k = #unit
      if closed then
        for i = 1, k do
          ats[i] = ats[i] or 0
        end
        plan[#plan + 1] = { 'wait', unit, 'maintenance_window', ats }
      elseif started + k <= mc or (started == 0 and k > mc) then
        local reqs = unit.reqs or requires_of(unit[1])
        local ok = true
        for _, m in ipairs(unit) do
          if not placeable(m.node, reqs) then
            ok = false
            break
          end
        end
        if ok then
          plan[#plan + 1] = { 'run', unit }
          started = started + k
        else
          plan[#plan + 1] = { 'reject', unit }
        end
      else
        -- next in line: waits for this wave of its lane
        plan[#plan + 1] = { 'wait', unit, 'lane_full', {} }
        peeked = peeked + k
        if peeked >= mc then
          break
        end
      end
    end
  end
  local wave = num(redis.call('HGET', k_lanes(rid), lane)) + 1
  for _, p in ipairs(plan) do
    for i, m in ipairs(p[2]) do
      if p[1] == 'run' then
        dispatch(m, wave)
      elseif p[1] == 'wait' then
        set_reason(m, p[3], p[4][i] or 0)
      else
        WV.completed = WV.completed + finish(m, 'blocked', 'placement_rejected')
        WV.touched = WV.touched + 1
        event('placement_rejected', rid, m.id)
      end
    end
  end
  if started > 0 then
    redis.call('HSET', k_lanes(rid), lane, int(wave))
    local top = num(redis.call('HGET', rk, 'wave'))
    if wave > top then
      top = wave
    end
    redis.call('HSET', rk, 'wave', int(top), 'reason', '', 'updated_at', int(NOW))
    event('wave', rid, lane .. '#' .. int(wave))
  end
  return started
end
