package reconciler

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/fleetwave/fleetwave"
)

// Sentinels of PlanManual; every error it returns is a *RequestError that
// wraps one of them (check with errors.Is).
var (
	// ErrNoMatchingNodes: the request resolves to no node (code no_matching_nodes).
	ErrNoMatchingNodes = errors.New("no matching nodes")
	// ErrUnknownBRC: the request names no trigger of the snapshot (code unknown_brc).
	ErrUnknownBRC = errors.New("unknown brc")
	// ErrUnknownNode: an explicit node has no record (code unknown_node).
	ErrUnknownNode = errors.New("unknown node")
	// ErrConflictsWithBRC: the request asks for a version other than its
	// reconciliation BRC's target: the next reconcile would undo it (code
	// conflicts_with_brc). Change the BRC's target_version instead.
	ErrConflictsWithBRC = errors.New("request conflicts with its brc")
	// ErrInvalidRequest: the request cannot be planned as written (code
	// invalid_request: unknown action, template error, unknown window).
	ErrInvalidRequest = errors.New("invalid rollout request")
	// ErrObserveMode: the config is in observe mode, which dispatches
	// nothing (code observe_mode); the request stays pending.
	ErrObserveMode = errors.New("observe mode dispatches nothing")
)

// RequestError is a rejected manual rollout request, with the
// machine-readable code of the API's error body.
type RequestError struct {
	Code    string
	Request string
	Message string
	err     error
}

func (e *RequestError) Error() string { return "rollout " + e.Request + ": " + e.Message }
func (e *RequestError) Unwrap() error { return e.err }

func requestError(req *fleetwave.RolloutRequest, code string, sentinel error, format string, args ...any) error {
	return &RequestError{Code: code, Request: req.Name, Message: fmt.Sprintf(format, args...), err: sentinel}
}

// ResolveTargets resolves a manual request's targets from the persisted node
// records of snap: the explicit nodes, else the label selector (draining and
// never-reported nodes included). Sorted; an empty result is an error
// wrapping ErrNoMatchingNodes, an unknown explicit node one wrapping
// ErrUnknownNode.
func ResolveTargets(snap *fleetwave.Snapshot, req *fleetwave.RolloutRequest) ([]string, error) {
	var out []string
	switch {
	case len(req.Nodes) > 0:
		var unknown []string
		for _, id := range req.Nodes {
			if snap.Nodes[id] == nil {
				unknown = append(unknown, id)
			} else if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return nil, requestError(req, "unknown_node", ErrUnknownNode, "no node record for %s", strings.Join(unknown, ", "))
		}
		sort.Strings(out)
	case !req.Selector.Empty():
		for _, id := range snap.SortedNodeIDs() {
			if req.Selector.Matches(snap.Nodes[id].Labels) {
				out = append(out, id)
			}
		}
	}
	if len(out) == 0 {
		return nil, requestError(req, fleetwave.ReasonNoMatchingNodes, ErrNoMatchingNodes, "the request's nodes or selector match no node")
	}
	return out, nil
}

// ManualRolloutID is the id of the rollout of manual request name.
func ManualRolloutID(name string) string { return "manual-" + name }

