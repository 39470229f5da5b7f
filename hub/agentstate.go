package hub

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave"
)

// The state the agents' requests read and write (every poll asks whether
// its node owes a report, every report is recorded) and the version
// history every reconcile adds all observations to each have their own
// lock, not the hub's: at 100,000 nodes a reconcile walked every node's
// observation and a status commit copied every node's history under the
// hub's lock, and hundreds of polls and reports queued behind it (318 in
// one goroutine dump), each delayed answer holding back the agent's next
// poll and its results.

// reportAsks is what decides whether the hub asks a node for a full
// report (WantsReport). Every poll and every report take its one lock, on
// purpose: in 64 shards by node the waits behind it left the hub's mutex
// profile, but a 100,000-node rollout ran slower, not faster (the scale
// report's attempts 77 to 82).
type reportAsks struct {
	mu sync.Mutex
	// observed are the nodes with a full report at the last reconcile,
	// whose read of the observations started at observedAt; known are the
	// nodes of the snapshot that reconcile planned (nil before one).
	observed   map[string]bool
	observedAt time.Time
	known      map[string]*fleetwave.Node
	// asked is when each node was last asked for a report, taken when
	// this hub last took one and what it said.
	asked map[string]time.Time
	taken map[string]takenReport
	// awaiting are the nodes with an item the engine made ambiguous (an
	// attempt delivered, its result lost or late) until this hub takes a
	// report of theirs: only such a report settles the item, and the hub
	// asks for it rather than wait for the node's next periodic one.
	awaiting map[string]bool
}

// reconciled records what a reconcile read: the nodes with observations
// (read from at) and the snapshot it planned.
func (r *reportAsks) reconciled(seen map[string]bool, at time.Time, snap *fleetwave.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observed, r.observedAt, r.known = seen, at, snap.Nodes
}

// await records nodes with an ambiguous item.
func (r *reportAsks) await(nodes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.awaiting == nil {
		r.awaiting = map[string]bool{}
	}
	for _, n := range nodes {
		r.awaiting[n] = true
	}
}

// took records node's report (sum is the digest of what it says) taken
// at now, and returns the node's previous one (known: there was one) and
// when the node was last asked for one (wasAsked: it was).
func (r *reportAsks) took(node string, sum [32]byte, now time.Time) (prev takenReport, known bool, asked time.Time, wasAsked bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taken == nil {
		r.taken = map[string]takenReport{}
	}
	prev, known = r.taken[node]
	r.taken[node] = takenReport{at: now, sum: sum}
	delete(r.awaiting, node)
	asked, wasAsked = r.asked[node]
	return prev, known, asked, wasAsked
}

// wants is WantsReport: see there.
func (r *reportAsks) wants(node string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.awaiting[node] {
		return r.ask(node, now)
	}
	if r.observed == nil || r.observed[node] {
		return false // no reconcile yet (agents report at start), or reported
	}
	if tr, ok := r.taken[node]; ok && tr.at.After(r.observedAt) {
		// this hub took its report after the last reconcile read the
		// observations: not lost, only newer than that reconcile (at
		// 100,000 nodes, agents that registered while a reconcile ran
		// were each asked for a second full report)
		return false
	}
	if r.known[node] == nil {
		return false
	}
	return r.ask(node, now)
}

// ask says whether to ask node for a report now, once per
// reportAskEvery; r.mu held.
func (r *reportAsks) ask(node string, now time.Time) bool {
	if at, ok := r.asked[node]; ok && now.Sub(at) < reportAskEvery {
		return false
	}
	if r.asked == nil {
		r.asked = map[string]time.Time{}
	}
	r.asked[node] = now
	return true
}

// historyMaxVersions bounds the versions remembered per node and block.
const historyMaxVersions = 20

// versionHistory is the versions each node reported of each block, at
// most historyMaxVersions each, oldest first: the rollback exemption of
// the approval gate, the node view and the status read it. A node's map
// and its slices are never changed once made (add replaces them), so of
// hands them out without copying: every status write takes the history
// of the whole fleet, and copying it (100,000 maps and their slices at
// 100,000 nodes) made 53 MB of garbage a write (BenchmarkHistoryOfFleet),
// held alive until the next one.
type versionHistory struct {
	mu sync.Mutex
	m  map[string]map[string][]string // node -> block -> versions
}

// observe adds the versions of obs' instances (absent ones left out).
func (v *versionHistory) observe(obs fleetwave.Observations) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for node, r := range obs {
		for _, in := range r.Instances {
			if in.Version == "" || in.State == fleetwave.StateAbsent {
				continue
			}
			v.add(node, in.Block, in.Version)
		}
	}
}

// merge adds history (read from the status in Git).
func (v *versionHistory) merge(history map[string]map[string][]string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for node, m := range history {
		for block, versions := range m {
			for _, ver := range versions {
				v.add(node, block, ver)
			}
		}
	}
}

// add records one version; v.mu held.
func (v *versionHistory) add(node, block, version string) {
	if v.m == nil {
		v.m = map[string]map[string][]string{}
	}
	m := v.m[node]
	if slices.Contains(m[block], version) {
		return
	}
	// a new map and a new slice: those handed out stay as they were
	vs := append(slices.Clip(m[block]), version)
	if len(vs) > historyMaxVersions {
		vs = vs[len(vs)-historyMaxVersions:]
	}
	cp := make(map[string][]string, len(m)+1)
	maps.Copy(cp, m)
	cp[block] = vs
	v.m[node] = cp
}

// reported says whether node reported version of block.
func (v *versionHistory) reported(node, block, version string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Contains(v.m[node][block], version)
}

// of returns the history of nodes (every node's when nodes is nil) as it
// is now, read only: a node's map is the history's own, never changed
// afterwards (add replaces it). A node without history is left out.
func (v *versionHistory) of(nodes []string) map[string]map[string][]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if nodes == nil {
		return maps.Clone(v.m)
	}
	out := make(map[string]map[string][]string, len(nodes))
	for _, id := range nodes {
		if m := v.m[id]; len(m) > 0 {
			out[id] = m
		}
	}
	return out
}
