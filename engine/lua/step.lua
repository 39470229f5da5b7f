-- step: ARGV[4] delivery grace ms, [5] backoff base ms, [6] backoff max ms,
-- [7] default action timeout ms, [8] batch limit, [9] jitter count j, then
-- j jitter values in [0,1), then the window set count w and w triples
-- (window set id, open 1|0, next opening ms or 0 = none known).
-- Returns {'stale_fence'} or {'ok', {dispatched, expired, completed}, events}
-- where each event is {kind, rollout, detail}.
if not check_fence() then
  return { 'stale_fence' }
end
local GRACE = tonumber(ARGV[4])
local BASE = tonumber(ARGV[5])
local MAXB = tonumber(ARGV[6])
local DEF_TIMEOUT = tonumber(ARGV[7])
local LIMIT = tonumber(ARGV[8])
local nj = tonumber(ARGV[9])
local jitters = {}
for i = 10, 9 + nj do
  jitters[#jitters + 1] = tonumber(ARGV[i])
end
local wbase = 10 + nj
local WIN = {} -- window set id -> 0 when open, else next opening ms (-1 = unknown)
for i = 0, tonumber(ARGV[wbase]) - 1 do
  local b = wbase + 1 + 3 * i
  if ARGV[b + 1] == '1' then
    WIN[ARGV[b]] = 0
  else
    WIN[ARGV[b]] = tonumber(ARGV[b + 2]) or -1
  end
end
local ji = 0
local function jitter()
  if #jitters == 0 then
    return 0.5
  end
  ji = ji % #jitters + 1
  return jitters[ji]
end

local dispatched, expired, completed, touched = 0, 0, 0, 0
local events = {}
local function event(kind, rid, detail)
  events[#events + 1] = { kind, rid, detail }
end

-- closed_until returns nil when the item may run now (no windows, or one
-- of them open), else the next opening time in ms (0 = not known: a set
-- this Step was not told about, or one that never opens).
local function closed_until(it)
  local ws = it.wset or ''
  if ws == '' then
    return nil
  end
  local w = WIN[ws]
  if w == 0 then
    return nil
  end
  if w == nil or w < 0 then
    return 0
  end
  return w
end

-- set_reason records why a waiting item was not dispatched (written only
-- when it changed, so a quiet Step stays cheap).
local function set_reason(it, reason, at)
  if (it.reason or '') ~= reason or num(it.retry_after) ~= at then
    redis.call('HSET', k_i(it.id), 'reason', reason, 'retry_after', int(at))
    it.reason, it.retry_after = reason, int(at)
    touched = touched + 1
  end
end

-- dispatch starts a new attempt of item it, queued for its node.
local function dispatch(it, wave)
  local n = num(it.attempts) + 1
  local aid = it.id .. '.' .. n
  local tmo = num(it.timeout_ms)
  if tmo <= 0 then
    tmo = DEF_TIMEOUT
  end
  local deadline = NOW + tmo + GRACE
  local payload = redis.call('GET', P .. 'ip:' .. it.id) or '{}'
  redis.call('HSET', k_a(aid), 'id', aid, 'item', it.id, 'rollout', it.rollout,
    'node', it.node, 'block', it.block, 'action', it.action, 'generation', it.generation,
    'target_version', it.target_version or '', 'config_hash', it.config_hash or '',
    'desired_state', it.desired_state or '', 'managed_by', it.managed_by or '',
    'fence', FENCE, 'deadline', int(deadline), 'dispatched_at', int(NOW),
    'state', 'queued', 'payload', payload)
  redis.call('RPUSH', P .. 'q:' .. it.node, aid)
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
  dispatched = dispatched + 1
end

-- 1. attempts past their deadline
local due = redis.call('ZRANGEBYSCORE', P .. 'deadlines', '-inf', int(NOW), 'LIMIT', 0, LIMIT)
for _, aid in ipairs(due) do
  local a = hgetall(k_a(aid))
  local it = hgetall(k_i(a.item or ''))
  expired = expired + 1
  if it.status == 'in_progress' and it.last_attempt == aid then
    if a.state == 'queued' then
      -- never delivered: the agent is offline, a transient failure
      close_attempt(aid, a.node, 'expired', 'lost')
      completed = completed + transient(it, BASE, MAXB, jitter())
      event('undelivered', it.rollout, it.id)
    else
      -- delivered, no result: never replay blindly, wait for a report
      close_attempt(aid, a.node, 'lost', 'lost')
      set_status(it, 'ambiguous', 'awaiting_report')
      redis.call('HSET', k_i(it.id), 'last_class', 'lost')
      redis.call('SADD', P .. 'amb:' .. it.node, it.id)
      event('ambiguous', it.rollout, it.id)
    end
  else
    close_attempt(aid, a.node or '', 'expired', 'lost')
  end
end

-- 2. retrying items whose backoff passed get a new attempt in their wave,
-- once one of their maintenance windows is open; a paused rollout holds
-- them (resume puts them back), a cancelled one skips them.
local ready = redis.call('ZRANGEBYSCORE', P .. 'retry', '-inf', int(NOW), 'LIMIT', 0, LIMIT)
for _, id in ipairs(ready) do
  local it = hgetall(k_i(id))
  if it.status ~= 'retrying' then
    redis.call('ZREM', P .. 'retry', id)
  else
    local rs = redis.call('HGET', k_r(it.rollout), 'status')
    if rs == 'cancelled' then
      completed = completed + finish(it, 'skipped', 'cancelled')
    elseif rs == 'paused' then
      redis.call('ZREM', P .. 'retry', id)
    else
      local at = closed_until(it)
      if at == nil then
        dispatch(it, nil)
      else
        local score = at
        if score <= NOW then
          score = NOW + 60000 -- opening not known: look again in a minute
        end
        set_reason(it, 'maintenance_window', at)
        redis.call('ZADD', P .. 'retry', int(score), id)
      end
    end
  end
end

-- 3. waves, per lane: a lane whose current wave has nothing in flight
-- starts its next wave of up to max_concurrent pending items whose window
-- is open; lanes never wait for each other. A rollout with nothing pending
-- or in flight completes; the failure threshold halts the whole rollout.
local active = redis.call('ZRANGE', P .. 'active', 0, -1)
for _, rid in ipairs(active) do
  local rk = k_r(rid)
  local r = hgetall(rk)
  if r.status ~= 'active' then
    redis.call('ZREM', P .. 'active', rid)
  elseif num(r.c_pending) == 0 and num(r.c_in_progress) == 0 then
    if maybe_complete(rid) == 1 then
      completed = completed + 1
      event('completed', rid, '')
    end
  else
    local thr = num(r.failure_threshold_percent)
    local mc = num(r.max_concurrent)
    if mc < 1 then
      mc = 1
    end
    local top = num(r.wave)
    for _, lane in ipairs(lanes_of(rid)) do
      local lp, lf = k_lp(rid, lane), k_lf(rid, lane)
      if redis.call('SCARD', lf) == 0 and redis.call('ZCARD', lp) > 0 then
        -- the threshold counts failures since the last resume
        local failed = num(r.c_failed) - num(r.thr_failed0)
        local base = num(r.c_total) - num(r.thr_total0)
        if thr > 0 and failed * 100 > thr * base then
          redis.call('HSET', rk, 'status', 'blocked', 'reason', 'failure_threshold', 'updated_at', int(NOW))
          redis.call('ZREM', P .. 'active', rid)
          event('halted', rid, 'failure_threshold')
          break
        end
        local wave = num(redis.call('HGET', k_lanes(rid), lane)) + 1
        local started, peeked = 0, 0
        local ids = redis.call('ZRANGE', lp, 0, LIMIT - 1)
        for _, id in ipairs(ids) do
          local it = hgetall(k_i(id))
          if it.status ~= 'pending' then
            redis.call('ZREM', lp, id) -- not pending any more: heal
          else
            local at = closed_until(it)
            if at ~= nil then
              set_reason(it, 'maintenance_window', at)
            elseif started < mc then
              dispatch(it, wave)
              started = started + 1
            else
              -- next in line: waits for this wave of its lane
              set_reason(it, 'lane_full', 0)
              peeked = peeked + 1
              if peeked >= mc then
                break
              end
            end
          end
        end
        if started > 0 then
          redis.call('HSET', k_lanes(rid), lane, int(wave))
          if wave > top then
            top = wave
          end
          redis.call('HSET', rk, 'wave', int(top), 'reason', '', 'updated_at', int(NOW))
          event('wave', rid, lane .. '#' .. int(wave))
        end
      end
    end
  end
end

if dispatched + expired + completed + touched + #events > 0 then
  bump()
end
return { 'ok', { dispatched, expired, completed }, events }
