-- create_rollout: ARGV[4] base id, [5] source json, [6] max_concurrent,
-- [7] failure_threshold_percent, [8] max_retries, [9] item source kind,
-- [10] source user, [11] item count, [12] observed version (0 = unknown),
-- [13] window set count k, then k pairs (window set id, definition json),
-- then 18 fields per item:
-- node, block, action, generation, target_version, config_hash,
-- desired_state, managed_by, criticality, one_shot, timeout_ms, payload,
-- window set id ('' = always open), skip reason ('' = none), split group
-- ('' = none), requirements (newline-separated), block message ('' =
-- none; otherwise the item is created blocked with the skip reason field
-- as its reason, e.g. invalid_config, and is never dispatched), operational
-- ('1': a backup, restart... that leaves the instance as it is: created
-- only when the instance has no active item, never superseding one, and
-- its outcome is not recorded on the instance).
-- A split group is created whole or not at all: when one of its (not
-- skipped) specs would not be created, none of them is.
-- Returns {'stale_fence'} or {'ok', rollout id or '', item ids...}.
if not check_fence() then
  return { 'stale_fence' }
end
local NF = 18
local n = tonumber(ARGV[11])
local observed = tonumber(ARGV[12]) or 0
local nws = tonumber(ARGV[13])
for i = 0, nws - 1 do
  -- content-addressed: the same id always holds the same definition
  redis.call('HSETNX', P .. 'wsets', ARGV[14 + 2 * i], ARGV[15 + 2 * i])
end
local HEAD = 13 + 2 * nws
local rid = nil
local pos = 0
local out = { 'ok', '' }
local changed = false

local function alloc_id(base)
  if base == '' then
    base = 'rollout'
  end
  local id = base
  local i = 1
  while redis.call('EXISTS', k_r(id)) == 1 do
    i = i + 1
    id = base .. '-' .. i
  end
  return id
end

local function open_rollout()
  rid = alloc_id(ARGV[4])
  local seq = redis.call('INCR', P .. 'seq')
  redis.call('HSET', k_r(rid), 'id', rid, 'status', 'active', 'reason', '',
    'source', ARGV[5], 'max_concurrent', ARGV[6], 'failure_threshold_percent', ARGV[7],
    'max_retries', ARGV[8], 'wave', '0', 'seq', int(seq),
    'c_total', '0', 'c_done', '0', 'c_in_progress', '0', 'c_pending', '0', 'c_failed', '0', 'c_skipped', '0',
    'created_at', int(NOW), 'updated_at', int(NOW))
  redis.call('ZADD', P .. 'rollouts', int(seq), rid)
  redis.call('ZADD', P .. 'active', int(seq), rid)
  outbox_rollout(rid, 'active', 'created')
  out[2] = rid
end

-- decide says whether a spec is created, and which pending item of an
-- older generation it supersedes, or whether the instance's active pointer
-- dangles (heal). It changes nothing.
local function decide(inst, gen, hash, skip, op)
  if op and skip == '' then
    -- operational: only on a free instance; it supersedes nothing and no
    -- converging bookkeeping (last_*) applies to it
    if inst.active then
      local cur = hgetall(k_i(inst.active))
      if not cur.status or not ACTIVE[cur.status] then
        return true, nil, true
      end
      return false
    end
    return true
  end
  if skip ~= '' then
    -- a skipped item never occupies the instance; the same skip of the
    -- same generation and config is recorded once
    if (inst.skip_reason or '') == skip and num(inst.skip_gen) == gen
        and (inst.skip_hash or '') == hash then
      return false
    elseif inst.active then
      local cur = hgetall(k_i(inst.active))
      if not cur.status or not ACTIVE[cur.status] then
        return true, nil, true
      elseif num(cur.generation) >= gen then
        return false -- already covered by a newer plan
      elseif cur.status == 'pending' then
        return true, cur
      end
    end
    return true
  end
  if inst.active then
    local cur = hgetall(k_i(inst.active))
    if not cur.status or not ACTIVE[cur.status] then
      return true, nil, true -- dangling pointer: heal
    elseif cur.op == '1' then
      return false -- a backup or restart runs first; the next plan decides
    elseif num(cur.generation) >= gen then
      return false -- already covered
    elseif cur.status == 'pending' then
      return true, cur
    end
    return false -- an older attempt is running: let it finish first
  elseif (inst.last_status == 'blocked' or inst.last_status == 'failed')
      and num(inst.last_gen) == gen and (inst.last_hash or '') == hash then
    return false -- needs a newer generation
  elseif observed > 0 and num(inst.last_ver) > observed
      and num(inst.last_gen) >= gen then
    -- an item of this generation finished after the observations behind
    -- the plan were read: the plan is stale, the next one decides
    return false
  end
  return true
