package reconciler

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/fleetwave/fleetwave"
)

// Problem is an instance the reconciler could not plan (for example its
// template does not render); it is reported, not dispatched.
type Problem struct {
	Trigger string                `json:"trigger"`
	Node    string                `json:"node"`
	Block   string                `json:"block"`
	Reason  string                `json:"reason"`
	Message string                `json:"message"`
	Key     fleetwave.InstanceKey `json:"-"`
}

// Plan is the work a snapshot asks for, given the observations.
type Plan struct {
	Rollouts []fleetwave.RolloutSpec
	Problems []Problem
	// Held lists triggers that planned nothing on purpose, with the reason
	// (e.g. observe_mode).
	Held map[string]string
}

// Items returns the number of items over all rollouts.
func (p Plan) Items() int {
	n := 0
	for _, r := range p.Rollouts {
		n += len(r.Items)
	}
	return n
}

// PlanSnapshot computes the rollouts the snapshot's reconciliation triggers
// ask for. now is accepted for time-dependent rules (windows, schedules) and
// is otherwise unused; the function reads no clock.
func PlanSnapshot(snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time) Plan {
	_ = now
	plan := Plan{Held: map[string]string{}}
	names := make([]string, 0, len(snap.Triggers))
	for name := range snap.Triggers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := snap.Triggers[name]
		if t.TriggerType != "" && t.TriggerType != fleetwave.TriggerReconciliation {
			continue
		}
		if snap.Config.ReconcileMode == "observe" {
			plan.Held[name] = fleetwave.ReasonObserveMode
			continue
		}
		spec, problems := planTrigger(snap, obs, t)
		plan.Problems = append(plan.Problems, problems...)
		if len(spec.Items) > 0 {
			plan.Rollouts = append(plan.Rollouts, spec)
		}
	}
	return plan
}

// Scope returns the ids of the nodes a trigger addresses, sorted, draining
// nodes included.
func Scope(snap *fleetwave.Snapshot, t *fleetwave.Trigger) []string {
	var explicit map[string]bool
	if len(t.Nodes) > 0 {
		explicit = make(map[string]bool, len(t.Nodes))
		for _, id := range t.Nodes {
			explicit[id] = true
		}
	}
	var out []string
	for _, id := range snap.SortedNodeIDs() {
		n := snap.Nodes[id]
		if explicit != nil && !explicit[id] {
			continue
		}
		if len(t.TargetOrganizations) > 0 && !slices.Contains(t.TargetOrganizations, organizationOf(snap, n)) {
			continue
		}
		if len(t.TargetWorkspaces) > 0 && !slices.Contains(t.TargetWorkspaces, n.Workspace) {
			continue
		}
		if !t.Selector.Empty() && !t.Selector.Matches(n.Labels) {
			continue
		}
		out = append(out, id)
	}
	return out
}

func organizationOf(snap *fleetwave.Snapshot, n *fleetwave.Node) string {
	if n.Organization != "" {
		return n.Organization
	}
	if ws := snap.Workspaces[n.Workspace]; ws != nil {
		return ws.Organization
	}
	return ""
}

// Criticality resolves a node's criticality: node, then workspace, then
// organization, default medium.
func Criticality(snap *fleetwave.Snapshot, n *fleetwave.Node) fleetwave.Criticality {
	if n.Criticality != "" {
		return n.Criticality
	}
	if ws := snap.Workspaces[n.Workspace]; ws != nil && ws.Criticality != "" {
		return ws.Criticality
	}
	if org := snap.Organizations[organizationOf(snap, n)]; org != nil && org.Criticality != "" {
		return org.Criticality
	}
	return fleetwave.CriticalityMedium
}

func priorityRank(order []fleetwave.Criticality, c fleetwave.Criticality) int {
	if len(order) == 0 {
		order = []fleetwave.Criticality{fleetwave.CriticalityHigh, fleetwave.CriticalityMedium, fleetwave.CriticalityLow}
	}
	if i := slices.Index(order, c); i >= 0 {
		return i
	}
	return len(order)
}

