package hub

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/status"
)

// TestRolloutPartsBuiltOnlyWhenTheirItemsChanged: a rollout of 2,500
// items is written in three parts; each status write builds (encodes and
// digests) again only the parts whose items changed since they were last
// built, and after every write the parts committed so far are what a hub
// that kept nothing builds (real redis-server, real mirror).
func TestRolloutPartsBuiltOnlyWhenTheirItemsChanged(t *testing.T) {
	h, clk, fence := statusHub(t, gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"}))
	ctx := context.Background()
	spec := fleetwave.RolloutSpec{BaseID: "web", MaxConcurrent: 10,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "web"), Generation: 1, Kind: fleetwave.SourceScheduler}}
	for i := range 2500 {
		spec.Items = append(spec.Items, fleetwave.ItemSpec{Node: fmt.Sprintf("n%04d", i), Block: "web", Action: fleetwave.ActionUpgrade,
			Generation: 1, TargetVersion: "1", Payload: fleetwave.AttemptPayload{Command: "true", TimeoutSeconds: 60}})
	}
	id, _, err := h.eng.CreateRollout(ctx, fence, spec)
	if err != nil {
		t.Fatal(err)
	}
	partPaths := []string{status.RolloutPartPath(id, 1), status.RolloutPartPath(id, 2), status.RolloutPartPath(id, 3)}

	committed := map[string][]byte{} // the parts written so far
	write := func(step string) (built []string) {
		t.Helper()
		b, err := h.statusFiles(ctx, map[string]bool{id: true}, nil)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		for p, data := range b.files {
			if strings.HasPrefix(p, status.RolloutPath(id)[:len(status.RolloutPath(id))-len(".yaml")]+"/") {
				committed[p] = data
			}
		}
		for _, p := range b.rendered {
			h.rendered[p].data = nil // landed
		}
		// a hub that kept nothing builds every part: the same bytes
		rendered, inputs, parts := h.rendered, h.nodeInputs, h.partItems
		h.rendered, h.nodeInputs, h.partItems = map[string]*renderedDoc{}, nil, nil
		fresh, err := h.statusFiles(ctx, map[string]bool{id: true}, nil)
		h.rendered, h.nodeInputs, h.partItems = rendered, inputs, parts
		if err != nil {
			t.Fatalf("%s, built afresh: %v", step, err)
		}
		if !slices.Equal(fresh.partsBuilt, partPaths) {
			t.Fatalf("%s: built afresh %v, want every part", step, fresh.partsBuilt)
		}
		for _, p := range partPaths {
			if string(committed[p]) != string(fresh.files[p]) {
				t.Fatalf("%s: %s is\n%.600s\nbuilt afresh:\n%.600s", step, p, committed[p], fresh.files[p])
			}
		}
		return b.partsBuilt
	}
	expect := func(step string, want ...string) {
		t.Helper()
		if got := write(step); !slices.Equal(got, want) {
			t.Fatalf("%s: built %v, want %v", step, got, want)
		}
	}
	expect("first write", partPaths...)
	expect("nothing changed")
	// a part's items are kept as the engine's chunk, not a copy (39 MB a
	// write at 100,000 items): the part is unchanged when the engine
	// returns the same chunk, without comparing its items
	_, chunks, err := h.eng.RolloutChunks(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for k, p := range partPaths {
		if !sameChunk(h.partItems[p], chunks[k]) {
			t.Fatalf("%s: its items kept are not the engine's chunk %d", p, k)
		}
	}

	// the first wave: ten items of the first part dispatched
	h.engineStep(ctx)
	expect("first wave dispatched", partPaths[0])
	expect("nothing changed since")

	// one attempt of the first wave fails for good: its item, in the
	// first part, is blocked
	_, items, err := h.eng.Rollout(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var node string
	for _, it := range items {
		if it.Status == fleetwave.ItemInProgress {
			node = it.Node
			break
		}
	}
	as, err := h.eng.Poll(ctx, node, 1, 0)
	if err != nil || len(as) != 1 {
		t.Fatalf("poll %s: %v, %v", node, as, err)
	}
	clk.Advance(time.Second)
	if err := h.eng.Complete(ctx, node, fleetwave.AttemptResult{AttemptID: as[0].ID, Fence: as[0].Fence, Class: fleetwave.ResultPermanent}); err != nil {
		t.Fatal(err)
	}
	expect("an item of the first part blocked", partPaths[0])

	// cancelled: every pending item, in every part, is skipped
	clk.Advance(time.Second)
	if err := h.eng.SetRolloutState(ctx, fence, id, "cancel", "test"); err != nil {
		t.Fatal(err)
	}
	expect("rollout cancelled", partPaths...)
	expect("nothing changed after")
}
