package hub

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

func TestPlannedRolloutShowsWindowWaitsAndWaves(t *testing.T) {
	w := fleetwave.Window{Name: "nightly", Cron: "0 3 * * *", Duration: time.Hour, Timezone: "UTC"}
	spec := fleetwave.RolloutSpec{BaseID: "op-g2", MaxConcurrent: 2, Source: fleetwave.RolloutSource{Object: "trigger/op", Generation: 2}}
	var items []fleetwave.ItemSpec
	for _, n := range []string{"a", "b", "c"} {
		items = append(items, fleetwave.ItemSpec{Node: n, Block: "op", Action: "upgrade", ManagedBy: "team", Windows: []fleetwave.Window{w}, BypassWindows: n == "c"})
	}
	pr := plannedRollout(&fleetwave.Snapshot{}, spec, items, time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	if len(pr.Lanes) != 1 || len(pr.Lanes[0].Waves) != 2 || len(pr.Lanes[0].Waves[0]) != 2 {
		t.Fatalf("waves = %+v", pr.Lanes)
	}
	a, c := pr.Lanes[0].Waves[0][0], pr.Lanes[0].Waves[1][0]
	if a.Windows != "nightly" || a.WaitsUntil != "2026-05-02T03:00:00Z" {
		t.Fatalf("item a = %+v, want a wait for nightly until 03:00 next day", a)
	}
	if c.Windows != "" || c.WaitsUntil != "" {
		t.Fatalf("bypassed item c = %+v, want no wait", c)
	}
	rep := &PlanReport{Rollouts: []PlannedRollout{pr}, Objects: []ObjectChange{{Key: "trigger/op", Change: "modified", From: 1, To: 2}}}
	var sb strings.Builder
	rep.WriteText(&sb, false)
	if !strings.Contains(sb.String(), "waits for window nightly until 2026-05-02T03:00:00Z") {
		t.Fatalf("text:\n%s", sb.String())
	}
}

func TestPlannedItemsShowBlockedSkippedAndConfigChanges(t *testing.T) {
	spec := fleetwave.RolloutSpec{BaseID: "op-g3", MaxConcurrent: 5, Source: fleetwave.RolloutSource{Object: "trigger/op", Generation: 3}}
	items := []fleetwave.ItemSpec{
		{Node: "a", Block: "op", Action: "upgrade", BlockReason: "invalid_config", BlockMessage: "replicas: out of bound"},
		{Node: "b", Block: "op", Action: "upgrade", TargetVersion: "2", SkipReason: "cli_managed"},
		{Node: "c", Block: "op", Action: "start"},
	}
	pr := plannedRollout(&fleetwave.Snapshot{}, spec, items, time.Now())
	if pr.ConfigChange {
		t.Fatalf("a rollout of a blocked, a skipped and a start item counts as a config change: %+v", pr)
	}
	var sb strings.Builder
	(&PlanReport{Rollouts: []PlannedRollout{pr}}).WriteText(&sb, false)
	for _, want := range []string{"upgrade op@a BLOCKED invalid_config: replicas: out of bound", "upgrade op@b -> 2 skipped cli_managed", "approval: not required (no version or config change)"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("text lacks %q:\n%s", want, sb.String())
		}
	}
	items = append(items, fleetwave.ItemSpec{Node: "d", Block: "op", Action: "apply", ConfigHash: "abc"})
	if pr := plannedRollout(&fleetwave.Snapshot{}, spec, items, time.Now()); !pr.ConfigChange {
		t.Fatal("an apply with a new config hash is not a config change")
	}
}

func TestPlannedItemsOfDrainingNodesWait(t *testing.T) {
	snap := &fleetwave.Snapshot{Nodes: map[string]*fleetwave.Node{"a": {ID: "a"}, "b": {ID: "b", Drain: true}, "c": {ID: "c"}}}
	spec := fleetwave.RolloutSpec{BaseID: "op-g4", MaxConcurrent: 1, Source: fleetwave.RolloutSource{Object: "trigger/op", Generation: 4}}
	var items []fleetwave.ItemSpec
	for _, n := range []string{"a", "b", "c"} {
		items = append(items, fleetwave.ItemSpec{Node: n, Block: "op", Action: "upgrade", TargetVersion: "4", ManagedBy: "team"})
	}
	pr := plannedRollout(snap, spec, items, time.Now())
	l := pr.Lanes[0]
	if len(l.Waves) != 2 || l.Waves[0][0].Node != "a" || l.Waves[1][0].Node != "c" {
		t.Fatalf("waves %+v, want a then c", l.Waves)
	}
	if len(l.Waiting) != 1 || l.Waiting[0].Node != "b" || l.Waiting[0].Reason != fleetwave.ReasonNodeDraining {
		t.Fatalf("waiting %+v, want b with node_draining", l.Waiting)
	}
	var sb strings.Builder
	(&PlanReport{Rollouts: []PlannedRollout{pr}}).WriteText(&sb, false)
	if want := "lane team waits (node_draining): upgrade op@b -> 4"; !strings.Contains(sb.String(), want) {
		t.Fatalf("text lacks %q:\n%s", want, sb.String())
	}
}
