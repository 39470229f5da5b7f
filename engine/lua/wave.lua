-- wave.lua follows lib.lua in the scripts that start waves (step,
-- complete).
--
-- Wave machinery, shared by step (every lane, every call) and complete
-- (the lanes its results emptied).
--
-- The caller's settings are a mode, passed to the functions they change
-- (dispatch, closed_until, lane_wave):
--   fence        the fence new attempts carry
--   grace, def_timeout   ms, for new deadlines
--   limit        how many pending ids a lane's scan reads at most
--   win          window states (id -> 0 open, else next opening ms, -1
--                unknown); nil = the caller was not told any: a windowed
--                item then leaves the wave to Step
--   peek         the caller (Step) also records why the next in line of a
--                lane wait; a result's script (complete) only starts
--                waves, so that the critical path between two waves holds
--                no more than the new wave
-- new_mode returns a mode with the defaults (no windows known, no peek).
local function new_mode()
  return { fence = FENCE, grace = 0, def_timeout = 600000, limit = 1000, win = nil, peek = false }
end

-- WV tallies what this call did, for the caller's reply.
local WV = { dispatched = 0, touched = 0, completed = 0, events = {} }

local function event(kind, rid, detail)
  WV.events[#WV.events + 1] = { kind, rid, detail }
end

-- closed_until returns nil when the item may run now (no windows, or one
-- of them open), else the next opening time in ms (0 = not known: a set
-- this call was not told about, or one that never opens); false when the
-- caller knows no window state at all (win, the mode's, is nil).
local function closed_until(it, win)
  local ws = it.wset or ''
  if ws == '' then
    return nil
  end
  if win == nil then
    return false
  end
  local w = win[ws]
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
    hset_i(it.id, 'reason', reason, 'retry_after', int(at))
    it.reason, it.retry_after = reason, int(at)
    WV.touched = WV.touched + 1
  end
end

-- Set and sorted-set updates of dispatches are gathered (gather_add) and
-- written by dispatched() in one command per key, not one per item: a
-- wave of 200 writes the deadlines, the lane's pending zset and in-flight
-- set once.
local DQ = { deadlines = {}, lp = {}, lf = {}, retry = {}, lane = {}, ready = {} }
-- the pending and in-flight keys of each lane ("<rollout>\n<lane>"),
-- built once per call
local LANEKEYS = {}

-- dispatch starts a new attempt of a pending or retrying item, queued for
-- its node as the agent will receive it: "<attempt id>\n<fence>\n<deadline
-- ms>\n" followed by the item's attempt template (ip:<item>: the fields
-- and payload every attempt of the item shares). A Poll delivers it by
-- popping it (BLPOP), so an attempt still in its node's queue is one never
-- delivered. The item records the attempt (see close_attempt). The caller
-- calls dispatched() before anything reads the deadlines, retry, pending or
-- in-flight sets again. The attempt's deadline and fence come from mode.
local function dispatch(it, wave, mode)
  local n = num(it.attempts) + 1
  local aid = it.id .. '.' .. n
  local tmo = num(it.timeout_ms)
  if tmo <= 0 then
    tmo = mode.def_timeout
  end
  -- the deadline, formatted again only when the timeout differs from the
  -- last attempt's (a call's now and the mode's grace are the same for
  -- all its attempts). One value, not a table by timeout: the embedded
  -- Redis's Lua makes a table indexed by a number of milliseconds an
  -- array that long.
  local deadline = mode.dl
  if mode.dl_tmo ~= tmo then
    deadline = int(NOW + tmo + mode.grace)
    mode.dl, mode.dl_tmo = deadline, tmo
  end
  local tpl = redis.call('GET', P .. 'ip:' .. it.id) or '{}'
  redis.call('RPUSH', P .. 'q:' .. it.node, aid .. '\n' .. mode.fence .. '\n' .. deadline .. '\n' .. tpl)
  DQ.ready[#DQ.ready + 1] = it.node
  gather_add(DQ.deadlines, P .. 'deadlines', deadline, aid)
  if it.status == 'pending' then
    local lk = LANEKEYS[it.rollout .. '\n' .. (it.managed_by or '')]
    if not lk then
      lk = { k_lp(it.rollout, it.managed_by), k_lf(it.rollout, it.managed_by) }
      LANEKEYS[it.rollout .. '\n' .. (it.managed_by or '')] = lk
    end
    local lp, lf = lk[1], lk[2]
    gather_add(DQ.lp, lp, it.id)
    gather_add(DQ.lf, lf, it.id)
    DQ.lane[lp], DQ.lane[lf] = it.managed_by or '', it.managed_by or ''
  elseif it.status == 'retrying' then
    gather_add(DQ.retry, P .. 'retry', it.id) -- a retrying item stays in flight
  end
  if it.q == '1' then
    -- a queued item takes its instance now that it is free
    redis.call('HSET', k_inst(it.node, it.block), 'active', it.id)
    hset_i(it.id, 'q', '0')
    it.q = '0'
  end
  set_status(it, 'in_progress', '', 'attempts', int(n), 'last_attempt', aid,
    'dispatched_at', now_s(), 'retry_after', '0', 'a_fence', mode.fence, 'a_state', 'queued',
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
      local n = call_chunked(cmd, key, l)
      if t == DQ.lp then
        lane_count('p', DQ.lane[key], -n)
      elseif t == DQ.lf then
        lane_count('f', DQ.lane[key], n)
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
local NO_REQS = {} -- read only: what requires_of returns for an item without any
local function requires_of(it, into, seen)
  if into == nil and (it.req or '') == '' then
    return NO_REQS, nil
  end
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
-- dispatched to them; their items wait with reason node_draining. No
-- script that reads it changes it: a fleet without any draining node asks
-- once per script, not once per node.
local DRAIN, ANY_DRAINING = {}, nil
local function draining(node)
  if ANY_DRAINING == nil then
    ANY_DRAINING = redis.call('SCARD', P .. 'drain') > 0
  end
  if not ANY_DRAINING then
    return false
  end
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
-- finishing, manual requests of the same BRC); and the finished rollouts
-- with nothing in flight, which leave the budget's set (the caller removes
-- them). No budget: no bound. It reads only.
local function budget_room(rid, r, lane)
  local b = r.budget or ''
  local cap = num(r.budget_cap)
  local idle = {}
  if b == '' or cap < 1 then
    return math.huge, idle
  end
  local bk = P .. 'bud:' .. b
  local n = 0
  for _, other in ipairs(redis.call('SMEMBERS', bk)) do
    local c = redis.call('SCARD', k_lf(other, lane))
    n = n + c
    if c == 0 and other ~= rid then
      local st = redis.call('HGET', k_r(other), 'status')
      if st ~= 'active' and st ~= 'paused' and st ~= 'blocked' then
        local empty = true
        for _, l in ipairs(lanes_of(other)) do
          if redis.call('SCARD', k_lf(other, l)) > 0 then
            empty = false
            break
          end
        end
        if empty then
          idle[#idle + 1] = other
        end
      end
    end
  end
  return cap - n, idle
end

-- A lane's next wave is decided in three steps: lane_scan reads what the
-- lane has, lane_plan decides from that alone which items the wave takes
-- and why the others wait, lane_apply writes the decision. Nothing is
-- written before the plan is complete, so a caller without window states
-- (complete) that meets a windowed item writes only housekeeping (the
-- heals of the pending zset, the idle rollouts out of the budget's set).

-- unit_facts reads what decides a unit (the pending items that leave
-- together) and returns it: held ('node_draining' when a node drains,
-- else 'instance_busy' when a queued item waits for its instance) and,
-- when full says it may start and it is not held, placeable (whether
-- every node advertises the unit's requirements).
local function unit_facts(unit, full)
  for _, m in ipairs(unit) do
    if not m.node then
      m.node, m.block, m.q = unpack(redis.call('HMGET', k_i(m.id), 'node', 'block', 'q'))
    end
    if draining(m.node) then
      unit.held = 'node_draining'
      break
    elseif busy(m) then
      unit.held = 'instance_busy'
    end
  end
  if full and not unit.held then
    local reqs = unit.reqs or requires_of(unit[1])
    unit.placeable = true
    for _, m in ipairs(unit) do
      if not placeable(m.node, reqs) then
        unit.placeable = false
        break
      end
    end
  end
  return unit
end

-- lane_scan reads what lane of active rollout rid (record r) has for a
-- wave under mode.
-- Inputs: the rollout's record r (counters, limits, budget, hold), the
-- lane's pending zset, in-flight set, current wave and peek marker, the
-- budget's rollouts.
-- Output: nil when no wave can start and there is nothing to peek at (no
-- pending item; held, e.g. until its claim is in Git; a wave in flight and
-- the caller does not peek, or already peeked at that wave); otherwise a
-- scan: rid, lane, r, mc (max_concurrent, at least 1), inflight (the lane
-- has a wave in flight), wave (the lane's current wave), room (what its
-- budget lets it start; nil when in flight), idle (rollouts to drop from
-- the budget's set), heals (ids in the pending zset that are not pending
-- any more) and next(full), which returns the next unit in dispatch order
-- or nil at the end (or at mode.limit ids read, or max_concurrent and 64 more when larger).
-- A unit is the pending items that leave together (one item, or the
-- pending members of a split group, with reqs: their requirements) with
-- the facts the plan needs (unit_facts). Units are read lazily,
-- in chunks: a wave rarely looks beyond 2*mc items, and reading up to
-- mode.limit ids at once costs more than the wave itself; full also
-- chooses how much of an item to load.
local function lane_scan(rid, r, lane, mode)
  local rk = k_r(rid)
  local lp, lf = k_lp(rid, lane), k_lf(rid, lane)
  if redis.call('ZCARD', lp) == 0 then
    return nil
  end
  if (r.hold or '') ~= '' then
    return nil
  end
  local s = { rid = rid, lane = lane, r = r, heals = {}, idle = {} }
  s.mc = num(r.max_concurrent)
  if s.mc < 1 then
    s.mc = 1
  end
  s.inflight = redis.call('SCARD', lf) ~= 0
  local cur = redis.call('HGET', k_lanes(rid), lane) or '0'
  s.wave = num(cur)
  if s.inflight then
    if not mode.peek or redis.call('HGET', rk .. ':peek', lane) == cur then
      return nil
    end
  else
    s.room, s.idle = budget_room(rid, r, lane)
  end

  -- a wave may take max_concurrent items: the scan reads at least that
  -- many (and some more, for items that cannot leave now)
  local limit = math.max(mode.limit, s.mc + 64)
  local chunk = math.min(limit, 2 * s.mc + 64)
  local ids, read, i = nil, 0, 0
  local groups = {}
  -- next_id returns the next pending id, reading the zset chunk by chunk
  -- (the heals stay in it until lane_apply: the offsets hold)
  local function next_id()
    if ids == nil then
      ids = redis.call('ZRANGE', lp, 0, chunk - 1)
      read = #ids
    end
    i = i + 1
    local id = ids[i]
    if not id then
      if #ids < chunk or read >= limit then
        return nil
      end
      ids = redis.call('ZRANGE', lp, read, read + math.min(chunk, limit - read) - 1)
      read, i = read + #ids, 1
      id = ids[1]
    end
    return id
  end
  function s.next(full)
    while true do
      local id = next_id()
      if not id then
        return nil
      end
      -- an item this wave cannot start any more needs only what decides
      -- its reason
      local it = load_item(id, full and ITEM_RUN_F or ITEM_SCAN_F)
      local unit = nil
      if it.status ~= 'pending' then
        s.heals[#s.heals + 1] = id
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
      if unit and #unit > 0 then
        return unit_facts(unit, full)
      end
    end
  end
  return s
end

-- lane_plan decides the wave from scan s alone (it reads nothing else; it
-- pulls s's units in order, telling the scan whether the next one may
-- still start).
-- Inputs: s and mode (win: the window states; peek).
-- Output: a plan: halt (the failure threshold halts the rollout: nothing
-- else happens), none (no room and no peek, or a wave below the cap
-- while the rollout fills: nothing to write), abandon (a windowed item
-- and no window states: the next Step decides), started
-- (items the wave takes) and steps, in dispatch order: {'run', unit} |
-- {'wait', unit, reason, ats (per item: the next opening, maintenance
-- windows only)} | {'reject', unit} (placement_rejected).
-- The wave takes the first units, up to max_concurrent items (the room
-- the budget leaves), that are not held, whose windows are open and whose
-- nodes advertise their requirements; a split group leaves as a whole
-- (one larger than max_concurrent runs alone in its wave) or waits; with
-- peek, the units that wait for the next wave (lane_full) are looked at
-- up to max_concurrent items, and so is the lane of a wave in flight.
local function lane_plan(s, mode)
  local r = s.r
  local p = { steps = {}, started = 0 }
  local cap = s.mc -- how many items may start
  if s.inflight then
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
      p.halt = true
      return p
    end
    -- the BRC's cap holds across its rollouts and generations
    if s.room < cap then
      cap = math.max(s.room, 0)
      if cap == 0 and not mode.peek then
        p.none = true
        return p
      end
    end
  end
  local steps = p.steps
  local started, peeked = 0, 0
  while true do
    if started >= cap and cap > 0 and not mode.peek then
      break -- the wave is full and the next in line are left to Step
    end
    local unit = s.next(started < cap)
    if not unit then
      break
    end
    if unit.held then
      steps[#steps + 1] = { 'wait', unit, unit.held, {} }
    else
      local closed, ats = false, {}
      for i, m in ipairs(unit) do
        local at = closed_until(m, mode.win)
        if at == false then
          p.abandon = true -- window state unknown here: the next Step decides
          return p
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
        steps[#steps + 1] = { 'wait', unit, 'maintenance_window', ats }
      elseif cap > 0 and (started + k <= cap or (started == 0 and k > cap)) then
        if unit.placeable then
          steps[#steps + 1] = { 'run', unit }
          started = started + k
        else
          steps[#steps + 1] = { 'reject', unit }
        end
      else
        -- next in line: waits for this wave of its lane
        steps[#steps + 1] = { 'wait', unit, 'lane_full', {} }
        peeked = peeked + k
        if peeked >= s.mc then
          break
        end
      end
    end
  end
  -- a rollout still filling (its chunks coming: fill_until, see
  -- create_rollout) starts no wave below its cap, which would be as small
  -- as the chunks created so far; its last chunk or the mark's expiry
  -- lets it start
  if started > 0 and started < cap and num(r.fill_until) > NOW then
    p.none = true
    return p
  end
  p.started = started
  return p
end

-- lane_apply writes plan p of scan s under mode.
-- Inputs: s (rid, lane, wave, idle, heals) and p.
-- Writes: a halt (the rollout blocked, failure_threshold; its outbox entry
-- and event); otherwise the budget's idle rollouts dropped, the heals out
-- of the pending zset, and unless p is none or abandoned: the attempts of
-- the 'run' units (the lane's next wave), the reasons of the waiting items
-- (written only when changed), the rejected items blocked, the lane's peek
-- marker (with mode.peek), and the lane's and rollout's wave.
-- Output: -1 when the rollout halted, else the number of items dispatched.
local function lane_apply(s, p, mode)
  local rid, lane = s.rid, s.lane
  local rk = k_r(rid)
  if p.halt then
    redis.call('HSET', rk, 'status', 'blocked', 'reason', 'failure_threshold', 'updated_at', now_s())
    redis.call('ZREM', P .. 'active', rid)
    outbox_rollout(rid, 'blocked', 'failure_threshold')
    event('halted', rid, 'failure_threshold')
    return -1
  end
  for _, other in ipairs(s.idle) do
    redis.call('SREM', P .. 'bud:' .. s.r.budget, other)
  end
  for _, id in ipairs(s.heals) do
    lp_rem(rid, lane, id) -- not pending any more
  end
  if p.none or p.abandon then
    return 0
  end
  local wave = s.wave + 1
  for _, step in ipairs(p.steps) do
    for i, m in ipairs(step[2]) do
      if step[1] == 'run' then
        dispatch(m, wave, mode)
      elseif step[1] == 'wait' then
        set_reason(m, step[3], step[4][i] or 0)
      end
    end
  end
  dispatched()
  for _, step in ipairs(p.steps) do
    if step[1] == 'reject' then
      for _, m in ipairs(step[2]) do
        if not m.generation then
          m = load_item(m.id) -- finish needs the whole item
        end
        WV.completed = WV.completed + finish(m, 'blocked', 'placement_rejected')
        WV.touched = WV.touched + 1
        event('placement_rejected', rid, m.id)
      end
    end
  end
  local started = p.started
  if mode.peek then
    redis.call('HSET', rk .. ':peek', lane, int(started > 0 and wave or wave - 1))
  end
  if started > 0 then
    redis.call('HSET', k_lanes(rid), lane, int(wave))
    local top = num(redis.call('HGET', rk, 'wave'))
    if wave > top then
      top = wave
    end
    redis.call('HSET', rk, 'wave', int(top), 'reason', '', 'updated_at', now_s())
    event('wave', rid, lane .. '#' .. int(wave))
  end
  return started
end

-- lane_wave starts the next wave of a lane of active rollout rid (record r)
-- under mode when the lane has nothing in flight and something pending
-- (see lane_plan for which items), and with mode.peek records why the
-- next in line wait (lane_full, maintenance_window), once per wave for a
-- lane whose wave is in flight (r:<id>:peek holds the lane's wave last
-- looked at), so a wave started by a result gets its reasons from the
-- next Step. Returns -1 when the failure threshold halted the rollout,
-- else the number of items dispatched.
local function lane_wave(rid, r, lane, mode)
  local s = lane_scan(rid, r, lane, mode)
  if not s then
    return 0
  end
  return lane_apply(s, lane_plan(s, mode), mode)
end
