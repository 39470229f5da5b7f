-- lib.lua is prepended to every other script of this directory.
--
-- Calling convention of every script:
--   KEYS[1] epoch (fencing counter)   KEYS[2] lease (hash)
--   KEYS[3] version (outbox cursor)   KEYS[4] fleet counters (hash)
--   ARGV[1] key prefix "fw{p}:"       ARGV[2] caller's fence ("" when unfenced)
--   ARGV[3] now in unix ms (from the engine's clock; scripts never read time)
-- Every other key a script touches is built from ARGV[1] and so carries the
-- same hash tag as KEYS: all keys live in one Cluster slot.
-- Numbers are written with int() so timestamps never turn into 1.7e+12.

local P = ARGV[1]
local FENCE = ARGV[2]
local NOW = tonumber(ARGV[3])

local function int(n)
  return string.format('%d', n)
end

local function hgetall(key)
  local r = redis.call('HGETALL', key)
  local t = {}
  for i = 1, #r, 2 do
    t[r[i]] = r[i + 1]
  end
  return t
end

local function num(x)
  return tonumber(x) or 0
end

-- check_fence: the caller's fence must be the current epoch and the lease's.
local function check_fence()
  local cur = redis.call('GET', KEYS[1])
  if not cur or cur ~= FENCE then
    return false
  end
  return redis.call('HGET', KEYS[2], 'fence') == FENCE
end

local function bump()
  redis.call('INCR', KEYS[3])
end

local ACTIVE = { pending = true, in_progress = true, retrying = true, ambiguous = true }

-- status -> counter bucket (fleetwave.Counters)
local BUCKET = {
  completed = 'done',
  in_progress = 'in_progress', retrying = 'in_progress', ambiguous = 'in_progress',
  pending = 'pending',
  failed = 'failed', blocked = 'failed',
  skipped = 'skipped',
}

local function k_r(rid) return P .. 'r:' .. rid end
local function k_i(id) return P .. 'i:' .. id end
local function k_a(aid) return P .. 'a:' .. aid end
local function k_inst(node, block) return P .. 'inst:' .. node .. ':' .. block end
-- lanes: an item's lane is its managed_by ('' = the default lane)
local function k_lanes(rid) return P .. 'r:' .. rid .. ':lanes' end
local function k_lp(rid, lane) return P .. 'r:' .. rid .. ':p:' .. (lane or '') end
local function k_lf(rid, lane) return P .. 'r:' .. rid .. ':f:' .. (lane or '') end

local function count(rid, status, delta)
  local b = BUCKET[status]
  redis.call('HINCRBY', k_r(rid), 'c_' .. b, delta)
  redis.call('HINCRBY', KEYS[4], b, delta)
end

-- set_status moves an item to status new, keeping both counter sets exact.
local function set_status(it, new, reason)
  if it.status ~= new then
    count(it.rollout, it.status, -1)
    count(it.rollout, new, 1)
    it.status = new
  end
  redis.call('HSET', k_i(it.id), 'status', new, 'reason', reason or '', 'updated_at', int(NOW))
  redis.call('HSET', k_r(it.rollout), 'updated_at', int(NOW))
end

-- maybe_complete marks an active rollout completed once every item is
-- terminal; returns 1 when it did.
local function maybe_complete(rid)
  local rk = k_r(rid)
  local r = redis.call('HMGET', rk, 'status', 'c_pending', 'c_in_progress')
  if r[1] == 'active' and num(r[2]) == 0 and num(r[3]) == 0 then
    redis.call('HSET', rk, 'status', 'completed', 'reason', '', 'updated_at', int(NOW))
    redis.call('ZREM', P .. 'active', rid)
    return 1
  end
  return 0
end

-- finish moves an item to a terminal status, frees its block instance and
-- records the outcome there; returns 1 when that completed the rollout.
local function finish(it, status, reason)
  set_status(it, status, reason)
  redis.call('HSET', k_i(it.id), 'completed_at', int(NOW), 'retry_after', '0')
  redis.call('SREM', k_lf(it.rollout, it.managed_by), it.id)
  redis.call('ZREM', k_lp(it.rollout, it.managed_by), it.id)
  redis.call('ZREM', P .. 'retry', it.id)
  redis.call('SREM', P .. 'amb:' .. it.node, it.id)
  local ik = k_inst(it.node, it.block)
  if redis.call('HGET', ik, 'active') == it.id then
    redis.call('HDEL', ik, 'active')
  end
  redis.call('HSET', ik, 'last_item', it.id, 'last_status', status,
    'last_gen', it.generation, 'last_hash', it.config_hash or '', 'last_at', int(NOW))
  return maybe_complete(it.rollout)
end

-- lanes_of returns the rollout's lane names, sorted.
local function lanes_of(rid)
  local names = redis.call('HKEYS', k_lanes(rid))
  table.sort(names)
  return names
end

-- transient handles a transient failure: retrying with exponential backoff
-- and jitter, or failed once retry_count reached the rollout's max_retries.
-- Returns 1 when that completed the rollout.
local function transient(it, base, maxb, jitter)
  local rc = num(it.retry_count)
  local mr = num(redis.call('HGET', k_r(it.rollout), 'max_retries'))
  redis.call('HSET', k_i(it.id), 'last_class', 'transient')
  if rc >= mr then
    return finish(it, 'failed', 'retries_exhausted')
  end
  local d = base * (2 ^ rc)
  if d > maxb then
    d = maxb
  end
  d = math.floor(d / 2 + (d / 2) * jitter)
  local at = NOW + d
  set_status(it, 'retrying', 'backoff')
  redis.call('HSET', k_i(it.id), 'retry_count', int(rc + 1), 'retry_after', int(at))
  redis.call('ZADD', P .. 'retry', int(at), it.id)
  return 0
end

-- close_attempt records an attempt's end and drops its payload (the rendered
-- config must not outlive the attempt); the hash expires later (garbage
-- collection only: no logic depends on that TTL).
local function close_attempt(aid, node, state, class)
  local ak = k_a(aid)
  redis.call('HSET', ak, 'state', state, 'class', class, 'finished_at', int(NOW))
  redis.call('HDEL', ak, 'payload')
  redis.call('PEXPIRE', ak, 604800000)
  redis.call('ZREM', P .. 'deadlines', aid)
  redis.call('LREM', P .. 'q:' .. node, 0, aid)
end
