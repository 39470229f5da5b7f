package schema

import (
	"fmt"
	"maps"
	"slices"

	"cuelang.org/go/cue"

	"github.com/fleetwave/fleetwave"
)

// crossCheck runs the checks between objects, over the objects that passed
// their per-file checks. A reference to an object whose file exists but is
// invalid is not reported again: the file's own errors say what to fix.
// dataOf returns the data of a file, to position an error in it; it is
// called only for files that have an error.
//
// Every check is a map lookup: the cost is linear in the number of objects
// and references.
func crossCheck(snap *fleetwave.Snapshot, objs []*object, present map[fleetwave.ObjectKey]string, dataOf func(path string) cue.Value) []fleetwave.FileError {
	var errs []fleetwave.FileError
	if _, ok := present[fleetwave.Key(fleetwave.KindConfig, configStem)]; !ok {
		errs = append(errs, fleetwave.FileError{Path: configStem + ".cue",
			Msg: "missing the kind:config object, expected fleetwave.cue, fleetwave.yaml or fleetwave.json at the repository root"})
	}
	errs = append(errs, referenceErrors(snap, objs, present, dataOf)...)
	return append(errs, ownerConflicts(snap, objs, dataOf)...)
}

// referenceErrors runs the checks of each of objs against the other objects
// of snap (present lists every object file of the tree, valid or not).
func referenceErrors(snap *fleetwave.Snapshot, objs []*object, present map[fleetwave.ObjectKey]string, dataOf func(path string) cue.Value) []fleetwave.FileError {
	var errs []fleetwave.FileError
	configKey := fleetwave.Key(fleetwave.KindConfig, configStem)
	_, configValid := snap.Objects[configKey]

	exists := func(k fleetwave.Kind, name string) bool {
		_, ok := present[fleetwave.Key(k, name)]
		return ok
	}
	// Organizations and workspaces are optional records: a fleet may have
	// none, and a node may name neither. But every organization or
	// workspace an object names (a node, a workspace's organization, a
	// trigger's targets) must have its record: a typo would otherwise
	// silently put nodes into a group no trigger targets, without the
	// windows and criticality its record would give them.
	organization := func(c *fileChecker, sel []any, org string) {
		if org != "" && !exists(fleetwave.KindOrganization, org) {
			c.errorf(sel, "organization %q is not defined (no organizations/%s.*)", org, org)
		}
	}
	workspace := func(c *fileChecker, sel []any, ws string) {
		if ws != "" && !exists(fleetwave.KindWorkspace, ws) {
			c.errorf(sel, "workspace %q is not defined (no workspaces/%s.*)", ws, ws)
		}
	}

	for _, o := range objs {
		c := &fileChecker{path: o.path, dataOf: dataOf}
		windows := func(sel []any, names []string) {
			if !configValid {
				return
			}
			for i, w := range names {
				if _, ok := snap.Config.MaintenanceWindows[w]; !ok {
					c.errorf(append(sel, i), "maintenance window %q is not defined, expected one of the maintenance_windows of %s", w, snap.Objects[configKey].Path)
				}
			}
		}
		nodes := func(names []string) {
			for i, n := range names {
				if !exists(fleetwave.KindNode, n) {
					c.errorf(fld("nodes", i), "node %q does not exist, expected a record nodes/%s", n, n)
				}
			}
		}
		brc := func(name string) *fleetwave.Trigger {
			if !exists(fleetwave.KindTrigger, name) {
				c.errorf(fld("brc"), "trigger %q does not exist, expected a BRC brc/%s", name, name)
			}
			return snap.Triggers[name]
		}
		switch x := o.obj.(type) {
		case *fleetwave.Config:
			if e := x.Enablement; e != nil {
				for _, sc := range []struct {
					field string
					scope *fleetwave.EnablementScope
				}{{"lifecycle", e.Lifecycle}, {"config_apply", e.ConfigApply}} {
					if sc.scope == nil {
						continue
					}
					for i, n := range sc.scope.Nodes {
						if !exists(fleetwave.KindNode, n) {
							c.errorf(fld("enablement", sc.field, "nodes", i), "node %q does not exist, expected a record nodes/%s", n, n)
						}
					}
				}
			}
		case *fleetwave.Trigger:
			checkTriggerBlock(c, snap, x, exists(fleetwave.KindBlock, x.BlockName))
			nodes(x.Nodes)
			for i, org := range x.TargetOrganizations {
				organization(c, fld("target_organizations", i), org)
			}
			for i, ws := range x.TargetWorkspaces {
				workspace(c, fld("target_workspaces", i), ws)
			}
			if x.MaintenanceWindow != "" {
				if configValid {
					if _, ok := snap.Config.MaintenanceWindows[x.MaintenanceWindow]; !ok {
						c.errorf(fld("maintenance_window"), "maintenance window %q is not defined, expected one of the maintenance_windows of %s", x.MaintenanceWindow, snap.Objects[configKey].Path)
					}
				}
			}
		case *fleetwave.Node:
			windows(fld("maintenance_windows"), x.MaintenanceWindows)
			organization(c, fld("organization"), x.Organization)
			workspace(c, fld("workspace"), x.Workspace)
			if w := snap.Workspaces[x.Workspace]; w != nil && x.Organization != "" && w.Organization != "" && w.Organization != x.Organization {
				c.errorf(fld("organization"), "found %q, but workspace %q belongs to organization %q", x.Organization, x.Workspace, w.Organization)
			}
		case *fleetwave.Organization:
			windows(fld("maintenance_windows"), x.MaintenanceWindows)
		case *fleetwave.Workspace:
			windows(fld("maintenance_windows"), x.MaintenanceWindows)
			organization(c, fld("organization"), x.Organization)
		case *fleetwave.RolloutRequest:
			// takeover needs no action of the block: the agent's built-in
			// takeover records the instance as fleetwave's
			if t := brc(x.BRC); t != nil && x.ActionName != "" && x.ActionName != fleetwave.ActionTakeover {
				if b := snap.Blocks[t.BlockName]; b != nil {
					if _, ok := b.Actions[x.ActionName]; !ok {
						c.errorf(fld("action_name"), "block %q has no action %q, expected one of %v", b.Name, x.ActionName, slices.Sorted(maps.Keys(b.Actions)))
					}
				}
			}
			nodes(x.Nodes)
		case *fleetwave.ApprovalRequest:
			brc(x.BRC)
			nodes(x.Nodes)
		}
		errs = append(errs, c.errs...)
	}
	return errs
}

