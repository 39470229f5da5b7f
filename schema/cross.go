package schema

import (
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
	configKey := fleetwave.Key(fleetwave.KindConfig, configStem)
	if _, ok := present[configKey]; !ok {
		errs = append(errs, fleetwave.FileError{Path: configStem + ".cue",
			Msg: "missing the kind:config object, expected fleetwave.cue, fleetwave.yaml or fleetwave.json at the repository root"})
	}
	_, configValid := snap.Objects[configKey]

	// Organizations and workspaces are optional records: a name is known
	// when a record exists or a node (or workspace) names it.
	orgs, workspaces := map[string]bool{}, map[string]bool{}
	for name := range snap.Organizations {
		orgs[name] = true
	}
	for name, w := range snap.Workspaces {
		workspaces[name] = true
		if w.Organization != "" {
			orgs[w.Organization] = true
		}
	}
	for _, n := range snap.Nodes {
		if n.Organization != "" {
			orgs[n.Organization] = true
		}
		if n.Workspace != "" {
			workspaces[n.Workspace] = true
		}
	}
	exists := func(k fleetwave.Kind, name string) bool {
		_, ok := present[fleetwave.Key(k, name)]
		return ok
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
				if !orgs[org] {
					c.errorf(fld("target_organizations", i), "organization %q is not defined, expected a record organizations/%s or a node or workspace in it", org, org)
				}
			}
			for i, ws := range x.TargetWorkspaces {
				if !workspaces[ws] {
					c.errorf(fld("target_workspaces", i), "workspace %q is not defined, expected a record workspaces/%s or a node in it", ws, ws)
				}
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
			if w := snap.Workspaces[x.Workspace]; w != nil && x.Organization != "" && w.Organization != "" && w.Organization != x.Organization {
				c.errorf(fld("organization"), "found %q, but workspace %q belongs to organization %q", x.Organization, x.Workspace, w.Organization)
			}
		case *fleetwave.Organization:
			windows(fld("maintenance_windows"), x.MaintenanceWindows)
		case *fleetwave.Workspace:
			windows(fld("maintenance_windows"), x.MaintenanceWindows)
		case *fleetwave.RolloutRequest:
			if t := brc(x.BRC); t != nil && x.ActionName != "" {
				if b := snap.Blocks[t.BlockName]; b != nil {
					if _, ok := b.Actions[x.ActionName]; !ok {
						c.errorf(fld("action_name"), "block %q has no action %q, expected one of %v", b.Name, x.ActionName, sortedKeys(b.Actions))
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
			c.errorf(sel, "block %q has no action %q (%s), expected one of %v", b.Name, action, why, sortedKeys(b.Actions))
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
