package schema

import (
	"slices"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// TestDetectAndSplitPlacementDecode: a block's detect command and a split
// action decode with their durations, and a rollouts/ request may ask for
// takeover of a block that has no takeover action (the agent's built-in
// takeover).
func TestDetectAndSplitPlacementDecode(t *testing.T) {
	tree := with(map[string]string{
		"blocks/web.yaml": "kind: block\nname: web\nactions:\n  install:\n    command: echo install\n  upgrade:\n    command: echo upgrade\n" +
			"  shuffle:\n    command: run-shuffle\n    placement: split\n    requires: [network_shuffle, \"address:shuffle\"]\n" +
			"detect:\n  command: cat version\n  timeout: 10s\n",
		"blocks/db.cue":      "kind: \"block\"\nname: \"db\"\nactions: install: {command: \"echo\", placement: \"single\"}\ndetect: command: \"db --version\"\n",
		"rollouts/take.yaml": "kind: rollout\nname: take\nbrc: web\naction_name: takeover\nnodes: [n1]\n",
	})
	snap, err := newValidator(t).Load(tree)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	web := snap.Blocks["web"]
	if web.Detect == nil || web.Detect.Command != "cat version" || web.Detect.Timeout != 10*time.Second || web.Detect.TimeoutText != "10s" {
		t.Fatalf("web detect = %+v", web.Detect)
	}
	sh := web.Actions["shuffle"]
	if sh.Placement != fleetwave.PlacementSplit || !slices.Equal(sh.Requires, []string{"network_shuffle", "address:shuffle"}) {
		t.Fatalf("shuffle = %+v", sh)
	}
	if web.Actions["install"].Placement != "" {
		t.Fatalf("install placement = %q, want unset", web.Actions["install"].Placement)
	}
	db := snap.Blocks["db"]
	if db.Detect == nil || db.Detect.Command != "db --version" || db.Detect.Timeout != 0 || db.Actions["install"].Placement != fleetwave.PlacementSingle {
		t.Fatalf("db = %+v detect %+v", db, db.Detect)
	}
	if r := snap.Rollouts["take"]; r == nil || r.ActionName != fleetwave.ActionTakeover {
		t.Fatalf("rollout take = %+v", r)
	}
	// the object's hash is its content's: a detect command is part of it
	tree["blocks/web.yaml"] = []byte(string(tree["blocks/web.yaml"]) + "  # a comment\n")
	again, err := newValidator(t).Load(tree)
	if err != nil {
		t.Fatal(err)
	}
	key := fleetwave.Key(fleetwave.KindBlock, "web")
	if again.Objects[key].Hash != snap.Objects[key].Hash {
		t.Fatalf("a comment changed the block's hash")
	}
}
