package reconciler

import (
	"fmt"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// BenchmarkPlanNewBRC100k plans what a push of a fleet-wide BRC plans
// (the push plan: that BRC alone, from every node's report) on 100,000
// nodes that all reported, none with the block yet.
//
//	go test -run '^$' -bench PlanNewBRC100k -benchtime 5x ./reconciler/
func BenchmarkPlanNewBRC100k(b *testing.B) {
	snap := testSnapshot()
	snap.Nodes = map[string]*fleetwave.Node{}
	obs := fleetwave.Observations{}
	for i := range 100_000 {
		id := fmt.Sprintf("node-%06d", i)
		snap.Nodes[id] = &fleetwave.Node{ID: id, Workspace: fmt.Sprintf("ws-%03d", i%300),
			Labels: map[string]string{"region": []string{"eu", "us", "ap"}[i%3]}}
		obs[id] = &fleetwave.Report{Node: id, Instances: []fleetwave.InstanceStatus{{Block: "other", Version: "1"}}}
	}
	snap.Triggers["main"] = &fleetwave.Trigger{Name: "main", BlockName: "operator", TargetVersion: "1.0.0", ManagedBy: "scale",
		TriggerType: fleetwave.TriggerReconciliation, MaxConcurrent: 5000, BypassMaintenanceWindow: true}
	snap.Generations[fleetwave.Key(fleetwave.KindTrigger, "main")] = 1
	opts := Options{RequireReport: true, Only: map[string]bool{"main": true}}
	b.ReportAllocs()
	for b.Loop() {
		p := PlanWith(snap, obs, now, opts)
		if n := p.Items(); n != 100_000 {
			b.Fatalf("%d items, want 100000 (problems %v)", n, p.Problems)
		}
	}
}

// TestAnEmptyTemplateRendersAsGonjaDoes: a BRC without a config template
// renders, without the template engine, what gonja renders of an empty
// template, with and without a render cache.
func TestAnEmptyTemplateRendersAsGonjaDoes(t *testing.T) {
	snap := testSnapshot()
	tr := &fleetwave.Trigger{Name: "bare", BlockName: "operator", TargetVersion: "1"}
	for _, id := range snap.SortedNodeIDs() {
		n := snap.Nodes[id]
		for _, opts := range []Options{{}, {Renders: &RenderCache{}}} {
			r := newRenderer(opts)
			want, err := r.render(tr.Name, "", TemplateVars(snap, n, snap.Blocks["operator"], tr), CredentialScope(n))
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.renderVars(snap, n, snap.Blocks["operator"], tr)
			if err != nil || got != want {
				t.Fatalf("node %s: rendered %q, %v; gonja renders %q", id, got, err, want)
			}
		}
	}
}
