package schema

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// baseTree is a small valid tree; each broken case changes a few files.
func baseTree() map[string][]byte {
	return map[string][]byte{
		"fleetwave.yaml":     []byte("kind: config\nname: fleetwave\nmaintenance_windows:\n  nightly:\n    cron: \"0 2 * * *\"\n    duration: 2h\n"),
		"blocks/web.yaml":    []byte("kind: block\nname: web\nactions:\n  install:\n    command: echo install\n  upgrade:\n    command: echo upgrade\n    timeout: 30s\n"),
		"brc/web.yaml":       []byte("kind: trigger\nname: web\nblock_name: web\ntarget_version: \"1.0\"\n"),
		"nodes/n1.yaml":      []byte("kind: node\nname: n1\nlabels:\n  env: prod\n"),
		"nodes/n2.cue":       []byte("kind: \"node\"\nname: \"n2\"\nworkspace: \"ws\"\n"),
		"workspaces/ws.yaml": []byte("kind: workspace\nname: ws\n"),
		"README.md":          []byte("# not an object\n"),
		"status/x.yaml":      []byte("not: [valid\n"),
	}
}

func with(changes map[string]string) map[string][]byte {
	t := baseTree()
	for p, c := range changes {
		if c == "" {
			delete(t, p)
			continue
		}
		t[p] = []byte(c)
	}
	return t
}

func errorLines(err error) ([]string, error) {
	var verr *fleetwave.ValidationError
	if !errors.As(err, &verr) {
		return nil, fmt.Errorf("error %v (%T) is not a *fleetwave.ValidationError", err, err)
	}
	lines := make([]string, len(verr.Errors))
	for i, fe := range verr.Errors {
		lines[i] = fe.Error()
	}
	return lines, nil
}

func TestBaseTreeIsValid(t *testing.T) {
	snap, err := newValidator(t).Load(baseTree())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(snap.Objects) != 6 {
		t.Errorf("objects = %d, want 6 (README.md and status/ ignored)", len(snap.Objects))
	}
	if snap.Config.MaxConcurrent != 10 || snap.Config.MaxRetries != 3 || snap.Config.BackoffText != "10s" ||
		snap.Config.ReconcileMode != "enforce" || snap.Config.FailureThresholdPercent != 100 || len(snap.Config.PriorityOrder) != 3 {
		t.Errorf("config defaults not applied: %+v", snap.Config)
	}
	if got := snap.Blocks["web"].Actions["upgrade"].TimeoutText; got != "30s" {
		t.Errorf("an explicit timeout must win over the default, got %q", got)
	}
	// the loader sorts the node ids once, for SortedNodeIDs and Scope
	if want := []string{"n1", "n2"}; !slices.Equal(snap.NodeIDs, want) || !slices.Equal(snap.SortedNodeIDs(), want) {
		t.Errorf("NodeIDs = %v, SortedNodeIDs = %v, want %v", snap.NodeIDs, snap.SortedNodeIDs(), want)
	}
}

// The broken-tree cases live in the golden corpus testdata/broken (see
// TestBrokenCorpus).
