-- record: the head RC: table ('requests' | 'sched'), field, value, mode:
-- 'nx' keeps a first record (a request is handled once), 'set'
-- replaces it (a schedule's last fire).
-- The hub's own records, written under the leader's fence like every
-- other state change.
-- Returns {'stale_fence'} | {'invalid'} | {'ok', 1 when written else 0}.
if not check_fence() then
  return { 'stale_fence' }
end
local t = ARGV[RC.table]
local field, value = ARGV[RC.field], ARGV[RC.value]
if t ~= 'requests' and t ~= 'sched' then
  return { 'invalid' }
end
local n
if ARGV[RC.mode] == 'nx' then
  n = redis.call('HSETNX', P .. t, field, value)
else
  redis.call('HSET', P .. t, field, value)
  n = 1
end
if n == 1 then
  bump()
end
return { 'ok', n }
