-- renew: the head RN: hub (id), instance ('' = none), ttl_ms, restart ('1'
-- when Redis restarted since the caller last looked). The lease
-- is renewed while it is still ours (hub id and instance) at our fence, even
-- past expires_at when nobody took it over; after a restart it is dropped
-- instead, so the next campaign gets a new epoch.
-- Returns {'ok'}, {'restarted'} or {'not_leader'}.
local l = hgetall(KEYS[2])
if l.owner ~= ARGV[RN.hub] or (l.instance or '') ~= ARGV[RN.instance] or l.fence ~= FENCE or redis.call('GET', KEYS[1]) ~= FENCE then
  return { 'not_leader' }
end
if ARGV[RN.restart] == '1' then
  redis.call('DEL', KEYS[2])
  return { 'restarted' }
end
redis.call('HSET', KEYS[2], 'expires_at', int(NOW + tonumber(ARGV[RN.ttl_ms])))
return { 'ok' }
