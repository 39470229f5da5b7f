-- release: the head RL: rollout (id), hold (the one to lift, e.g. claim). A held
-- rollout dispatches nothing (wave.lua); releasing it lets its waves
-- start at the next Step. A rollout not held, or held for another
-- reason, is left alone.
-- Returns {'stale_fence'} | {'not_found'} | {'ok', 1 when released else 0}.
if not check_fence() then
  return { 'stale_fence' }
end
local rk = k_r(ARGV[RL.rollout])
local hold = ARGV[RL.hold]
local v = redis.call('HMGET', rk, 'id', 'hold', 'reason')
if not v[1] then
  return { 'not_found' }
end
if v[2] ~= hold or hold == '' then
  return { 'ok', 0 }
end
redis.call('HSET', rk, 'hold', '', 'updated_at', now_s())
if v[3] == hold then
  redis.call('HSET', rk, 'reason', '')
end
bump()
return { 'ok', 1 }
