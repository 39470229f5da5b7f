-- campaign: the head CP: hub (id), instance (the caller's process; '' =
-- none), ttl_ms, floor (the highest fence known to have been used; 0 =
-- none), restart ('1' when Redis restarted since the caller last looked),
-- fresh ('1' when the caller never held a lease: a new process); named in
-- args.go (campaignArgs).
-- The lease is the caller's when both its owner (the hub id) and its
-- instance are the caller's. A new process never extends a lease it finds
-- under its own name, and takes over a live lease of another instance of its
-- hub id (an earlier process of the same hub: dead, or paused and then
-- fenced out by the new epoch); any other live lease is refused.
-- An epoch missing or below the floor (Redis lost data) is raised to the
-- floor and the lease is void, so the new fence is above every fence used
-- before; after a restart the caller's own lease is replaced by a new one.
-- Returns {'ok', fence, replaced holder or ''} or
-- {'not_leader', holder, expires_at}.
local hub, inst = ARGV[CP.hub], ARGV[CP.instance]
local ttl = tonumber(ARGV[CP.ttl_ms])
local floor = tonumber(ARGV[CP.floor]) or 0
local restart = ARGV[CP.restart] == '1'
local new = ARGV[CP.fresh] == '1'
local l = hgetall(KEYS[2])
local exp = num(l.expires_at)
local held = l.owner ~= nil and l.owner ~= '' and exp > NOW
local mine = l.owner == hub and (l.instance or '') == inst
local holder = ''
if held then
  holder = l.owner
  if l.instance and l.instance ~= '' then
    holder = holder .. '/' .. l.instance
  end
end
local epoch = redis.call('GET', KEYS[1])
local lost = floor > 0 and num(epoch) < floor
if lost then
  redis.call('SET', KEYS[1], int(floor))
elseif held and mine and l.fence == epoch and not restart and not new then
  redis.call('HSET', KEYS[2], 'expires_at', int(NOW + ttl))
  return { 'ok', l.fence, '' }
elseif held and not mine and not (new and l.owner == hub) then
  return { 'not_leader', holder, int(exp) }
end
local f = redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'owner', hub, 'instance', inst, 'fence', int(f), 'expires_at', int(NOW + ttl), 'acquired_at', int(NOW))
if mine then
  holder = ''
end
return { 'ok', int(f), holder }
