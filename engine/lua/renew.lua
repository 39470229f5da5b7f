-- renew: ARGV[4] hub id, ARGV[5] instance ('' = none), ARGV[6] ttl_ms,
-- ARGV[7] '1' when Redis restarted since the caller last looked. The lease
-- is renewed while it is still ours (hub id and instance) at our fence, even
-- past expires_at when nobody took it over; after a restart it is dropped
-- instead, so the next campaign gets a new epoch.
-- Returns {'ok'}, {'restarted'} or {'not_leader'}.
local l = hgetall(KEYS[2])
if l.owner ~= ARGV[4] or (l.instance or '') ~= ARGV[5] or l.fence ~= FENCE or redis.call('GET', KEYS[1]) ~= FENCE then
  return { 'not_leader' }
end
if ARGV[7] == '1' then
  redis.call('DEL', KEYS[2])
  return { 'restarted' }
end
redis.call('HSET', KEYS[2], 'expires_at', int(NOW + tonumber(ARGV[6])))
return { 'ok' }
