package hub

import (
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

func TestSentItemsLeavesOutWhatTheEngineCreatedMomentsAgo(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	item := func(node, hash, group string) fleetwave.ItemSpec {
		return fleetwave.ItemSpec{Node: node, Block: "web", Action: fleetwave.ActionInstall, Generation: 2, ConfigHash: hash, Group: group}
	}
	spec := fleetwave.RolloutSpec{BaseID: "web-g2", Source: fleetwave.RolloutSource{Generation: 2, Kind: fleetwave.SourceScheduler},
		Items: []fleetwave.ItemSpec{item("n1", "h", ""), item("n2", "h", ""), item("n3", "h", "split"), item("n4", "h", "")}}
	nodes := func(s fleetwave.RolloutSpec) []string {
		var out []string
		for _, it := range s.Items {
			out = append(out, it.Node)
		}
		return out
	}
	s := sentItems{ttl: 30 * time.Second}
	if got, _ := s.filter(7, spec, t0); len(got.Items) != 4 {
		t.Fatalf("nothing created yet: kept %v, want all", nodes(got))
	}
	s.created(7, spec, []int{0, 1, 2}, t0) // n4 was not created (its instance was busy)
	got, left := s.filter(7, spec, t0.Add(time.Second))
	if want := []string{"n3", "n4"}; left != 2 || len(got.Items) != 2 || got.Items[0].Node != want[0] || got.Items[1].Node != want[1] {
		t.Fatalf("kept %v (left out %d), want %v: a split group and what was not created are sent again", nodes(got), left, want)
	}
	if len(spec.Items) != 4 {
		t.Fatal("filter changed the caller's spec")
	}
	changed := spec
	changed.Items = []fleetwave.ItemSpec{item("n1", "other-config", "")}
	if got, _ := s.filter(7, changed, t0.Add(time.Second)); len(got.Items) != 1 {
		t.Fatal("an item planned differently was left out")
	}
	newer := spec
	newer.BaseID, newer.Source.Generation = "web-g3", 3
	if got, _ := s.filter(7, newer, t0.Add(time.Second)); len(got.Items) != 4 {
		t.Fatal("the items of another event were left out")
	}
	if got, _ := s.filter(8, spec, t0.Add(time.Second)); len(got.Items) != 4 {
		t.Fatal("a new leader term left items out")
	}
	if got, _ := s.filter(7, spec, t0.Add(30*time.Second)); len(got.Items) != 4 {
		t.Fatal("items were left out after ttl")
	}
	once := spec
	once.Once = true
	if got, _ := s.filter(7, once, t0.Add(time.Second)); len(got.Items) != 4 {
		t.Fatal("a one-shot event's items were left out")
	}
	s.prune(t0.Add(31 * time.Second))
	if len(s.items) != 0 {
		t.Fatalf("%d entries kept after ttl", len(s.items))
	}
}

// TestWantsReportOnlyOfANodeTheObservationsLost: a node missing from the
// last reconcile's observations is asked for a full report, unless this
// hub took one from it after that reconcile read them (then the report
// is only newer than the reconcile, as for every agent that registered
// while a long reconcile ran); once asked, not again for a minute.
func TestWantsReportOnlyOfANodeTheObservationsLost(t *testing.T) {
	read := time.Now()
	h := &Hub{snapshot: &fleetwave.Snapshot{Nodes: map[string]*fleetwave.Node{"n1": {}, "n2": {}, "n3": {}}},
		observed: map[string]bool{"n3": true}, observedAt: read,
		reportTaken: map[string]takenReport{"n1": {at: read.Add(-time.Second)}, "n2": {at: read.Add(time.Second)}}}
	if !h.WantsReport("n1") {
		t.Error("n1 reported before the reconcile read the observations, which lack it: want a report")
	}
	if h.WantsReport("n1") {
		t.Error("n1 asked twice within a minute")
	}
	if h.WantsReport("n2") {
		t.Error("n2 reported after the reconcile read the observations: asked for another")
	}
	if h.WantsReport("n3") {
		t.Error("n3 is observed: asked for a report")
	}
	if h.WantsReport("ghost") {
		t.Error("a node the snapshot does not know was asked for a report")
	}
}
