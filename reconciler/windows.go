package reconciler

import (
	"sort"

	"github.com/fleetwave/fleetwave"
)

// WindowNames returns the names of the maintenance windows node n is bound by
// under trigger t (t may be nil): the node's own windows, else its
// workspace's, else its organization's (the most specific level that names
// any wins), plus the trigger's maintenance_window. Sorted, without
// duplicates. (Windows tells which one is the trigger's: it narrows.)
func WindowNames(snap *fleetwave.Snapshot, n *fleetwave.Node, t *fleetwave.Trigger) []string {
	var names []string
	switch {
	case len(n.MaintenanceWindows) > 0:
		names = append(names, n.MaintenanceWindows...)
	case snap.Workspaces[n.Workspace] != nil && len(snap.Workspaces[n.Workspace].MaintenanceWindows) > 0:
		names = append(names, snap.Workspaces[n.Workspace].MaintenanceWindows...)
	default:
		if org := snap.Organizations[organizationOf(snap, n)]; org != nil {
			names = append(names, org.MaintenanceWindows...)
		}
	}
	if t != nil && t.MaintenanceWindow != "" {
		names = append(names, t.MaintenanceWindow)
	}
	sort.Strings(names)
	out := names[:0]
	for i, s := range names {
		if i == 0 || s != names[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// Windows resolves WindowNames against the config's maintenance_windows and
// sets each Window's Name. The trigger's maintenance_window is Required: an
// item runs when it is open AND one of the node's windows is (when the node
// has any), so a trigger's window narrows a node's windows, never widens
// them. unknown is the first name that does not resolve ("" when all do):
// the caller must not plan the instance (fail closed: an unknown window
// must not mean "always open").
func Windows(snap *fleetwave.Snapshot, n *fleetwave.Node, t *fleetwave.Trigger) (ws []fleetwave.Window, unknown string) {
	names := WindowNames(snap, n, t)
	if len(names) == 0 {
		return nil, ""
	}
	ws = make([]fleetwave.Window, 0, len(names))
	for _, name := range names {
		w, ok := snap.Config.MaintenanceWindows[name]
		if !ok {
			return nil, name
		}
		w.Name = name
		w.Required = t != nil && name == t.MaintenanceWindow
		ws = append(ws, w)
	}
	return ws, ""
}
