-- pop: the head PO: node, max, delivered, token. Pops up to max attempts from
-- the node's queue and numbers each: the node's counter dseq:<node> plus
-- one for the first, then one by one in the order popped (the order the
-- agent takes them in), and never at or below delivered, what its agent
-- says it holds (a counter Redis lost in a failover comes back above it).
-- Each attempt popped stays in dlv:<node> under its number until the
-- agent says it received it (a delivered at or above the number drops
-- it), so that a poll that follows a lost answer, or an agent that
-- stopped part way through one, finds what it did not take (resume in
-- deliver.go). Runs without lib.lua: it runs for every poll that finds
-- work. Returns {'ok', first number, entries...}, or {'ok', 0} when the
-- queue is empty; the status word is 'report' instead when ask is 1 and
-- an item of the node awaits its full report (amb:<node> holds one).
-- Numbers go to Redis as strings: a Lua number is formatted as a float
-- (%.14g), which costs more than the rest of a command's arguments.
-- A pop that finds work keeps its answer for a minute (plast:<node>: its
-- token, a newline, the first number and the entries, each after a NUL,
-- which no entry holds): the Redis client sends a script again when its
-- reply is late (its read timeout) or its connection broke, and the first
-- sending may have run. The same pop sent again answers what it popped
-- then, and pops nothing: found empty, the queue left those attempts to
-- their deadlines; found holding attempts queued between the two
-- sendings, the second popped those instead, and the first's waited for
-- their deadlines. Every pop reads the token's length of it, one
-- GETRANGE.
local P = ARGV[1]
local node, delivered = ARGV[PO.node], tonumber(ARGV[PO.delivered])
local token = ARGV[PO.token]
local dlv = P .. 'dlv:' .. node
local last = P .. 'plast:' .. node
local status = 'ok'
if ARGV[PO.ask] == '1' and redis.call('EXISTS', P .. 'amb:' .. node) == 1 then
  status = 'report'
end
if delivered > 0 then
  redis.call('ZREMRANGEBYSCORE', dlv, '-inf', ARGV[PO.delivered])
end
if token ~= '' and redis.call('GETRANGE', last, 0, #token) == token .. '\n' then
  local out = { status }
  for v in string.gmatch(string.sub(redis.call('GET', last), #token + 2), '%z([^%z]*)') do
    out[#out + 1] = v
  end
  out[2] = tonumber(out[2])
  return out
end
local raw = redis.call('LPOP', P .. 'q:' .. node, ARGV[PO.max])
if not raw then
  return { status, 0 }
end
local first = redis.call('INCRBY', P .. 'dseq:' .. node, string.format('%d', #raw)) - #raw + 1
if first <= delivered then
  first = delivered + 1
  redis.call('SET', P .. 'dseq:' .. node, string.format('%d', first + #raw - 1))
end
for i, v in ipairs(raw) do
  redis.call('ZADD', dlv, string.format('%d', first + i - 1), string.match(v, '^[^\n]*'))
end
-- an agent that never says what it received (an older one) leaves the
-- newest deliveries only, and a node gone leaves nothing for long
redis.call('ZREMRANGEBYRANK', dlv, '0', '-65')
redis.call('EXPIRE', dlv, '604800')
if token ~= '' then
  redis.call('SET', last, token .. '\n\0' .. string.format('%d', first) .. '\0' .. table.concat(raw, '\0'), 'PX', '60000')
end
return { status, first, unpack(raw) }
