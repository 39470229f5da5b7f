-- complete: ARGV[4] node, [5] attempt id, [6] attempt fence, [7] class,
-- [8] exit code, [9] backoff base ms, [10] backoff max ms, [11] jitter,
-- [12] observed instance json ("" = none), [13] its updated_at (agent ms),
-- [14] the reported instance's generation (-1 = no instance reported).
-- Health gate: a success whose instance shows an earlier generation than
-- the item's does not count as done (a status left from an earlier revision
-- never counts); the item waits, ambiguous, for a full report that shows it.
-- O(1): it reads two short field lists and touches a fixed number of
-- keys, never a scan. When the result empties its lane's current wave, it
-- says so, and the caller starts the lane's next wave at once with
-- next_wave.lua.
-- Returns {'ok', rollouts completed, next wave due 1|0, rollout, lane} or
-- {'unknown_attempt'|'wrong_node'|'stale_attempt'}.
local node, aid = ARGV[4], ARGV[5]
local class = ARGV[7]
local a = redis.call('HMGET', k_a(aid), 'item', 'node', 'fence', 'state')
if not a[1] then
  return { 'unknown_attempt' }
end
if a[2] ~= node then
  return { 'wrong_node' }
end
if a[3] ~= ARGV[6] or (a[4] ~= 'queued' and a[4] ~= 'delivered') then
  return { 'stale_attempt' }
end
local it = load_item(a[1], COMPLETE_F)
if it.status ~= 'in_progress' or it.last_attempt ~= aid then
  return { 'stale_attempt' }
end
close_attempt(aid, node, a[4], 'done', class, 'exit_code', ARGV[8])
local done = 0
local igen = tonumber(ARGV[14]) or -1
if class == 'success' and igen >= 0 and igen < num(it.generation) and it.desired_state ~= 'absent'
    and it.op ~= '1' then
  set_status(it, 'ambiguous', 'awaiting_report', 'last_class', 'success')
  redis.call('SADD', P .. 'amb:' .. node, it.id)
elseif class == 'success' then
  done = finish(it, 'completed', '', 'last_class', 'success')
  if ARGV[12] ~= '' then
    redis.call('HSET', P .. 'obsi:' .. node, it.block, ARGV[12])
    redis.call('HSET', P .. 'obsi_at:' .. node, it.block, ARGV[13])
    redis.call('SADD', P .. 'obs_nodes', node)
  end
elseif class == 'transient' then
  done = transient(it, tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))
else
  done = finish(it, 'blocked', 'permanent_failure', 'last_class', 'permanent')
end
-- the next wave is due when this result left the lane with nothing in
-- flight and something pending: the caller starts it (next_wave.lua), so
-- this script stays small and O(1) for the other results of the wave
local due = 0
if done == 0 and redis.call('SCARD', k_lf(it.rollout, it.managed_by)) == 0
    and redis.call('ZCARD', k_lp(it.rollout, it.managed_by)) > 0 then
  due = 1
end
bump()
return { 'ok', done, due, it.rollout, it.managed_by or '' }
