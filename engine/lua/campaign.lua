-- campaign: ARGV[4] owner, ARGV[5] ttl_ms.
-- Returns {'ok', fence} or {'not_leader', owner, expires_at}.
local owner = ARGV[4]
local ttl = tonumber(ARGV[5])
local l = hgetall(KEYS[2])
local exp = num(l.expires_at)
local epoch = redis.call('GET', KEYS[1])
if l.owner == owner and exp > NOW and l.fence == epoch then
  redis.call('HSET', KEYS[2], 'expires_at', int(NOW + ttl))
  return { 'ok', l.fence }
end
if l.owner and l.owner ~= '' and exp > NOW then
  return { 'not_leader', l.owner, int(exp) }
end
local f = redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'owner', owner, 'fence', int(f), 'expires_at', int(NOW + ttl), 'acquired_at', int(NOW))
return { 'ok', int(f) }
