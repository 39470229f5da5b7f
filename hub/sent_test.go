package hub

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
)

// TestSentItemsLeavesOutWhatTheEngineCreatedMomentsAgo: the items the
// engine created from a plan are left out of the next plans for ttl
// (the reconcile interval, or four times the last reconcile), and again
// for ttl when, sent again, the engine created nothing for them; an item
// it never created, a split group's, one planned differently or of
// another event, and any of a new leader term are always sent.
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
	if got, _, _ := s.filter(7, spec, t0); len(got.Items) != 4 {
		t.Fatalf("nothing created yet: kept %v, want all", nodes(got))
	}
	s.created(7, spec, []int{0, 1, 2}, []string{"r.0", "r.1", "r.2"}, t0) // n4 was not created (its instance was busy)
	got, left, _ := s.filter(7, spec, t0.Add(time.Second))
	if want := []string{"n3", "n4"}; left != 2 || len(got.Items) != 2 || got.Items[0].Node != want[0] || got.Items[1].Node != want[1] {
		t.Fatalf("kept %v (left out %d), want %v: a split group and what was not created are sent again", nodes(got), left, want)
	}
	if len(spec.Items) != 4 {
		t.Fatal("filter changed the caller's spec")
	}
	changed := spec
	changed.Items = []fleetwave.ItemSpec{item("n1", "other-config", "")}
	if got, _, _ := s.filter(7, changed, t0.Add(time.Second)); len(got.Items) != 1 {
		t.Fatal("an item planned differently was left out")
	}
	newer := spec
	newer.BaseID, newer.Source.Generation = "web-g3", 3
	if got, _, _ := s.filter(7, newer, t0.Add(time.Second)); len(got.Items) != 4 {
		t.Fatal("the items of another event were left out")
	}
	if got, _, _ := s.filter(8, spec, t0.Add(time.Second)); len(got.Items) != 4 {
		t.Fatal("a new leader term left items out")
	}
	if got, _, _ := s.filter(7, spec, t0.Add(30*time.Second)); len(got.Items) != 4 {
		t.Fatal("items were left out after ttl")
	}
	once := spec
	once.Once = true
	if got, _, _ := s.filter(7, once, t0.Add(time.Second)); len(got.Items) != 4 {
		t.Fatal("a one-shot event's items were left out")
	}
	// after ttl the plan sends them again; the engine creates nothing
	// (its items are there): the ones it created earlier are left out for
	// another ttl, the one it never created is sent with every plan
	t1 := t0.Add(30 * time.Second)
	s.created(7, spec, nil, nil, t1)
	got, left, _ = s.filter(7, spec, t1.Add(time.Second))
	if want := []string{"n3", "n4"}; left != 2 || len(got.Items) != 2 || got.Items[0].Node != want[0] || got.Items[1].Node != want[1] {
		t.Fatalf("after ttl, sent again and not created: kept %v (left out %d), want %v", nodes(got), left, want)
	}
	// a reconcile that took 20 s stretches ttl to 80 s
	s.reconciled(20 * time.Second)
	if got, _, _ := s.filter(7, spec, t1.Add(60*time.Second)); len(got.Items) != 2 {
		t.Fatalf("a ttl stretched by a slow reconcile: kept %v, want n3 and n4", nodes(got))
	}
	if got, _, _ := s.filter(7, spec, t1.Add(80*time.Second)); len(got.Items) != 4 {
		t.Fatal("items were left out after the stretched ttl")
	}
	s.prune(t1.Add(159 * time.Second))
	if len(s.items) != 2 {
		t.Fatalf("%d entries kept before twice the ttl, want n1's and n2's", len(s.items))
	}
	s.prune(t1.Add(160 * time.Second))
	if len(s.items) != 0 {
		t.Fatalf("%d entries kept after twice the ttl", len(s.items))
	}
}

