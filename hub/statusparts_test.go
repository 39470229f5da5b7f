package hub

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	spec := webSpec(2500)
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

// webSpec is a rollout of block web to nodes n0000 and on, n items, ten
// at a time.
func webSpec(n int) fleetwave.RolloutSpec {
	spec := fleetwave.RolloutSpec{BaseID: "web", MaxConcurrent: 10,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "web"), Generation: 1, Kind: fleetwave.SourceScheduler}}
	for i := range n {
		spec.Items = append(spec.Items, fleetwave.ItemSpec{Node: fmt.Sprintf("n%04d", i), Block: "web", Action: fleetwave.ActionUpgrade,
			Generation: 1, TargetVersion: "1", Payload: fleetwave.AttemptPayload{Command: "true", TimeoutSeconds: 60}})
	}
	return spec
}

// TestAFillingRolloutIsWrittenOnceItsItemsAreAll: a status write leaves
// out a rollout whose items the engine is still creating (a large one is
// created in chunks; at 100,000 items, reading them meanwhile made the
// slowest write of every run), and the nodes' documents, which list the
// items waiting on each node, with it. The write after its creation ended
// commits its document, its parts and the nodes' documents (real
// redis-server, real mirror and remote).
func TestAFillingRolloutIsWrittenOnceItsItemsAreAll(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"})
	cut := &cutAfterScript{}
	h, clk, fence := statusHub(t, url, cut)
	ctx := context.Background()
	if err := h.eng.Report(ctx, fleetwave.Report{Node: "n0001", SentAt: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	spec := webSpec(2500)
	// the creation stops after its first chunk, as the leader's would
	// between two of its scripts
	cctx, cancel := context.WithCancel(ctx)
	cut.arm(cancel)
	_, _, err := h.eng.CreateRollout(cctx, fence, spec)
	cut.disarm()
	if err == nil {
		t.Fatal("the creation went on after its context ended")
	}
	id := "web"
	ro, err := h.eng.RolloutRecord(ctx, id)
	if err != nil || !ro.Filling || ro.Counters.Total != 2000 {
		t.Fatalf("rollout after its first chunk: filling %v, %d items, %v; want filling with 2000", ro.Filling, ro.Counters.Total, err)
	}
	statusFile := func(p string) (string, bool) { return gittest.ReadFileAt(t, url, "fleetwave/status", p) }
	nodeDoc := status.NodePath("n0001")

	h.statusStep(ctx)
	summary, ok := statusFile(status.SummaryPath)
	if !ok || !strings.Contains(summary, id) {
		t.Fatalf("the write while it fills: summary committed %v, naming %s: %v\n%.800s", ok, id, strings.Contains(summary, id), summary)
	}
	for _, p := range []string{status.RolloutPath(id), status.RolloutPartPath(id, 1), nodeDoc} {
		if _, ok := statusFile(p); ok {
			t.Fatalf("the write while it fills committed %s", p)
		}
	}

	// sent again (the next reconcile): the rest is created and the fill ends
	if _, _, err := h.eng.CreateRollout(ctx, fence, spec); err != nil {
		t.Fatal(err)
	}
	if ro, err := h.eng.RolloutRecord(ctx, id); err != nil || ro.Filling || ro.Counters.Total != 2500 {
		t.Fatalf("rollout once sent again: filling %v, %d items, %v; want 2500, not filling", ro.Filling, ro.Counters.Total, err)
	}
	h.statusStep(ctx)
	doc, ok := statusFile(status.RolloutPath(id))
	if !ok || !strings.Contains(doc, "total: 2500") {
		t.Fatalf("the write after the fill: rollout document committed %v:\n%.800s", ok, doc)
	}
	for part := 1; part <= 3; part++ {
		if _, ok := statusFile(status.RolloutPartPath(id, part)); !ok {
			t.Fatalf("the write after the fill: part %d not committed", part)
		}
	}
	node, ok := statusFile(nodeDoc)
	if !ok || !strings.Contains(node, id+".2") {
		t.Fatalf("the write after the fill: %s committed %v, listing its waiting item %s.2:\n%.800s", nodeDoc, ok, id, node)
	}
}

// cutAfterScript, once armed, calls its cut after the first script
// (EVAL, EVALSHA) Redis ran without error.
type cutAfterScript struct {
	mu    sync.Mutex
	armed func()
}

func (c *cutAfterScript) arm(cut func()) { c.mu.Lock(); c.armed = cut; c.mu.Unlock() }
func (c *cutAfterScript) disarm()        { c.arm(nil) }

func (c *cutAfterScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cutAfterScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *cutAfterScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); err == nil && (name == "eval" || name == "evalsha") {
			c.mu.Lock()
			if c.armed != nil {
				c.armed()
				c.armed = nil
			}
			c.mu.Unlock()
		}
		return err
	}
}