// maxOwnersPaired bounds the triggers of one block instance that a later
// trigger is compared with, so that the check stays linear in the scopes
// even for a tree where many triggers overlap (each conflicting trigger is
// still reported).
const maxOwnersPaired = 8

// ownerConflicts reports two reconciliation triggers that own the same
// block instance (the same block on the same node): each would converge it
// to its own version, config and state, so the instance would flip
// between them with every plan. Schedule triggers own no instance and are
// exempt; a trigger with desired_state absent owns the instances it
// removes. The error is reported once per pair of triggers, in the file
// that comes later in path order, at its block_name, with the number of
// shared nodes and the first of them. Scopes are those the reconciler
// plans with (Snapshot.Scope), over the valid objects.
func ownerConflicts(snap *fleetwave.Snapshot, objs []*object, dataOf func(path string) cue.Value) []fleetwave.FileError {
	type pair struct{ first, later *object }
	type shared struct {
		count int
		node  string
	}
	var errs []fleetwave.FileError
	byBlock := map[string][]*object{} // reconciliation triggers by block, in path order
	for _, o := range objs {
		if t, ok := o.obj.(*fleetwave.Trigger); ok && t.TriggerType != fleetwave.TriggerSchedule {
			byBlock[t.BlockName] = append(byBlock[t.BlockName], o)
		}
	}
	for _, block := range slices.Sorted(maps.Keys(byBlock)) {
		triggers := byBlock[block]
		if len(triggers) < 2 {
			continue
		}
		owners := map[string][]*object{} // node -> triggers owning its instance
		conflicts := map[pair]*shared{}
		var order []pair
		for _, o := range triggers {
			for _, id := range snap.Scope(o.obj.(*fleetwave.Trigger)) {
				for _, first := range owners[id][:min(len(owners[id]), maxOwnersPaired)] {
					k := pair{first, o}
					sh := conflicts[k]
					if sh == nil {
						sh = &shared{node: id} // scopes are sorted: the first node
						conflicts[k] = sh
						order = append(order, k)
					}
					sh.count++
				}
				owners[id] = append(owners[id], o)
			}
		}
		for _, k := range order {
			sh := conflicts[k]
			where := "node " + sh.node
			if sh.count > 1 {
				where = fmt.Sprintf("%d nodes, e.g. %s,", sh.count, sh.node)
			}
			c := &fileChecker{path: k.later.path, dataOf: dataOf}
			c.errorf(fld("block_name"), "block %s on %s is also managed by %s (two reconciliation BRCs cannot own one block instance)", block, where, k.first.path)
			errs = append(errs, c.errs...)
		}
	}
	return errs
}

// checkTriggerBlock checks that the trigger's block exists and has every
// action the trigger can ask for.
func checkTriggerBlock(c *fileChecker, snap *fleetwave.Snapshot, t *fleetwave.Trigger, blockFilePresent bool) {
	b := snap.Blocks[t.BlockName]
	if b == nil {
		if !blockFilePresent {
			c.errorf(fld("block_name"), "block %q does not exist, expected a definition blocks/%s", t.BlockName, t.BlockName)
		}
		return
	}
	need := func(action, why string, sel ...any) {
		if _, ok := b.Actions[action]; !ok {
			c.errorf(sel, "block %q has no action %q (%s), expected one of %v", b.Name, action, why, slices.Sorted(maps.Keys(b.Actions)))
		}
	}
	if t.TriggerType == fleetwave.TriggerSchedule {
		need(t.ActionName, "the action this schedule runs", "action_name")
		return
	}
	switch t.DesiredState {
	case fleetwave.StateAbsent:
		need(fleetwave.ActionUninstall, "needed for desired_state absent", "desired_state")
		return
	case fleetwave.StateRunning:
		need(fleetwave.ActionStart, "needed for desired_state running", "desired_state")
	case fleetwave.StateStopped:
		need(fleetwave.ActionStop, "needed for desired_state stopped", "desired_state")
	}
	if t.AutoTakeover {
		need(fleetwave.ActionTakeover, "auto_takeover migrates CLI-managed instances with it", "auto_takeover")
	}
	need(fleetwave.ActionInstall, "a reconciliation trigger installs missing instances", "block_name")
	need(t.ActionName, "run when the version or config differs; action_name defaults to "+fleetwave.ActionUpgrade, "action_name")
}
