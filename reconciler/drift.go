package reconciler

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/fleetwave/fleetwave"
)

// Kinds of drift.
const (
	DriftMissing            = "missing"             // desired, not observed
	DriftUnexpected         = "unexpected"          // desired absent, observed present
	DriftVersion            = "version"             // observed version differs
	DriftConfig             = "config"              // observed config hash differs
	DriftState              = "state"               // running/stopped differs
	DriftGenerationMismatch = "generation_mismatch" // observed generation below the trigger's
	DriftStaleNode          = "stale_node"          // no full report within staleAfter (or never)
	DriftCLIManaged         = "cli_managed"         // installed out of band
	// DriftAgentVersion: the agent block is at its target version but the
	// running agent reports another agent_version (the new binary is not
	// running yet: it needs an agent restart, or the upgrade command did
	// not replace it). No item is planned for it: re-running the upgrade
	// would not restart the agent.
	DriftAgentVersion = "agent_version"
)

// DriftEntry is one difference between desired and observed, for status
// files and the console. Values are versions, hashes, states and
// generations: never a rendered config.
type DriftEntry struct {
	Node     string `json:"node"`
	Block    string `json:"block,omitempty"`
	Trigger  string `json:"trigger,omitempty"`
	Kind     string `json:"kind"`
	Desired  string `json:"desired,omitempty"`
	Observed string `json:"observed,omitempty"`
}

// Drift lists, per instance in scope of every reconciliation trigger, how
// observed differs from desired, plus one stale_node entry per node whose
// last full report is older than staleAfter before now (or missing). It is
// what observe mode shows instead of dispatching; it works in any mode.
// Sorted by node, block, trigger, kind. Template failures are left out
// (PlanWith reports them as Problems).
func Drift(snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time, staleAfter time.Duration, opts Options) []DriftEntry {
	var c DriftCache
	c.Update(snap, obs, now, staleAfter, opts)
	var out []DriftEntry
	for _, id := range snap.SortedNodeIDs() {
		out = append(out, c.Of(id)...)
	}
	return out
}

// DriftCache is Drift node by node, for a caller that asks again as
// reports come in (the hub, at every status write): a node's entries are
// worked out again only when its report or the snapshot is another than
// at the last Update, and after a new snapshot that changed only BRCs,
// only when one of its BRCs changed (keepUnchanged). A snapshot and a
// report are never changed in place (a new one replaces them), so the
// same pointer says the same thing; a node's entries depend on nothing
// else but the clock, which only stale_node reads, at every Update. At
// 100,000 nodes in a fleet-wide rollout every node drifts, and working it
// all out for each status write (a config rendered and hashed per
// instance, some 300,000 entries sorted, then grouped by node) took
// 0.45-0.75 s a write (BenchmarkDriftPerWrite) while a write sees a few
// thousand new reports. One caller's Options throughout; not safe for
// concurrent use. The zero value is ready.
type DriftCache struct {
	snap *fleetwave.Snapshot
	// triggers are the reconciliation triggers whose scope holds each
	// node (in name order), of snap
	triggers map[string][]string
	nodes    map[string]nodeDrift
	// stale are the entries of the nodes with a stale_node entry at the
	// last Update, that one first
	stale map[string][]DriftEntry
}

// nodeDrift is a node's entries (stale_node aside, sorted) as worked out
// from report.
type nodeDrift struct {
	report  *fleetwave.Report
	entries []DriftEntry
}

// Update brings the cache to Drift's arguments; Of then gives each node's
// entries. A nil snap leaves no entries.
func (c *DriftCache) Update(snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time, staleAfter time.Duration, opts Options) {
	if snap != c.snap || c.triggers == nil {
		prev, prevTriggers, prevNodes := c.snap, c.triggers, c.nodes
		c.snap, c.triggers, c.nodes = snap, map[string][]string{}, map[string]nodeDrift{}
		if snap != nil {
			for _, name := range slices.Sorted(maps.Keys(snap.Triggers)) {
				t := snap.Triggers[name]
				if (t.TriggerType != "" && t.TriggerType != fleetwave.TriggerReconciliation) || snap.Blocks[t.BlockName] == nil {
					continue
				}
				for _, id := range Scope(snap, t) {
					c.triggers[id] = append(c.triggers[id], name)
				}
			}
			c.keepUnchanged(prev, prevTriggers, prevNodes)
		}
	}
	if c.stale == nil {
		c.stale = map[string][]DriftEntry{}
	}
	clear(c.stale)
	if snap == nil {
		return
	}
	var rend *renderer // made when a node needs it
	for _, id := range snap.SortedNodeIDs() {
		r := obs[id]
		var stale *DriftEntry
		switch {
		case r == nil:
			stale = &DriftEntry{Node: id, Kind: DriftStaleNode, Observed: "never"}
		default:
			at := r.ReceivedAt
			if at.IsZero() {
				at = r.SentAt
			}
			if now.Sub(at) > staleAfter {
				stale = &DriftEntry{Node: id, Kind: DriftStaleNode, Observed: at.UTC().Format(time.RFC3339)}
			}
		}
		var nd nodeDrift
		if names := c.triggers[id]; len(names) > 0 {
			var ok bool
			if nd, ok = c.nodes[id]; !ok || nd.report != r {
				if rend == nil {
					rend = newRenderer(opts)
				}
				nd = nodeDrift{report: r, entries: nodeDriftOf(snap, obs, id, names, rend)}
				c.nodes[id] = nd
			}
		}
		if stale != nil {
			// without a block, it sorts before the node's others
			c.stale[id] = append([]DriftEntry{*stale}, nd.entries...)
		}
	}
}

