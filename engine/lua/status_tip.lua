-- status_tip: ARGV[4] the status commit the leader just pushed. The leader
-- records the commit its status write landed, after it landed: a hub that
-- takes the lease and finds the status branch still at this commit knows
-- Redis holds everything that commit was built from (Redis loses a
-- suffix of its writes, never a write without those before it). Fenced,
-- and it does not bump the version: recording it is no change to report.
-- Returns {'stale_fence'} or {'ok'}.
if not check_fence() then
  return { 'stale_fence' }
end
redis.call('SET', P .. 'statustip', ARGV[4])
return { 'ok' }
