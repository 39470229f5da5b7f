-- report: ARGV[4] node, [5] report json (without instances), [6] sent_at ms,
-- [7] instance count, then 5 fields per instance: block, generation,
-- config_hash, state, instance json.
-- Stores the observation and resolves the node's ambiguous items.
-- Returns {'ok', resolved items, rollouts completed}.
local node = ARGV[4]
local sent = tonumber(ARGV[6])
local n = tonumber(ARGV[7])
redis.call('HSET', P .. 'obs', node, ARGV[5])
redis.call('SADD', P .. 'obs_nodes', node)
local ik, atk = P .. 'obsi:' .. node, P .. 'obsi_at:' .. node
-- Reports and attempt results race: a report taken before an attempt's
-- result arrived must not roll the observation back. An instance recorded
-- after the report was sent (agent clock on both sides) is kept as is.
local stored_at = {}
local flat = redis.call('HGETALL', atk)
for i = 1, #flat, 2 do
  stored_at[flat[i]] = tonumber(flat[i + 1]) or 0
end
local seen = {}
for i = 0, n - 1 do
  local b = 7 + i * 5
  local block = ARGV[b + 1]
  seen[block] = { gen = num(ARGV[b + 2]), hash = ARGV[b + 3], state = ARGV[b + 4] }
  if (stored_at[block] or 0) <= sent then
    redis.call('HSET', ik, block, ARGV[b + 5])
    redis.call('HSET', atk, block, sent)
  end
end
for _, block in ipairs(redis.call('HKEYS', ik)) do
  if seen[block] == nil and (stored_at[block] or 0) <= sent then
    redis.call('HDEL', ik, block)
    redis.call('HDEL', atk, block)
  end
end
local resolved, completed = 0, 0
local amb = redis.call('SMEMBERS', P .. 'amb:' .. node)
for _, id in ipairs(amb) do
  local it = hgetall(k_i(id))
  if it.status ~= 'ambiguous' then
    redis.call('SREM', P .. 'amb:' .. node, id)
  else
    local disp = num(it.dispatched_at)
    if sent > disp then
      local inst = seen[it.block]
      local done
      if it.op == '1' then
        done = false -- an operational action leaves no trace in a report
      elseif it.desired_state == 'absent' then
        done = inst == nil or inst.state == 'absent'
      else
        done = inst ~= nil and inst.gen >= num(it.generation)
          and ((it.config_hash or '') == '' or inst.hash == it.config_hash)
      end
      resolved = resolved + 1
      if done then
        completed = completed + finish(it, 'completed', '')
      elseif it.one_shot == '1' then
        completed = completed + finish(it, 'blocked', 'ambiguous_one_shot')
      elseif redis.call('HGET', k_r(it.rollout), 'status') == 'cancelled' then
        completed = completed + finish(it, 'skipped', 'cancelled')
      else
        set_status(it, 'pending', '')
        redis.call('SREM', P .. 'amb:' .. node, id)
        lf_rem(it.rollout, it.managed_by, id)
        lp_add(it.rollout, it.managed_by, it.pos, id)
      end
    end
  end
end
bump()
return { 'ok', resolved, completed }