// PlanManual plans a manual rollout request (rollouts/<name>): the action
// (req.ActionName, else the trigger's action_name, else upgrade) at the
// version (req.TargetVersion, else the trigger's) on every resolved target,
// in criticality order; Source.Kind manual, windows bypassed, MaxConcurrent
// = req.BatchSize, else the trigger's concurrency. BaseID is
// "manual-<name>".
//
// Targets are pinned by the caller: the hub creates the rollout once per
// request name, so nodes labelled later are never added. A draining target
// keeps its place as an item that waits (the engine holds it with reason
// node_draining until the drain is lifted: nothing new is
// dispatched to it); a CLI-managed instance is skipped with cli_managed.
// Any error is a *RequestError and nothing is planned (no partial rollout).
func PlanManual(snap *fleetwave.Snapshot, obs fleetwave.Observations, req *fleetwave.RolloutRequest, opts Options) (fleetwave.RolloutSpec, error) {
	t := snap.Triggers[req.BRC]
	if t == nil {
		return fleetwave.RolloutSpec{}, requestError(req, "unknown_brc", ErrUnknownBRC, "brc %q is not defined", req.BRC)
	}
	if snap.Config.ReconcileMode == "observe" {
		return fleetwave.RolloutSpec{}, requestError(req, fleetwave.ReasonObserveMode, ErrObserveMode, "the config is in observe mode")
	}
	targets, err := ResolveTargets(snap, req)
	if err != nil {
		return fleetwave.RolloutSpec{}, err
	}
	block := snap.Blocks[t.BlockName]
	if block == nil {
		return fleetwave.RolloutSpec{}, requestError(req, "invalid_request", ErrInvalidRequest, "block %q is not defined", t.BlockName)
	}
	eff := *t // the trigger as the request overrides it
	if req.TargetVersion != "" {
		eff.TargetVersion = req.TargetVersion
	}
	action := configAction(t)
	if req.ActionName != "" {
		action = req.ActionName
	}
	eff.ActionName = action
	if req.TargetVersion != "" && req.TargetVersion != t.TargetVersion && converging(t, action) &&
		t.TriggerType != fleetwave.TriggerSchedule {
		return fleetwave.RolloutSpec{}, requestError(req, "conflicts_with_brc", ErrConflictsWithBRC,
			"target_version %s differs from brc %s's %s: the next reconcile would undo it; change the brc's target_version instead",
			req.TargetVersion, t.Name, t.TargetVersion)
	}
	operational := !converging(t, action)
	rkey := fleetwave.Key(fleetwave.KindRollout, req.Name)
	brcCap := maxConcurrent(snap, t, len(Scope(snap, t)))
	spec := fleetwave.RolloutSpec{
		BaseID:                  ManualRolloutID(req.Name),
		Source:                  fleetwave.RolloutSource{Object: rkey, Generation: snap.Generation(rkey), Commit: snap.Commit, Kind: fleetwave.SourceManual},
		MaxConcurrent:           req.BatchSize,
		FailureThresholdPercent: firstNonZeroF(t.FailureThresholdPercent, snap.Config.FailureThresholdPercent),
		FailureThreshold:        firstNonZero(t.FailureThreshold, snap.Config.FailureThreshold),
		MaxRetries:              firstNonZero(t.MaxRetries, snap.Config.MaxRetries),
		Backoff:                 snap.Config.Backoff,
		// the request is the BRC's work too: its cap holds across both
		Budget:    t.Name,
		BudgetCap: brcCap,
		Once:      true,
	}
	if spec.MaxConcurrent <= 0 {
		spec.MaxConcurrent = brcCap
	}
	// Items carry the trigger's generation: the instance converges to the
	// trigger's desired generation, as with a git-triggered rollout.
	gen := snap.Generation(fleetwave.Key(fleetwave.KindTrigger, t.Name))
	desired := desiredState(t)
	r := newRenderer(opts)
	var items []rankedItem
	for _, id := range targets {
		n := snap.Nodes[id]
		var rendered, hash, invalid string
		if desired != fleetwave.StateAbsent {
			out, err := r.renderBlock(block, t.Name, t.BlockConfigTemplate, TemplateVars(snap, n, block, &eff), CredentialScope(n))
			if err != nil {
				invalid = err.Error() // the node's item is created blocked, the others run
			} else {
				rendered, hash = out, ConfigHash(out)
			}
		}
		item, p := buildItem(snap, n, &eff, block, action, gen, rendered, hash, desired)
		if p != nil {
			return fleetwave.RolloutSpec{}, requestError(req, "invalid_request", ErrInvalidRequest, "node %s: %s", id, p.Message)
		}
		item.BypassWindows = true // manual triggers always bypass windows
		observed := observedInstance(obs, fleetwave.InstanceKey{Node: id, Block: t.BlockName})
		if operational || action == fleetwave.ActionTakeover {
			leaveInstance(&item)
		}
		item.Payload.Operational = operational
		ik := fleetwave.InstanceKey{Node: id, Block: t.BlockName}
		busy := opts.ActiveInstance != nil && opts.ActiveInstance(ik)
		switch {
		case operational && observed == nil && !busy && obs[id] != nil:
			// the node reported and has no such instance, and nothing is
			// about to install it (a node that never reported is tried:
			// the request pinned it)
			item.SkipReason, item.Payload = ReasonNotInstalled, fleetwave.AttemptPayload{}
		case invalid != "":
			item.BlockReason, item.BlockMessage, item.Payload = ReasonInvalidConfig, invalid, fleetwave.AttemptPayload{}
		case observed != nil && observed.ManagedBy == fleetwave.ManagedByCLI && action != fleetwave.ActionTakeover:
			item.SkipReason, item.Payload = fleetwave.ReasonCLIManaged, fleetwave.AttemptPayload{}
		case action == fleetwave.ActionTakeover && observed == nil && !busy && obs[id] != nil:
			// nothing installed by hand to take over on this node
			item.SkipReason, item.Payload = ReasonNotInstalled, fleetwave.AttemptPayload{}
		case action == fleetwave.ActionTakeover && observed != nil && observed.ManagedBy != fleetwave.ManagedByCLI:
			item.SkipReason, item.Payload = ReasonNotCLIManaged, fleetwave.AttemptPayload{}
		}
		items = append(items, rankedItem{rank: priorityRank(snap.Config.PriorityOrder, item.Criticality), item: &item})
	}
	items, _ = place(obs, t.Name, block, items, nil, opts)
	spec.Items = sortItems(items)
	return spec, nil
}

// PlanApproval plans the rollout of an approved request on BRC t: the
// BRC's difference (install, upgrade, ...) on each pinned node, whatever
// the node's labels became since (a late approval cannot change its
// targets), at t's current generation, as one one-shot event in the BRC's
// budget with batchSize as its wave size (the BRC's max_concurrent when 0).
// The caller sets BaseID, Source and Hold. Pinned nodes without a record
// any more are left out; with opts.RequireReport a node without a report
// is a hold (awaiting_report), and the caller waits for it.
func PlanApproval(snap *fleetwave.Snapshot, obs fleetwave.Observations, t *fleetwave.Trigger, nodes []string, batchSize int, opts Options) (fleetwave.RolloutSpec, []Problem, []Problem) {
	brcCap := maxConcurrent(snap, t, len(Scope(snap, t)))
	pinned := *t
	pinned.Nodes = slices.Clone(nodes)
	pinned.TargetOrganizations, pinned.TargetWorkspaces, pinned.Selector = nil, nil, nil
	r := newRenderer(opts)
	spec, problems, holds := planTrigger(snap, obs, &pinned, r, opts)
	spec.MaxConcurrent = batchSize
	if spec.MaxConcurrent <= 0 {
		spec.MaxConcurrent = brcCap
	}
	spec.Budget, spec.BudgetCap = t.Name, brcCap
	spec.Supersede, spec.Once = false, true
	return spec, problems, holds
}
