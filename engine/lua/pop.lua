-- pop: the head PO: node, max, delivered. Pops up to max attempts from
-- the node's queue and numbers the delivery: the node's counter dseq:<node>
-- plus one, and never at or below delivered, what its agent says it holds
-- (a counter Redis lost in a failover comes back above it). Each attempt
-- popped stays in dlv:<node> under that number until the agent says it
-- received it (a delivered at or above the number drops it), so that a
-- poll that follows a lost answer finds what was lost (resume in
-- deliver.go). Runs without lib.lua: it runs for every poll that finds work.
-- Returns {'ok', number, entries...}, or {'ok', 0} when the queue is empty.
local P = ARGV[1]
local node, max, delivered = ARGV[PO.node], tonumber(ARGV[PO.max]), tonumber(ARGV[PO.delivered])
local dlv = P .. 'dlv:' .. node
if delivered > 0 then
  redis.call('ZREMRANGEBYSCORE', dlv, '-inf', delivered)
end
local raw = redis.call('LPOP', P .. 'q:' .. node, max)
if not raw then
  return { 'ok', 0 }
end
local seq = redis.call('INCR', P .. 'dseq:' .. node)
if seq <= delivered then
  seq = delivered + 1
  redis.call('SET', P .. 'dseq:' .. node, string.format('%d', seq))
end
for _, v in ipairs(raw) do
  redis.call('ZADD', dlv, seq, string.match(v, '^[^\n]*'))
end
-- an agent that never says what it received (an older one) leaves the
-- newest deliveries only, and a node gone leaves nothing for long
redis.call('ZREMRANGEBYRANK', dlv, 0, -65)
redis.call('EXPIRE', dlv, 604800)
return { 'ok', seq, unpack(raw) }
