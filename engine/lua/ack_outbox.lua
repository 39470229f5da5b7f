-- ack_outbox: ARGV[4..] outbox entry ids. The leader acknowledges outbox
-- entries it has delivered (to Git): they are deleted, so the stream holds
-- exactly the undelivered ones and stays bounded. Fenced: a deposed leader
-- acknowledges nothing, so the new one delivers those entries again.
-- Returns {'stale_fence'} or {'ok', entries deleted}.
if not check_fence() then
  return { 'stale_fence' }
end
local n = 0
for i = 4, #ARGV, 1000 do
  n = n + redis.call('XDEL', P .. 'outbox', unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return { 'ok', n }
