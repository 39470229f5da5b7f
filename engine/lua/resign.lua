-- resign: ARGV[4] hub id, ARGV[5] instance ('' = whichever instance of the
-- hub id holds the lease at our fence: a fence names one acquisition).
-- Frees the lease when it is ours at our fence; the epoch is kept so the
-- next Campaign hands out a higher fence.
-- Returns {'ok'} or {'not_leader'}.
local l = hgetall(KEYS[2])
if l.owner ~= ARGV[4] or l.fence ~= FENCE or (ARGV[5] ~= '' and (l.instance or '') ~= ARGV[5]) then
  return { 'not_leader' }
end
redis.call('DEL', KEYS[2])
return { 'ok' }
