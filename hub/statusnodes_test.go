package hub

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/status"
	"github.com/redis/go-redis/v9"
)

// TestNodeDocumentsBuiltOnlyWhenTheirInputsChanged writes status several
// times while each input of a node's document changes for some nodes (a
// report, the snapshot's node, staleness, a version reported, its drift
// from a BRC, an item waiting, a hold): each write builds the documents of
// those nodes only, and after every write the documents committed so far
// are, node by node, what a hub that kept nothing (no documents, inputs or
// drift) builds (real redis-server, real mirror).
func TestNodeDocumentsBuiltOnlyWhenTheirInputsChanged(t *testing.T) {
	h, clk, fence := statusHub(t, gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"}))
	ctx := context.Background()
	h.cfg.StaleAfter = Duration(2 * time.Minute)
	nodes := map[string]*fleetwave.Node{}
	for i := range 8 {
		id := fmt.Sprintf("n%d", i)
		nodes[id] = &fleetwave.Node{ID: id}
	}
	// a BRC wants web at 2 everywhere: a node drifts until it reports 2
	brc := map[string]*fleetwave.Trigger{"web": {Name: "web", BlockName: "web", TargetVersion: "2", TriggerType: fleetwave.TriggerReconciliation}}
	blocks := map[string]*fleetwave.Block{"web": {Name: "web"}}
	h.snapshot = &fleetwave.Snapshot{Nodes: maps.Clone(nodes), Triggers: brc, Blocks: blocks}
	report := func(node, version string) {
		t.Helper()
		r := fleetwave.Report{Node: node, AgentVersion: "1.0.0", SentAt: clk.Now(),
			Instances: []fleetwave.InstanceStatus{{Block: "web", Version: version, Generation: 1}}}
		if err := h.Report(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for id := range nodes {
		report(id, "1")
	}

	committed := map[string][]byte{} // the node documents written so far
	write := func(step string) (built []string) {
		t.Helper()
		b, err := h.statusFiles(ctx, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		for p, data := range b.files {
			if strings.HasPrefix(p, "status/nodes/") {
				committed[p] = data
			}
		}
		built = b.nodesBuilt
		for _, p := range b.rendered {
			h.rendered[p].data = nil // landed
		}
		// a hub that kept nothing builds every document: the same bytes
		rendered, inputs, drift := h.rendered, h.nodeInputs, h.drift
		h.rendered, h.nodeInputs, h.drift = map[string]*renderedDoc{}, nil, reconciler.DriftCache{}
		fresh, err := h.statusFiles(ctx, nil, nil)
		h.rendered, h.nodeInputs, h.drift = rendered, inputs, drift
		if err != nil {
			t.Fatalf("%s, built afresh: %v", step, err)
		}
		for id := range nodes {
			p := status.NodePath(id)
			if string(committed[p]) != string(fresh.files[p]) {
				t.Fatalf("%s: %s is\n%s\nbuilt afresh:\n%s", step, p, committed[p], fresh.files[p])
			}
		}
		return built
	}
	expect := func(step string, built []string, want ...string) {
		t.Helper()
		got := map[string]bool{}
		for _, id := range built {
			got[id] = true
		}
		if len(got) != len(want) {
			t.Fatalf("%s: built %v, want %v", step, built, want)
		}
		for _, id := range want {
			if !got[id] {
				t.Fatalf("%s: built %v, want %v", step, built, want)
			}
		}
	}

	expect("first write", write("first write"), "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7")
	expect("nothing changed", write("nothing changed"))

	clk.Advance(10 * time.Second)
	report("n1", "2") // a new version: the report, and the versions seen
	expect("n1 reported 2", write("n1 reported 2"), "n1")
	for id, want := range map[string]bool{"n0": true, "n1": false} {
		if got := strings.Contains(string(committed[status.NodePath(id)]), "kind: version"); got != want {
			t.Fatalf("%s's document shows its version drift %v, want %v:\n%s", id, got, want, committed[status.NodePath(id)])
		}
	}

	next := maps.Clone(nodes)
	next["n2"] = &fleetwave.Node{ID: "n2", Drain: true}
	delete(next, "n3") // no longer in the repository
	h.snapshot = &fleetwave.Snapshot{Nodes: next, Triggers: brc, Blocks: blocks}
	expect("n2 drained, n3 removed", write("n2 drained, n3 removed"), "n2", "n3")

	h.problems = []reconciler.Problem{{Node: "n4", Block: "web", Trigger: "web", Reason: "invalid_config", Message: "bad"}}
	expect("n4 held", write("n4 held"), "n4")

	spec := fleetwave.RolloutSpec{BaseID: "web-g2", MaxConcurrent: 1,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "web"), Generation: 2, Kind: fleetwave.SourceScheduler}}
	for _, n := range []string{"n5", "n6"} {
		spec.Items = append(spec.Items, fleetwave.ItemSpec{Node: n, Block: "web", Action: fleetwave.ActionUpgrade, Generation: 2,
			TargetVersion: "2", Payload: fleetwave.AttemptPayload{Command: "true", TimeoutSeconds: 60}})
	}
	if _, _, err := h.eng.CreateRollout(ctx, fence, spec); err != nil {
		t.Fatal(err)
	}
	expect("items waiting on n5 and n6", write("items waiting on n5 and n6"), "n5", "n6")

	// everyone but n7 reports again with nothing new; n7 goes stale
	clk.Advance(90 * time.Second)
	for id := range nodes {
		if id != "n7" {
			report(id, map[bool]string{true: "2", false: "1"}[id == "n1"])
		}
	}
	clk.Advance(40 * time.Second)
	built := write("n7 stale")
	if !slices.Contains(built, "n7") {
		t.Fatalf("n7 stale: built %v, want n7 among them", built)
	}
}

// statusHub is a leader hub (engineHub) that writes status to a mirror of
// the remote at url, on the status branch fleetwave/status.
func statusHub(t *testing.T, url string, hooks ...redis.Hook) (*Hub, *clock.Fake, int64) {
	t.Helper()
	h, clk := engineHub(t, hooks...)
	ctx := context.Background()
	repo := openMirror(t, url)
	fence, err := h.eng.Campaign(ctx, "hub-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h.repo, h.fence, h.metrics = repo, fence, newMetrics(h)
	return h, clk, fence
}

// openMirror opens a new mirror of the remote at url, closed at the end
// of the test.
func openMirror(t *testing.T, url string) *gitsync.Repo {
	t.Helper()
	r, err := gitsync.Open(context.Background(), gitsync.Source{URL: url, Dir: filepath.Join(t.TempDir(), "mirror")}, gitsync.WithStatusBranch("fleetwave/status"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// TestAttemptsThatDidNotReachTheirAgentAreCounted: attempts a poll took
// whose client left, or whose answer's write failed, are counted by
// reason (real engine on a real redis-server).
func TestAttemptsThatDidNotReachTheirAgentAreCounted(t *testing.T) {
	h, _, _ := statusHub(t, gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"}))
	ctx := context.Background()
	h.NotHanded(ctx, "n1", []fleetwave.Attempt{{ID: "web-g1.1.1"}}, false)
	h.NotHanded(ctx, "n2", []fleetwave.Attempt{{ID: "web-g1.2.1"}, {ID: "web-g1.3.1"}}, true)
	got := map[string]float64{}
	mfs, err := h.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fleetwave_attempts_unreceived_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if want := map[string]float64{"client_gone": 1, "write_failed": 2, "agent_said": 0}; !maps.Equal(got, want) {
		t.Errorf("fleetwave_attempts_unreceived_total by reason = %v, want %v", got, want)
	}
}

// TestNodeDocumentsWaitTheirTurnWhileARolloutRuns: once building the
// nodes' documents took more than a tenth of status.interval, a status
// commit while a rollout runs leaves them out (the rollout's document and
// the summary go in) until ten times that build passed; statusStep then
// commits them even though nothing else changed; with no rollout running,
// or at the last write (nodesForce), they are built at once (real
// redis-server, real mirror and remote).
func TestNodeDocumentsWaitTheirTurnWhileARolloutRuns(t *testing.T) {
	h, clk, fence := statusHub(t, gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"}))
	ctx := context.Background()
	h.cfg.Status.Interval = Duration(time.Second)
	h.snapshot = &fleetwave.Snapshot{Nodes: map[string]*fleetwave.Node{"n0": {ID: "n0"}, "n1": {ID: "n1"}}}
	report := func(node, version string) {
		t.Helper()
		clk.Advance(time.Second)
		r := fleetwave.Report{Node: node, AgentVersion: "1.0.0", SentAt: clk.Now(),
			Instances: []fleetwave.InstanceStatus{{Block: "web", Version: version, Generation: 1}}}
		if err := h.Report(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// the version the committed document of node says it runs
	committed := func(node string) string {
		t.Helper()
		v, ok := committedVersion(t, h, node)
		if !ok {
			t.Fatalf("%s is not committed", status.NodePath(node))
		}
		return v
	}
	touch := func() { // something else for status to write (a sync's result)
		h.mu.Lock()
		h.syncGen++
		h.mu.Unlock()
	}
	report("n0", "1")
	report("n1", "1")
	spec := fleetwave.RolloutSpec{BaseID: "web-g2", MaxConcurrent: 1,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "web"), Generation: 2, Kind: fleetwave.SourceScheduler}}
	spec.Items = append(spec.Items, fleetwave.ItemSpec{Node: "n0", Block: "web", Action: fleetwave.ActionUpgrade, Generation: 2,
		TargetVersion: "2", Payload: fleetwave.AttemptPayload{Command: "true", TimeoutSeconds: 60}})
	id, _, err := h.eng.CreateRollout(ctx, fence, spec)
	if err != nil {
		t.Fatal(err)
	}

	h.statusStep(ctx) // the first write builds every node's document
	if got := committed("n1"); got != "1" {
		t.Fatalf("n1's document says %q after the first write, want 1", got)
	}
	// the last build "took" a second: its documents wait ten
	h.nodesTook = time.Second
	report("n1", "2")
	touch()
	h.statusStep(ctx)
	if !h.nodesOwed {
		t.Fatal("the write after a costly build of the nodes' documents, a rollout running, built them")
	}
	if got := committed("n1"); got != "1" {
		t.Fatalf("n1's document says %q while its turn had not come, want 1 (as last built)", got)
	}
	before, err := h.repo.StatusTip(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.statusStep(ctx) // nothing changed and their turn has not come: no commit
	if tip, _ := h.repo.StatusTip(ctx); tip != before {
		t.Fatalf("a status commit %s with nothing changed before the nodes' turn", short(tip))
	}
	h.nodesLast = h.nodesLast.Add(-10 * time.Second) // ten times the build passed
	h.statusStep(ctx)
	if got := committed("n1"); got != "2" || h.nodesOwed {
		t.Fatalf("n1's document says %q once its turn came (owed still: %v), want 2", got, h.nodesOwed)
	}

	// no rollout running: built at once, whatever the last build took
	h.nodesTook = time.Second
	if err := h.eng.SetRolloutState(ctx, fence, id, engine.ActionCancel, "test"); err != nil {
		t.Fatal(err)
	}
	report("n1", "3")
	h.statusStep(ctx)
	if got := committed("n1"); got != "3" {
		t.Fatalf("n1's document says %q with no rollout running, want 3", got)
	}

	// a rollout running again: left out, then built by the last write
	spec.BaseID, spec.Source.Generation = "web-g3", 3
	if _, _, err := h.eng.CreateRollout(ctx, fence, spec); err != nil {
		t.Fatal(err)
	}
	h.nodesTook = time.Second
	report("n1", "4")
	h.statusStep(ctx)
	if got := committed("n1"); got != "3" || !h.nodesOwed {
		t.Fatalf("n1's document says %q (owed: %v) while a rollout runs, want 3 and owed", got, h.nodesOwed)
	}
	h.nodesForce = true // as the hub's last write at shutdown
	h.statusStep(ctx)
	if got := committed("n1"); got != "4" {
		t.Fatalf("n1's document says %q after the last write, want 4", got)
	}
}

// TestNodeDocumentsPastTheLimitFollowInTheNextWrites: a status write
// builds at most nodesPerWrite nodes' documents; the others keep theirs as
// last built, and the next writes build them, one after the other at each
// interval, although nothing else changed, those left longest first; then
// no write is owed. The last write at shutdown (nodesAll) builds them all
// (real redis-server, real mirror and remote).
func TestNodeDocumentsPastTheLimitFollowInTheNextWrites(t *testing.T) {
	h, clk, _ := statusHub(t, gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"}))
	ctx := context.Background()
	const n, limit = 10, 4
	h.nodesPerWrite = limit
	nodes := map[string]*fleetwave.Node{}
	for i := range n {
		id := fmt.Sprintf("n%d", i)
		nodes[id] = &fleetwave.Node{ID: id}
	}
	h.snapshot = &fleetwave.Snapshot{Nodes: nodes}
	reportAll := func(version string) {
		t.Helper()
		clk.Advance(time.Second)
		for id := range nodes {
			r := fleetwave.Report{Node: id, AgentVersion: "1.0.0", SentAt: clk.Now(),
				Instances: []fleetwave.InstanceStatus{{Block: "web", Version: version, Generation: 1}}}
			if err := h.Report(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// how many committed node documents say each version ("" : none yet)
	versions := func() map[string]int {
		t.Helper()
		out := map[string]int{}
		for id := range nodes {
			v, _ := committedVersion(t, h, id)
			out[v]++
		}
		return out
	}
	// the writes until none is owed, and what each left committed
	settle := func() []map[string]int {
		t.Helper()
		var seen []map[string]int
		for range n {
			h.statusStep(ctx)
			seen = append(seen, versions())
			if !h.nodesOwed {
				return seen
			}
		}
		t.Fatalf("%d writes, nodes' documents still owed: %v", n, seen)
		return nil
	}
	check := func(step string, got []map[string]int, want ...map[string]int) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the committed documents said %v after each write, want %v", step, got, want)
		}
	}

	reportAll("1")
	check("the first writes", settle(), map[string]int{"1": 4, "": 6}, map[string]int{"1": 8, "": 2}, map[string]int{"1": 10})
	before, err := h.repo.StatusTip(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.statusStep(ctx)
	if tip, _ := h.repo.StatusTip(ctx); tip != before {
		t.Fatalf("a status commit %s with nothing changed nor owed", short(tip))
	}

	reportAll("2")
	check("every node reported 2", settle(), map[string]int{"2": 4, "1": 6}, map[string]int{"2": 8, "1": 2}, map[string]int{"2": 10})

	// every node changes again before the write that owes six: the six
	// go first, then two of the four built at 3 (the others wait)
	reportAll("3")
	h.statusStep(ctx)
	reportAll("4")
	check("every node reported 3, then 4 before the next write", append([]map[string]int{versions()}, settle()...),
		map[string]int{"3": 4, "2": 6}, map[string]int{"4": 4, "3": 4, "2": 2}, map[string]int{"4": 8, "3": 2}, map[string]int{"4": 10})

	reportAll("5")
	h.nodesForce, h.nodesAll = true, true // as the hub's last write at shutdown
	h.statusStep(ctx)
	if got := versions(); got["5"] != n || h.nodesOwed {
		t.Fatalf("the last write left the documents saying %v (owed: %v), want all %d saying 5", got, h.nodesOwed, n)
	}
}

// committedVersion returns the version of its one instance that node's
// document at the tip of h's status branch says, and whether the tip has
// the document ("" when not).
func committedVersion(t *testing.T, h *Hub, node string) (string, bool) {
	t.Helper()
	ctx := context.Background()
	tip, err := h.repo.StatusTip(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, ok, err := h.repo.StatusFile(ctx, tip, status.NodePath(node))
	if err != nil {
		t.Fatalf("%s at %s: %v", status.NodePath(node), short(tip), err)
	}
	if !ok {
		return "", false
	}
	doc, err := status.DecodeNode(data)
	if err != nil || len(doc.Instances) != 1 {
		t.Fatalf("%s: %v, instances %+v", status.NodePath(node), err, doc.Instances)
	}
	return doc.Instances[0].Version, true
}
