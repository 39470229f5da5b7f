-- renew: ARGV[4] owner, ARGV[5] ttl_ms. The lease is renewed while it is
-- still ours at our fence, even past expires_at when nobody took it over.
-- Returns {'ok'} or {'not_leader'}.
local l = hgetall(KEYS[2])
if l.owner ~= ARGV[4] or l.fence ~= FENCE or redis.call('GET', KEYS[1]) ~= FENCE then
  return { 'not_leader' }
end
redis.call('HSET', KEYS[2], 'expires_at', int(NOW + tonumber(ARGV[5])))
return { 'ok' }
