-- resign: the head RS: hub (id), instance ('' = whichever instance of the
-- hub id holds the lease at our fence: a fence names one acquisition).
-- Frees the lease when it is ours at our fence; the epoch is kept so the
-- next Campaign hands out a higher fence.
-- Returns {'ok'} or {'not_leader'}.
local l = hgetall(KEYS[2])
local inst = ARGV[RS.instance]
if l.owner ~= ARGV[RS.hub] or l.fence ~= FENCE or (inst ~= '' and (l.instance or '') ~= inst) then
  return { 'not_leader' }
end
redis.call('DEL', KEYS[2])
return { 'ok' }