// TestAWriteThatBuildsManyPartsLeavesTheNodesToTheNext: a status write
// that builds the parts of at least nodesPerWrite items (the first write
// after a large rollout was created) commits the rollout's document and
// parts and leaves the nodes' documents, due, to the next write, which
// commits them although nothing else changed; a write that builds fewer
// parts' items builds the nodes' documents with them, and one write never
// leaves them twice for that (real redis-server, real mirror and remote).
func TestAWriteThatBuildsManyPartsLeavesTheNodesToTheNext(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"})
	h, clk, fence := statusHub(t, url)
	ctx := context.Background()
	h.nodesPerWrite = 2000 // the rollout's 2,500 items take a write's share
	// a node of the first wave, and one of the last part
	for _, node := range []string{"n0001", "n2000"} {
		if err := h.eng.Report(ctx, fleetwave.Report{Node: node, SentAt: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	statusFile := func(p string) (string, bool) { return gittest.ReadFileAt(t, url, "fleetwave/status", p) }
	nodeDoc, lateDoc := status.NodePath("n0001"), status.NodePath("n2000")
	h.statusStep(ctx)
	if node, ok := statusFile(nodeDoc); !ok || strings.Contains(node, "web.") {
		t.Fatalf("before the rollout: %s committed %v, listing no item:\n%.800s", nodeDoc, ok, node)
	}

	id, _, err := h.eng.CreateRollout(ctx, fence, webSpec(2500))
	if err != nil {
		t.Fatal(err)
	}
	h.statusStep(ctx)
	for part := 1; part <= 3; part++ {
		if _, ok := statusFile(status.RolloutPartPath(id, part)); !ok {
			t.Fatalf("the write after the creation: part %d not committed", part)
		}
	}
	if node, _ := statusFile(nodeDoc); strings.Contains(node, id+".2") || !h.nodesOwed {
		t.Fatalf("the write that built 2,500 items' parts built the nodes' documents too (owed: %v):\n%.800s", h.nodesOwed, node)
	}
	h.statusStep(ctx)
	if node, _ := statusFile(nodeDoc); !strings.Contains(node, id+".2") || h.nodesOwed {
		t.Fatalf("the next write, nothing else changed: %s does not list its waiting item %s.2 (owed: %v):\n%.800s", nodeDoc, id, h.nodesOwed, node)
	}

	// a write that builds one part (the first wave dispatched): the
	// nodes' documents with it
	report := func(node, version string) {
		t.Helper()
		clk.Advance(time.Second)
		if err := h.eng.Report(ctx, fleetwave.Report{Node: node, SentAt: clk.Now(), AgentVersion: version}); err != nil {
			t.Fatal(err)
		}
	}
	h.engineStep(ctx)
	report("n0001", "2.0.0")
	h.statusStep(ctx)
	if node, _ := statusFile(nodeDoc); !strings.Contains(node, "2.0.0") || h.nodesOwed {
		t.Fatalf("a write that built one part left the nodes' documents (owed: %v):\n%.800s", h.nodesOwed, node)
	}

	// a write that builds every part again (this hub forgot the parts it
	// built) leaves the nodes' documents, and the next one, which builds
	// every part again too, builds them anyway
	report("n2000", "3.0.0")
	h.partItems = nil
	h.statusStep(ctx)
	if node, _ := statusFile(lateDoc); strings.Contains(node, "3.0.0") || !h.nodesOwed {
		t.Fatalf("a write that built every part again built the nodes' documents (owed: %v):\n%.800s", h.nodesOwed, node)
	}
	h.partItems = nil
	h.statusStep(ctx)
	if node, _ := statusFile(lateDoc); !strings.Contains(node, "3.0.0") || h.nodesOwed {
		t.Fatalf("the second write in a row that built every part left the nodes' documents again (owed: %v):\n%.800s", h.nodesOwed, node)
	}
}
