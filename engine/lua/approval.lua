-- approval: the head AP: op, id (the approval's), and what the op reads:
-- record (submit: json), actor and decision (decide: approved | rejected),
-- rollout (consume: its id), reason (expire, stale); named in args.go
-- (approvalArgs).
-- The approval records (hash 'approvals': id -> json), each a small state
-- machine whose every step is a compare-and-set here, under the leader's
-- fence:
--   submit:  (none) -> pending | refused (the record says which); a known
--            id is left as it is
--   decide:  pending -> approved | rejected, by an actor who is not the
--            submitter (the caller checked the role)
--   consume: approved -> consumed, with the rollout it created (idempotent
--            for the same rollout)
--   expire:  pending -> expired
-- Returns {'stale_fence'} | {'not_found'} | {'state', current state} when
-- the step does not apply | {'self'} (decide by the submitter) |
-- {'ok', record json}.
if not check_fence() then
  return { 'stale_fence' }
end
local op, id = ARGV[AP.op], ARGV[AP.id]
local key = P .. 'approvals'
local raw = redis.call('HGET', key, id)
if op == 'submit' then
  if raw then
    return { 'ok', raw }
  end
  redis.call('HSET', key, id, ARGV[AP.record])
  bump()
  return { 'ok', ARGV[AP.record] }
end
if not raw then
  return { 'not_found' }
end
local a = cjson.decode(raw)
if op == 'decide' then
  if a.state ~= 'pending' then
    return { 'state', a.state }
  end
  if a.submitted_by == ARGV[AP.actor] then
    return { 'self' }
  end
  a.state, a.decided_by, a.decided_at = ARGV[AP.decision], ARGV[AP.actor], NOW
elseif op == 'consume' then
  if a.state == 'consumed' and a.rollout == ARGV[AP.rollout] then
    return { 'ok', raw }
  end
  if a.state ~= 'approved' then
    return { 'state', a.state }
  end
  a.state, a.rollout, a.consumed_at = 'consumed', ARGV[AP.rollout], NOW
elseif op == 'expire' or op == 'stale' then
  if a.state ~= 'pending' and not (op == 'stale' and a.state == 'approved') then
    return { 'state', a.state }
  end
  a.state, a.reason, a.ended_at = (op == 'expire') and 'expired' or 'stale', ARGV[AP.reason], NOW
else
  return { 'state', 'unknown_op' }
end
local out = cjson.encode(a)
redis.call('HSET', key, id, out)
bump()
return { 'ok', out }
