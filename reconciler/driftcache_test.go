package reconciler

import (
	"fmt"
	"maps"
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
// drift in its status document. A new snapshot that changed only BRCs
// (a version, a template, a selector, or nothing but a generation) keeps the entries
// of the nodes none of whose BRCs changed; one that changed a node's
// labels, and so a BRC's scope, keeps none.
func TestDriftCacheIsDrift(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const nodes = 120
	commits := 0
	// the snapshot of a commit: op's version and generation, db's
	// template and selector (by tier, or by region: a scope that grows and
	// shrinks), and whether n000's labels moved it out of db's tier
	snapshot := func(version string, gen int64, dbTemplate string, byRegion, moved bool) *fleetwave.Snapshot {
		snap := testSnapshot()
		commits++
		snap.Commit = fmt.Sprintf("c%d", commits)
		snap.Triggers["op"].TargetVersion = version
		snap.Triggers["db"] = &fleetwave.Trigger{Name: "db", BlockName: "db", TargetVersion: "2", TriggerType: fleetwave.TriggerReconciliation,
			DesiredState: fleetwave.StateRunning, Selector: &fleetwave.Selector{MatchLabels: map[string]string{"tier": "db"}},
			BlockConfigTemplate: dbTemplate}
		if byRegion {
			snap.Triggers["db"].Selector = &fleetwave.Selector{MatchLabels: map[string]string{"region": "eu"}}
		}
		snap.Blocks["db"] = &fleetwave.Block{Name: "db", Actions: snap.Blocks["operator"].Actions}
		snap.Generations = map[fleetwave.ObjectKey]int64{"trigger/op": gen, "trigger/db": 2}
		snap.Nodes = map[string]*fleetwave.Node{}
		snap.Objects = map[fleetwave.ObjectKey]fleetwave.Object{}
		object := func(k fleetwave.ObjectKey, content string) {
			snap.Objects[k] = fleetwave.Object{Key: k, Path: string(k), Hash: content}
		}
		object("trigger/op", version)
		object("trigger/db", fmt.Sprint(dbTemplate, byRegion))
		object("block/operator", "operator")
		object("block/db", "db")
		for i := range nodes {
			id := fmt.Sprintf("n%03d", i)
			labels := map[string]string{"region": []string{"eu", "us"}[i%2]}
			if i%3 == 0 && !(i == 0 && moved) {
				labels["tier"] = "db"
			}
			snap.Nodes[id] = &fleetwave.Node{ID: id, Workspace: "ws-a", Labels: labels}
			object(fleetwave.Key(fleetwave.KindNode, id), fmt.Sprint(labels))
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
	templates := []string{"tier: {{ node.labels.tier }}\n", "tier: {{ node.labels.tier }}\nregion: {{ node.labels.region }}\n"}
	clock := now
	version, gen, dbTemplate, byRegion, moved := "1.1.0", int64(4), templates[0], false, false
	snap := snapshot(version, gen, dbTemplate, byRegion, moved)
	obs := fleetwave.Observations{}
	for i := range nodes {
		if i%7 != 0 { // some never reported
			id := fmt.Sprintf("n%03d", i)
			obs[id] = report(id, clock)
		}
	}
	var c DriftCache
	drifting, renewed, kept := 0, 0, 0
	for step := range 200 {
		before := maps.Clone(c.nodes)
		triggersOnly := false
		switch k := rng.IntN(10); {
		case k < 5: // new reports for a few nodes (replaced, never changed in place)
			for range 1 + rng.IntN(10) {
				id := fmt.Sprintf("n%03d", rng.IntN(nodes))
				obs[id] = report(id, clock)
			}
		case k < 6: // a node's report is gone
			delete(obs, fmt.Sprintf("n%03d", rng.IntN(nodes)))
		case k < 7: // time passes: some reports go stale
			clock = clock.Add(time.Duration(rng.IntN(40)) * time.Minute)
		case k < 9: // a new commit of BRCs: op's version or generation, db's template or selector
			version, gen = []string{"1.1.0", "1.2.0"}[rng.IntN(2)], int64(4+rng.IntN(2))
			dbTemplate, byRegion = templates[rng.IntN(2)], rng.IntN(3) == 0
			snap = snapshot(version, gen, dbTemplate, byRegion, moved)
			renewed++
			triggersOnly = true
		default: // a new commit that moves n000 in or out of db's scope
			moved = !moved
			snap = snapshot(version, gen, dbTemplate, byRegion, moved)
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
		if !triggersOnly {
			continue
		}
		for id, nd := range c.nodes { // kept, not worked out again
			if b, ok := before[id]; ok && len(nd.entries) > 0 && len(b.entries) > 0 && &nd.entries[0] == &b.entries[0] {
				kept++
			}
		}
	}
	if renewed == 0 || drifting == 0 || kept == 0 {
		t.Fatalf("the steps renewed the snapshot %d times, found %d drifting nodes and kept %d nodes' entries over a new snapshot: the test tried nothing", renewed, drifting, kept)
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

// BenchmarkDriftAfterPush is the drift a status write needs at 100,000
// nodes after a push of a BRC of one node (a probe): "kept" keeps every
// other node's entries (the new snapshot changed only that BRC), "whole"
// works out every node's again, as every new snapshot did before (its
// snapshot without the objects' hashes that tell what changed):
//
//	go test -run '^$' -bench DriftAfterPush -benchmem ./reconciler/
func BenchmarkDriftAfterPush(b *testing.B) {
	for _, kept := range []bool{true, false} {
		b.Run(map[bool]string{true: "kept", false: "whole"}[kept], func(b *testing.B) { benchDriftAfterPush(b, kept) })
	}
}

func benchDriftAfterPush(b *testing.B, kept bool) {
	const nodes = 100_000
	base := testSnapshot()
	base.Nodes = map[string]*fleetwave.Node{}
	base.Objects = map[fleetwave.ObjectKey]fleetwave.Object{}
	obs := fleetwave.Observations{}
	for i := range nodes {
		id := fmt.Sprintf("node-%06d", i)
		base.Nodes[id] = &fleetwave.Node{ID: id, Workspace: "ws-a", Labels: map[string]string{"region": "eu"}}
		k := fleetwave.Key(fleetwave.KindNode, id)
		base.Objects[k] = fleetwave.Object{Key: k, Path: string(k), Hash: "eu"}
		obs[id] = &fleetwave.Report{Node: id, ReceivedAt: now, Instances: []fleetwave.InstanceStatus{
			{Block: "operator", Version: "1.0.0", Generation: 3, ConfigHash: "old", State: fleetwave.StateInstalled}}}
	}
	base.NodeIDs = base.SortedNodeIDs()
	base.Objects["trigger/op"] = fleetwave.Object{Key: "trigger/op", Path: "trigger/op", Hash: "op"}
	// the next commit: the probe BRC of one node at its next version
	probe := 0
	push := func(prev *fleetwave.Snapshot) *fleetwave.Snapshot {
		probe++
		snap := *prev
		snap.Commit = fmt.Sprintf("c%d", probe+1)
		snap.Triggers = maps.Clone(prev.Triggers)
		snap.Triggers["probe"] = &fleetwave.Trigger{Name: "probe", BlockName: "operator", TargetVersion: fmt.Sprint(probe),
			TriggerType: fleetwave.TriggerReconciliation, Nodes: []string{"node-000000"}}
		snap.Generations = maps.Clone(prev.Generations)
		snap.Generations["trigger/probe"] = int64(probe)
		if kept {
			snap.Objects = maps.Clone(prev.Objects)
			snap.Objects["trigger/probe"] = fleetwave.Object{Key: "trigger/probe", Path: "trigger/probe", Hash: fmt.Sprint(probe)}
		} else {
			snap.Objects = nil
		}
		return &snap
	}
	var renders RenderCache
	opts := Options{Renders: &renders}
	var c DriftCache
	snap := push(base)
	c.Update(snap, obs, now, time.Hour, opts)
	for b.Loop() {
		b.StopTimer()
		snap = push(snap)
		b.StartTimer()
		c.Update(snap, obs, now, time.Hour, opts)
		if d := c.Of("node-000001"); len(d) != 3 {
			b.Fatalf("node-000001 drifts %+v, want a config, a generation and a version", d)
		}
	}
}
