package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

func newValidator(t testing.TB) *Validator {
	t.Helper()
	v, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

func TestExampleFleetLoads(t *testing.T) {
	v := newValidator(t)
	snap, err := v.LoadDir(filepath.Join("..", "examples", "fleet"))
	if err != nil {
		t.Fatalf("LoadDir(examples/fleet):\n%v", err)
	}
	if got := len(snap.Nodes); got != 30 {
		t.Errorf("nodes = %d, want 30", got)
	}
	for _, id := range snap.SortedNodeIDs() {
		if !strings.HasPrefix(id, "edge-") {
			t.Errorf("unexpected node id %q", id)
		}
	}
	if got, want := len(snap.Blocks), 4; got != want {
		t.Errorf("blocks = %d, want %d", got, want)
	}
	if got, want := len(snap.Organizations), 3; got != want {
		t.Errorf("organizations = %d, want %d", got, want)
	}
	if got, want := len(snap.Workspaces), 6; got != want {
		t.Errorf("workspaces = %d, want %d", got, want)
	}
	if snap.Generations != nil || snap.Commit != "" {
		t.Errorf("Load must leave Commit and Generations empty, got %q %v", snap.Commit, snap.Generations)
	}
	op := snap.Triggers["operator-rollout"]
	if op == nil {
		t.Fatal("trigger operator-rollout missing")
	}
	if op.MaxConcurrent != 3 || op.TargetVersion != "1.4.0" || len(op.Nodes) != 12 || op.DesiredState != fleetwave.StateInstalled {
		t.Errorf("operator-rollout decoded as %+v", op)
	}
	if !strings.Contains(op.BlockConfigTemplate, "{{ node.labels.region }}") {
		t.Errorf("template lost: %q", op.BlockConfigTemplate)
	}
	lb := snap.Triggers["loadbalancer-edge"]
	if lb.TriggerType != fleetwave.TriggerReconciliation || lb.ActionName != "upgrade" || lb.Owner(snap.Blocks[lb.BlockName]) != "network-team" {
		t.Errorf("trigger defaults not applied: %+v", lb)
	}
	if lb.Selector == nil || len(lb.Selector.MatchExpressions) != 1 || lb.Selector.MatchExpressions[0].Operator != "in" {
		t.Errorf("selector decoded as %+v", lb.Selector)
	}
	bk := snap.Triggers["controlplane-backup"]
	if bk.TriggerType != fleetwave.TriggerSchedule || bk.CronExpression != "0 3 * * *" || bk.Timezone != "Europe/Berlin" {
		t.Errorf("schedule trigger decoded as %+v", bk)
	}
	if got := snap.Blocks["operator"].Actions["install"].Timeout; got != 2*time.Minute {
		t.Errorf("operator install timeout = %v, want 2m", got)
	}
	if got := snap.Blocks["operator"].Actions["upgrade"]; got.Timeout != DefaultActionTimeout || got.TimeoutText != "5m" {
		t.Errorf("operator upgrade timeout = %v %q, want the 5m default", got.Timeout, got.TimeoutText)
	}
	if !snap.Blocks["operator"].Actions["rollback"].OneShot {
		t.Error("rollback should be one_shot")
	}
	cfg := snap.Config
	if cfg.Name != "fleetwave" || cfg.MaxConcurrent != 4 || cfg.Backoff != 5*time.Second || cfg.ReconcileMode != "enforce" {
		t.Errorf("config decoded as %+v", cfg)
	}
	if w := cfg.MaintenanceWindows["nightly"]; w.Duration != 2*time.Hour || w.Timezone != "Europe/Berlin" {
		t.Errorf("nightly window decoded as %+v", w)
	}
	n4 := snap.Nodes["edge-04"]
	if n4.ID != "edge-04" || n4.Labels["region"] != "us-east" || n4.Labels["fleetwave.io/agent-channel"] != "stable" || n4.Criticality != "" {
		t.Errorf("edge-04 decoded as %+v", n4)
	}
	if got := snap.Nodes["edge-03"].Criticality; got != fleetwave.CriticalityLow {
		t.Errorf("edge-03 criticality = %q, want low", got)
	}
	if got := snap.Workspaces["globex-prod"].Criticality; got != "" {
		t.Errorf("workspace criticality must stay empty (inherit), got %q", got)
	}
	oi := snap.Triggers["operator-initech"]
	if oi == nil || len(oi.TargetOrganizations) != 1 || oi.Selector.MatchExpressions[0].Operator != "notin" || oi.MaxConcurrentPercent != 34 || oi.MaintenanceWindow != "hourly" {
		t.Errorf("operator-initech decoded as %+v", oi)
	}
	sb := snap.Triggers["loadbalancer-standby"]
	if sb == nil || sb.DesiredState != fleetwave.StateStopped || !sb.AutoTakeover || sb.Selector.MatchExpressions[0].Operator != "exists" {
		t.Errorf("loadbalancer-standby decoded as %+v", sb)
	}
	if r := snap.Rollouts["restart-frontends"]; r == nil || r.Selector.Empty() || r.ActionName != "restart" {
		t.Errorf("rollout request decoded as %+v", r)
	}
	obj, ok := snap.Objects["node/edge-09"]
	if !ok || obj.Path != "nodes/edge-09.json" || len(obj.Hash) != 64 {
		t.Errorf("Objects[node/edge-09] = %+v", obj)
	}
	if got, want := len(snap.Objects), 1+7+4+30+3+6+1; got != want {
		t.Errorf("objects = %d, want %d", got, want)
	}
}

func TestExampleSystemBRCMatchesScaffold(t *testing.T) {
	for _, p := range []string{"brc/fleetwave-agent.cue", "blocks/fleetwave-agent.cue"} {
		ex, err := os.ReadFile(filepath.Join("..", "examples", "fleet", filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		sc, err := scaffoldFS.ReadFile("scaffold/" + p)
		if err != nil {
			t.Fatal(err)
		}
		if string(ex) != string(sc) {
			t.Errorf("examples/fleet/%s differs from the scaffold's copy", p)
		}
	}
}
