-- record: ARGV[4] table ('requests' | 'sched'), [5] field, [6] value,
-- [7] mode: 'nx' keeps a first record (a request is handled once), 'set'
-- replaces it (a schedule's last fire).
-- The hub's own records, written under the leader's fence like every
-- other state change.
-- Returns {'stale_fence'} | {'invalid'} | {'ok', 1 when written else 0}.
if not check_fence() then
  return { 'stale_fence' }
end
local t = ARGV[4]
if t ~= 'requests' and t ~= 'sched' then
  return { 'invalid' }
end
local n
if ARGV[7] == 'nx' then
  n = redis.call('HSETNX', P .. t, ARGV[5], ARGV[6])
else
  redis.call('HSET', P .. t, ARGV[5], ARGV[6])
  n = 1
end
if n == 1 then
  bump()
end
return { 'ok', n }
