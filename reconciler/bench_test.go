package reconciler

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// fleet10k is 10,000 nodes and three reconciliation triggers with
// templates, a third of the instances observed converged.
func fleet10k() (*fleetwave.Snapshot, fleetwave.Observations) {
	snap := testSnapshot()
	snap.Nodes = map[string]*fleetwave.Node{}
	for i := range 10_000 {
		id := fmt.Sprintf("node-%05d", i)
		snap.Nodes[id] = &fleetwave.Node{ID: id, Workspace: fmt.Sprintf("ws-%03d", i%300),
			Labels: map[string]string{"region": []string{"eu", "us", "ap"}[i%3], "rack": fmt.Sprint(i % 40)}}
	}
	tpl := "node: {{ node.id }}\nregion: {{ node.labels.region }}\nworkspace: {{ node.workspace }}\n" +
		"{% for k, v in node.labels.items() %}label_{{ k }}: {{ v | tojson }}\n{% endfor %}" +
		"backup: {{ backup_schedule_cron(node.workspace) | tojson }}\nversion: {{ brc.target_version }}\n"
	for _, name := range []string{"op", "lb", "mon"} {
		snap.Triggers[name] = &fleetwave.Trigger{Name: name, BlockName: "operator", TargetVersion: "1.1.0", ManagedBy: name,
			TriggerType: fleetwave.TriggerReconciliation, BlockConfigTemplate: tpl + "# " + name + "\n"}
		snap.Generations[fleetwave.Key(fleetwave.KindTrigger, name)] = 2
	}
	obs := fleetwave.Observations{}
	for i, id := range snap.SortedNodeIDs() {
		if i%3 == 0 {
			obs[id] = &fleetwave.Report{Node: id, Instances: []fleetwave.InstanceStatus{{Block: "operator", Version: "1.1.0"}}}
		}
	}
	return snap, obs
}

// BenchmarkPlan10k plans 10,000 nodes x 3 triggers: a first plan of a
// snapshot, and a plan again of the same snapshot with the renders the
// first kept (RenderCache, as the hub's reconcile loop plans).
func BenchmarkPlan10k(b *testing.B) {
	snap, obs := fleet10k()
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p := PlanSnapshot(snap, obs, now); p.Items() == 0 {
				b.Fatal("no items")
			}
		}
	})
	b.Run("again", func(b *testing.B) {
		opts := Options{Renders: &RenderCache{}}
		PlanWith(snap, obs, now, opts)
		b.ReportAllocs()
		for b.Loop() {
			if p := PlanWith(snap, obs, now, opts); p.Items() == 0 {
				b.Fatal("no items")
			}
		}
	})
}

// TestPlan10kFigure prints the time of one plan of 10,000 nodes x 3
// triggers (render + diff); FLEETWAVE_BENCH=1 enables it. Target < 2 s.
func TestPlan10kFigure(t *testing.T) {
	if os.Getenv("FLEETWAVE_BENCH") != "1" {
		t.Skip("set FLEETWAVE_BENCH=1 to measure")
	}
	snap, obs := fleet10k()
	start := time.Now()
	p := PlanSnapshot(snap, obs, now)
	d := time.Since(start)
	t.Logf("plan 10000 nodes x 3 triggers: %d items, %d problems in %v", p.Items(), len(p.Problems), d)
	if len(p.Problems) > 0 {
		t.Fatalf("problems: %v", p.Problems[0])
	}
	if d > 2*time.Second {
		t.Errorf("plan took %v, target < 2s", d)
	}
}

// BenchmarkScope100k scopes BRCs of a 100,000-node snapshot: one that lists
// one node (a push of such a BRC plans it alone), and one of the whole
// fleet, with the node ids the loader sorted and without them (sorted at
// each call, as every Scope did before the loader kept them).
func BenchmarkScope100k(b *testing.B) {
	snap := testSnapshot()
	snap.Nodes = map[string]*fleetwave.Node{}
	for i := range 100_000 {
		id := fmt.Sprintf("node-%06d", i)
		snap.Nodes[id] = &fleetwave.Node{ID: id, Workspace: fmt.Sprintf("ws-%03d", i%300),
			Labels: map[string]string{"region": []string{"eu", "us", "ap"}[i%3]}}
	}
	listed := &fleetwave.Trigger{Name: "probe", BlockName: "operator", Nodes: []string{"node-000042"}}
	fleet := &fleetwave.Trigger{Name: "eu", BlockName: "operator", Selector: &fleetwave.Selector{MatchLabels: map[string]string{"region": "eu"}}}
	run := func(name string, t *fleetwave.Trigger, ids []string, want int) {
		b.Run(name, func(b *testing.B) {
			snap.NodeIDs = ids
			for b.Loop() {
				if got := len(Scope(snap, t)); got != want {
					b.Fatalf("scope of %d nodes, want %d", got, want)
				}
			}
		})
	}
	run("listed", listed, nil, 1)
	run("fleet", fleet, slices.Sorted(maps.Keys(snap.Nodes)), 33_334)
	run("fleet-unsorted", fleet, nil, 33_334)
}
