-- campaign: ARGV[4] owner, ARGV[5] ttl_ms, ARGV[6] fence floor (the highest
-- fence known to have been used; 0 = none), ARGV[7] '1' when Redis
-- restarted since the caller last looked.
-- An epoch missing or below the floor (Redis lost data) is raised to the
-- floor and the lease is void, so the new fence is above every fence used
-- before; after a restart the caller's own lease is replaced by a new one.
-- Returns {'ok', fence} or {'not_leader', owner, expires_at}.
local owner = ARGV[4]
local ttl = tonumber(ARGV[5])
local floor = tonumber(ARGV[6]) or 0
local restart = ARGV[7] == '1'
local l = hgetall(KEYS[2])
local exp = num(l.expires_at)
local epoch = redis.call('GET', KEYS[1])
local lost = floor > 0 and num(epoch) < floor
if lost then
  redis.call('SET', KEYS[1], int(floor))
elseif l.owner == owner and exp > NOW and l.fence == epoch and not restart then
  redis.call('HSET', KEYS[2], 'expires_at', int(NOW + ttl))
  return { 'ok', l.fence }
elseif l.owner and l.owner ~= '' and l.owner ~= owner and exp > NOW then
  return { 'not_leader', l.owner, int(exp) }
end
local f = redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'owner', owner, 'fence', int(f), 'expires_at', int(NOW + ttl), 'acquired_at', int(NOW))
return { 'ok', int(f) }