// leaderEngineHub is engineHub holding the leader lease: its fence.
func leaderEngineHub(t *testing.T) (*Hub, int64) {
	t.Helper()
	h, _ := engineHub(t)
	fence, err := h.eng.Campaign(context.Background(), "hub-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return h, fence
}

// sentTestItem is an upgrade of block web on node.
func sentTestItem(node string) fleetwave.ItemSpec {
	return fleetwave.ItemSpec{Node: node, Block: "web", Action: fleetwave.ActionUpgrade, Generation: 1, TargetVersion: "1.1",
		ConfigHash: "h1", Payload: fleetwave.AttemptPayload{Command: "deploy", TimeoutSeconds: 60}}
}

// sentTestSpec is the plan of BRC brc's first generation.
func sentTestSpec(brc string, items ...fleetwave.ItemSpec) fleetwave.RolloutSpec {
	return fleetwave.RolloutSpec{BaseID: brc, MaxConcurrent: 1,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, brc), Generation: 1, Kind: fleetwave.SourceScheduler},
		Items:  items}
}

// TestSentItemsPastTTLAreCheckedNotSent: past ttl, an item the engine
// created is not sent again while its instance's active item (a real
// redis-server's) is still the one created for it; once that item ended,
// it is sent again. Checked items are left out for another ttl.
func TestSentItemsPastTTLAreCheckedNotSent(t *testing.T) {
	h, fence := leaderEngineHub(t)
	ctx := context.Background()
	item := sentTestItem
	spec := sentTestSpec("web", item("n1"), item("n2"), item("n3"))
	s := sentItems{ttl: 30 * time.Second}
	t0 := time.Now()
	r, err := h.eng.CreateRolloutResult(ctx, fence, spec)
	if err != nil || len(r.Items) != 3 {
		t.Fatalf("created %+v, %v", r, err)
	}
	s.created(fence, spec, r.Created, r.Items, t0)
	// n1's item runs and completes: its instance has no active item
	h.fence = fence
	h.engineStep(ctx)
	as, err := h.eng.Poll(ctx, "n1", 10, 0)
	if err != nil || len(as) != 1 {
		t.Fatalf("polled %v, %v", as, err)
	}
	if err := h.eng.Complete(ctx, "n1", fleetwave.AttemptResult{AttemptID: as[0].ID, Fence: as[0].Fence, Class: fleetwave.ResultSuccess,
		Instance: &fleetwave.InstanceStatus{Block: "web", Version: "1.1", ConfigHash: "h1", Generation: 1, State: fleetwave.StateInstalled}}); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(31 * time.Second)
	kept, left, again := s.filter(fence, spec, t1)
	if left != 0 || len(kept.Items) != 3 || len(again) != 3 {
		t.Fatalf("past ttl: kept %d, left out %d, to check %v; want all three kept and checked", len(kept.Items), left, again)
	}
	keys := []fleetwave.InstanceKey{item("n1").Instance(), item("n2").Instance(), item("n3").Instance()}
	active, err := h.eng.ActiveItems(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 2 || active[keys[1]] != r.Items[1] || active[keys[2]] != r.Items[2] {
		t.Fatalf("active items %v, want n2's and n3's of %v", active, r.Items)
	}
	kept, left = s.stillActive(fence, kept, again, active, t1)
	if left != 2 || len(kept.Items) != 1 || kept.Items[0].Node != "n1" {
		t.Fatalf("checked: kept %d (left out %d), want n1's only: its item ended", len(kept.Items), left)
	}
	if got, _, again := s.filter(fence, spec, t1.Add(time.Second)); len(got.Items) != 1 || len(again) != 1 {
		t.Fatalf("after the check: kept %d, to check %v; want n1's alone, n2's and n3's left out for another ttl", len(got.Items), again)
	}
	// an active item that is not the one created for it (another event's) is no reason to leave one out
	active[keys[0]] = "other.0"
	if kept, left := s.stillActive(fence, spec, again, active, t1); left != 2 || len(kept.Items) != 1 {
		t.Fatalf("n1 held by another item: kept %d, left out %d", len(kept.Items), left)
	}
	if kept, left := s.stillActive(fence+1, spec, again, active, t1); left != 0 || len(kept.Items) != 3 {
		t.Fatal("a new leader term left checked items out")
	}
}

// TestSentItemsAdoptTheItemsOfTheirEvent: a hub that lost its entries (a
// new leader, or entries pruned while a long creation ran) sends a plan
// the engine (a real redis-server) creates nothing for: the items whose
// instance an item of the plan's event holds are recorded as created, so
// the next plans leave them out; one held by another event's item is not,
// so it is sent with every plan.
func TestSentItemsAdoptTheItemsOfTheirEvent(t *testing.T) {
	h, fence := leaderEngineHub(t)
	h.metrics = newMetrics(h)
	ctx := context.Background()
	item := sentTestItem
	spec := sentTestSpec("web", item("n1"), item("n2"), item("n3"))
	other := sentTestSpec("db", item("n4"))
	if _, _, err := h.eng.CreateRollout(ctx, fence, other); err != nil {
		t.Fatal(err)
	}
	h.sent = sentItems{ttl: 30 * time.Second}
	h.createPlanned(ctx, fence, spec)
	spec.Items = append(spec.Items, item("n4")) // n4 is held by db's item
	h.sent = sentItems{ttl: 30 * time.Second}   // the entries are lost
	h.createPlanned(ctx, fence, spec)
	kept, left, _ := h.sent.filter(fence, spec, time.Now())
	if left != 3 || len(kept.Items) != 1 || kept.Items[0].Node != "n4" {
		t.Fatalf("after the plan was sent again: kept %d (left out %d), want n4 alone", len(kept.Items), left)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if e := h.sent.items[item(n).Instance()]; e.item == "" || !strings.HasPrefix(e.item, "web.") {
			t.Fatalf("%s recorded as %+v, want web's item", n, e)
		}
	}
}

// TestCreatePlannedLeavesAnEventToTheCreationUnderWay: while one
// createPlanned creates an event's rollout (the push step's), another of
// the same event (a reconcile's) sends nothing to the engine (a real
// redis-server); another event's goes ahead, and once the first ended the
// event is sent again as usual.
func TestCreatePlannedLeavesAnEventToTheCreationUnderWay(t *testing.T) {
	h, fence := leaderEngineHub(t)
	h.metrics = newMetrics(h)
	ctx := context.Background()
	item := sentTestItem
	spec := sentTestSpec("web", item("n1"), item("n2"))
	other := sentTestSpec("db", item("n3"))
	h.sent = sentItems{ttl: 30 * time.Second}
	if !h.sent.begin(spec) {
		t.Fatal("a first creation was refused")
	}
	if h.sent.begin(spec) {
		t.Fatal("a second creation of the same event was let through")
	}
	h.createPlanned(ctx, fence, spec)
	h.createPlanned(ctx, fence, other)
	keys := []fleetwave.InstanceKey{item("n1").Instance(), item("n2").Instance(), item("n3").Instance()}
	active, err := h.eng.ActiveItems(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 1 || active[keys[2]] == "" {
		t.Fatalf("active items %v while web's creation was under way, want db's alone", active)
	}
	h.sent.end(spec)
	h.createPlanned(ctx, fence, spec)
	if active, err = h.eng.ActiveItems(ctx, keys); err != nil || len(active) != 3 {
		t.Fatalf("active items %v (%v) once it ended, want all three", active, err)
	}
	if !h.sent.begin(spec) {
		t.Fatal("createPlanned kept the event claimed after it returned")
	}
}

// TestWantsReportOnlyOfANodeTheObservationsLost: a node missing from the
// last reconcile's observations is asked for a full report, unless this
// hub took one from it after that reconcile read them (then the report
// is only newer than the reconcile, as for every agent that registered
// while a long reconcile ran); once asked, not again for a minute.
func TestWantsReportOnlyOfANodeTheObservationsLost(t *testing.T) {
	read := time.Now()
	h := &Hub{asks: reportAsks{known: map[string]*fleetwave.Node{"n1": {}, "n2": {}, "n3": {}},
		observed: map[string]bool{"n3": true}, observedAt: read,
		taken: map[string]takenReport{"n1": {at: read.Add(-time.Second)}, "n2": {at: read.Add(time.Second)}}}}
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

// TestANodeWithAnAmbiguousItemIsAskedForAReport: an attempt delivered
// whose result never came makes its item ambiguous at its deadline (a real
// redis-server); the leader then asks the node for the full report that
// settles it at its next poll, once a minute, rather than wait for the
// node's periodic report, and stops asking once it took one. The report
// shows the target: the item completes.
func TestANodeWithAnAmbiguousItemIsAskedForAReport(t *testing.T) {
	h, clk := engineHub(t)
	ctx := context.Background()
	fence, err := h.eng.Campaign(ctx, "hub-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h.fence = fence
	spec := fleetwave.RolloutSpec{BaseID: "web", MaxConcurrent: 1,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "web"), Generation: 1, Kind: fleetwave.SourceScheduler},
		Items: []fleetwave.ItemSpec{{Node: "n1", Block: "web", Action: fleetwave.ActionUpgrade, Generation: 1, TargetVersion: "1.1",
			ConfigHash: "h1", Payload: fleetwave.AttemptPayload{Command: "deploy", TimeoutSeconds: 60}}}}
	id, items, err := h.eng.CreateRollout(ctx, fence, spec)
	if err != nil {
		t.Fatal(err)
	}
	h.engineStep(ctx)
	as, err := h.eng.Poll(ctx, "n1", 10, 0)
	if err != nil || len(as) != 1 {
		t.Fatalf("polled %v, %v", as, err)
	}
	if h.WantsReport("n1") {
		t.Fatal("a report asked of a node whose attempt runs")
	}
	// the node's agent holds its next poll meanwhile: the step that makes
	// the item ambiguous ends it, so the agent is asked for its report now
	held := make(chan error, 1)
	go func() {
		as, err := h.eng.Poll(ctx, "n1", 10, time.Minute)
		if err == nil && len(as) > 0 {
			err = fmt.Errorf("held poll returned %d attempts", len(as))
		}
		held <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); h.eng.WaitingPolls() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the held poll never waited")
		}
	}
	clk.Advance(60*time.Second + engine.DefaultDeliveryGrace) // no result came
	h.engineStep(ctx)
	select {
	case err := <-held:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the node's held poll was not ended when its item became ambiguous")
	}
	_, its, err := h.eng.Rollout(ctx, id)
	if err != nil || len(its) != 1 || its[0].Status != fleetwave.ItemAmbiguous {
		t.Fatalf("item after its deadline: %+v, %v", its, err)
	}
	if !h.WantsReport("n1") {
		t.Fatal("the node of an ambiguous item not asked for a report")
	}
	if h.WantsReport("n1") {
		t.Fatal("asked twice within a minute")
	}
	if h.WantsReport("n2") {
		t.Fatal("a node without an ambiguous item asked for a report")
	}
	clk.Advance(time.Second)
	if err := h.Report(ctx, fleetwave.Report{Node: "n1", SentAt: clk.Now(), Attempts: []string{as[0].ID},
		Instances: []fleetwave.InstanceStatus{{Block: "web", Version: "1.1", ConfigHash: "h1", Generation: 1}}}); err != nil {
		t.Fatal(err)
	}
	h.asks.mu.Lock()
	delete(h.asks.asked, "n1") // a minute later
	h.asks.mu.Unlock()
	if h.WantsReport("n1") {
		t.Fatal("asked again after the node reported")
	}
	_, its, err = h.eng.Rollout(ctx, id)
	if err != nil || len(its) != 1 || its[0].ID != items[0] || its[0].Status != fleetwave.ItemCompleted {
		t.Fatalf("item after the report: %+v, %v", its, err)
	}
}
