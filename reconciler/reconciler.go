package reconciler

import (
	"fmt"
	"maps"
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
	// Problems are instances that could not be planned (errors to fix in
	// the repository: template, unknown action or window).
	Problems []Problem
	// Held lists triggers that planned nothing on purpose, with the reason
	// (e.g. observe_mode).
	Held map[string]string
	// Holds lists instances that differ from their desired state but are
	// held on purpose (node_draining, lifecycle_disabled,
	// config_apply_disabled); they are planned once the reason goes away.
	Holds []Problem
}

// WithItems returns the rollouts that have items.
func (p Plan) WithItems() []fleetwave.RolloutSpec {
	var out []fleetwave.RolloutSpec
	for _, r := range p.Rollouts {
		if len(r.Items) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// Items returns the number of items over all rollouts.
func (p Plan) Items() int {
	n := 0
	for _, r := range p.Rollouts {
		n += len(r.Items)
	}
	return n
}

// PlanSnapshot is PlanWith without options (no credentials, no staged
// enablement).
func PlanSnapshot(snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time) Plan {
	return PlanWith(snap, obs, now, Options{})
}

// PlanWith computes the rollouts the snapshot's reconciliation triggers ask
// for. now is accepted for time-dependent rules and is otherwise unused; the
// function reads no clock. Schedule triggers are planned by Schedules and
// PlanSchedule, manual requests by PlanManual.
func PlanWith(snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time, opts Options) Plan {
	_ = now
	plan := Plan{Held: map[string]string{}}
	r := newRenderer(opts)
	for _, name := range slices.Sorted(maps.Keys(snap.Triggers)) {
		t := snap.Triggers[name]
		if t.TriggerType != "" && t.TriggerType != fleetwave.TriggerReconciliation {
			continue
		}
		if opts.Only != nil && !opts.Only[name] {
			continue
		}
		if snap.Config.ReconcileMode == "observe" {
			plan.Held[name] = fleetwave.ReasonObserveMode
			continue
		}
		spec, problems, holds := planTrigger(snap, obs, t, r, opts)
		plan.Problems = append(plan.Problems, problems...)
		plan.Holds = append(plan.Holds, holds...)
		// a spec without items still supersedes the trigger's older
		// generations (Supersede)
		plan.Rollouts = append(plan.Rollouts, spec)
	}
	return plan
}

// RolloutID is the id of the rollout of a trigger's generation: one trigger
// event, one rollout.
func RolloutID(trigger string, generation int64) string {
	return trigger + "-g" + strconv.FormatInt(generation, 10)
}

// Scope returns the ids of the nodes a trigger addresses, sorted, draining
// nodes included (fleetwave.Snapshot.Scope: schema checks ownership with the
// same rule).
func Scope(snap *fleetwave.Snapshot, t *fleetwave.Trigger) []string { return snap.Scope(t) }

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

// rankedItem orders items by criticality rank, then node id.
type rankedItem struct {
	rank int
	item *fleetwave.ItemSpec // not the value: growing a slice of 100,000 copied most of a plan's bytes
}

func sortItems(items []rankedItem) []fleetwave.ItemSpec {
	sort.SliceStable(items, func(i, j int) bool {
		if items[i].rank != items[j].rank {
			return items[i].rank < items[j].rank
		}
		return items[i].item.Node < items[j].item.Node
	})
	out := make([]fleetwave.ItemSpec, 0, len(items))
	for _, r := range items {
		out = append(out, *r.item)
	}
	return out
}

// observedInstance returns the observed instance, nil when missing or
// reported absent (an uninstalled instance is not there).
func observedInstance(obs fleetwave.Observations, ik fleetwave.InstanceKey) *fleetwave.InstanceStatus {
	in := obs.Instance(ik)
	if in != nil && in.State == fleetwave.StateAbsent {
		return nil
	}
	return in
}

func desiredState(t *fleetwave.Trigger) fleetwave.DesiredState {
	if t.DesiredState == "" {
		return fleetwave.StateInstalled
	}
	return t.DesiredState
}

func planTrigger(snap *fleetwave.Snapshot, obs fleetwave.Observations, t *fleetwave.Trigger, r *renderer, opts Options) (fleetwave.RolloutSpec, []Problem, []Problem) {
	key := fleetwave.Key(fleetwave.KindTrigger, t.Name)
	gen := snap.Generation(key)
	block := snap.Blocks[t.BlockName]
	scope := Scope(snap, t)
	mc := maxConcurrent(snap, t, len(scope))
	spec := fleetwave.RolloutSpec{
		BaseID: RolloutID(t.Name, gen),
		Source: fleetwave.RolloutSource{
			Object: key, Generation: gen, Commit: snap.Commit, Kind: fleetwave.SourceScheduler,
		},
		MaxConcurrent:           mc,
		FailureThresholdPercent: firstNonZeroF(t.FailureThresholdPercent, snap.Config.FailureThresholdPercent),
		FailureThreshold:        firstNonZero(t.FailureThreshold, snap.Config.FailureThreshold),
		MaxRetries:              firstNonZero(t.MaxRetries, snap.Config.MaxRetries),
		Backoff:                 snap.Config.Backoff,
		Budget:                  t.Name,
		BudgetCap:               mc,
		Supersede:               true,
	}
	if block == nil { // schema validation prevents this; stay safe
		return spec, []Problem{{Trigger: t.Name, Block: t.BlockName, Reason: "unknown_block", Message: "block " + t.BlockName + " is not defined"}}, nil
	}
	desired := desiredState(t)
	var problems, holds []Problem
	var items []rankedItem
	for _, id := range scope {
		n := snap.Nodes[id]
		ik := fleetwave.InstanceKey{Node: id, Block: t.BlockName}
		if opts.RequireReport && obs[id] == nil {
			holds = append(holds, Problem{Trigger: t.Name, Node: id, Block: t.BlockName, Reason: fleetwave.ReasonAwaitingReport,
				Message: "no report from this node's agent yet", Key: ik})
			continue
		}
		observed := observedInstance(obs, ik)
		var rendered, hash, invalid string
		if desired != fleetwave.StateAbsent {
			out, err := r.renderNode(snap, n, block, t)
			if err != nil {
				// The instance gets a blocked item carrying the error: it is
				// counted and visible in its rollout, never dispatched, and
				// stays blocked until a newer generation or config.
				invalid = err.Error()
				problems = append(problems, Problem{Trigger: t.Name, Node: id, Block: t.BlockName, Reason: ReasonInvalidConfig, Message: invalid, Key: ik})
			} else {
				rendered, hash = out, ConfigHash(out)
			}
		}
		action := decide(t, desired, observed, hash)
		if invalid != "" {
			action = fleetwave.ActionInstall
			if observed != nil {
				action = configAction(t)
			}
		}
		skip := ""
		if observed != nil && observed.ManagedBy == fleetwave.ManagedByCLI {
			// A CLI-managed instance is a conflict: migrate it first when
			// allowed (the normal difference follows on the next plan),
			// otherwise record it as skipped.
			if _, ok := block.Actions[fleetwave.ActionTakeover]; ok && t.AutoTakeover {
				action = fleetwave.ActionTakeover
			} else if action != "" {
				skip = fleetwave.ReasonCLIManaged
			}
		}
		if action == "" {
			continue
		}
		hold := func(reason, msg string) {
			holds = append(holds, Problem{Trigger: t.Name, Node: id, Block: t.BlockName, Reason: reason, Message: msg, Key: ik})
		}
		if reason := holdReason(snap.Config.Enablement, n, action); reason != "" {
			hold(reason, action+" is not enabled for this node")
			continue
		}
		if action == fleetwave.ActionInstall && observed == nil && awaitingDetect(opts, block, obs[id]) {
			hold(fleetwave.ReasonAwaitingReport, "waiting for a report that ran the detect command of block "+block.Name+" (an instance installed by hand is never installed over)")
			continue
		}
		item, p := buildItem(snap, n, t, block, action, gen, rendered, hash, desired)
		if p != nil {
			problems = append(problems, *p)
			continue
		}
		if action == fleetwave.ActionTakeover {
			leaveInstance(&item) // ownership only; the difference follows
		}
		switch {
		case skip != "":
			item.SkipReason = skip
			item.Payload = fleetwave.AttemptPayload{} // never dispatched
		case invalid != "":
			item.BlockReason, item.BlockMessage = ReasonInvalidConfig, invalid
			item.Payload = fleetwave.AttemptPayload{} // never dispatched
		}
		items = append(items, rankedItem{rank: priorityRank(snap.Config.PriorityOrder, item.Criticality), item: &item})
	}
	items, held := place(obs, t.Name, block, items, holds, opts)
	spec.Items = sortItems(items)
	return spec, problems, append(holds, held...)
}

// buildItem makes the item for action on node n, resolving the block action
// and the maintenance windows; a non-nil Problem means it cannot be planned.
func buildItem(snap *fleetwave.Snapshot, n *fleetwave.Node, t *fleetwave.Trigger, block *fleetwave.Block, action string, gen int64, rendered, hash string, desired fleetwave.DesiredState) (fleetwave.ItemSpec, *Problem) {
	ik := fleetwave.InstanceKey{Node: n.ID, Block: block.Name}
	ba, ok := block.Actions[action]
	if !ok && action == fleetwave.ActionTakeover {
		// the agent's built-in takeover (no command): it records the
		// instance it detected as fleetwave's
		ba, ok = fleetwave.BlockAction{}, true
	}
	if !ok {
		return fleetwave.ItemSpec{}, &Problem{Trigger: t.Name, Node: n.ID, Block: block.Name, Reason: ReasonUnknownAction,
			Message: fmt.Sprintf("block %s has no %s action", block.Name, action), Key: ik}
	}
	windows, unknown := Windows(snap, n, t)
	if unknown != "" {
		return fleetwave.ItemSpec{}, &Problem{Trigger: t.Name, Node: n.ID, Block: block.Name, Reason: ReasonUnknownWindow,
			Message: fmt.Sprintf("maintenance window %s is not defined in the config", unknown), Key: ik}
	}
	return fleetwave.ItemSpec{
		Node: n.ID, Block: block.Name, Action: action, Generation: gen,
		TargetVersion: t.TargetVersion, ConfigHash: hash, DesiredState: desired,
		ManagedBy: t.Owner(block), Criticality: Criticality(snap, n),
		Windows: windows, BypassWindows: t.BypassMaintenanceWindow, Requires: slices.Clone(ba.Requires),
		Payload: fleetwave.AttemptPayload{
			Command: ba.Command, TimeoutSeconds: int(math.Ceil(ba.Timeout.Seconds())),
			Config: rendered, OneShot: ba.OneShot,
		},
	}, nil
}

// decide returns the action that converges observed to desired, "" for none.
// Ownership (CLI-managed instances) is handled by the caller.
func decide(t *fleetwave.Trigger, desired fleetwave.DesiredState, observed *fleetwave.InstanceStatus, hash string) string {
	if desired == fleetwave.StateAbsent {
		if observed != nil {
			return fleetwave.ActionUninstall
		}
		return ""
	}
	if observed == nil {
		return fleetwave.ActionInstall
	}
	if observed.Version != t.TargetVersion || observed.ConfigHash != hash {
		return configAction(t)
	}
	switch {
	case desired == fleetwave.StateRunning && observed.State == fleetwave.StateStopped:
		return fleetwave.ActionStart
	case desired == fleetwave.StateStopped && observed.State != fleetwave.StateStopped:
		return fleetwave.ActionStop
	}
	return ""
}

func configAction(t *fleetwave.Trigger) string {
	if t.ActionName != "" {
		return t.ActionName
	}
	return fleetwave.ActionUpgrade
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
			"managed_by": t.Owner(b),
		},
	}
}
