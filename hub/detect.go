package hub

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sync"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/reconciler"
)

// The Hub hands agents their detect commands.
var _ api.DetectHub = (*Hub)(nil)

// detectCache keeps the detect commands of every node per snapshot (a
// snapshot is read-only once built): agents ask before every full report,
// and computing them walks every BRC's scope. A few entries, for the hubs
// of one process.
var detectCache = struct {
	sync.Mutex
	bySnap map[*fleetwave.Snapshot]map[string][]fleetwave.DetectCommand
}{bySnap: map[*fleetwave.Snapshot]map[string][]fleetwave.DetectCommand{}}

const detectCacheSize = 4

// blockNameRE is a block name (the repository's #Name).
var blockNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// DetectCommands returns the detect commands of the blocks whose BRCs
// target node in the snapshot in force; 503 not_ready before the first
// snapshot, so that an agent does not report without them.
func (h *Hub) DetectCommands(_ context.Context, node string) ([]fleetwave.DetectCommand, error) {
	snap := h.Snapshot()
	if snap == nil {
		return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: "not_ready",
			Message: "the hub has not read its config repository yet"}
	}
	detectCache.Lock()
	defer detectCache.Unlock()
	byNode, ok := detectCache.bySnap[snap]
	if !ok {
		if len(detectCache.bySnap) >= detectCacheSize {
			clear(detectCache.bySnap)
		}
		byNode = reconciler.DetectCommandsByNode(snap)
		detectCache.bySnap[snap] = byNode
	}
	return byNode[node], nil
}

// checkDetected refuses a report whose detected list is out of bounds (400
// invalid_report naming the field): block names, at most as many as a
// report's instances.
func checkDetected(r fleetwave.Report) error {
	bad := func(field, msg string) error {
		return &api.Error{Status: http.StatusBadRequest, Code: "invalid_report", Message: field + ": " + msg,
			Details: map[string]string{"field": field}}
	}
	if len(r.Detected) > api.MaxReportInstances {
		return bad("detected", fmt.Sprintf("holds %d entries; at most %d", len(r.Detected), api.MaxReportInstances))
	}
	for i, b := range r.Detected {
		if !blockNameRE.MatchString(b) {
			return bad(fmt.Sprintf("detected[%d]", i), "is not a block name (1-63 lowercase letters, digits and '-', alphanumeric at both ends)")
		}
	}
	return nil
}
