-- step: the head SH (delivery grace, backoff base and max, default action
-- timeout, all ms; the batch limit; the jitter count j; the window set
-- count w), then j jitter values in [0,1), then w window states WST (id,
-- open 1|0, next opening ms or 0 = none known). The fields are named in
-- args.go (stepHead, windowStateArg).
-- Returns {'stale_fence'} or {'ok', {dispatched, expired, completed}, events}
-- where each event is {kind, rollout, detail}. The nodes whose report an
-- item now awaits are also published on the channel 'report'.
if not check_fence() then
  return { 'stale_fence' }
end
local MODE = new_mode() -- Step knows the windows and peeks
MODE.grace = tonumber(ARGV[SH.grace])
MODE.peek = true
local BASE = tonumber(ARGV[SH.backoff_base])
local MAXB = tonumber(ARGV[SH.backoff_max])
MODE.def_timeout = tonumber(ARGV[SH.def_timeout])
MODE.limit = tonumber(ARGV[SH.limit])
local LIMIT = MODE.limit
local nj = tonumber(ARGV[SH.jitters])
local jitters = {}
for i = 1, nj do
  jitters[#jitters + 1] = tonumber(ARGV[SH.after + i])
end
MODE.win = {}
for i = 0, tonumber(ARGV[SH.window_sets]) - 1 do
  local b = SH.after + nj + i * WST.n
  if ARGV[b + WST.open] == '1' then
    MODE.win[ARGV[b + WST.id]] = 0
  else
    MODE.win[ARGV[b + WST.id]] = tonumber(ARGV[b + WST.next]) or -1
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

local expired, completed = 0, 0
local wanted = {} -- nodes whose full report an item now awaits

-- 1. attempts past their deadline
local due = redis.call('ZRANGEBYSCORE', P .. 'deadlines', '-inf', now_s(), 'LIMIT', 0, LIMIT)
for _, aid in ipairs(due) do
  local it = load_item(item_of(aid) or '')
  expired = expired + 1
  if it.status == 'in_progress' and it.last_attempt == aid then
    -- still queued (no Poll popped it), or popped too late (Poll marks it
    -- undelivered): never delivered
    if it.a_state == 'undelivered' or (it.a_state == 'queued' and q_take(it.node, aid)) then
      -- never delivered: the agent is offline, a transient failure
      close_attempt(it, aid, 'expired')
      completed = completed + transient(it, BASE, MAXB, jitter())
      event('undelivered', it.rollout, it.id)
    elseif it.a_state == 'disagree' then
      -- a success whose report never showed the target: wait for a report
      close_attempt(it, aid, 'disagree')
      set_status(it, 'ambiguous', 'awaiting_report', 'last_class', 'success', 'amb_at', now_s())
      redis.call('SADD', P .. 'amb:' .. it.node, it.id)
      event('ambiguous', it.rollout, it.id .. '\n' .. it.node)
      wanted[#wanted + 1] = it.node
    else
      -- delivered, no result: never replay blindly, wait for a report
      close_attempt(it, aid, 'lost')
      set_status(it, 'ambiguous', 'awaiting_report', 'last_class', 'lost', 'amb_at', now_s())
      redis.call('SADD', P .. 'amb:' .. it.node, it.id)
      event('ambiguous', it.rollout, it.id .. '\n' .. it.node)
      wanted[#wanted + 1] = it.node
    end
  else
    -- its item moved on (cannot happen: every move closes the attempt)
    redis.call('ZREM', P .. 'deadlines', aid)
    if it.node then
      q_take(it.node, aid)
    end
  end
end

if #wanted > 0 then
  -- every hub asks these nodes' agents for a report: any of them may hold
  -- their polls (and a Step sent twice answers them only the first time)
  redis.call('PUBLISH', P .. 'report', table.concat(wanted, '\n'))
end

-- 2. retrying items whose backoff passed get a new attempt in their wave,
-- once one of their maintenance windows is open; a paused rollout holds
-- them (resume puts them back), a cancelled or superseded one skips them
-- (what it had in flight finishes; nothing of it runs again).
local ready = redis.call('ZRANGEBYSCORE', P .. 'retry', '-inf', now_s(), 'LIMIT', 0, LIMIT)
for _, id in ipairs(ready) do
  local it = load_item(id)
  if it.status ~= 'retrying' then
    redis.call('ZREM', P .. 'retry', id)
  else
    local rs = redis.call('HGET', k_r(it.rollout), 'status')
    if rs == 'cancelled' or rs == 'superseded' then
      completed = completed + finish(it, 'skipped', rs)
      WV.touched = WV.touched + 1
    elseif rs == 'paused' then
      redis.call('ZREM', P .. 'retry', id)
    else
      local at = closed_until(it, MODE.win)
      if draining(it.node) then
        -- nothing new goes to a draining node: look again in a while
        set_reason(it, 'node_draining', 0)
        redis.call('ZADD', P .. 'retry', int(NOW + 10000), id)
      elseif at == nil then
        dispatch(it, nil, MODE)
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

dispatched()

-- 3. waves, per lane: a lane whose current wave has nothing in flight
-- starts its next wave (lane_wave); lanes never wait for each other. A
-- rollout with nothing pending or in flight completes; the failure
-- threshold halts the whole rollout.
local active = redis.call('ZRANGE', P .. 'active', 0, -1)
for _, rid in ipairs(active) do
  local rk = k_r(rid)
  flush() -- r's counters must include what this call changed
  local r = hgetall(rk)
  if r.status ~= 'active' then
    redis.call('ZREM', P .. 'active', rid)
  elseif num(r.c_pending) == 0 and num(r.c_in_progress) == 0 then
    if maybe_complete(rid) == 1 then
      completed = completed + 1
      event('completed', rid, '')
    end
  else
    for _, lane in ipairs(lanes_of(rid)) do
      if lane_wave(rid, r, lane, MODE) < 0 then
        break
      end
    end
  end
end

completed = completed + WV.completed
flush()
if WV.dispatched + expired + completed + WV.touched + #WV.events > 0 then
  bump()
end
return { 'ok', { WV.dispatched, expired, completed }, WV.events }
