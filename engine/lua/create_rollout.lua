-- create_rollout: the head CH (header: the spec's header, JSON, see
-- rolloutHeader in rollout.go; window_sets: their count k), then k window
-- sets WS (id, def: definition json), then the items IF (their count is
-- the header's items). The records' fields are named in args.go (createHead,
-- windowSetArg, itemArg). An item with a blocked message is created
-- blocked with its reason (e.g. invalid_config) and is never dispatched.
--
-- One trigger event, one rollout: the rollout of the header's id (and
-- source) is created the first time and later specs of the same event
-- (nodes that reported later, became eligible later) join it as new items,
-- in later waves; a completed one is reopened, a cancelled or superseded
-- one takes nothing more. A spec of a generation older than one already
-- seen for its source object is stale and creates nothing. With
-- supersede, the active, paused and blocked rollouts of older generations
-- of the same object end as superseded: their pending and retrying items
-- are skipped (reason superseded), their attempts in flight finish (and
-- still count against the budget).
-- A split group is created whole or not at all: when one of its (not
-- skipped) specs would not be created, none of them is.
-- Returns {'stale_fence'} or {'ok', rollout id or '', status, then for each
-- item created its id and the 0-based index of its spec}
-- where status is 'created', 'joined', 'none' (nothing to create),
-- 'stale_generation', 'cancelled' or 'superseded' (the event's rollout
-- takes no more items).
local H = cjson.decode(ARGV[CH.header])
-- A creation that creates items keeps its answer for a minute under its
-- token (clast:<token>: the answer past 'ok', keep_answer): the Redis
-- client sends a script again when its reply is late, and the second
-- sending, finding the items there, answered that it created none (or,
-- the fence deposed meanwhile, stale_fence). The same creation sent again
-- answers what the first created, before any check: the first ran under a
-- fence that held then.
local token = H.token or ''
if token ~= '' then
  local kept = kept_answer(P .. 'clast:' .. token, { 'ok' })
  if kept then
    return kept
  end
end
if not check_fence() then
  return { 'stale_fence' }
end
local nws = tonumber(ARGV[CH.window_sets])
for i = 0, nws - 1 do
  -- content-addressed: the same id always holds the same definition
  local b = CH.after + i * WS.n
  redis.call('HSETNX', P .. 'wsets', ARGV[b + WS.id], ARGV[b + WS.def])
end
local HEAD = CH.after + nws * WS.n -- the items follow
local n = math.floor(H.items or 0)
local observed = H.observed or 0
local obj, gen = H.object or '', math.floor(H.generation or 0)
local once = H.once == true
local changed = false

-- a plan of an older generation than one already seen (a replica or a
-- hub whose snapshot lags) changes nothing
if obj ~= '' then
  local seen = num(redis.call('HGET', P .. 'srcgen', obj))
  if gen < seen then
    return { 'ok', '', 'stale_generation' }
  elseif gen > seen then
    redis.call('HSET', P .. 'srcgen', obj, int(gen))
  end
end