end

-- groups: one member that cannot be created holds back the whole group
local veto = {}
for i = 0, n - 1 do
  local b = HEAD + i * NF
  local grp = ARGV[b + 15]
  if grp ~= '' and ARGV[b + 14] == '' and not veto[grp] then
    local inst = hgetall(k_inst(ARGV[b + 1], ARGV[b + 2]))
    if not decide(inst, tonumber(ARGV[b + 4]), ARGV[b + 6], '') then
      veto[grp] = true
    end
  end
end

for i = 0, n - 1 do
  local b = HEAD + i * NF
  local node, block = ARGV[b + 1], ARGV[b + 2]
  local gen = tonumber(ARGV[b + 4])
  local hash = ARGV[b + 6]
  local lane = ARGV[b + 8]
  local skip = ARGV[b + 14]
  local grp = ARGV[b + 15]
  local blocked = ARGV[b + 17]
  local reason0 = skip
  if blocked ~= '' then
    skip = '' -- created like a normal item, but already finished
  end
  if skip ~= '' or blocked ~= '' then
    grp = '' -- a skipped item takes no part in its group's dispatch
  end
  local ik = k_inst(node, block)
  local create, sup, heal = false, nil, false
  if not veto[grp] then
    create, sup, heal = decide(hgetall(ik), gen, hash, skip, ARGV[b + 18] == '1')
  end
  if heal then
    redis.call('HDEL', ik, 'active')
  end
  if sup then
    finish(sup, 'skipped', 'superseded')
    changed = true
  end
  if create then
    if not rid then
      open_rollout()
    end
    pos = pos + 1
    local id = rid .. '.' .. pos
    local status, reason, done_at = 'pending', 'wave_gate', 0
    if skip ~= '' then
      status, reason, done_at = 'skipped', skip, NOW
    elseif blocked ~= '' then
      status, reason, done_at = 'blocked', reason0, NOW
    end
    redis.call('HSET', k_i(id), 'id', id, 'rollout', rid, 'pos', int(pos),
      'node', node, 'block', block, 'action', ARGV[b + 3], 'generation', ARGV[b + 4],
      'target_version', ARGV[b + 5], 'config_hash', hash, 'desired_state', ARGV[b + 7],
      'managed_by', lane, 'criticality', ARGV[b + 9], 'one_shot', ARGV[b + 10], 'op', ARGV[b + 18],
      'timeout_ms', ARGV[b + 11], 'wset', ARGV[b + 13], 'grp', grp, 'req', ARGV[b + 16],
      'status', status, 'reason', reason,
      'source', ARGV[9], 'source_user', ARGV[10], 'wave', '0', 'retry_count', '0',
      'retry_after', '0', 'dispatched_at', '0', 'completed_at', int(done_at), 'attempts', '0',
      'last_attempt', '', 'last_class', '', 'created_at', int(NOW), 'updated_at', int(NOW))
    redis.call('RPUSH', k_r(rid) .. ':items', id)
    redis.call('HSETNX', k_lanes(rid), lane, '0')
    if status ~= 'pending' then
      outbox_item({ rollout = rid, id = id, node = node, block = block, generation = ARGV[b + 4] },
        status, reason)
    end
    if skip ~= '' then
      redis.call('HSET', ik, 'skip_reason', skip, 'skip_gen', ARGV[b + 4], 'skip_hash', hash)
    elseif blocked ~= '' then
      redis.call('HSET', k_i(id), 'message', blocked)
      if ARGV[b + 18] ~= '1' then -- an operational item leaves the record alone
        redis.call('HSET', ik, 'last_item', id, 'last_status', 'blocked',
          'last_gen', ARGV[b + 4], 'last_hash', hash, 'last_at', int(NOW), 'last_ver', int(version_after()))
        redis.call('HDEL', ik, 'skip_reason', 'skip_gen', 'skip_hash')
      end
    else
      redis.call('SET', P .. 'ip:' .. id, ARGV[b + 12])
      lp_add(rid, lane, int(pos), id)
      if grp ~= '' then
        redis.call('RPUSH', k_g(rid, grp), id)
      end
      redis.call('HSET', ik, 'active', id)
      redis.call('HDEL', ik, 'skip_reason', 'skip_gen', 'skip_hash')
    end
    redis.call('HINCRBY', k_r(rid), 'c_total', 1)
    redis.call('HINCRBY', KEYS[4], 'total', 1)
    count(rid, status, 1, lane)
    out[#out + 1] = id
    changed = true
  end
end
if rid then
  maybe_complete(rid) -- every item skipped: nothing to wait for
end
if changed then
  bump()
end
return out
