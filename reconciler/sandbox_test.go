package reconciler

import (
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

func TestRenderHostileTemplatesFailFast(t *testing.T) {
	tests := []struct {
		name, src, wantErr string
	}{
		{"include of /etc/passwd", `{% include "/etc/passwd" %}`, "include"},
		{"relative include escape", `{% include "../../../../etc/passwd" %}`, "include"},
		{"extends", `{% extends "/etc/passwd" %}`, "extends"},
		{"from import", `{% from "/etc/passwd" import x %}`, "from"},
		{"environment variable", `{{ env.HOME }}`, "env"},
		{"environ", `{{ environ }}`, "environ"},
		{"os module", `{{ os.environ }}`, "os"},
		{"lipsum is gone", `{{ lipsum() }}`, "lipsum"},
		{"random filter is gone", `{{ [1, 2] | random }}`, "random"},
		{"recursive macro", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "macro"},
		{"infinite nested loops over a string", `{% set s = "a" * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}`, "loop iteration budget"},
		{"nested range", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, "budget"},
		{"1 GiB string repetition", `{{ "a" * 1073741824 }}`, "string repetition"},
		{"1 GiB by doubling", `{% set ns = namespace(s="a") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}`, "limit"},
		{"1 GiB by plus", `{% set ns = namespace(s="a") %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`, "limit"},
		{"1 GiB output through a loop", `{% for i in range(100000) %}{{ "a" * 100000 }}{% endfor %}`, "exceeds"},
		{"huge center width", `{{ "a" | center(1073741824) }}`, "limit"},
		{"huge ljust method", `{{ "a".ljust(1073741824) }}`, "limit"},
		{"huge format width", `{{ "%01073741824d" | format(1) }}`, "field widths"},
		{"replace blow-up", `{% set s = "a" * 1000000 %}{{ s | replace("a", s) }}`, "replace result"},
		{"join blow-up", `{% set s = "a" * 1000000 %}{{ [s, s, s] | join("") }}`, "limit"},
		{"credential without a store", `{{ credential_get_or_create("db") }}`, "no credential store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := Render("t", tt.src, map[string]any{})
			if err == nil || !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if len(err.Error()) > maxErrorTextBytes+100 {
				t.Fatalf("error too long: %d bytes", len(err.Error()))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v: not fail-fast", d)
			}
		})
	}
}

func TestRenderKeepsOrdinaryOperators(t *testing.T) {
	out, err := Render("t", `{{ 2 * 3 }} {{ 1.5 * 2 }} {{ "ab" * 2 }} {{ 1 + 2 }} {{ "a" + "b" }} {{ ([1] + [2]) | length }} {{ "x" ~ 1 }} {{ "a" * -1 }}|{{ "a,b".split(",") | join("-") }}`, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "6 3.0 abab 3 ab 2 x1 |a-b"; out != want {
		t.Fatalf("out = %q, want %q", out, want)
	}
}

func TestCredentialsInTemplates(t *testing.T) {
	store := map[string]string{}
	calls := 0
	opts := Options{Credential: func(scope, name string, length int) (string, error) {
		calls++
		k := scope + "|" + name
		if v, ok := store[k]; ok {
			return v, nil
		}
		v := strings.Repeat("s", length)
		store[k] = v
		return v, nil
	}}
	out, err := RenderWith("t", `{{ credential_get_or_create("db") }} {{ credential_get_or_create("api", length=12) }}`, nil, opts, "workspace/a")
	if err != nil {
		t.Fatal(err)
	}
	if out != strings.Repeat("s", 32)+" "+strings.Repeat("s", 12) || calls != 2 {
		t.Fatalf("out = %q, calls = %d", out, calls)
	}
	// Errors from the store name the credential, never a value.
	failing := Options{Credential: func(string, string, int) (string, error) { return "", errors.New("disk full") }}
	_, err = RenderWith("t", `{{ credential_get_or_create("db") }}`, nil, failing, "s")
	if err == nil || !strings.Contains(err.Error(), `"db"`) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
	for _, src := range []string{`{{ credential_get_or_create("") }}`, `{{ credential_get_or_create("../x") }}`, `{{ credential_get_or_create("db", length=4) }}`} {
		if _, err := RenderWith("t", src, nil, opts, "s"); err == nil {
			t.Fatalf("%s: accepted", src)
		}
	}
}

// randomSnapshot builds a snapshot of n nodes and a few triggers from r.
func randomSnapshot(r *rand.Rand, nodes int) *fleetwave.Snapshot {
	snap := testSnapshot()
	snap.Nodes = map[string]*fleetwave.Node{}
	crits := []fleetwave.Criticality{"", "high", "medium", "low"}
	regions := []string{"eu", "us", "ap"}
	for i := range nodes {
		id := fmt.Sprintf("n%03d", r.Intn(nodes*3))
		snap.Nodes[id] = &fleetwave.Node{ID: id, Workspace: []string{"ws-a", "ws-b", ""}[r.Intn(3)], Criticality: crits[r.Intn(4)],
			Labels: map[string]string{"region": regions[r.Intn(3)], "i": fmt.Sprint(i % 5)}, Drain: r.Intn(10) == 0}
	}
	states := []fleetwave.DesiredState{"", "running", "stopped", "absent"}
	snap.Triggers["op"].DesiredState = states[r.Intn(4)]
	snap.Triggers["op2"] = &fleetwave.Trigger{Name: "op2", BlockName: "operator", TargetVersion: "2", DesiredState: states[r.Intn(4)],
		Selector: &fleetwave.Selector{MatchLabels: map[string]string{"region": regions[r.Intn(3)]}}, ManagedBy: "team-b",
		BlockConfigTemplate: "{% for k, v in node.labels.items() %}{{ k }}: {{ v }}\n{% endfor %}"}
	snap.Blocks["operator"].Actions["start"] = fleetwave.BlockAction{Command: "start"}
	snap.Blocks["operator"].Actions["stop"] = fleetwave.BlockAction{Command: "stop"}
	snap.Generations["trigger/op2"] = 1
	return snap
}

// rebuild deep-copies a snapshot through fresh maps filled in a shuffled
// order, so map layout and iteration order differ from the original.
func rebuild(r *rand.Rand, s *fleetwave.Snapshot) *fleetwave.Snapshot {
	c := *s
	c.Nodes = map[string]*fleetwave.Node{}
	ids := s.SortedNodeIDs()
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		n := *s.Nodes[id]
		n.Labels = map[string]string{}
		keys := sortedKeys(s.Nodes[id].Labels)
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys {
			n.Labels[k] = s.Nodes[id].Labels[k]
		}
		c.Nodes[id] = &n
	}
	c.Triggers = map[string]*fleetwave.Trigger{}
	names := sortedKeys(s.Triggers)
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	for _, n := range names {
		c.Triggers[n] = s.Triggers[n]
	}
	return &c
}

