-- wave.lua follows lib.lua in the scripts that start waves (step,
-- complete).
--
-- Wave machinery, shared by step (every lane, every call) and complete
-- (the lanes its results emptied). WV holds the caller's settings and
-- what this call did: grace and default timeout (ms) for new deadlines, the
-- window states (id -> 0 open, else next opening ms, -1 unknown; nil = the
-- caller was not told any: a windowed item then leaves the wave to Step),
-- the fence new attempts carry and the scan limit.
-- peek says the caller (Step) also records why the next in line of a lane
-- wait; a result's script (complete) only starts waves, so that the
-- critical path between two waves holds no more than the new wave.
local WV = { grace = 0, def_timeout = 600000, win = nil, fence = FENCE, limit = 1000,
  peek = false, dispatched = 0, touched = 0, completed = 0, events = {} }

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

-- Set and sorted-set updates of dispatches are gathered and written by
-- dispatched() in one command per key, not one per item: a wave of 200
-- writes the deadlines, the lane's pending zset and in-flight set once.
local DQ = { deadlines = {}, lp = {}, lf = {}, retry = {}, lane = {}, ready = {} }

local function dq_add(t, key, a, b)
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

-- dispatch starts a new attempt of a pending or retrying item, queued for
-- its node as the agent will receive it: "<attempt id>\n<fence>\n<deadline
-- ms>\n" followed by the item's attempt template (ip:<item>: the fields
-- and payload every attempt of the item shares). A Poll delivers it by
-- popping it (BLPOP), so an attempt still in its node's queue is one never
-- delivered. The item records the attempt (see close_attempt). The caller
-- calls dispatched() before anything reads the deadlines, retry, pending or
-- in-flight sets again.
local function dispatch(it, wave)
  local n = num(it.attempts) + 1
  local aid = it.id .. '.' .. n
  local tmo = num(it.timeout_ms)
  if tmo <= 0 then
    tmo = WV.def_timeout
  end
  local deadline = int(NOW + tmo + WV.grace)
  local tpl = redis.call('GET', P .. 'ip:' .. it.id) or '{}'
  redis.call('RPUSH', P .. 'q:' .. it.node, aid .. '\n' .. WV.fence .. '\n' .. deadline .. '\n' .. tpl)
  DQ.ready[#DQ.ready + 1] = it.node
  dq_add(DQ.deadlines, P .. 'deadlines', deadline, aid)
  if it.status == 'pending' then
    local lp, lf = k_lp(it.rollout, it.managed_by), k_lf(it.rollout, it.managed_by)
    dq_add(DQ.lp, lp, it.id)
    dq_add(DQ.lf, lf, it.id)
    DQ.lane[lp], DQ.lane[lf] = it.managed_by or '', it.managed_by or ''
  elseif it.status == 'retrying' then
    dq_add(DQ.retry, P .. 'retry', it.id) -- a retrying item stays in flight
  end
  if it.q == '1' then
    -- a queued item takes its instance now that it is free
    redis.call('HSET', k_inst(it.node, it.block), 'active', it.id)
    redis.call('HSET', k_i(it.id), 'q', '0')
    it.q = '0'
  end
  set_status(it, 'in_progress', '', 'attempts', int(n), 'last_attempt', aid,
    'dispatched_at', int(NOW), 'retry_after', '0', 'a_fence', WV.fence, 'a_state', 'queued',
    'wave', wave and int(wave) or it.wave or '0') -- a retry stays in its wave
  WV.dispatched = WV.dispatched + 1
end

-- dispatched writes what dispatch gathered, in chunks (unpack has limits),
-- and publishes the nodes it queued for.
local function dispatched()
  for cmd, t in pairs({ ZADD = DQ.deadlines, ZREM = DQ.lp, SADD = DQ.lf, ZREM_R = DQ.retry }) do
    if cmd == 'ZREM_R' then
      cmd = 'ZREM'
    end
    for key, l in pairs(t) do
      local step = 1000 -- even: ZADD takes score/member pairs
      for i = 1, #l, step do
        local n = redis.call(cmd, key, unpack(l, i, math.min(i + step - 1, #l)))
        if t == DQ.lp then
          lane_count('p', DQ.lane[key], -n)
        elseif t == DQ.lf then
          lane_count('f', DQ.lane[key], n)
        end
      end
    end
  end
  -- announce the queued nodes to the waiting Polls (deliver.go), once
  if #DQ.ready > 0 then
    redis.call('PUBLISH', P .. 'ready', table.concat(DQ.ready, '\n'))
  end
  DQ = { deadlines = {}, lp = {}, lf = {}, retry = {}, lane = {}, ready = {} }
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

-- Draining nodes (the set 'drain', replaced by SetDrained): nothing new is
-- dispatched to them; their items wait with reason node_draining.
local DRAIN = {}
local function draining(node)
  local d = DRAIN[node]
  if d == nil then
    d = redis.call('SISMEMBER', P .. 'drain', node) == 1
    DRAIN[node] = d
  end
  return d
end

-- busy says whether a queued item (q = '1', created behind the item that
-- held its instance) must still wait: another active item holds the
-- instance.
local function busy(it)
  if it.q ~= '1' then
    return false
  end
  local holder = redis.call('HGET', k_inst(it.node, it.block), 'active')
  if not holder or holder == it.id then
    return false
  end
  local st = redis.call('HGET', k_i(holder), 'status')
  return st ~= false and st ~= nil and ACTIVE[st] == true
end

-- budget_room returns how many more items lane may put in flight under
-- the rollout's budget (its BRC): budget_cap minus the items in flight in
-- that lane of every rollout sharing the budget (older generations
-- finishing, manual requests of the same BRC). Finished rollouts with
-- nothing in flight leave the budget's set. No budget: no bound.
local function budget_room(rid, r, lane)
  local b = r.budget or ''
  local cap = num(r.budget_cap)
  if b == '' or cap < 1 then
    return math.huge
  end
  local bk = P .. 'bud:' .. b
  local n = 0
  for _, other in ipairs(redis.call('SMEMBERS', bk)) do
    local c = redis.call('SCARD', k_lf(other, lane))
    n = n + c
    if c == 0 and other ~= rid then
      local st = redis.call('HGET', k_r(other), 'status')
      if st ~= 'active' and st ~= 'paused' and st ~= 'blocked' then
        local idle = true
        for _, l in ipairs(lanes_of(other)) do
          if redis.call('SCARD', k_lf(other, l)) > 0 then
            idle = false
            break
          end
        end
        if idle then
          redis.call('SREM', bk, other)
        end
      end
    end
  end
  return cap - n
end

-- lane_wave starts the next wave of a lane of active rollout rid (record r)
-- when the lane has nothing in flight and something pending: the first
-- max_concurrent pending items in dispatch order whose window is open. A
-- split group leaves pending as a whole (its pending items count together
-- against max_concurrent; one larger than max_concurrent runs alone in its
-- wave) or waits; an item or group whose nodes do not advertise its
-- requirements is blocked (placement_rejected) before any attempt exists.
-- With WV.peek it also records why the next in line wait (lane_full,
-- maintenance_window), and does so once per wave for a lane whose wave is
-- in flight (r:<id>:peek holds the lane's wave last looked at), so a wave
-- started by a result gets its reasons from the next Step.
-- The scan is decided first and applied after, so a caller without window
-- states (complete) changes nothing when it meets a windowed item.
-- Returns -1 when the failure threshold halted the rollout, else the number
-- of items dispatched.
local function lane_wave(rid, r, lane)
  local rk = k_r(rid)
  local lp, lf = k_lp(rid, lane), k_lf(rid, lane)
  if redis.call('ZCARD', lp) == 0 then
    return 0
  end
  if (r.hold or '') ~= '' then
    return 0 -- held (e.g. until its claim is in Git): nothing starts
  end
  local mc = num(r.max_concurrent)
  if mc < 1 then
    mc = 1
  end
  local cap = mc -- how many items may start
  if redis.call('SCARD', lf) ~= 0 then
    if not WV.peek then
      return 0
    end
    local cur = redis.call('HGET', k_lanes(rid), lane) or '0'
    if redis.call('HGET', rk .. ':peek', lane) == cur then
      return 0
    end
    cap = 0 -- a wave is in flight: only the reasons of the next in line
  else
    -- the threshold counts failures since the last resume
    local thr = num(r.failure_threshold_percent)
    local count = num(r.failure_threshold)
    local failed = num(r.c_failed) - num(r.thr_failed0)
    local base = num(r.c_total) - num(r.thr_total0)
    -- halted by whichever threshold is reached first: more than thr % of
    -- the items, or count items, failed since the last resume
    if (thr > 0 and failed * 100 > thr * base) or (count > 0 and failed >= count) then
      redis.call('HSET', rk, 'status', 'blocked', 'reason', 'failure_threshold', 'updated_at', int(NOW))
      redis.call('ZREM', P .. 'active', rid)
      outbox_rollout(rid, 'blocked', 'failure_threshold')
      event('halted', rid, 'failure_threshold')
      return -1
    end
    -- the BRC's cap holds across its rollouts and generations
    local room = budget_room(rid, r, lane)
    if room < cap then
      cap = math.max(room, 0)
      if cap == 0 and not WV.peek then
        return 0
      end
    end
  end
  local plan = {} -- {'run', items} | {'wait', items, reason, ats} | {'reject', items}
  local started, peeked = 0, 0
  local groups = {}
  -- read the pending ids in chunks: a wave rarely looks beyond 2*mc items,
  -- and reading up to WV.limit ids at once costs more than the wave itself
  local chunk = math.min(WV.limit, 2 * mc + 64)
  local ids = redis.call('ZRANGE', lp, 0, chunk - 1)
  local read, healed, i = #ids, 0, 0
  while true do
    i = i + 1
    local id = ids[i]
    if not id then
      if #ids < chunk or read >= WV.limit then
        break
      end
      -- healing removed entries before the cursor only
      local off = read - healed
      ids = redis.call('ZRANGE', lp, off, off + math.min(chunk, WV.limit - read) - 1)
      read, i = read + #ids, 1
      id = ids[1]
      if not id then
        break
      end
    end
    -- an item this wave cannot start any more needs only what decides
    -- its reason
    if started >= cap and cap > 0 and not WV.peek then
      break -- the wave is full and the next in line are left to Step
    end
    local it = load_item(id, started < cap and ITEM_RUN_F or ITEM_SCAN_F)
    local unit = nil
    if it.status ~= 'pending' then
      lp_rem(rid, lane, id) -- not pending any more: heal
      healed = healed + 1
    elseif (it.grp or '') == '' then
      unit = { it }
    elseif not groups[it.grp] then
      groups[it.grp] = true
      unit = {}
      local reqs, seen = {}, {}
      for _, mid in ipairs(redis.call('LRANGE', k_g(rid, it.grp), 0, -1)) do
        local m = load_item(mid)
        requires_of(m, reqs, seen)
        if m.status == 'pending' then
          unit[#unit + 1] = m
        end
      end
      unit.reqs = reqs
    end
    local held = nil
    if unit and #unit > 0 then
      for _, m in ipairs(unit) do
        if not m.node then
          m.node, m.block, m.q = unpack(redis.call('HMGET', k_i(m.id), 'node', 'block', 'q'))
        end
        if draining(m.node) then
          held = 'node_draining'
          break
        elseif busy(m) then
          held = 'instance_busy'
        end
      end
    end
    if held then
      plan[#plan + 1] = { 'wait', unit, held, {} }
    elseif unit and #unit > 0 then
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
      elseif cap > 0 and (started + k <= cap or (started == 0 and k > cap)) then
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
      end
    end
  end
  dispatched()
  for _, p in ipairs(plan) do
    if p[1] == 'reject' then
      for _, m in ipairs(p[2]) do
        if not m.generation then
          m = load_item(m.id) -- finish needs the whole item
        end
        WV.completed = WV.completed + finish(m, 'blocked', 'placement_rejected')
        WV.touched = WV.touched + 1
        event('placement_rejected', rid, m.id)
      end
    end
  end
  if WV.peek then
    redis.call('HSET', rk .. ':peek', lane, int(started > 0 and wave or wave - 1))
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
