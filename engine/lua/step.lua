-- step: ARGV[4] delivery grace ms, [5] backoff base ms, [6] backoff max ms,
-- [7] default action timeout ms, [8] batch limit, [9..] jitter values in [0,1).
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
local jitters = {}
for i = 9, #ARGV do
  jitters[#jitters + 1] = tonumber(ARGV[i])
end
local ji = 0
local function jitter()
  if #jitters == 0 then
    return 0.5
  end
  ji = ji % #jitters + 1
  return jitters[ji]
end

local dispatched, expired, completed = 0, 0, 0
local events = {}
local function event(kind, rid, detail)
  events[#events + 1] = { kind, rid, detail }
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
  redis.call('SADD', k_r(it.rollout) .. ':inflight', it.id)
  redis.call('ZREM', k_r(it.rollout) .. ':pending', it.id)
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

-- 2. retrying items whose backoff passed get a new attempt in their wave
local ready = redis.call('ZRANGEBYSCORE', P .. 'retry', '-inf', int(NOW), 'LIMIT', 0, LIMIT)
for _, id in ipairs(ready) do
  redis.call('ZREM', P .. 'retry', id)
  local it = hgetall(k_i(id))
  if it.status == 'retrying' then
    dispatch(it, nil)
  end
end

-- 3. waves: a rollout whose current wave has nothing in flight either
-- completes, halts on its failure threshold, or starts its next wave.
local active = redis.call('ZRANGE', P .. 'active', 0, -1)
for _, rid in ipairs(active) do
  local rk = k_r(rid)
  local r = hgetall(rk)
  if r.status ~= 'active' then
    redis.call('ZREM', P .. 'active', rid)
  elseif redis.call('SCARD', rk .. ':inflight') == 0 then
    local thr = num(r.failure_threshold_percent)
    if redis.call('ZCARD', rk .. ':pending') == 0 then
      if maybe_complete(rid) == 1 then
        completed = completed + 1
        event('completed', rid, '')
      end
    elseif thr > 0 and num(r.c_failed) * 100 > thr * num(r.c_total) then
      redis.call('HSET', rk, 'status', 'blocked', 'reason', 'failure_threshold', 'updated_at', int(NOW))
      redis.call('ZREM', P .. 'active', rid)
      event('halted', rid, 'failure_threshold')
    else
      local mc = num(r.max_concurrent)
      if mc < 1 then
        mc = 1
      end
      local wave = num(r.wave) + 1
      local ids = redis.call('ZRANGE', rk .. ':pending', 0, mc - 1)
      local started = 0
      for _, id in ipairs(ids) do
        local it = hgetall(k_i(id))
        if it.status == 'pending' then
          dispatch(it, wave)
          started = started + 1
        else
          redis.call('ZREM', rk .. ':pending', id) -- not pending any more: heal
        end
      end
      if started > 0 then
        redis.call('HSET', rk, 'wave', int(wave), 'reason', '', 'updated_at', int(NOW))
        event('wave', rid, int(wave))
      end
    end
  end
end

if dispatched + expired + completed + #events > 0 then
  bump()
end
return { 'ok', { dispatched, expired, completed }, events }
