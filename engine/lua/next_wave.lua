-- next_wave: ARGV[4] rollout id, [5] lane, [6] delivery grace ms,
-- [7] default action timeout ms, [8] scan limit.
-- Starts the lane's next wave (lane_wave) right after the result that
-- emptied its current wave (see complete.lua), so agents need not wait for
-- the next Step. The caller is an agent's request, not the leader: the wave
-- starts under the fence of the current lease, only while that lease is
-- valid, only for an active rollout, and never when the wave would hold a
-- windowed item (Step knows the windows and starts it then). Re-entrant:
-- a lane with items in flight is left alone.
-- Returns {'ok', rollouts completed, attempts dispatched, events} (events
-- as step returns them).
local rid, lane = ARGV[4], ARGV[5]
local lease = redis.call('HMGET', KEYS[2], 'fence', 'expires_at')
if not lease[1] or lease[1] ~= redis.call('GET', KEYS[1]) or num(lease[2]) <= NOW then
  return { 'ok', 0, 0, {} }
end
local r = hgetall(k_r(rid))
if r.status ~= 'active' then
  return { 'ok', 0, 0, {} }
end
WV.fence = lease[1]
WV.grace, WV.def_timeout, WV.limit = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
lane_wave(rid, r, lane)
if WV.dispatched + WV.touched + #WV.events > 0 then
  bump()
end
flush()
return { 'ok', WV.completed, WV.dispatched, WV.events }
