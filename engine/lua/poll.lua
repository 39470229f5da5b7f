-- poll: ARGV[4] node, [5] max. Pops up to max attempts queued for node,
-- skipping stale ones (item moved on, or deadline passed: Step then treats
-- them as undelivered), and marks the rest delivered. Drops the node's
-- wake-up token once its queue is empty.
-- Returns {'ok', {attempt hash as flat field/value list}...}.
local node = ARGV[4]
local max = tonumber(ARGV[5])
local q = P .. 'q:' .. node
local out = { 'ok' }
local drained = false
while #out - 1 < max do
  local aid = redis.call('LPOP', q)
  if not aid then
    drained = true
    break
  end
  local ak = k_a(aid)
  local a = redis.call('HMGET', ak, 'state', 'deadline', 'item')
  if a[1] == 'queued' and num(a[2]) > NOW then
    local it = redis.call('HMGET', k_i(a[3]), 'status', 'last_attempt')
    if it[1] == 'in_progress' and it[2] == aid then
      redis.call('HSET', ak, 'state', 'delivered', 'delivered_at', int(NOW))
      out[#out + 1] = redis.call('HGETALL', ak)
    end
  end
end
-- an empty queue needs no wake-up token: the next dispatch pushes a new one
if drained then
  redis.call('DEL', P .. 'wake:' .. node)
end
if #out > 1 then
  bump()
end
return out
