package reconciler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// TestDriftCacheIsDrift: over a fleet whose reports, snapshot and clock
// change step by step, what a DriftCache kept across the steps gives
// each node is what Drift works out from scratch. A cache that missed a
// replaced report, a new snapshot or the clock would show a node's old
// drift in its status document.
func TestDriftCacheIsDrift(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const nodes = 120
	snapshot := func(version string, gen int64) *fleetwave.Snapshot {
		snap := testSnapshot()
		snap.Triggers["op"].TargetVersion = version
		snap.Triggers["db"] = &fleetwave.Trigger{Name: "db", BlockName: "db", TargetVersion: "2", TriggerType: fleetwave.TriggerReconciliation,
			DesiredState: fleetwave.StateRunning, Selector: &fleetwave.Selector{MatchLabels: map[string]string{"tier": "db"}},
			BlockConfigTemplate: "tier: {{ node.labels.tier }}\n"}
		snap.Blocks["db"] = &fleetwave.Block{Name: "db", Actions: snap.Blocks["operator"].Actions}
		snap.Generations = map[fleetwave.ObjectKey]int64{"trigger/op": gen, "trigger/db": 2}
		snap.Nodes = map[string]*fleetwave.Node{}
		for i := range nodes {
			id := fmt.Sprintf("n%03d", i)
			labels := map[string]string{"region": []string{"eu", "us"}[i%2]}
			if i%3 == 0 {
				labels["tier"] = "db"
			}
			snap.Nodes[id] = &fleetwave.Node{ID: id, Workspace: "ws-a", Labels: labels}
		}
		return snap
	}
	report := func(id string, at time.Time) *fleetwave.Report {
		r := &fleetwave.Report{Node: id, ReceivedAt: at}
		if rng.IntN(5) > 0 {
			r.Instances = append(r.Instances, fleetwave.InstanceStatus{Block: "operator", Version: []string{"1.0.0", "1.1.0"}[rng.IntN(2)],
				Generation: int64(3 + rng.IntN(3)), ConfigHash: []string{"", "x"}[rng.IntN(2)], State: fleetwave.StateInstalled})
		}
		if rng.IntN(2) == 0 {
			r.Instances = append(r.Instances, fleetwave.InstanceStatus{Block: "db", Version: "2", Generation: 2,
				State: []fleetwave.DesiredState{fleetwave.StateRunning, fleetwave.StateStopped}[rng.IntN(2)]})
		}
		return r
	}
	clock := now
	snap := snapshot("1.1.0", 4)
	obs := fleetwave.Observations{}
	for i := range nodes {
		if i%7 != 0 { // some never reported
			id := fmt.Sprintf("n%03d", i)
			obs[id] = report(id, clock)
		}
	}
	var c DriftCache
	drifting, renewed := 0, 0
	for step := range 60 {
		switch k := rng.IntN(10); {
		case k < 6: // new reports for a few nodes (replaced, never changed in place)
			for range 1 + rng.IntN(10) {
				id := fmt.Sprintf("n%03d", rng.IntN(nodes))
				obs[id] = report(id, clock)
			}
		case k < 7: // a node's report is gone
			delete(obs, fmt.Sprintf("n%03d", rng.IntN(nodes)))
		case k < 9: // time passes: some reports go stale
			clock = clock.Add(time.Duration(rng.IntN(40)) * time.Minute)
		default: // a new snapshot
			snap = snapshot([]string{"1.1.0", "1.2.0"}[rng.IntN(2)], int64(4+rng.IntN(2)))
			renewed++
		}
		c.Update(snap, obs, clock, time.Hour, Options{})
		want := map[string][]DriftEntry{}
		for _, d := range Drift(snap, obs, clock, time.Hour, Options{}) {
			want[d.Node] = append(want[d.Node], d)
		}
		for id := range snap.Nodes {
			if got := c.Of(id); !slices.Equal(got, want[id]) {
				t.Fatalf("step %d, node %s: the cache says %+v, Drift %+v", step, id, got, want[id])
			}
		}
		drifting += len(want)
	}
	if renewed == 0 || drifting == 0 {
		t.Fatalf("the steps renewed the snapshot %d times and found %d drifting nodes: the test tried nothing", renewed, drifting)
	}
}

// BenchmarkDriftPerWrite is the drift a status write needs at 100,000
// nodes in a fleet-wide rollout (every node drifts; 5,000 new reports
// between two writes), worked out whole and grouped by node as the writes
// did, against a DriftCache kept across the writes; with the BRC's config
// rendered from a template for each node, and without one, the renders
// kept as the hub keeps them (a RenderCache shared with its plans):
//
//	go test -run '^$' -bench DriftPerWrite -benchmem ./reconciler/
func BenchmarkDriftPerWrite(b *testing.B) {
	for _, template := range []bool{true, false} {
		b.Run(map[bool]string{true: "template", false: "no-template"}[template], func(b *testing.B) { benchDriftPerWrite(b, template) })
	}
}

func benchDriftPerWrite(b *testing.B, template bool) {
	const nodes, wave = 100_000, 5_000
	snap := testSnapshot()
	if !template {
		snap.Triggers["op"].BlockConfigTemplate = ""
	}
	snap.Nodes = map[string]*fleetwave.Node{}
	obs := fleetwave.Observations{}
	for i := range nodes {
		id := fmt.Sprintf("node-%06d", i)
		snap.Nodes[id] = &fleetwave.Node{ID: id, Workspace: "ws-a", Labels: map[string]string{"region": "eu"}}
		obs[id] = &fleetwave.Report{Node: id, ReceivedAt: now, Instances: []fleetwave.InstanceStatus{
			{Block: "operator", Version: "1.0.0", Generation: 3, ConfigHash: "old", State: fleetwave.StateInstalled}}}
	}
	snap.NodeIDs = snap.SortedNodeIDs()
	var renders RenderCache
	opts := Options{Renders: &renders}
	Drift(snap, obs, now, time.Hour, opts) // the renders kept
	next := 0
	newWave := func() { // the next wave's nodes report their new version
		for range wave {
			id := fmt.Sprintf("node-%06d", next%nodes)
			obs[id] = &fleetwave.Report{Node: id, ReceivedAt: now, Instances: []fleetwave.InstanceStatus{
				{Block: "operator", Version: "1.1.0", Generation: 4, ConfigHash: "new", State: fleetwave.StateInstalled}}}
			next++
		}
	}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			newWave()
			b.StartTimer()
			byNode := map[string][]DriftEntry{}
			for _, d := range Drift(snap, obs, now, time.Hour, opts) {
				byNode[d.Node] = append(byNode[d.Node], d)
			}
			if len(byNode) != nodes {
				b.Fatalf("%d nodes drift, want %d", len(byNode), nodes)
			}
		}
	})
	b.Run("cache", func(b *testing.B) {
		var c DriftCache
		c.Update(snap, obs, now, time.Hour, opts)
		for b.Loop() {
			b.StopTimer()
			newWave()
			b.StartTimer()
			c.Update(snap, obs, now, time.Hour, opts)
			n := 0
			for _, id := range snap.NodeIDs {
				if len(c.Of(id)) > 0 {
					n++
				}
			}
			if n != nodes {
				b.Fatalf("%d nodes drift, want %d", n, nodes)
			}
		}
	})
}
