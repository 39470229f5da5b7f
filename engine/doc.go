// Package engine is fleetwave's wave scheduler on Redis. It owns the queue
// and time: rollouts, items, waves bounded by max_concurrent, attempts with a
// deadline and a fencing token, retries with backoff, the leader lease with
// its fencing epoch, the dashboard counters, the lane depths and the
// outbox.
//
// # Atomicity and fencing
//
// Every state change is one Lua script (lua/*.lua, each prefixed with
// lua/lib.lua, and with lua/wave.lua for the scripts that start waves:
// step and complete). The scripts receive now_ms from the engine's clock and never
// read time themselves, so a fake clock drives expiry, backoff and leases in
// tests; expiry is decided by comparing stored timestamps (expires_at,
// deadline, retry_after) with now_ms, never by Redis TTLs. The engine's
// time in Redis never goes backwards: every script but the lease's takes
// the later of its now_ms and the last one a script used (key clock), since
// a caller's now_ms is taken before its call waits for a connection, for
// Redis or for a core, and calls do not reach Redis in the order of their
// clocks (nor do those of replicas whose clocks differ): a step that took
// its now before a rollout was created and ran after it would stamp its
// items dispatched before the rollout existed. The leader lease
// is a hash (owner, fence, expires_at) beside a never-expiring epoch counter:
// Campaign bumps the epoch whenever the lease changes hands, and every
// leader-only script (CreateRollout, Step) first checks that the caller's
// fence is both the current epoch and the lease's fence, so a deposed
// leader changes nothing (ErrStaleFence). Agent-facing calls (Poll, Complete,
// Report) are not fenced: they are checked against the attempt instead (its
// node, its fence, and whether it is still its item's current attempt); a
// wave that a result starts carries the fence of the lease, and only while
// that lease is valid.
//
// A lease owner is a hub id and a random instance per process (NewOwner):
// an Engine that never held the lease (a new process, even one restarted
// with the same hub id) always gets a new, higher fence, so a paused older
// process of the same hub id is fenced out like any other.
//
// The fence never goes back, even when Redis restarts without its data
// (docs/contract.md#leader-lease: a new epoch after any restart): Campaign raises a missing or
// lower epoch to a floor (the highest of WithFenceFloor's answer, e.g. the
// fences of the status commits in Git, and the highest fence this Engine
// held) so the new fence is above it, and it records the server's run_id
// (INFO server; skipped when the server does not answer it): when the
// run_id changed since this Engine's last Campaign or Renew, Renew drops
// the lease (ErrNotLeader) and Campaign grants a new one with a higher
// fence even to the holder, so attempts dispatched before the restart
// carry an older fence.
//
// # Script arguments
//
// Every script receives the same KEYS (epoch, lease, version, counters) and
// the common head ARGV[1..3] (key prefix, fence, now_ms), then its own
// arguments as records with named fields, each defined once, as a Go
// struct in args.go (the field order is the ARGV order; an `arg` tag names
// each field): a head record (e.g. stepHead: delivery grace, backoff, the
// counts of what follows), then the repeated records (the items of
// CreateRollout, the results of a Complete group, the instances of a
// Report, the window sets and window states). The engine prepends to each
// script a Lua table per record it receives, generated from the struct
// (local IF = { n = 18, node = 1, ... }), so the scripts read fields by
// name (ARGV[b + IF.node], ARGV[SH.grace]) and stride by n; adding a field
// is one struct field in Go and its use in Lua. A test fails on a script
// that reads a record slot by a number, on a field no script reads, and
// when a script reads a record back differently from how Go wrote it. The
// only positional arguments left are the lists of one value each
// (AckOutbox's entry ids, SetDrained's nodes, Step's jitter values).
//
// # Keys
//
// All keys start with "fw{p}:" (p is the prefix, default "fleetwave"), so
// they share one hash tag and every script stays in one Cluster slot:
//
//	epoch                  fencing counter (string, never expires)
//	lease                  hash owner (hub id), instance (the process), fence, expires_at, acquired_at
//	version                change counter, bumped by every state change (level-based status;
//	                       RolloutSpec.ObservedVersion)
//	outbox                 stream of the transitions Git status must show, until acknowledged
//	counters               hash total, done, in_progress, pending, failed, skipped
//	lanedepth              hash p:<lane>, f:<lane> -> items in the lanes' pending, in-flight sets
//	seq                    rollout creation sequence
//	rollouts, active       zsets of rollout ids by creation sequence
//	r:<id>                 hash: status, reason, source (and src_obj, src_gen, src_kind: the
//	                       event), limits, budget, budget_cap, once, hold, wave, npos, c_* counters
//	r:<id>:items           list of item ids in dispatch order
//	r:<id>:inst            set of "node\nblock" with an item in a one-shot event's rollout
//	r:<id>:lanes           hash lane (managed_by) -> the lane's current wave
//	r:<id>:peek            hash lane -> the wave whose next in line Step gave their reasons
//	r:<id>:p:<lane>        zset of the lane's pending item ids by position
//	r:<id>:f:<lane>        set of the lane's in_progress, retrying and ambiguous items
//	r:<id>:g:<group>       list of the item ids of a split group (ItemSpec.Group)
//	r:<id>:history         list of operator actions (JSON: action, actor, at, from, to)
//	wsets                  hash window set id -> its windows (JSON; content-addressed)
//	i:<item>               hash: the item (no payload) and its last attempt (a_fence, a_state, a_exit)
//	ip:<item>              the item's attempt template: fields and payload (command, rendered config with
//	                       credentials sealed by the hub), until the item ends
//	q:<node>               list of the attempts queued for the node, each "<attempt id>\n<fence>\n<deadline>\n<template>"
//	dseq:<node>            the node's delivery counter (the number of its last attempt popped)
//	dlv:<node>             zset delivery number -> attempt id, popped and not yet said received (Resume)
//	plast:<node>           the node's last pop that found work, for a minute: "<token>\n", then the first
//	                       delivery number and each entry popped, each after a NUL (the same pop sent again
//	                       answers it)
//	clast:<token>          a creation's answer, for a minute, when it created items: the rollout id,
//	                       the outcome, then each item id and its spec's index, each after a NUL (the same
//	                       creation sent again answers it)
//	cdone:<token>          a group of results' statuses, for a minute, each after a NUL (the same group
//	                       sent again answers them)
//	ready                  pub/sub channel: the nodes a script queued attempts for (newline-separated)
//	report                 pub/sub channel: the nodes whose full report a Step made an item await (newline-separated)
//	deadlines, retry       zsets of open attempts by deadline, of retrying items by retry_after
//	inst:<node>:<block>    hash: active item; last finished item, status, generation, config hash,
//	                       change counter
//	amb:<node>             set of the node's ambiguous items (and of its successes awaiting a
//	                       report that shows their target: report_mismatch)
//	src:<object>           zset of the object's rollouts by generation
//	srcgen                 hash object -> highest generation CreateRollout was asked for
//	bud:<budget>           set of the rollouts sharing a budget (a BRC), while they have work
//	drain                  set of the draining nodes (SetDrained)
//	requests               hash request name -> outcome of a request handled without a rollout
//	sched                  hash schedule trigger -> its last fired tick (unix ms)
//	obs, obs_nodes         hash node -> last full report (without instances); set of observed nodes
//	obsi:<node>            hash block -> observed instance (JSON)
//	obs_changed            zset node -> change counter of its last observed change (Observe reads only those newer than its last read)
//	ichg:<rollout>         zset item -> change counter of its last write (Rollout reads again only those newer than its last read)
//	clock                  the latest now_ms a script used (unix ms; see above)
//	incarnation            random value written by the first reader of a keyspace without one: a flush shows as another value
//	obsi_at:<node>         hash block -> agent time (ms) of that observation: an older report never rolls it back
//
// Item ids are "<rollout>.<position>", attempt ids "<item>.<n>". The payload
// is kept apart from the item and rollout records that status files and
// the API read: in the item's template, deleted when the item ends, and in
// the queued attempt, gone when a Poll pops it.
//
// # Items
//
//	pending -> in_progress -> completed
//	                       -> retrying -> in_progress ...  (transient, backoff)
//	                       -> failed                       (transient, retries exhausted)
//	                       -> blocked                      (permanent)
//	                       -> ambiguous -> completed | pending | blocked (one-shot) | skipped
//	pending | retrying -> skipped                           (superseded, cancelled)
//	(created) skipped                                       (ItemSpec.SkipReason)
//
// At most one item per block instance is active (pending, in_progress,
// retrying, ambiguous) and holds the instance; CreateRollout enforces it
// (see its doc). The one exception is an item of a one-shot event (a
// manual request, a schedule tick) created while another item held its
// instance: it is pending with q = 1 and reason instance_busy, holds
// nothing, and takes the instance when it is dispatched, once the holder
// ended.
//
// # Events and budgets
//
// One trigger event, one rollout (CreateRolloutOutcome): the rollout of a
// BRC generation, a schedule tick or a manual request is created once, and
// the event's later specs (nodes that reported or became eligible later)
// join it as new items in later waves; a new generation of the same object
// supersedes the older ones (status superseded: pending and retrying items
// skipped, attempts in flight finish; none of its items runs again: one
// whose attempt fails transiently, or that a report shows not in effect
// after its result was lost, is skipped too). A rollout's Budget (its BRC) bounds
// the items in flight per lane over every rollout of that budget
// (budget_cap): a wave starts at most budget_cap minus what the other
// rollouts of the budget have in flight, so max_concurrent holds for the
// BRC across its generations, its manual requests and hub replicas (the
// count and the dispatch are one script). The counters
// of a rollout and of the fleet are kept by the same script that changes an
// item's status (the old bucket is decremented, the new one incremented,
// summed per script and written once before the script reads or returns),
// so Total = Done + InProgress + Pending + Failed + Skipped always holds.
// The lane depths (LaneDepths) follow the lanes' pending and in-flight sets
// the same way.
//
// # Outbox
//
// A rollout created, a rollout changing status (completed, blocked by the
// failure threshold, paused, resumed, cancelled) and an item reaching a
// terminal status are appended to the outbox stream by the script that
// makes the change, so the record and the change are one atomic step.
// ReadOutbox returns the entries not yet acknowledged, oldest first, to any
// reader and as often as asked; AckOutbox (fenced: only the leader) deletes
// delivered ones. Delivery is therefore at least once across crashes,
// restarts and failovers, and the stream holds only undelivered entries.
//
// # Lanes, windows and reasons
//
// An item's lane is its managed_by. Lanes never wait for each other: each
// has its own current wave, and max_concurrent bounds each lane's items in
// flight. Item.Wave is the wave within the item's lane; Rollout.Wave the
// highest lane wave. The failure threshold is the rollout's: once exceeded
// it halts every lane.
//
// An item with maintenance windows (and no bypass) is dispatched only while
// one of them is open. CreateRollout stores each distinct window set once
// (id = hash of its windows); Step computes in Go, from the clock, whether
// each set is open and when it next opens (robfig/cron, 5 fields, in the
// window's time zone; open at T when a tick lies in (T-duration, T]) and
// passes that to the step script. A running attempt is never interrupted;
// a retry waits for a window too.
//
// Why a pending item is not dispatched is in Item.Reason, written when Step
// looks at the item (only when it changed): "wave_gate" (set at creation:
// waits for a later wave of its lane), "lane_full" (next in line: its
// lane's current wave holds max_concurrent items, or its BRC's budget is
// full), "maintenance_window" with Item.RetryAfter = the next opening (zero
// when unknown), "node_draining" (its node drains: SetDrained),
// "instance_busy" (a one-shot event's item waits for its instance);
// retrying items carry "backoff" with RetryAfter = the retry time. A
// rollout created with a Hold (e.g. "claim") dispatches nothing until
// Release. A halted rollout
// carries "failure_threshold", a paused one "paused", a cancelled one
// "cancelled" (SetRolloutState).
//
// # Waves: how the next one is chosen and what counts as done
//
// Step is level-based and re-entrant. It first settles time: attempts past
// their deadline (action timeout + delivery grace) that were never delivered
// are transient failures (the agent is offline); delivered ones without a
// result make their item ambiguous (reason awaiting_report) and no new
// attempt is made until a full report sent after the dispatch shows whether
// the target is in effect. Retrying items whose retry_after passed get a new
// attempt within their wave. Then, for every active rollout in creation
// order: the rollout completes when nothing is pending or in flight (every
// item is terminal); otherwise, per lane, the current wave is done when
// none of the lane's items is in flight (in_progress, retrying, ambiguous).
// Only then does the rollout halt (blocked, reason failure_threshold, when
// the items failed since the last resume reach failure_threshold, a count,
// or exceed failure_threshold_percent of the items not finished at that
// resume: whichever comes first) or the lane start its next wave: the
// first max_concurrent pending items in dispatch order (the caller's
// priority order; an item made pending again keeps its position) whose
// window is open, whose node is not draining and whose budget has room
// get an attempt each. A lane therefore never has more than max_concurrent
// items in flight (except a split group larger than max_concurrent, which
// runs alone in its wave).
//
// A lane's wave (lane_wave in lua/wave.lua) is decided in three steps:
// the scan reads what the lane has (in flight, pending in dispatch order
// with what decides each item: draining node, busy instance, placement;
// the budget's room), the plan decides from the scan alone which items
// the wave takes and why the others wait, and the apply writes it (the
// attempts, the reasons, the rejections, the lane's wave). Nothing is
// written before the plan is whole.
//
// The health gate (complete.lua, report.lua) counts a success done only
// when the instance its agent reports shows the item in effect: generation
// at least the item's, its target version, its desired state; otherwise
// the item stays in progress (report_mismatch) until a full report shows
// it, or its deadline makes it ambiguous.
//
// Results are committed in groups (group commit): concurrent Completes
// share one run of complete.lua, each result checked on its own, and the
// group then starts the next wave of every lane it left with nothing in
// flight, in the same script, under the current lease's fence, so agents
// do not wait for the next Step; it leaves the wave to Step when the lease
// expired or the wave would hold an item bound by windows (only Step knows
// them). Between two waves the critical path therefore holds the last
// results, one wave start and one delivery round trip. Such a wave start
// does not write why the next in line wait (lane_full, maintenance_window):
// the next Step does, once per wave (r:<id>:peek). A wave's dispatches
// write the deadlines, pending and in-flight sets once per wave, not once
// per item.
//
// # Delivery
//
// Attempts are queued as the agent receives them; popping one delivers it,
// so an attempt still queued at its deadline was never delivered (a Poll
// that pops one past its deadline marks it undelivered instead of handing
// it out). An attempt popped for a poll whose client is gone (NotHanded)
// has its deadline moved to now: never sent, it is retried; perhaps sent
// (the answer's write failed), its item waits for the node's report, as
// at any deadline. A Poll that finds its queue empty waits in memory: the scripts
// that queue attempts publish the nodes on the ready channel, and one
// subscriber per Engine claims the waiting Polls of those nodes and pops
// their queues in one pipeline (deliver.go). No Redis connection is held
// by a waiting agent. The calls made for one agent's request (a Poll's
// look at its queue, Resume, NotHanded, Report) hold at most
// WithAgentCalls connections at once; the others wait in the Engine, so a
// fleet connecting at once leaves the rest of the pool to the leader's
// scripts and reads.
//
// # Placement
//
// Placement fails closed (docs/contract.md#rules). Before an item with Requires or a
// Group is dispatched, the last full report of its node (obs) must
// advertise every requirement: a capability, or "address:<name>" for
// DataAddresses[<name>]; a node that never reported lacks everything. A
// split group (the items of one rollout with the same Group) is checked on
// every node of the group against the union of its members' requirements
// and leaves pending all together in one Step, its items counting together
// against max_concurrent: when the wave cannot take the whole group it
// waits (lane_full) for the next one. When a node lacks a requirement, the
// item, or every item of the group, is blocked with reason
// placement_rejected before any attempt exists; the instance's last
// outcome then keeps the same generation and config from being planned
// again (a newer generation is). CreateRollout creates a group whole or not
// at all. Retries are not checked again: the group has started. An item counts as done when its agent reports success, or when
// a later full report shows its instance at the item's generation and
// config hash.
package engine
