-- set_drain: ARGV[4..] the ids of the draining nodes, the whole set (it
-- replaces the previous one). Nothing new is dispatched to a draining
-- node: its items wait with reason node_draining (wave.lua) and go on when
-- the drain is lifted.
-- Returns {'stale_fence'} or {'ok', 1 when the set changed else 0}.
if not check_fence() then
  return { 'stale_fence' }
end
local key = P .. 'drain'
local want = {}
local n = 0
for i = 4, #ARGV do
  if not want[ARGV[i]] then
    want[ARGV[i]] = true
    n = n + 1
  end
end
local cur = redis.call('SMEMBERS', key)
local same = #cur == n
if same then
  for _, id in ipairs(cur) do
    if not want[id] then
      same = false
      break
    end
  end
end
if same then
  return { 'ok', 0 }
end
redis.call('DEL', key)
local batch = {}
for id in pairs(want) do
  batch[#batch + 1] = id
  if #batch == 1000 then
    redis.call('SADD', key, unpack(batch))
    batch = {}
  end
end
if #batch > 0 then
  redis.call('SADD', key, unpack(batch))
end
bump()
return { 'ok', 1 }
