// Package fleetsim simulates a fleet of agents against a real hub and
// measures how the hub scales with the number of nodes.
//
// # The simulator
//
// Fleet speaks the hub's agent protocol over HTTP exactly as an agent does
// (register with a full report, long poll for attempts, post each result,
// a full report when the hub asks for one and every ReportEvery), but runs
// no command: an attempt "runs" for a configured duration on a timer and
// ends in a result drawn from a failure mix. A simulated agent is a small
// struct, not a goroutine: a fixed pool of pollers (at most Options.Pollers)
// takes agents from a queue, long-polls for one, hands what arrived to
// timers and puts the agent back. All requests share one http.Transport.
//
// When the pool is at least as large as the fleet, every agent always has a
// long poll open, as real agents do. HTTP/1.1 needs a connection per open
// poll, and a process holds at most RLIMIT_NOFILE descriptors (the hub
// too), so a fleet larger than the pool takes turns: each poll waits only
// Options.RotateWait, and an attempt waits in the hub's queue until its
// agent's turn comes. Options.H2C multiplexes every poll over a few
// connections instead, for a hub that serves unencrypted HTTP/2.
//
// # The scale report
//
// Run starts a hub process (`fleetwave serve`, managed Redis) on a config
// repository written by internal/fleetgen, a fleet of N-1 simulated agents
// and the probe pushes' node's agent in a process of its own (RunAgents,
// `fleetwave dev probe-agent`), and measures one scenario: push -> first dispatch, validation, planning,
// a fleet-wide rollout's makespan against its ideal, status commits, the
// hub's memory and CPU, its waits for a Redis connection, Redis memory and
// API latency while the rollout runs (read by a process of its own, Probe,
// started before the push as a console open when it lands). Report
// renders the rows as a table, markdown and an SVG plot.
package fleetsim