// keepUnchanged keeps, when the new snapshot changed nothing but triggers
// from prev (ChangedTriggers), the entries worked out under prev of every
// node whose triggers in scope are those it had, none of them changed
// nor given another generation: what they were worked out from (the node,
// its triggers, their blocks, generations and renders) is the same. At
// 100,000 nodes every push, a one-node BRC's among them, worked out every
// node's drift again: 5.4-6.0 s of a status write under load.
func (c *DriftCache) keepUnchanged(prev *fleetwave.Snapshot, prevTriggers map[string][]string, prevNodes map[string]nodeDrift) {
	if prev == nil || len(prevNodes) == 0 || len(prev.Objects) == 0 || len(c.snap.Objects) == 0 {
		return
	}
	changed := ChangedTriggers(prev, c.snap)
	if changed == nil {
		return
	}
	for name := range c.snap.Triggers {
		k := fleetwave.Key(fleetwave.KindTrigger, name)
		if c.snap.Generation(k) != prev.Generation(k) {
			changed[name] = true
		}
	}
	for id, nd := range prevNodes {
		names := c.triggers[id]
		if slices.Equal(names, prevTriggers[id]) && !slices.ContainsFunc(names, func(n string) bool { return changed[n] }) {
			c.nodes[id] = nd
		}
	}
}

// Of returns node id's entries at the last Update, sorted by block,
// trigger and kind; read only (the cache's own).
func (c *DriftCache) Of(id string) []DriftEntry {
	if e, ok := c.stale[id]; ok {
		return e
	}
	return c.nodes[id].entries
}

// nodeDriftOf works out node id's entries for the triggers names, sorted
// by block, trigger and kind.
func nodeDriftOf(snap *fleetwave.Snapshot, obs fleetwave.Observations, id string, names []string, rend *renderer) []DriftEntry {
	var out []DriftEntry
	n := snap.Nodes[id]
	for _, name := range names {
		t := snap.Triggers[name]
		block := snap.Blocks[t.BlockName]
		gen := snap.Generation(fleetwave.Key(fleetwave.KindTrigger, name))
		desired := desiredState(t)
		in := observedInstance(obs, fleetwave.InstanceKey{Node: id, Block: t.BlockName})
		add := func(kind, want, got string) {
			out = append(out, DriftEntry{Node: id, Block: t.BlockName, Trigger: name, Kind: kind, Desired: want, Observed: got})
		}
		if desired == fleetwave.StateAbsent {
			if in != nil {
				add(DriftUnexpected, string(fleetwave.StateAbsent), string(in.State))
			}
			continue
		}
		if in == nil {
			add(DriftMissing, string(desired), "")
			continue
		}
		if in.ManagedBy == fleetwave.ManagedByCLI {
			add(DriftCLIManaged, t.Owner(block), in.ManagedBy)
		}
		if in.Version != t.TargetVersion {
			add(DriftVersion, t.TargetVersion, in.Version)
		} else if t.BlockName == fleetwave.AgentBlock {
			if r := obs[id]; r != nil && r.AgentVersion != "" && r.AgentVersion != t.TargetVersion {
				add(DriftAgentVersion, t.TargetVersion, r.AgentVersion)
			}
		}
		if rendered, err := rend.renderVars(snap, n, block, t); err == nil {
			if h := ConfigHash(rendered); h != in.ConfigHash {
				add(DriftConfig, h, in.ConfigHash)
			}
		}
		if (desired == fleetwave.StateRunning && in.State == fleetwave.StateStopped) ||
			(desired == fleetwave.StateStopped && in.State != fleetwave.StateStopped) {
			add(DriftState, string(desired), string(in.State))
		}
		if in.Generation < gen {
			add(DriftGenerationMismatch, strconv.FormatInt(gen, 10), strconv.FormatInt(in.Generation, 10))
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Block != b.Block {
			return a.Block < b.Block
		}
		if a.Trigger != b.Trigger {
			return a.Trigger < b.Trigger
		}
		return a.Kind < b.Kind
	})
	return out
}
