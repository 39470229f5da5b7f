-- set_state: the head SS: rollout (id), action (pause|resume|cancel), actor.
--   pause:  active|blocked -> paused; nothing new is dispatched (retries
--           are held), attempts in flight finish.
--   resume: paused|blocked -> active; the failure threshold counts again
--           from here (failures before the resume no longer count), held
--           retries are put back.
--   cancel: active|paused|blocked -> cancelled; pending and retrying items
--           are skipped (reason cancelled), attempts in flight finish.
-- A rollout already in the wanted state is left alone.
-- Returns {'stale_fence'} | {'not_found'} | {'invalid', status} |
-- {'ok', new status, changed 1|0, items skipped}.
if not check_fence() then
  return { 'stale_fence' }
end
local rid, action, actor = ARGV[SS.rollout], ARGV[SS.action], ARGV[SS.actor]
local rk = k_r(rid)
local r = hgetall(rk)
if not r.id then
  return { 'not_found' }
end
local from = r.status
local to = ({ pause = 'paused', resume = 'active', cancel = 'cancelled' })[action]
if not to then
  return { 'invalid', from }
end
if from == to then
  return { 'ok', to, 0, 0 }
end
if from == 'completed' or from == 'cancelled' or (action == 'resume' and from == 'active') then
  return { 'invalid', from }
end
local skipped = 0
if action == 'pause' then
  redis.call('HSET', rk, 'status', 'paused', 'reason', 'paused')
  redis.call('ZREM', P .. 'active', rid)
elseif action == 'resume' then
  redis.call('HSET', rk, 'status', 'active', 'reason', '',
    'thr_failed0', int(num(r.c_failed)),
    'thr_total0', int(num(r.c_done) + num(r.c_failed) + num(r.c_skipped)))
  redis.call('ZADD', P .. 'active', num(r.seq), rid)
  for _, lane in ipairs(lanes_of(rid)) do
    for _, id in ipairs(redis.call('SMEMBERS', k_lf(rid, lane))) do
      local it = redis.call('HMGET', k_i(id), 'status', 'retry_after')
      if it[1] == 'retrying' then
        redis.call('ZADD', P .. 'retry', num(it[2]), id)
      end
    end
  end
else
  redis.call('HSET', rk, 'status', 'cancelled', 'reason', 'cancelled')
  redis.call('ZREM', P .. 'active', rid)
  for _, lane in ipairs(lanes_of(rid)) do
    for _, id in ipairs(redis.call('ZRANGE', k_lp(rid, lane), 0, -1)) do
      local it = hgetall(k_i(id))
      if it.status == 'pending' then
        finish(it, 'skipped', 'cancelled')
        skipped = skipped + 1
      end
    end
    for _, id in ipairs(redis.call('SMEMBERS', k_lf(rid, lane))) do
      local it = hgetall(k_i(id))
      if it.status == 'retrying' then
        finish(it, 'skipped', 'cancelled')
        skipped = skipped + 1
      end
    end
  end
end
redis.call('HSET', rk, 'updated_at', now_s(), 'state_action', action,
  'state_actor', actor, 'state_at', now_s())
outbox_rollout(rid, to, action)
redis.call('RPUSH', rk .. ':history',
  cjson.encode({ action = action, actor = actor, at = now_s(), from = from, to = to }))
if action == 'resume' then
  maybe_complete(rid)
end
bump()
return { 'ok', to, 1, skipped }