func planTrigger(snap *fleetwave.Snapshot, obs fleetwave.Observations, t *fleetwave.Trigger) (fleetwave.RolloutSpec, []Problem) {
	key := fleetwave.Key(fleetwave.KindTrigger, t.Name)
	gen := snap.Generation(key)
	block := snap.Blocks[t.BlockName]
	scope := Scope(snap, t)
	spec := fleetwave.RolloutSpec{
		BaseID: t.Name + "-g" + strconv.FormatInt(gen, 10),
		Source: fleetwave.RolloutSource{
			Object: key, Generation: gen, Commit: snap.Commit, Kind: fleetwave.SourceScheduler,
		},
		MaxConcurrent:           maxConcurrent(snap, t, len(scope)),
		FailureThresholdPercent: firstNonZeroF(t.FailureThresholdPercent, snap.Config.FailureThresholdPercent),
		MaxRetries:              firstNonZero(t.MaxRetries, snap.Config.MaxRetries),
	}
	if block == nil { // schema validation prevents this; stay safe
		return spec, []Problem{{Trigger: t.Name, Block: t.BlockName, Reason: "unknown_block", Message: "block " + t.BlockName + " is not defined"}}
	}
	desired := t.DesiredState
	if desired == "" {
		desired = fleetwave.StateInstalled
	}
	var problems []Problem
	type ranked struct {
		rank int
		item fleetwave.ItemSpec
	}
	var items []ranked
	for _, id := range scope {
		n := snap.Nodes[id]
		if n.Drain {
			continue
		}
		ik := fleetwave.InstanceKey{Node: id, Block: t.BlockName}
		observed := obs.Instance(ik)
		if observed != nil && observed.State == fleetwave.StateAbsent {
			observed = nil // an uninstalled instance is not there
		}
		var rendered, hash string
		if desired != fleetwave.StateAbsent {
			out, err := Render(t.Name, t.BlockConfigTemplate, TemplateVars(snap, n, block, t))
			if err != nil {
				problems = append(problems, Problem{Trigger: t.Name, Node: id, Block: t.BlockName, Reason: "invalid_config", Message: err.Error(), Key: ik})
				continue
			}
			rendered, hash = out, ConfigHash(out)
		}
		action := decide(t, block, desired, observed, hash)
		if action == "" {
			continue
		}
		ba, ok := block.Actions[action]
		if !ok {
			problems = append(problems, Problem{Trigger: t.Name, Node: id, Block: t.BlockName, Reason: "unknown_action",
				Message: fmt.Sprintf("block %s has no %s action", block.Name, action), Key: ik})
			continue
		}
		crit := Criticality(snap, n)
		items = append(items, ranked{rank: priorityRank(snap.Config.PriorityOrder, crit), item: fleetwave.ItemSpec{
			Node: id, Block: t.BlockName, Action: action, Generation: gen,
			TargetVersion: t.TargetVersion, ConfigHash: hash, DesiredState: desired,
			ManagedBy: t.Owner(), Criticality: crit,
			Payload: fleetwave.AttemptPayload{
				Command: ba.Command, TimeoutSeconds: int(math.Ceil(ba.Timeout.Seconds())),
				Config: rendered, OneShot: ba.OneShot,
			},
		}})
	}
	sort.SliceStable(items, func(i, j int) bool {
		if items[i].rank != items[j].rank {
			return items[i].rank < items[j].rank
		}
		return items[i].item.Node < items[j].item.Node
	})
	for _, r := range items {
		spec.Items = append(spec.Items, r.item)
	}
	return spec, problems
}

// decide returns the action that converges observed to desired, "" for none.
func decide(t *fleetwave.Trigger, block *fleetwave.Block, desired fleetwave.DesiredState, observed *fleetwave.InstanceStatus, hash string) string {
	if desired == fleetwave.StateAbsent {
		if observed != nil {
			return fleetwave.ActionUninstall
		}
		return ""
	}
	if observed == nil {
		return fleetwave.ActionInstall
	}
	if observed.ManagedBy == fleetwave.ManagedByCLI && t.AutoTakeover {
		if _, ok := block.Actions[fleetwave.ActionTakeover]; ok {
			return fleetwave.ActionTakeover
		}
	}
	if observed.Version != t.TargetVersion || observed.ConfigHash != hash {
		if t.ActionName != "" {
			return t.ActionName
		}
		return fleetwave.ActionUpgrade
	}
	switch {
	case desired == fleetwave.StateRunning && observed.State == fleetwave.StateStopped:
		return fleetwave.ActionStart
	case desired == fleetwave.StateStopped && observed.State != fleetwave.StateStopped:
		return fleetwave.ActionStop
	}
	return ""
}

func maxConcurrent(snap *fleetwave.Snapshot, t *fleetwave.Trigger, scope int) int {
	if t.MaxConcurrent > 0 {
		return t.MaxConcurrent
	}
	if t.MaxConcurrentPercent > 0 {
		return max(1, int(math.Ceil(float64(scope)*t.MaxConcurrentPercent/100)))
	}
	if snap.Config.MaxConcurrent > 0 {
		return snap.Config.MaxConcurrent
	}
	return 1
}

func firstNonZero(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func firstNonZeroF(a, b float64) float64 {
	if a != 0 {
		return a
	}
	return b
}

// TemplateVars is the context a block_config_template is rendered with:
// node, workspace, organization, labels, block and brc, as plain data (no Go
// values with methods).
func TemplateVars(snap *fleetwave.Snapshot, n *fleetwave.Node, b *fleetwave.Block, t *fleetwave.Trigger) map[string]any {
	labels := map[string]any{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	caps := make([]any, 0, len(n.Capabilities))
	for _, c := range n.Capabilities {
		caps = append(caps, c)
	}
	addrs := map[string]any{}
	for k, v := range n.DataAddresses {
		addrs[k] = v
	}
	org := organizationOf(snap, n)
	node := map[string]any{
		"id": n.ID, "name": n.ID, "organization": org, "workspace": n.Workspace,
		"criticality": string(Criticality(snap, n)), "labels": labels,
		"capabilities": caps, "data_addresses": addrs,
	}
	ws := map[string]any{"name": n.Workspace, "organization": org}
	if w := snap.Workspaces[n.Workspace]; w != nil {
		ws["criticality"] = string(w.Criticality)
	}
	orgv := map[string]any{"name": org}
	if o := snap.Organizations[org]; o != nil {
		orgv["criticality"] = string(o.Criticality)
	}
	return map[string]any{
		"node":         node,
		"workspace":    ws,
		"organization": orgv,
		"labels":       labels,
		"block":        map[string]any{"name": b.Name, "owner": b.Owner},
		"brc": map[string]any{
			"name": t.Name, "block_name": t.BlockName, "action_name": t.ActionName,
			"target_version": t.TargetVersion, "desired_state": string(t.DesiredState),
			"managed_by": t.Owner(),
		},
	}
}
