-- complete: the results of agents, in a batch. The head CA (backoff base
-- and max, delivery grace and default action timeout, all ms; the scan
-- limit; the result count), then the results RF: node, attempt id, its
-- fence, class, exit code, jitter, the observed instance (json, '' = none;
-- its updated_at in agent ms, its generation, -1 = no instance reported,
-- its version and state), the tail of the command's output (redacted by
-- the agent; kept on the item for a failure), the reason of a permanent
-- result (permanent_failure unless the agent named a known one). The
-- fields are named in args.go (completeHead, resultArg).
-- Each result is checked against its attempt and item on its own, in
-- order, exactly as if it came alone. Health gate: a success counts as
-- done only when the instance the agent reports agrees with the item: its
-- generation at least the item's (a status left from an earlier revision
-- never counts), its version the item's target version, its state the
-- desired state (absent: no instance). A success that disagrees keeps the
-- item in progress (reason report_mismatch) until its deadline, when it
-- becomes ambiguous like a lost result; a full report that agrees, sent
-- after the dispatch, completes it before (report.lua).
-- Then every lane a result touched whose current wave has nothing left in
-- flight starts its next wave at once (lane_wave), and so does that lane
-- in the other active rollouts of the same budget (the BRC's older or
-- newer generations, its manual requests), so agents do not wait
-- for the next Step: under the fence of the current lease, only while that
-- lease is valid, only for an active rollout, and never when the wave
-- would hold a windowed item (Step knows the windows and starts it then).
-- Whether a rollout completed is looked at once per rollout, at the end.
-- Returns {'ok', rollouts completed, attempts dispatched, events (as step
-- returns them), {status per result: 'ok'|'unknown_attempt'|'wrong_node'|
-- 'stale_attempt'|'recorded'|'error: <message>'}}: recorded, the same
-- result (attempt, fence, class, exit code) was recorded before, by
-- another group (an agent that sent it again after a lost answer).
-- The group keeps its statuses for a minute under its token (cdone:<token>,
-- keep_answer): the Redis client sends a script again when its reply is
-- late, and the same group sent again answers each result as the first
-- sending did ('ok', where it would find each applied result recorded),
-- with no rollout completed, attempt dispatched or event (the first's).
local TOKEN = ARGV[CA.token]
if TOKEN ~= '' then
  local kept = kept_answer(P .. 'cdone:' .. TOKEN, {})
  if kept then
    return { 'ok', 0, 0, {}, kept }
  end
end
local BASE, MAXB = tonumber(ARGV[CA.backoff_base]), tonumber(ARGV[CA.backoff_max])
-- no window states, no peek: a windowed item leaves its wave to Step
local MODE = new_mode()
MODE.grace, MODE.def_timeout = tonumber(ARGV[CA.grace]), tonumber(ARGV[CA.def_timeout])
MODE.limit = tonumber(ARGV[CA.limit])
local n = tonumber(ARGV[CA.results])
DEFER = {}
local statuses = {}
local lanes, touched = {}, {}

local function result(b)
  local node, aid, class = ARGV[b + RF.node], ARGV[b + RF.attempt], ARGV[b + RF.class]
  local id = item_of(aid)
  local it = id and load_item(id, COMPLETE_F)
  if not it or not it.status or attempt_no(aid) > num(it.attempts) then
    return 'unknown_attempt'
  end
  if it.node ~= node then
    return 'wrong_node'
  end
  if it.status ~= 'in_progress' or it.last_attempt ~= aid or it.a_fence ~= ARGV[b + RF.fence]
      or (it.a_state ~= 'queued' and it.a_state ~= 'delivered') then
    if it.last_attempt == aid and it.a_fence == ARGV[b + RF.fence]
        and (it.a_state == 'done' or it.a_state == 'disagree') then
      -- this very result, recorded before (an agent whose answer was
      -- lost; a group sent again after its kept answer expired): answered
      -- as the first, nothing changed
      local rec = redis.call('HMGET', k_i(id), 'last_class', 'a_exit')
      if rec[1] == class and rec[2] == ARGV[b + RF.exit_code] then
        return 'recorded'
      end
    end
    return 'stale_attempt'
  end
  local igen = tonumber(ARGV[b + RF.instance_gen]) or -1
  local inst, inst_at = ARGV[b + RF.instance], ARGV[b + RF.instance_at]
  local output = ARGV[b + RF.output]
  if class == 'success' and not agrees(it, igen, ARGV[b + RF.instance_version], ARGV[b + RF.instance_state]) then
    -- the attempt stays open: its deadline makes it ambiguous, unless a
    -- full report shows the target in effect first
    hset_i(it.id, 'a_state', 'disagree', 'a_exit', ARGV[b + RF.exit_code],
      'reason', 'report_mismatch', 'last_class', 'success', 'updated_at', now_s())
    redis.call('SADD', P .. 'amb:' .. node, it.id)
    if inst ~= '' then
      redis.call('HSET', P .. 'obsi:' .. node, it.block, inst)
      redis.call('HSET', P .. 'obsi_at:' .. node, it.block, inst_at)
      observed(node)
    end
    return 'ok'
  end
  -- the agent holds the attempt: a Poll popped it from the queue
  close_attempt(it, aid, 'done', 'a_exit', ARGV[b + RF.exit_code])
  if class == 'success' then
    finish(it, 'completed', '', 'last_class', 'success')
    if inst ~= '' then
      redis.call('HSET', P .. 'obsi:' .. node, it.block, inst)
      redis.call('HSET', P .. 'obsi_at:' .. node, it.block, inst_at)
      observed(node)
    end
  elseif class == 'lost' and it.one_shot == '1' then
    -- the agent was stopped while it ran the attempt: whether a one-shot
    -- action took effect is unknown, and it is never run twice
    finish(it, 'blocked', 'ambiguous_one_shot', 'last_class', 'lost', 'output', output)
  elseif class == 'transient' or class == 'lost' then
    -- lost from the agent: it was stopped while it ran the attempt; a
    -- converging action is safe to run again, as after a transient failure
    transient(it, BASE, MAXB, tonumber(ARGV[b + RF.jitter]))
    hset_i(it.id, 'output', output)
  else
    finish(it, 'blocked', ARGV[b + RF.reason], 'last_class', 'permanent', 'output', output)
  end
  if class == 'lost' and it.one_shot ~= '1' then
    hset_i(it.id, 'last_class', 'lost')
  end
  local lk = it.rollout .. '\n' .. (it.managed_by or '')
  if not lanes[lk] then
    lanes[lk] = true
    touched[#touched + 1] = { it.rollout, it.managed_by or '' }
  end
  return 'ok'
end

GATHER = { dl = {}, lf = {} }
for i = 0, n - 1 do
  -- a result that breaks (corrupt data) fails alone: what it wrote before
  -- the error stays (Redis does not roll a script back), the others go on
  local ok, st = pcall(result, CA.after + i * RF.n)
  if not ok then
    st = 'error: ' .. tostring(st)
  end
  statuses[#statuses + 1] = st
end
gathered()
GATHER = nil

-- the next waves of the lanes these results emptied
if #touched > 0 then
  local lease = redis.call('HMGET', KEYS[2], 'fence', 'expires_at')
  if lease[1] and lease[1] == redis.call('GET', KEYS[1]) and num(lease[2]) > NOW then
    MODE.fence = lease[1]
    flush() -- the threshold reads the rollouts' counters
    local rs = {}
    for _, l in ipairs(touched) do
      local r = rs[l[1]]
      if not r then
        r = hgetall(k_r(l[1]))
        rs[l[1]] = r
      end
      if r.status == 'active' and lane_wave(l[1], r, l[2], MODE) < 0 then
        r.status = 'blocked' -- halted by the failure threshold: no other lane starts
      end
      -- a result frees room in its budget: the same lane of the other
      -- rollouts of that budget may start their waves, oldest first
      if (r.budget or '') ~= '' then
        local others = redis.call('SMEMBERS', P .. 'bud:' .. r.budget)
        if #others > 1 then
          local order = {}
          for _, o in ipairs(others) do
            if o ~= l[1] then
              local ro = rs[o]
              if not ro then
                ro = hgetall(k_r(o))
                rs[o] = ro
              end
              if ro.status == 'active' then
                order[#order + 1] = o
              end
            end
          end
          table.sort(order, function(a, b) return num(rs[a].seq) < num(rs[b].seq) end)
          for _, o in ipairs(order) do
            if rs[o].status == 'active' and lane_wave(o, rs[o], l[2], MODE) < 0 then
              rs[o].status = 'blocked'
            end
          end
        end
      end
    end
  end
end

local completed = 0
local rids = {}
for rid in pairs(DEFER) do
  rids[#rids + 1] = rid
end
table.sort(rids)
DEFER = nil
for _, rid in ipairs(rids) do
  if maybe_complete(rid) == 1 then
    completed = completed + 1
    event('completed', rid, '')
  end
end
bump()
if TOKEN ~= '' then
  keep_answer(P .. 'cdone:' .. TOKEN, statuses, 1)
end
return { 'ok', completed, WV.dispatched, WV.events, statuses }