-- supersede: a newer generation replaces the rollouts of older ones
if H.supersede and obj ~= '' then
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', P .. 'src:' .. obj, '-inf', '(' .. int(gen))) do
    local rk = k_r(old)
    local st = redis.call('HGET', rk, 'status')
    if st == 'active' or st == 'paused' or st == 'blocked' then
      -- the status first: finish() then completes nothing
      redis.call('HSET', rk, 'status', 'superseded', 'reason', 'superseded', 'updated_at', now_s())
      redis.call('ZREM', P .. 'active', old)
      for _, lane in ipairs(lanes_of(old)) do
        for _, id in ipairs(redis.call('ZRANGE', k_lp(old, lane), 0, -1)) do
          local it = load_item(id)
          if it.status == 'pending' then
            finish(it, 'skipped', 'superseded')
          end
        end
        for _, id in ipairs(redis.call('SMEMBERS', k_lf(old, lane))) do
          local it = load_item(id)
          if it.status == 'retrying' then
            finish(it, 'skipped', 'superseded')
          end
        end
      end
      outbox_rollout(old, 'superseded', 'superseded')
      changed = true
    end
  end
end

-- the event's rollout: base, base-2, ... the first free id or the first
-- holding this same event (source object, generation and kind)
local rid, existing = nil, nil
do
  local base = H.base
  if base == nil or base == '' then
    base = 'rollout'
  end
  local i = 1
  local id = base
  while true do
    local v = redis.call('HMGET', k_r(id), 'id', 'src_obj', 'src_gen', 'src_kind', 'status')
    if not v[1] then
      break
    end
    if v[2] == obj and num(v[3]) == gen and v[4] == (H.kind or '') then
      existing = { status = v[5] }
      break
    end
    i = i + 1
    id = base .. '-' .. i
  end
  rid = id
end
if existing and (existing.status == 'cancelled' or existing.status == 'superseded') then
  flush()
  if changed then
    bump()
  end
  return { 'ok', '', existing.status }
end
-- out[2] names the event's rollout when it exists, even when this spec
-- creates nothing in it (CreateResult.Rollout)
local out = { 'ok', existing and rid or '', 'none' }
local opened = false
local pos = 0
if existing then
  pos = num(redis.call('HGET', k_r(rid), 'npos'))
end

local function open_rollout()
  opened = true
  if existing then
    out[2], out[3] = rid, 'joined'
    return
  end
  local seq = redis.call('INCR', P .. 'seq')
  local budget = H.budget or ''
  redis.call('HSET', k_r(rid), 'id', rid, 'status', 'active', 'reason', '',
    'source', H.source, 'src_obj', obj, 'src_gen', int(gen), 'src_kind', H.kind or '',
    'max_concurrent', int(H.max_concurrent or 0), 'failure_threshold_percent', H.ftp or '0',
    'failure_threshold', int(H.ftc or 0),
    'max_retries', int(H.max_retries or 0), 'backoff_ms', int(H.backoff_ms or 0), 'wave', '0', 'seq', int(seq), 'npos', '0',
    'budget', budget, 'budget_cap', int(H.budget_cap or 0), 'once', once and '1' or '0',
    'hold', H.hold or '', 'isr', '1',
    'c_total', '0', 'c_done', '0', 'c_in_progress', '0', 'c_pending', '0', 'c_failed', '0', 'c_skipped', '0',
    'created_at', now_s(), 'updated_at', now_s())
  if (H.hold or '') ~= '' then
    redis.call('HSET', k_r(rid), 'reason', H.hold)
  end
  redis.call('ZADD', P .. 'rollouts', int(seq), rid)
  redis.call('ZADD', P .. 'active', int(seq), rid)
  if obj ~= '' then
    redis.call('ZADD', P .. 'src:' .. obj, int(gen), rid)
  end
  if budget ~= '' then
    redis.call('SADD', P .. 'bud:' .. budget, rid)
  end
  outbox_rollout(rid, 'active', 'created')
  out[2], out[3] = rid, 'created'
end

-- decide says whether a spec is created, and which pending item of an
-- older generation it supersedes, or whether the instance's active pointer
-- dangles (heal), or (q) whether the item is created queued behind the
-- item that holds its instance (one-shot events: it waits with reason
-- instance_busy and takes the instance when that item ends). It changes
-- nothing.
local function decide(inst, gen, hash, skip, op)
  local cur = nil
  if inst.active then
    cur = hgetall(k_i(inst.active))
    if not cur.status or not ACTIVE[cur.status] then
      return true, nil, true -- dangling pointer: heal
    end
  end
  if op and skip == '' then
    -- operational: on a free instance; behind the holder in a one-shot
    -- event; it supersedes nothing and no converging bookkeeping (last_*)
    -- applies to it
    if cur then
      if once then
        return true, nil, false, true
      end
      return false
    end
    return true
  end
  if skip ~= '' then
    -- a skipped item never occupies the instance; the same skip of the
    -- same generation and config is recorded once (per event for one-shot
    -- events, which dedupe per instance anyway)
    if not once and (inst.skip_reason or '') == skip and num(inst.skip_gen) == gen
        and (inst.skip_hash or '') == hash then
      return false
    elseif cur then
      if num(cur.generation) >= gen and not once then
        return false -- already covered by a newer plan
      elseif cur.status == 'pending' and cur.op ~= '1' and num(cur.generation) < gen then
        return true, cur
      end
    end
    return true
  end
  if cur then
    if cur.op == '1' then
      if once then
        return true, nil, false, true
      end
      return false -- a backup or restart runs first; the next plan decides
    elseif num(cur.generation) >= gen then
      return false -- already covered
    elseif cur.status == 'pending' then
      return true, cur
    end
    if once then
      return true, nil, false, true -- waits for the older attempt
    end
    return false -- an older attempt is running: let it finish first
  elseif once then
    -- an explicit request runs even where the automatic plan would wait
    -- for a newer generation
    return true
  elseif (inst.last_status == 'blocked' or inst.last_status == 'failed')
      and num(inst.last_gen) == gen and (inst.last_hash or '') == hash then
    return false -- needs a newer generation
  elseif observed > 0 and num(inst.last_ver) > observed then
    -- an item of the instance (of any generation: an older install that
    -- ended makes this one an upgrade) finished after the observations
    -- behind the plan were read: the plan is stale, the next one decides
    return false
  end
  return true
end

-- one-shot events: at most one item per instance, ever
local ONCE_K = k_r(rid) .. ':inst'
local function taken(node, block)
  return once and redis.call('SISMEMBER', ONCE_K, node .. '\n' .. block) == 1
end

-- groups: one member that cannot be created holds back the whole group
local veto = {}
for i = 0, n - 1 do
  local b = HEAD + i * IF.n
  local grp = ARGV[b + IF.group]
  if grp ~= '' and ARGV[b + IF.reason] == '' and not veto[grp] then
    local node, block = ARGV[b + IF.node], ARGV[b + IF.block]
    if taken(node, block) then
      veto[grp] = true
    else
      local inst = hgetall(k_inst(node, block))
      local ok, _, _, q = decide(inst, tonumber(ARGV[b + IF.generation]), ARGV[b + IF.config_hash], '', false)
      if not ok or q then
        veto[grp] = true
      end
    end
  end
end

for i = 0, n - 1 do
  local b = HEAD + i * IF.n
  local node, block = ARGV[b + IF.node], ARGV[b + IF.block]
  local gen = tonumber(ARGV[b + IF.generation])
  local sgen = ARGV[b + IF.generation] -- as written, for the records
  local hash = ARGV[b + IF.config_hash]
  local lane = ARGV[b + IF.managed_by]
  local skip = ARGV[b + IF.reason]
  local grp = ARGV[b + IF.group]
  local blocked = ARGV[b + IF.blocked]
  local op = ARGV[b + IF.op]
  local reason0 = skip
  if blocked ~= '' then
    skip = '' -- created like a normal item, but already finished
  end
  if skip ~= '' or blocked ~= '' then
    grp = '' -- a skipped item takes no part in its group's dispatch
  end
  local ik = k_inst(node, block)
  local create, sup, heal, queued = false, nil, false, false
  if not veto[grp] and not taken(node, block) then
    create, sup, heal, queued = decide(hgetall(ik), gen, hash, skip, op == '1')
  end
  if heal then
    redis.call('HDEL', ik, 'active')
  end
  if sup then
    finish(sup, 'skipped', 'superseded')
    changed = true
  end
  if create then
    if not opened then
      open_rollout()
    end
    pos = pos + 1
    local id = rid .. '.' .. pos
    local status, reason, done_at = 'pending', 'wave_gate', 0
    if skip ~= '' then
      status, reason, done_at = 'skipped', skip, NOW
    elseif blocked ~= '' then
      status, reason, done_at = 'blocked', reason0, NOW
    elseif queued then
      reason = 'instance_busy'
    end
    -- Redis keeps a hash this small as a list it searches from its start
    -- for every field read or written: the fields a dispatch and a result
    -- read and write come first (a_state and a_fence among them, empty
    -- until the first attempt), the ones read only by the hub's Go code
    -- last.
    hset_i(id, 'status', status, 'reason', reason, 'attempts', '0', 'last_attempt', '',
      'a_state', '', 'a_fence', '', 'node', node, 'block', block, 'rollout', rid,
      'managed_by', lane, 'retry_after', '0', 'q', queued and '1' or '0',
      'wset', ARGV[b + IF.wset], 'grp', grp, 'req', ARGV[b + IF.requires],
      'timeout_ms', ARGV[b + IF.timeout_ms], 'updated_at', now_s(), 'dispatched_at', '0',
      'wave', '0', 'retry_count', '0', 'op', op, 'one_shot', ARGV[b + IF.one_shot],
      'generation', sgen, 'config_hash', hash, 'desired_state', ARGV[b + IF.desired_state],
      'target_version', ARGV[b + IF.target_version], 'completed_at', int(done_at),
      'last_class', '', 'id', id, 'pos', int(pos), 'action', ARGV[b + IF.action],
      'criticality', ARGV[b + IF.criticality], 'source', H.kind or '', 'source_user', H.actor or '',
      'created_at', now_s())
    redis.call('RPUSH', k_r(rid) .. ':items', id)
    redis.call('HSETNX', k_lanes(rid), lane, '0')
    if existing then
      -- the next Step gives the lane's next in line their reasons anew
      redis.call('HDEL', k_r(rid) .. ':peek', lane)
    end
    if once then
      redis.call('SADD', ONCE_K, node .. '\n' .. block)
    end
    if status == 'pending' and existing and existing.status == 'completed' then
      -- a late node joins a finished event: its rollout is active again
      existing.status = 'active'
      redis.call('HSET', k_r(rid), 'status', 'active', 'reason', '', 'updated_at', now_s())
      redis.call('ZADD', P .. 'active', num(redis.call('HGET', k_r(rid), 'seq')), rid)
      -- and counts against its budget again: a wave of another rollout
      -- of the budget may have dropped it from the set while it was idle
      local b = redis.call('HGET', k_r(rid), 'budget') or ''
      if b ~= '' then
        redis.call('SADD', P .. 'bud:' .. b, rid)
      end
      outbox_rollout(rid, 'active', 'joined')
    end
    if status ~= 'pending' then
      outbox_item({ rollout = rid, id = id, node = node, block = block, generation = sgen },
        status, reason)
    end
    if skip ~= '' then
      redis.call('HSET', ik, 'skip_reason', skip, 'skip_gen', sgen, 'skip_hash', hash)
    elseif blocked ~= '' then
      hset_i(id, 'message', blocked)
      if op ~= '1' then -- an operational item leaves the record alone
        redis.call('HSET', ik, 'last_item', id, 'last_status', 'blocked',
          'last_gen', sgen, 'last_hash', hash, 'last_at', now_s(), 'last_ver', version_after_s())
        redis.call('HDEL', ik, 'skip_reason', 'skip_gen', 'skip_hash')
      end
    else
      redis.call('SET', P .. 'ip:' .. id, ARGV[b + IF.payload])
      lp_add(rid, lane, int(pos), id)
      if grp ~= '' then
        redis.call('RPUSH', k_g(rid, grp), id)
      end
      if not queued then
        redis.call('HSET', ik, 'active', id)
      end
      redis.call('HDEL', ik, 'skip_reason', 'skip_gen', 'skip_hash')
    end
    redis.call('HINCRBY', k_r(rid), 'c_total', 1)
    redis.call('HINCRBY', KEYS[4], 'total', 1)
    count(rid, status, 1, lane)
    out[#out + 1] = id
    out[#out + 1] = i -- which spec (0-based): the caller knows its instance
    changed = true
  end
end
if opened then
  redis.call('HSET', k_r(rid), 'npos', int(pos))
  maybe_complete(rid) -- every item skipped: nothing to wait for
end
-- a rollout created in chunks fills until its last chunk (fillGrace in
-- rollout.go): the chunk that creates it marks it when more follow, each
-- chunk after it keeps the mark fresh, the last one (or one that finds
-- the mark expired) removes it; lane_plan starts no wave below the cap
-- meanwhile
local more = math.floor(H.more or 0)
if out[3] == 'created' then
  if more > 0 then
    redis.call('HSET', k_r(rid), 'fill_until', int(NOW + (H.fill_ms or 0)))
  end
elseif existing then
  local fill = num(redis.call('HGET', k_r(rid), 'fill_until'))
  if fill > 0 then
    if more > 0 and fill > NOW then
      redis.call('HSET', k_r(rid), 'fill_until', int(NOW + (H.fill_ms or 0)))
    else
      redis.call('HDEL', k_r(rid), 'fill_until')
    end
  end
end
flush()
if changed then
  bump()
end
-- items created: entries past 'ok', the rollout id and the outcome
if token ~= '' and #out > 3 then
  keep_answer(P .. 'clast:' .. token, out, 2)
end
return out
