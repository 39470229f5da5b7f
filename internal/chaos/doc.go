// Package chaos is fleetwave's chaos suite: it runs real hub processes
// (fleetwave serve), real redis-server processes (managed by the hub,
// started by the suite with AOF on and given to the hubs as a unix:// URL,
// or a Redis Sentinel deployment or a 6-process Redis Cluster the suite
// starts on loopback, named in hub.yaml's redis: mapping with password
// files), real agent processes and a real git remote (file://), injects
// faults in an order and at times drawn from a printed seed, and then
// checks invariants over ground truth the product does not write itself:
//
//   - ledgers: every block command appends "start" and "end" lines (node,
//     block, action, attempt, unix nanoseconds) to its node's ledger file;
//   - the agents' journals (state.json);
//   - the git remote: status commits and their Fleetwave-Fence trailers,
//     the human commits the suite pushed, the remote's reflog;
//   - the hubs' HTTP API (GET /api/v1/summary, /api/v1/rollouts/{id}),
//     sampled every ~100 ms during the run and read once everything settled.
//
// The invariants: every one-shot action ran at most once per node and
// request; every item reached a terminal state and every manual request an
// outcome; counters exact (per rollout against its items, the fleet history
// against the rollouts, the status committed to Git against the API) and
// never negative; a BRC's commands never overlapped beyond max_concurrent;
// fences never went back (status commits, agents' journals); no human
// commit lost and the remote left writable; no force push (sampled tips
// and the reflog); no Redis password in a hub's log or /readyz.
//
// Faults: SIGKILL of the leader hub and restart (the process, or its whole
// process group), SIGSTOP of the leader past the lease TTL, SIGKILL of
// redis-server (restarted on its AOF) and the loss of its data, agents
// SIGKILLed mid-action with their commands and restarted on their state
// dir, the remote renamed away for seconds, human pushes racing the status
// commits (status on main, or on its own branch), a second process with
// an existing hub id and another data dir, and a Redis that answers late
// (redis-slow, url mode: the hubs reach redis-server through a proxy that,
// for a few seconds, holds one script's reply in three past the hubs'
// read timeout, so their client sends the script again while its first
// sending ran all the same); on Sentinel and Cluster only,
// SIGKILL of the primary holding the engine's keys (primary-kill: the
// replica is promoted, the killed server stays down, so the rest of the run
// has no replica), and primary-kill-lossy, the same kill after the replica
// was paused for a second (the promoted replica lacks that second's
// acknowledged writes). Each fault's recovery time is measured (see
// recoveries), and "five-crashes" compares the makespan of a rollout with
// five leader crashes to the same rollout undisturbed.
//
// "sentinel-failover" and "cluster-failover" run three hub replicas (the
// agents spread over them) on Sentinel or Cluster, kill the primary while
// commands run and kill the leader hub; the report adds, per run, the
// replica's promotion time, the first command dispatched under a higher
// fence, how long the fleet had no leader (against the lease TTL) and the
// items seen ambiguous (attempts whose results may have been lost wait for
// their nodes' reports instead of running again). The long variant adds
// "sentinel-lossy-failover" and "cluster-lossy-failover".
//
// The package holds tests only. The short variant (mixed-url beside
// five-crashes followed by a managed-Redis mix on the same fleet, and
// sentinel-failover once a slot is free; about two minutes) is the default
// and runs inside `go test ./...`; the long one (every scenario, several
// runs) is opt-in:
//
//	make chaos                      # CHAOS_RUNS=3; CHAOS_ARGS=-chaos.seed=N
//	go test -count=1 -timeout 60m -run TestChaos -v ./internal/chaos/ -args -chaos.long -chaos.runs=3
//	FLEETWAVE_CHAOS=long go test -count=1 -timeout 60m -run TestChaos -v ./internal/chaos/
//
// Other flags (after -args): -chaos.seed=N reproduces a fault plan (timings
// still differ from run to run), -chaos.scenario=NAME runs the scenarios
// whose name contains NAME, -chaos.parallel=N (default 2), -chaos.keep
// keeps every run's directory (failed runs are always kept). The binary
// under test is built from the module once per test binary
// ($FLEETWAVE_CHAOS_BIN names a prebuilt one instead).
package chaos
