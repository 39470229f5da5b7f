-- complete: ARGV[4] node, [5] attempt id, [6] attempt fence, [7] class,
-- [8] exit code, [9] backoff base ms, [10] backoff max ms, [11] jitter,
-- [12] observed instance json ("" = none), [13] its updated_at (agent ms),
-- [14] delivery grace ms, [15] default action timeout ms, [16] scan limit,
-- [17] the reported instance's generation (-1 = no instance reported).
-- Health gate: a success whose instance shows an earlier generation than
-- the item's does not count as done (a status left from an earlier revision
-- never counts); the item waits, ambiguous, for a full report that shows it.
-- When the result empties its lane's current wave, the lane's next wave
-- starts here (lane_wave) under the leader's fence, so agents need not wait
-- for the next Step; that only happens while the lease is valid, and never
-- when the wave would hold a windowed item (Step knows the windows).
-- Returns {'ok', rollouts completed, attempts dispatched} or
-- {'unknown_attempt'|'wrong_node'|'stale_attempt'}.
local node, aid = ARGV[4], ARGV[5]
local class = ARGV[7]
local a = hgetall(k_a(aid))
if not a.id then
  return { 'unknown_attempt' }
end
if a.node ~= node then
  return { 'wrong_node' }
end
if a.fence ~= ARGV[6] or (a.state ~= 'queued' and a.state ~= 'delivered') then
  return { 'stale_attempt' }
end
local it = hgetall(k_i(a.item))
if it.status ~= 'in_progress' or it.last_attempt ~= aid then
  return { 'stale_attempt' }
end
close_attempt(aid, node, 'done', class)
redis.call('HSET', k_a(aid), 'exit_code', ARGV[8])
local done = 0
local igen = tonumber(ARGV[17]) or -1
if class == 'success' and igen >= 0 and igen < num(it.generation) and it.desired_state ~= 'absent' then
  redis.call('HSET', k_i(it.id), 'last_class', 'success')
  set_status(it, 'ambiguous', 'awaiting_report')
  redis.call('SADD', P .. 'amb:' .. node, it.id)
elseif class == 'success' then
  redis.call('HSET', k_i(it.id), 'last_class', 'success')
  done = finish(it, 'completed', '')
  if ARGV[12] ~= '' then
    redis.call('HSET', P .. 'obsi:' .. node, it.block, ARGV[12])
    redis.call('HSET', P .. 'obsi_at:' .. node, it.block, ARGV[13])
    redis.call('SADD', P .. 'obs_nodes', node)
  end
elseif class == 'transient' then
  done = transient(it, tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))
else
  redis.call('HSET', k_i(it.id), 'last_class', 'permanent')
  done = finish(it, 'blocked', 'permanent_failure')
end
if done == 0 then
  local lease = redis.call('HMGET', KEYS[2], 'fence', 'expires_at')
  if lease[1] and lease[1] == redis.call('GET', KEYS[1]) and num(lease[2]) > NOW then
    local r = hgetall(k_r(it.rollout))
    if r.status == 'active' then
      WV.fence = lease[1]
      WV.grace, WV.def_timeout, WV.limit = tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
      lane_wave(it.rollout, r, it.managed_by)
      done = WV.completed
    end
  end
end
bump()
return { 'ok', done, WV.dispatched }
