-- poll: ARGV[4] node, [5] max, [6] how long the caller may have waited
-- since now_ms (ms; Poll pipelines a blocking wait before this script, so
-- by the time it runs up to that much time may have passed). Pops up to
-- max attempts queued for node, skipping stale ones (closed, or deadline
-- passed, counting the wait: Step then treats them as undelivered), and marks the rest delivered, each with its item's
-- payload. An open attempt is always its item's current one (every path
-- that moves an item on closes its attempt first), so the item is not
-- read. Drops the node's wake-up token once its queue is empty, and keeps
-- one while attempts remain queued. Delivery changes no item or rollout,
-- so the version is not bumped.
-- delivered_at is now_ms: when the wait began.
-- Returns {'ok', {attempt hash as flat field/value list}...}.
local node = ARGV[4]
local max = tonumber(ARGV[5])
local horizon = NOW + (tonumber(ARGV[6]) or 0) -- latest time it may be now
local q = P .. 'q:' .. node
local wk = P .. 'wake:' .. node
local out = { 'ok' }
local drained = false
while #out - 1 < max do
  local aid = redis.call('LPOP', q)
  if not aid then
    drained = true
    break
  end
  local ak = k_a(aid)
  local h = redis.call('HGETALL', ak)
  local a = {}
  for i = 1, #h, 2 do
    a[h[i]] = i + 1 -- index of the value in h
  end
  if a.state and h[a.state] == 'queued' and a.deadline and num(h[a.deadline]) > horizon then
    redis.call('HSET', ak, 'state', 'delivered', 'delivered_at', int(NOW))
    h[a.state] = 'delivered'
    h[#h + 1] = 'delivered_at'
    h[#h + 1] = int(NOW)
    local p = redis.call('GET', P .. 'ip:' .. h[a.item])
    if p then
      h[#h + 1] = 'payload'
      h[#h + 1] = p
    end
    out[#out + 1] = h
  end
end
-- the wake-up token is there exactly while attempts are queued: a Poll
-- that blocks first (BLPOP) then never misses one nor wakes for nothing
if drained or redis.call('LLEN', q) == 0 then
  redis.call('DEL', wk)
elseif redis.call('EXISTS', wk) == 0 then
  redis.call('RPUSH', wk, '1')
  redis.call('PEXPIRE', wk, 600000)
end
return out
