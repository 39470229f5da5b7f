-- undeliver: the head UD: attempt (id). A Poll popped the attempt after its
-- deadline and does not hand it out: Step then treats it as never
-- delivered (a transient failure), as it would had it stayed queued. An
-- attempt already closed, or not its item's last, is left alone.
-- Returns {'ok', 1|0}.
local aid = ARGV[UD.attempt]
local id = item_of(aid)
if not id then
  return { 'ok', 0 }
end
local v = redis.call('HMGET', k_i(id), 'last_attempt', 'a_state')
if v[1] == aid and v[2] == 'queued' then
  hset_i(id, 'a_state', 'undelivered')
  return { 'ok', 1 }
end
return { 'ok', 0 }
