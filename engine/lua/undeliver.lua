-- undeliver: the head UD: attempt (id), unsent, expire (1 or 0). A Poll
-- popped the attempt and did not hand it out: after its deadline (unsent),
-- or its client was gone before the answer was written (unsent, expire),
-- or the answer's write failed, so the agent may or may not have it
-- (expire). Unsent marks it never delivered: Step then counts it as a
-- transient failure, as it would had it stayed queued. Expire moves its
-- deadline to now: the next Step closes it (never delivered, or lost and
-- the item ambiguous until the node's report says whether it ran) rather
-- than at the end of its timeout. An attempt already closed, or not its
-- item's last, is left alone.
-- Returns {'ok', 1|0}.
local aid = ARGV[UD.attempt]
local id = item_of(aid)
if not id then
  return { 'ok', 0 }
end
local v = redis.call('HMGET', k_i(id), 'last_attempt', 'a_state')
if v[1] ~= aid or v[2] ~= 'queued' then
  return { 'ok', 0 }
end
if ARGV[UD.unsent] == '1' then
  hset_i(id, 'a_state', 'undelivered')
  flush()
end
if ARGV[UD.expire] == '1' and redis.call('ZSCORE', P .. 'deadlines', aid) then
  redis.call('ZADD', P .. 'deadlines', now_s(), aid)
end
return { 'ok', 1 }
