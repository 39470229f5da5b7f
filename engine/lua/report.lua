-- report: the head RH (node, report: json without instances, with the
-- journalled attempt ids; sent_at ms; the instance count), then the
-- instances IN (block, generation, config_hash, state, version, json).
-- The fields are named in args.go (reportHead, instanceArg).
-- Stores the observation and resolves the node's ambiguous items.
-- Returns {'ok', resolved items, rollouts completed}.
local node = ARGV[RH.node]
local sent = tonumber(ARGV[RH.sent_at])
local n = tonumber(ARGV[RH.instances])
redis.call('HSET', P .. 'obs', node, ARGV[RH.report])
observed(node)
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
  local b = RH.after + i * IN.n
  local block = ARGV[b + IN.block]
  seen[block] = { gen = num(ARGV[b + IN.generation]), hash = ARGV[b + IN.config_hash],
    state = ARGV[b + IN.state], version = ARGV[b + IN.version] }
  if (stored_at[block] or 0) <= sent then
    redis.call('HSET', ik, block, ARGV[b + IN.json])
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
-- the attempts the agent journalled (ran or refused), by item, read from
-- the report only when an item needs them
local journal = nil
local function journalled(item)
  if journal == nil then
    journal = {}
    local ok, rep = pcall(cjson.decode, ARGV[RH.report])
    if ok and type(rep) == 'table' and type(rep.attempts) == 'table' then
      for _, a in ipairs(rep.attempts) do
        if type(a) == 'string' then
          local iid = item_of(a)
          if iid then
            journal[iid] = true
          end
        end
      end
    end
  end
  return journal[item] == true
end

-- ended returns the status of a rollout that runs nothing again
-- (cancelled, superseded), or nil.
local function ended(rid)
  local st = redis.call('HGET', k_r(rid), 'status')
  if st == 'cancelled' or st == 'superseded' then
    return st
  end
  return nil
end

local function shows(it)
  local inst = seen[it.block]
  if it.op == '1' then
    return false -- an operational action leaves no trace in a report
  end
  if inst == nil then
    return agrees(it, -1, '', '')
  end
  return agrees(it, inst.gen, inst.version, inst.state)
    and ((it.config_hash or '') == '' or inst.hash == it.config_hash)
end
local amb = redis.call('SMEMBERS', P .. 'amb:' .. node)
for _, id in ipairs(amb) do
  local it = hgetall(k_i(id))
  if it.status == 'in_progress' and it.a_state == 'disagree' then
    -- a success the result's own instance did not confirm: a later full
    -- report that shows the target completes it
    if sent > num(it.dispatched_at) and shows(it) then
      redis.call('ZREM', P .. 'deadlines', it.last_attempt)
      it.more = { 'a_state', 'done' }
      redis.call('SREM', P .. 'amb:' .. node, id)
      resolved = resolved + 1
      completed = completed + finish(it, 'completed', '', 'last_class', 'success')
    end
  elseif it.status ~= 'ambiguous' then
    redis.call('SREM', P .. 'amb:' .. node, id)
  elseif sent > num(it.dispatched_at) and not (it.one_shot == '1' and sent <= num(it.amb_at)
      and not journalled(id) and not shows(it)) then
    -- (a one-shot item the report does not journal waits for a report sent
    -- after it became ambiguous: before, its attempt may still reach the
    -- agent)
    resolved = resolved + 1
    local over = ended(it.rollout)
    if shows(it) then
      completed = completed + finish(it, 'completed', '')
    elseif it.last_class == 'success' then
      -- the agent said success, yet neither its result nor a later report
      -- shows the target: a human must look (never run again blindly)
      completed = completed + finish(it, 'blocked', 'report_mismatch')
    elseif it.one_shot == '1' and journalled(id) then
      -- it may have run: a human must look, whatever became of its rollout
      completed = completed + finish(it, 'blocked', 'ambiguous_one_shot')
    elseif over then
      -- a cancelled or superseded rollout runs nothing again (and starts
      -- no wave: made pending, the item would wait for ever)
      completed = completed + finish(it, 'skipped', over)
    else
      -- the target is not in effect, and a one-shot action never reached
      -- the agent (a report sent after the item became ambiguous does not
      -- journal any of its attempts; the agent refuses one past its
      -- deadline): a new attempt is safe
      set_status(it, 'pending', '')
      redis.call('SREM', P .. 'amb:' .. node, id)
      lf_rem(it.rollout, it.managed_by, id)
      lp_add(it.rollout, it.managed_by, it.pos, id)
    end
  end
end
bump()
return { 'ok', resolved, completed }
