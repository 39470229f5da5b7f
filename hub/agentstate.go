package hub

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
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
// report (WantsReport). Every poll asks it and every report records one:
// thousands of calls a second at 100,000 nodes, which under one lock
// queued behind each other (44% of the hub's lock waits in a mutex
// profile of a 10,000-node rollout). So each node's state lives in one of
// askShards shards, each with its own lock, and what the last reconcile
// read is replaced whole and read without one.
type reportAsks struct {
	read   atomic.Pointer[reconcileRead]
	shards [askShards]askShard
}

// askShards is the number of shards of reportAsks: enough that two cores
// rarely meet on one lock.
const askShards = 64

// reconcileRead is what the last reconcile read: observed are the nodes
// with a full report, whose read of the observations started at
// observedAt; known are the nodes of the snapshot it planned.
type reconcileRead struct {
	observed   map[string]bool
	observedAt time.Time
	known      map[string]*fleetwave.Node
}

// askShard is the state of the nodes of one shard.
type askShard struct {
	mu sync.Mutex
	// asked is when each node was last asked for a report, taken when
	// this hub last took one and what it said.
	asked map[string]time.Time
	taken map[string]takenReport
	// awaiting are the nodes with an item the engine made ambiguous (an
	// attempt delivered, its result lost or late) until this hub takes a
	// report of theirs: only such a report settles the item, and the hub
	// asks for it rather than wait for the node's next periodic one.
	awaiting map[string]bool
	// a shard to a cache line: two cores taking neighbouring locks do
	// not invalidate each other's
	_ [32]byte
}

var askSeed = maphash.MakeSeed()

// shard is node's shard.
func (r *reportAsks) shard(node string) *askShard {
	return &r.shards[maphash.String(askSeed, node)%askShards]
}

// reconciled records what a reconcile read: the nodes with observations
// (read from at) and the snapshot it planned.
func (r *reportAsks) reconciled(seen map[string]bool, at time.Time, snap *fleetwave.Snapshot) {
	r.read.Store(&reconcileRead{observed: seen, observedAt: at, known: snap.Nodes})
}

// await records nodes with an ambiguous item.
func (r *reportAsks) await(nodes []string) {
	for _, n := range nodes {
		s := r.shard(n)
		s.mu.Lock()
		if s.awaiting == nil {
			s.awaiting = map[string]bool{}
		}
		s.awaiting[n] = true
		s.mu.Unlock()
	}
}

// took records node's report (sum is the digest of what it says) taken
// at now, and returns the node's previous one (known: there was one) and
// when the node was last asked for one (wasAsked: it was).
func (r *reportAsks) took(node string, sum [32]byte, now time.Time) (prev takenReport, known bool, asked time.Time, wasAsked bool) {
	s := r.shard(node)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken == nil {
		s.taken = map[string]takenReport{}
	}
	prev, known = s.taken[node]
	s.taken[node] = takenReport{at: now, sum: sum}
	delete(s.awaiting, node)
	asked, wasAsked = s.asked[node]
	return prev, known, asked, wasAsked
}

// wants is WantsReport: see there.
func (r *reportAsks) wants(node string, now time.Time) bool {
	rd := r.read.Load()
	s := r.shard(node)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.awaiting[node] {
		return s.ask(node, now)
	}
	if rd == nil || rd.observed == nil || rd.observed[node] {
		return false // no reconcile yet (agents report at start), or reported
	}
	if tr, ok := s.taken[node]; ok && tr.at.After(rd.observedAt) {
		// this hub took its report after the last reconcile read the
		// observations: not lost, only newer than that reconcile (at
		// 100,000 nodes, agents that registered while a reconcile ran
		// were each asked for a second full report)
		return false
	}
	if rd.known[node] == nil {
		return false
	}
	return s.ask(node, now)
}

// ask says whether to ask node for a report now, once per
// reportAskEvery; s.mu held.
func (s *askShard) ask(node string, now time.Time) bool {
	if at, ok := s.asked[node]; ok && now.Sub(at) < reportAskEvery {
		return false
	}
	if s.asked == nil {
		s.asked = map[string]time.Time{}
	}
	s.asked[node] = now
	return true
}

// historyMaxVersions bounds the versions remembered per node and block.
const historyMaxVersions = 20

// versionHistory is the versions each node reported of each block, at
// most historyMaxVersions each, oldest first: the rollback exemption of
// the approval gate, the node view and the status read it.
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
	if m == nil {
		m = map[string][]string{}
		v.m[node] = m
	}
	if slices.Contains(m[block], version) {
		return
	}
	m[block] = append(m[block], version)
	if len(m[block]) > historyMaxVersions {
		m[block] = m[block][len(m[block])-historyMaxVersions:]
	}
}

// reported says whether node reported version of block.
func (v *versionHistory) reported(node, block, version string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Contains(v.m[node][block], version)
}

// of returns a copy of the history of nodes (every node's when nodes is
// nil); a node without history is left out.
func (v *versionHistory) of(nodes []string) map[string]map[string][]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]map[string][]string{}
	copyNode := func(id string, m map[string][]string) {
		if len(m) == 0 {
			return
		}
		cp := make(map[string][]string, len(m))
		for b, vs := range m {
			cp[b] = slices.Clone(vs)
		}
		out[id] = cp
	}
	if nodes == nil {
		for id, m := range v.m {
			copyNode(id, m)
		}
		return out
	}
	for _, id := range nodes {
		copyNode(id, v.m[id])
	}
	return out
}
