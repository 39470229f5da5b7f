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
// Sorted by node, block, kind. Template failures are left out (PlanWith
// reports them as Problems).
func Drift(snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time, staleAfter time.Duration, opts Options) []DriftEntry {
	var out []DriftEntry
	for _, id := range snap.SortedNodeIDs() {
		r := obs[id]
		switch {
		case r == nil:
			out = append(out, DriftEntry{Node: id, Kind: DriftStaleNode, Observed: "never"})
		default:
			at := r.ReceivedAt
			if at.IsZero() {
				at = r.SentAt
			}
			if now.Sub(at) > staleAfter {
				out = append(out, DriftEntry{Node: id, Kind: DriftStaleNode, Observed: at.UTC().Format(time.RFC3339)})
			}
		}
	}
	rend := newRenderer(opts)
	for _, name := range slices.Sorted(maps.Keys(snap.Triggers)) {
		t := snap.Triggers[name]
		if t.TriggerType != "" && t.TriggerType != fleetwave.TriggerReconciliation {
			continue
		}
		block := snap.Blocks[t.BlockName]
		if block == nil {
			continue
		}
		gen := snap.Generation(fleetwave.Key(fleetwave.KindTrigger, name))
		desired := desiredState(t)
		for _, id := range Scope(snap, t) {
			n := snap.Nodes[id]
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
				add(DriftCLIManaged, t.Owner(snap.Blocks[t.BlockName]), in.ManagedBy)
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
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
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