func TestPropertyPlanIsAFunctionOfItsInputs(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewSource(seed))
		snap := randomSnapshot(r, 5+r.Intn(40))
		// Observations: a random subset of instances equal to the desired
		// state, the rest missing or different.
		first := PlanSnapshot(snap, nil, now)
		obs := fleetwave.Observations{}
		converged := map[fleetwave.InstanceKey]bool{}
		for _, ro := range first.Rollouts {
			for _, it := range ro.Items {
				if r.Intn(2) == 0 || converged[it.Instance()] {
					continue
				}
				rep := obs[it.Node]
				if rep == nil {
					rep = &fleetwave.Report{Node: it.Node}
					obs[it.Node] = rep
				}
				if len(rep.Instances) > 0 { // two triggers on one block: keep it simple
					continue
				}
				state := it.DesiredState
				if state == fleetwave.StateInstalled || state == "" {
					state = fleetwave.StateRunning
				}
				rep.Instances = append(rep.Instances, fleetwave.InstanceStatus{Block: it.Block, Version: it.TargetVersion,
					ConfigHash: it.ConfigHash, State: state, ManagedBy: it.ManagedBy, Generation: it.Generation})
				converged[it.Instance()] = true
			}
		}
		a := PlanSnapshot(snap, obs, now)
		for range 3 {
			if b := PlanSnapshot(rebuild(r, snap), obs, now); !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d: plan depends on map order", seed)
			}
		}
		counted := map[fleetwave.InstanceKey]int{}
		for _, ro := range a.Rollouts {
			for _, it := range ro.Items {
				if converged[it.Instance()] && snap.Triggers[ro.Source.Object.Name()].DesiredState != fleetwave.StateAbsent {
					// Only an instance wanted identically by every trigger is converged.
					if len(Scope(snap, snap.Triggers["op2"])) == 0 || !inScope(snap, "op2", it.Node) || !inScope(snap, "op", it.Node) {
						t.Fatalf("seed %d: converged instance %s got %s", seed, it.Instance(), it.Action)
					}
				}
				counted[it.Instance()]++
			}
		}
		if len(a.Problems) != 0 {
			t.Fatalf("seed %d: problems %v", seed, a.Problems)
		}
	}
}

func inScope(snap *fleetwave.Snapshot, trigger, node string) bool {
	for _, id := range Scope(snap, snap.Triggers[trigger]) {
		if id == node {
			return true
		}
	}
	return false
}
