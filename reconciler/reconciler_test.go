package reconciler

import (
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testSnapshot() *fleetwave.Snapshot {
	return &fleetwave.Snapshot{
		Commit: "c1",
		Config: fleetwave.Config{Name: "fleetwave", MaxConcurrent: 5, MaxRetries: 3},
		Triggers: map[string]*fleetwave.Trigger{
			"op": {Name: "op", BlockName: "operator", TargetVersion: "1.1.0", MaxConcurrent: 1,
				TriggerType:         fleetwave.TriggerReconciliation,
				BlockConfigTemplate: "node: {{ node.id }}\nregion: {{ node.labels.region }}\nversion: {{ brc.target_version }}\n"},
		},
		Blocks: map[string]*fleetwave.Block{
			"operator": {Name: "operator", Actions: map[string]fleetwave.BlockAction{
				"install":   {Command: "echo install", Timeout: time.Minute},
				"upgrade":   {Command: "echo upgrade", Timeout: time.Minute},
				"uninstall": {Command: "echo uninstall", Timeout: time.Minute},
			}},
		},
		Nodes: map[string]*fleetwave.Node{
			"n3": {ID: "n3", Workspace: "ws-a", Labels: map[string]string{"region": "eu"}},
			"n1": {ID: "n1", Workspace: "ws-b", Labels: map[string]string{"region": "us"}},
			"n2": {ID: "n2", Workspace: "ws-a", Criticality: fleetwave.CriticalityLow, Labels: map[string]string{"region": "eu"}},
		},
		Workspaces: map[string]*fleetwave.Workspace{
			"ws-a": {Name: "ws-a", Criticality: fleetwave.CriticalityHigh},
			"ws-b": {Name: "ws-b"},
		},
		Generations: map[fleetwave.ObjectKey]int64{"trigger/op": 4},
	}
}

func nodesOf(spec fleetwave.RolloutSpec) []string {
	var out []string
	for _, it := range spec.Items {
		out = append(out, it.Node+":"+it.Action)
	}
	return out
}

func TestPlanInstallsEverywhereInCriticalityOrder(t *testing.T) {
	plan := PlanSnapshot(testSnapshot(), nil, now)
	if len(plan.Rollouts) != 1 {
		t.Fatalf("rollouts = %d, want 1", len(plan.Rollouts))
	}
	r := plan.Rollouts[0]
	// n3 inherits high from ws-a, n1 defaults to medium, n2 is low.
	if got, want := nodesOf(r), []string{"n3:install", "n1:install", "n2:install"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	if r.BaseID != "op-g4" || r.Source.Generation != 4 || r.Source.Commit != "c1" || r.MaxConcurrent != 1 || r.MaxRetries != 3 {
		t.Fatalf("spec = %+v", r)
	}
	if !strings.Contains(r.Items[0].Payload.Config, "node: n3\nregion: eu\nversion: 1.1.0") {
		t.Fatalf("rendered config = %q", r.Items[0].Payload.Config)
	}
	if r.Items[0].ConfigHash != ConfigHash(r.Items[0].Payload.Config) || r.Items[0].Generation != 4 {
		t.Fatalf("item = %+v", r.Items[0])
	}
}

func TestPlanActionFollowsTheDifference(t *testing.T) {
	snap := testSnapshot()
	first := PlanSnapshot(snap, nil, now).Rollouts[0]
	hash := map[string]string{}
	for _, it := range first.Items {
		hash[it.Node] = it.ConfigHash
	}
	obs := fleetwave.Observations{
		"n1": {Node: "n1", Instances: []fleetwave.InstanceStatus{{Block: "operator", Version: "1.1.0", ConfigHash: hash["n1"]}}},
		"n2": {Node: "n2", Instances: []fleetwave.InstanceStatus{{Block: "operator", Version: "1.0.0", ConfigHash: hash["n2"]}}},
		"n3": {Node: "n3", Instances: []fleetwave.InstanceStatus{{Block: "operator", Version: "1.1.0", ConfigHash: "stale"}}},
	}
	got := nodesOf(PlanSnapshot(snap, obs, now).Rollouts[0])
	if want := []string{"n3:upgrade", "n2:upgrade"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v (n1 converged must get nothing)", got, want)
	}

	snap.Triggers["op"].DesiredState = fleetwave.StateAbsent
	got = nodesOf(PlanSnapshot(snap, obs, now).Rollouts[0])
	if want := []string{"n3:uninstall", "n1:uninstall", "n2:uninstall"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
}

func TestPlanConvergedFleetPlansNothing(t *testing.T) {
	snap := testSnapshot()
	obs := fleetwave.Observations{}
	for _, it := range PlanSnapshot(snap, nil, now).Rollouts[0].Items {
		obs[it.Node] = &fleetwave.Report{Node: it.Node, Instances: []fleetwave.InstanceStatus{{Block: it.Block, Version: it.TargetVersion, ConfigHash: it.ConfigHash}}}
	}
	plan := PlanSnapshot(snap, obs, now)
	if got := plan.WithItems(); len(got) != 0 {
		t.Fatalf("converged fleet planned %v", nodesOf(got[0]))
	}
	// the trigger's spec is still there, empty: it supersedes older
	// generations of the trigger
	if len(plan.Rollouts) != 1 || !plan.Rollouts[0].Supersede || plan.Rollouts[0].Budget != "op" {
		t.Fatalf("the converged trigger's spec is %+v", plan.Rollouts)
	}
}

func TestPlanRequireReportHoldsSilentNodes(t *testing.T) {
	snap := testSnapshot()
	obs := fleetwave.Observations{"n1": {Node: "n1"}}
	plan := PlanWith(snap, obs, now, Options{RequireReport: true})
	if got := nodesOf(plan.Rollouts[0]); !reflect.DeepEqual(got, []string{"n1:install"}) {
		t.Fatalf("items = %v, want only the node that reported", got)
	}
	var held []string
	for _, h := range plan.Holds {
		if h.Reason == fleetwave.ReasonAwaitingReport {
			held = append(held, h.Node)
		}
	}
	sort.Strings(held)
	if !reflect.DeepEqual(held, []string{"n2", "n3"}) {
		t.Fatalf("awaiting_report holds %v, want n2 n3", held)
	}
	// the cap follows the whole scope, not the nodes that reported so far
	snap.Triggers["op"].MaxConcurrent, snap.Triggers["op"].MaxConcurrentPercent = 0, 50
	plan = PlanWith(snap, obs, now, Options{RequireReport: true})
	if mc := plan.Rollouts[0].MaxConcurrent; mc != 2 || plan.Rollouts[0].BudgetCap != 2 {
		t.Fatalf("max_concurrent_percent 50 of 3 nodes = %d (budget %d), want 2", mc, plan.Rollouts[0].BudgetCap)
	}
}

func TestPlanScopeFiltersAndDrain(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*fleetwave.Snapshot)
		want   []string
	}{
		{"selector keeps matching nodes", func(s *fleetwave.Snapshot) {
			s.Triggers["op"].Selector = &fleetwave.Selector{MatchLabels: map[string]string{"region": "eu"}}
		}, []string{"n3:install", "n2:install"}},
		{"notin expression", func(s *fleetwave.Snapshot) {
			s.Triggers["op"].Selector = &fleetwave.Selector{MatchExpressions: []fleetwave.SelectorTerm{{Key: "region", Operator: "notin", Values: []string{"eu"}}}}
		}, []string{"n1:install"}},
		{"explicit nodes and workspace are ANDed", func(s *fleetwave.Snapshot) {
			s.Triggers["op"].Nodes = []string{"n1", "n2"}
			s.Triggers["op"].TargetWorkspaces = []string{"ws-a"}
		}, []string{"n2:install"}},
		// drain changes availability, not intent: the engine holds the item
		{"a draining node keeps its item", func(s *fleetwave.Snapshot) { s.Nodes["n3"].Drain = true }, []string{"n3:install", "n1:install", "n2:install"}},
		{"custom priority order", func(s *fleetwave.Snapshot) {
			s.Config.PriorityOrder = []fleetwave.Criticality{"low", "medium", "high"}
		}, []string{"n2:install", "n1:install", "n3:install"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := testSnapshot()
			tt.modify(snap)
			got := nodesOf(PlanSnapshot(snap, nil, now).Rollouts[0])
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("items = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPlanObserveModeDispatchesNothing(t *testing.T) {
	snap := testSnapshot()
	snap.Config.ReconcileMode = "observe"
	plan := PlanSnapshot(snap, nil, now)
	if len(plan.Rollouts) != 0 || plan.Held["op"] != fleetwave.ReasonObserveMode {
		t.Fatalf("plan = %+v", plan)
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	a := PlanSnapshot(testSnapshot(), nil, now)
	for range 20 {
		if b := PlanSnapshot(testSnapshot(), nil, now); !reflect.DeepEqual(a, b) {
			t.Fatalf("plans differ:\n%+v\n%+v", a, b)
		}
	}
}

func TestPlanBlocksInstancesWhoseTemplateFails(t *testing.T) {
	snap := testSnapshot()
	snap.Triggers["op"].BlockConfigTemplate = "x: {{ node.nope }}"
	plan := PlanSnapshot(snap, nil, now)
	if len(plan.Problems) != 3 || plan.Problems[0].Reason != "invalid_config" {
		t.Fatalf("problems = %+v", plan.Problems)
	}
	if len(plan.Rollouts) != 1 || len(plan.Rollouts[0].Items) != 3 {
		t.Fatalf("rollouts = %+v, want one rollout of 3 blocked items", plan.Rollouts)
	}
	for _, it := range plan.Rollouts[0].Items {
		if it.BlockReason != ReasonInvalidConfig || !strings.Contains(it.BlockMessage, "nope") ||
			it.Payload.Command != "" || it.Payload.Config != "" {
			t.Fatalf("item %s: block %q %q payload %+v, want blocked invalid_config and no payload",
				it.Instance(), it.BlockReason, it.BlockMessage, it.Payload)
		}
	}
}

func TestRenderSandbox(t *testing.T) {
	tests := []struct {
		name, src, wantErr string
	}{
		{"include of a host file is refused", `{% include "/etc/passwd" %}`, "include"},
		{"import is refused", `{% import "x" as y %}`, "import"},
		{"macros are refused", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "macro"},
		{"undefined names fail", `{{ nope }}`, "nope"},
		{"huge output is cut", `{% for i in range(2000) %}{{ "a" * 1000 }}{% endfor %}`, "exceeds"},
		{"deep nesting is refused before parsing", "{{ " + strings.Repeat("(", 30000) + "1" + strings.Repeat(")", 30000) + " }}", "nest"},
		{"unbounded loops hit the budget", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, "budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render("t", tt.src, map[string]any{})
			if err == nil || !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if len(err.Error()) > maxErrorTextBytes+100 {
				t.Fatalf("error too long: %d bytes", len(err.Error()))
			}
		})
	}
}

func TestBackupScheduleCronIsStableAndSpread(t *testing.T) {
	render := func(ws string) string {
		out, err := Render("t", `{{ backup_schedule_cron(ws) }}`, map[string]any{"ws": ws})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if render("ws-a") != render("ws-a") {
		t.Fatal("not stable")
	}
	seen := map[string]bool{}
	for _, ws := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		seen[render(ws)] = true
	}
	if len(seen) < 4 {
		t.Fatalf("8 workspaces share %d schedules: not spread", len(seen))
	}
}

func TestPlanChecksTheRenderedConfigAgainstTheBlockSchema(t *testing.T) {
	snap := testSnapshot()
	snap.Blocks["operator"].ConfigSchema = "{node: string}"
	var seen []string
	opts := Options{ValidateConfig: func(schema, rendered string) error {
		seen = append(seen, schema)
		if strings.Contains(rendered, "region: eu") {
			return errors.New("rendered config does not satisfy config_schema at region")
		}
		return nil
	}}
	plan := PlanWith(snap, nil, now, opts)
	if len(seen) != 3 || seen[0] != "{node: string}" {
		t.Fatalf("validator calls = %v", seen)
	}
	var dispatchable, blocked []string
	for _, it := range plan.Rollouts[0].Items {
		if it.BlockReason == "" {
			dispatchable = append(dispatchable, it.Node)
		} else if it.BlockReason == ReasonInvalidConfig && strings.Contains(it.BlockMessage, "config_schema at region") {
			blocked = append(blocked, it.Node)
		}
	}
	sort.Strings(blocked)
	if strings.Join(dispatchable, ",") != "n1" || strings.Join(blocked, ",") != "n2,n3" {
		t.Fatalf("dispatchable %v blocked %v, want n1 and n2,n3 (the eu nodes fail the schema)", dispatchable, blocked)
	}
	if len(plan.Problems) != 2 || plan.Problems[0].Reason != ReasonInvalidConfig || !strings.Contains(plan.Problems[0].Message, "config_schema at region") {
		t.Fatalf("problems = %+v", plan.Problems)
	}
}

// TestRenderCacheServesOneSnapshot: plans sharing a RenderCache give what
// plans without one give; they render a snapshot's configs once (the
// cache holds every node of the trigger), a new snapshot's again (a
// changed label shows), and never keep a template that asks for a
// credential.
func TestRenderCacheServesOneSnapshot(t *testing.T) {
	var c RenderCache
	configs := func(p Plan) map[string]string {
		out := map[string]string{}
		for _, r := range p.Rollouts {
			for _, it := range r.Items {
				out[it.Node] = it.Payload.Config
			}
		}
		return out
	}
	snap := testSnapshot()
	want := configs(PlanWith(snap, nil, now, Options{}))
	for range 2 {
		if got := configs(PlanWith(snap, nil, now, Options{Renders: &c})); !reflect.DeepEqual(got, want) {
			t.Fatalf("with the cache: %v, want %v", got, want)
		}
	}
	if len(c.m) != 3 || c.snap != snap {
		t.Fatalf("cache holds %d renders (of the snapshot: %v), want the 3 nodes'", len(c.m), c.snap == snap)
	}
	// drift renders from the same cache: nothing to render again
	c.m[renderKey{"op", "n1"}] = "node: from the cache\n"
	obs := fleetwave.Observations{"n1": {Node: "n1", SentAt: now, Instances: []fleetwave.InstanceStatus{{Block: "operator", Version: "1.1.0",
		Generation: 4, ConfigHash: ConfigHash(want["n1"])}}}}
	drift := Drift(snap, obs, now, time.Hour, Options{Renders: &c})
	if !slices.ContainsFunc(drift, func(d DriftEntry) bool { return d.Node == "n1" && d.Kind == DriftConfig }) {
		t.Fatalf("drift did not render from the cache: %+v", drift)
	}
	next := testSnapshot()
	next.Nodes["n1"].Labels["region"] = "ap"
	if got := configs(PlanWith(next, nil, now, Options{Renders: &c})); !strings.Contains(got["n1"], "region: ap") {
		t.Fatalf("a new snapshot planned from the last one's renders: %q", got["n1"])
	}
	// a commit that changed only BRCs keeps the renders of the others
	withObjects := func(s *fleetwave.Snapshot, hashes map[string]string) *fleetwave.Snapshot {
		s.Objects = map[fleetwave.ObjectKey]fleetwave.Object{}
		for k, h := range hashes {
			key := fleetwave.ObjectKey(k)
			s.Objects[key] = fleetwave.Object{Key: key, Hash: h}
		}
		return s
	}
	two := func() *fleetwave.Snapshot {
		s := testSnapshot()
		op2 := *s.Triggers["op"]
		op2.Name, op2.BlockConfigTemplate = "op2", "other: {{ node.id }}\n"
		s.Triggers["op2"] = &op2
		return s
	}
	a := withObjects(two(), map[string]string{"trigger/op": "1", "trigger/op2": "1", "node/n1": "1", "block/operator": "1"})
	PlanWith(a, nil, now, Options{Renders: &c})
	c.m[renderKey{"op", "n1"}] = "kept: true\n"
	c.m[renderKey{"op2", "n1"}] = "kept: true\n"
	b := withObjects(two(), map[string]string{"trigger/op": "1", "trigger/op2": "2", "node/n1": "1", "block/operator": "1"})
	PlanWith(b, nil, now, Options{Renders: &c})
	if _, ok := c.get(b, b.Triggers["op"], "n1"); !ok || c.m[renderKey{"op", "n1"}] != "kept: true\n" {
		t.Fatal("a commit that changed only another BRC dropped op's renders")
	}
	if c.m[renderKey{"op2", "n1"}] == "kept: true\n" {
		t.Fatal("the renders of a BRC the commit changed were kept")
	}
	d := withObjects(two(), map[string]string{"trigger/op": "1", "trigger/op2": "2", "node/n1": "2", "block/operator": "1"})
	if _, ok := c.get(d, d.Triggers["op"], "n1"); ok {
		t.Fatal("a commit that changed a node kept the renders")
	}
	cred := testSnapshot()
	cred.Triggers["op"].BlockConfigTemplate = "password: {{ credential_get_or_create('db') }}\n"
	PlanWith(cred, nil, now, Options{Renders: &c, Credential: func(scope, name string, n int) (string, error) { return "s3cr3t", nil }})
	for k, v := range c.m {
		if strings.Contains(v, "s3cr3t") {
			t.Fatalf("a render that asks for a credential kept (%v)", k)
		}
	}
	if _, ok := c.get(cred, cred.Triggers["op"], "n1"); ok {
		t.Fatal("a render that asks for a credential kept")
	}
}
