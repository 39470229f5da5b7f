package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// renderBackstop only keeps a sandbox bug (a render that never returns)
// from hanging the test run: it is generous and measures nothing. The
// bounds themselves are counted (iterations, bytes), never timed.
const renderBackstop = 5 * time.Minute

// renderOrHang renders src, failing the test if the render has not
// returned after renderBackstop.
func renderOrHang(t *testing.T, src string) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := Render("t", src, map[string]any{})
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(renderBackstop):
		t.Fatalf("the render did not return within %v: a bound of the sandbox is missing", renderBackstop)
		return "", nil
	}
}

// TestRenderHostileTemplatesAreBounded renders templates that try to read
// files or the environment, recurse, loop, or build huge values, and
// checks that each one ends with the error of the mechanism that bounds
// it: a parse refusal, ErrTemplateBudget (loop iterations or range()
// elements, counted) or ErrTemplateSize (bytes, checked before anything
// is allocated). It asserts no duration: the same template hits the same
// bound after the same number of steps on any machine.
func TestRenderHostileTemplatesAreBounded(t *testing.T) {
	tests := []struct {
		name, src, wantErr string
		kind               error // nil: refused, but by no bound
	}{
		{"include of /etc/passwd", `{% include "/etc/passwd" %}`, "include", nil},
		{"relative include escape", `{% include "../../../../etc/passwd" %}`, "include", nil},
		{"extends", `{% extends "/etc/passwd" %}`, "extends", nil},
		{"from import", `{% from "/etc/passwd" import x %}`, "from", nil},
		{"environment variable", `{{ env.HOME }}`, "env", nil},
		{"environ", `{{ environ }}`, "environ", nil},
		{"os module", `{{ os.environ }}`, "os", nil},
		{"lipsum is gone", `{{ lipsum() }}`, "lipsum", nil},
		{"random filter is gone", `{{ [1, 2] | random }}`, "random", nil},
		{"recursive macro", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "macro", nil},
		{"infinite nested loops over a string", `{% set s = "a" * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}`,
			fmt.Sprintf("line 1 col 50: loop iteration budget of %d exceeded", MaxLoopIterations), ErrTemplateBudget},
		{"nested range", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`,
			fmt.Sprintf("range() iteration budget of %d exceeded", MaxRangeBudget), ErrTemplateBudget},
		{"one huge range", `{% for i in range(1000000000) %}{% endfor %}`, "range() iteration budget", ErrTemplateBudget},
		{"1 GiB string repetition", `{{ "a" * 1073741824 }}`, "line 1 col 8: string repetition would be 1073741824 bytes", ErrTemplateSize},
		{"1 GiB string repetition, count first", `{{ 1073741824 * "a" }}`, "string repetition", ErrTemplateSize},
		{"list repetition", `{{ [0] * 100000000 }}`, "line 1 col 8: list repetition would be 100000000 bytes, limit 1048576", ErrTemplateSize},
		{"nested list repetition", `{{ [[0] * 1000] * 2000 }}`, "list repetition would be 2002000 bytes", ErrTemplateSize},
		{"1 GiB by doubling", `{% set ns = namespace(s="a") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}`, "limit", ErrTemplateSize},
		{"1 GiB by plus", `{% set ns = namespace(s="a") %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`, "limit", ErrTemplateSize},
		{"a list doubled by nesting", `{% set ns = namespace(l=[0]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}`, "list would be", ErrTemplateSize},
		{"a dict doubled by nesting", `{% set ns = namespace(d={}) %}{% for i in range(40) %}{% set ns.d = {"a": ns.d, "b": ns.d} %}{% endfor %}{{ ns.d }}`, "dict would be", ErrTemplateSize},
		{"a list doubled by concatenation", `{% set ns = namespace(l=[0]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, "list would be", ErrTemplateSize},
		{"1 GiB output through a loop", `{% for i in range(100000) %}{{ "a" * 100000 }}{% endfor %}`, "rendered output exceeds", ErrTemplateSize},
		{"huge center width", `{{ "a" | center(1073741824) }}`, "limit", ErrTemplateSize},
		{"huge ljust method", `{{ "a".ljust(1073741824) }}`, "limit", ErrTemplateSize},
		{"huge format width", `{{ "%01073741824d" | format(1) }}`, "field widths", ErrTemplateSize},
		{"replace blow-up", `{% set s = "a" * 1000000 %}{{ s | replace("a", s) }}`, "replace result", ErrTemplateSize},
		{"join blow-up", `{% set s = "a" * 1000000 %}{{ [s, s, s] | join("") }}`, "limit", ErrTemplateSize},
		{"credential without a store", `{{ credential_get_or_create("db") }}`, "no credential store", nil},
		// work: each step is cheap in iterations but processes up to 1 MiB
		{"upper() of a 1 MiB string in a loop", `{% set s = "a" * 1000000 %}{% for i in range(1000) %}{% if s.upper() %}{% endif %}{% endfor %}`,
			fmt.Sprintf("work budget of %d exceeded (method upper", MaxRenderWork), ErrTemplateBudget},
		{"concatenation of a 1 MiB string in a loop", `{% set s = "a" * 1000000 %}{% for i in range(1000) %}{% if s ~ "x" %}{% endif %}{% endfor %}`,
			"line 1 col 62: work budget of 67108864 exceeded (operator ~", ErrTemplateBudget},
		{"filter of a 1 MiB string in a loop", `{% set s = "a" * 1000000 %}{% for i in range(1000) %}{% if s|length %}{% endif %}{% endfor %}`,
			"(filter length", ErrTemplateBudget},
		{"test of a 1 MiB string in a loop", `{% set s = "a" * 1000000 %}{% for i in range(1000) %}{% if s is upper %}{% endif %}{% endfor %}`,
			"(test upper", ErrTemplateBudget},
		{"in on a 1 MiB string in a loop", `{% set s = "a" * 1000000 %}{% for i in range(100000) %}{% if "b" in s %}{% endif %}{% endfor %}`,
			"work budget", ErrTemplateBudget},
		{"comparison of a 1 MiB string in a loop", `{% set s = "a" * 1000000 %}{% for i in range(100000) %}{% if s < s %}{% endif %}{% endfor %}`,
			"(operand", ErrTemplateBudget},
		{"slice of a 1 MiB string in a loop", `{% set s = "a" * 1000000 %}{% for i in range(1000) %}{% if s[1:2] %}{% endif %}{% endfor %}`,
			"line 1 col 61: work budget", ErrTemplateBudget},
		{"a 1 MiB string's characters per loop", `{% set s = "a" * 1000000 %}{% for i in range(1000) %}{% for c in s %}{% break %}{% endfor %}{% endfor %}`,
			"line 1 col 61: work budget of 67108864 exceeded (for-loop items", ErrTemplateBudget},
		{"sort of a 1 MiB string", `{% set s = "ab" * 524288 %}{{ s|sort|length }}`, "(filter sort", ErrTemplateBudget},
		{"loop.changed of a large list", `{% set l = range(90000)|list %}{% for a in range(3000) %}{% if loop.changed(l) %}{% endif %}{% endfor %}`,
			"work budget", ErrTemplateBudget},
		{"a large loop body", `{% for i in range(10000) %}` + strings.Repeat(`{% if i %}{% endif %}`, 1000) + `{% endfor %}`,
			"line 1 col 8: work budget of 67108864 exceeded (for-loop body", ErrTemplateBudget},
		{"lookups in a dict literal", `{% set d = {` + dictPairs(4000) + `} %}{% for i in range(100) %}{% for j in range(1000) %}{% if d["k3999"] %}{% endif %}{% endfor %}{% endfor %}`,
			"(for-loop body", ErrTemplateBudget},
		{"a list built by concatenation in a loop", `{% set ns = namespace(l=[]) %}{% for i in range(30000) %}{% set ns.l = ns.l + [i] %}{% endfor %}`,
			"(operator +", ErrTemplateBudget},
		{"1 GiB captured by a set block", `{% set s = "a" * 1000000 %}{% set x %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endset %}{{ x|length }}`,
			"line 1 col 35: set block exceeds 1048576 bytes", ErrTemplateSize},
		{"1 GiB captured by a filter block", `{% set s = "a" * 1000000 %}{% filter upper %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endfilter %}`,
			"line 1 col 38: filter block exceeds 1048576 bytes", ErrTemplateSize},
		{"recursive loop", `{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}`, "recursive for-loops are not supported", nil},
		{"shadowing the sandbox's budget", `{% set fw:budget = 1 %}`, "parse error", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := renderOrHang(t, tt.src)
			if err == nil || !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			for _, kind := range []error{ErrTemplateBudget, ErrTemplateSize} {
				if got, want := errors.Is(err, kind), kind == tt.kind; got != want {
					t.Fatalf("err = %v: errors.Is(err, %v) = %v, want %v", err, kind, got, want)
				}
			}
			if len(err.Error()) > maxErrorTextBytes+100 {
				t.Fatalf("error too long: %d bytes", len(err.Error()))
			}
		})
	}
}

// dictPairs returns n pairs "k0": 0, "k1": 1, ... of a dict literal.
func dictPairs(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	return b.String()
}

// TestRangeNeverOverflows: range() counts its elements without overflow
// and charges them before building the list; near the ends of int its
// loop variable once wrapped around and built ~2^64/step elements (the
// FuzzTemplate corpus holds these too). Results are Python's.
func TestRangeNeverOverflows(t *testing.T) {
	tests := []struct{ src, want, wantErr string }{
		{`{{ range(9223372036854775797, 9223372036854775807, 20)|length }}`, "1", ""},
		{`{{ range(9223372036854775797, 9223372036854775806, 20)|length }}`, "1", ""},
		{`{{ range(-9223372036854775798, -9223372036854775807, -20)|length }}`, "1", ""},
		{`{{ range(9223372036854775797, 9223372036854775807, 20) }}`, "[9223372036854775797]", ""},
		{`{{ range(-9223372036854775798, -9223372036854775807, -20) }}`, "[-9223372036854775798]", ""},
		{`{{ range(9223372036854775800, 9223372036854775807, 3) }}`, "[9223372036854775800, 9223372036854775803, 9223372036854775806]", ""},
		{`{{ range(9223372036854775807, -9223372036854775807 - 1, -9223372036854775807 - 1) }}`, "[9223372036854775807, -1]", ""},
		{`{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807) }}`, "[-9223372036854775808, -1, 9223372036854775806]", ""},
		{`{{ range(0, 10, 3) }} {{ range(10, 0, -3) }} {{ range(3) }} {{ range(2, 2) }} {{ range(3, 0) }} {{ range(0, 3, -1) }}`,
			"[0, 3, 6, 9] [10, 7, 4, 1] [0, 1, 2] [] [] []", ""},
		// 2^64/3 elements: refused before anything is built
		{`{{ range(-9223372036854775807, 9223372036854775807, 3)|length }}`, "", "range() iteration budget of 100000 exceeded"},
		{`{{ range(-9223372036854775807 - 1, 9223372036854775807)|length }}`, "", "range() iteration budget of 100000 exceeded"},
		{`{{ range(100000)|length }}{{ range(1)|length }}`, "", "range() iteration budget of 100000 exceeded"},
		{`{{ range(1, 2, 0) }}`, "", "step must not be 0"},
	}
	for _, tt := range tests {
		out, err := renderOrHang(t, tt.src)
		if tt.wantErr == "" {
			if err != nil || out != tt.want {
				t.Errorf("%s = %q, %v; want %q", tt.src, out, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want one containing %q", tt.src, err, tt.wantErr)
		}
		if strings.Contains(tt.wantErr, "budget") && !errors.Is(err, ErrTemplateBudget) {
			t.Errorf("%s: err = %v, want ErrTemplateBudget", tt.src, err)
		}
	}
}

// TestOrdinaryTemplatesUseLittleWork renders the templates of the golden
// cases and typical config templates on every node of their snapshots:
// each render uses less than a thousandth of MaxRenderWork, so the work
// allowance stops only templates that process megabytes per step.
func TestOrdinaryTemplatesUseLittleWork(t *testing.T) {
	typical := []string{
		"node: {{ node.id }}\nregion: {{ node.labels.region | default('none') }}\nworkspace: {{ node.workspace }}\n" +
			"{% for k, v in node.labels.items() %}label_{{ k }}: {{ v | tojson }}\n{% endfor %}" +
			"backup: {{ backup_schedule_cron(node.workspace) | tojson }}\nversion: {{ brc.target_version }}\n",
		"{% set ns = namespace(peers=[]) %}{% for i in range(16) %}{% set ns.peers = ns.peers + [node.id ~ '-' ~ i] %}{% endfor %}" +
			"peers: {{ ns.peers | join(',') }}\nreplicas: {% if node.criticality == 'high' %}3{% else %}1{% endif %}\n" +
			"{% set ports = {'http': 80, 'https': 443, 'metrics': 9090} %}{% for name, port in ports.items() %}{{ name | upper }}: {{ port }}\n{% endfor %}" +
			"name: {{ (node.id ~ '.' ~ workspace.name) | lower | replace('_', '-') | truncate(63) }}\n" +
			"{% for c in node.capabilities | sort %}{% if c is string and c.startswith('gpu') %}gpu: true\n{% endif %}{% endfor %}",
	}
	dirs, err := filepath.Glob(filepath.Join("testdata", "*", "snapshot.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden snapshots: %v", err)
	}
	rendered := 0
	for _, path := range dirs {
		snap := loadSnapshot(t, path)
		r := newRenderer(Options{Credential: fakeCredential})
		for _, tn := range slices.Sorted(maps.Keys(snap.Triggers)) {
			tr := snap.Triggers[tn]
			b := snap.Blocks[tr.BlockName]
			if b == nil {
				continue
			}
			for _, src := range append([]string{tr.BlockConfigTemplate}, typical...) {
				if src == "" {
					continue
				}
				for _, id := range snap.SortedNodeIDs() {
					n := snap.Nodes[id]
					if _, err := r.render(tn, src, TemplateVars(snap, n, b, tr), CredentialScope(n)); err != nil {
						t.Fatalf("%s, trigger %s, node %s: %v", path, tn, id, err)
					}
					if r.lastWork <= 0 || r.lastWork > MaxRenderWork/1000 {
						t.Fatalf("%s, trigger %s, node %s: the render used %d units of work, expected 1 to %d", path, tn, id, r.lastWork, MaxRenderWork/1000)
					}
					rendered++
				}
			}
		}
	}
	if rendered < 50 {
		t.Fatalf("only %d renders", rendered)
	}
}

// TestOperatorsOnListsAndDicts checks the operators against what Jinja2
// renders, or the error it raises (as a clear error with the operator's
// position in the template).
func TestOperatorsOnListsAndDicts(t *testing.T) {
	vars := map[string]any{"l": []any{1, 2}, "d": map[string]any{"a": 1}, "n": map[string]any{"replicas": "3"}}
	tests := []struct{ src, want, wantErr string }{
		{`{{ [0] * 3 }}`, "[0, 0, 0]", ""},
		{`{{ 3 * [0] }}`, "[0, 0, 0]", ""},
		{`{{ [1, "a"] * 2 }}`, "[1, 'a', 1, 'a']", ""},
		{`{{ l * 2 }}|{{ (l * 2) | length }}`, "[1, 2, 1, 2]|4", ""},
		{`{{ [0] * 0 }}{{ [0] * -2 }}`, "[][]", ""},
		{`{{ [0] * true }}`, "[0]", ""},
		{`{{ "ab" * 3 }}|{{ 3 * "ab" }}|{{ "ab" * 0 }}|`, "ababab|ababab||", ""},
		{`{{ [1] + [2, 3] }}`, "[1, 2, 3]", ""},
		{`{{ true * 3 }} {{ true + 1 }}`, "3 2", ""},
		{`{{ n.replicas * 2 }} {{ n.replicas - 1 }}`, "33 2", ""}, // label values are strings
		{`{{ 7 - 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 2 }} {{ 2 ** 3 }} {{ 1.5 * 2 }}`, "5 3.5 3 1 8.0 3.0", ""},
		{`{{ [1] * 2.0 }}`, "", "line 1 col 8: can't multiply sequence (list) by non-int of type 'float'"},
		{`{{ [1] * [2] }}`, "", "line 1 col 8: can't multiply sequence (list) by non-int of type 'list'"},
		{`{{ "a" * "b" }}`, "", "line 1 col 8: can't multiply sequence (str) by non-int of type 'str'"},
		{"x\n  {{ d * 2 }}", "", "line 2 col 8: unsupported operand types for *: 'dict' and 'int'"},
		{`{{ d + d }}`, "", "line 1 col 6: unsupported operand types for +: 'dict' and 'dict'"},
		{`{{ l + 1 }}`, "", "line 1 col 6: can only concatenate list (not 'int') to list"},
		{`{{ 1 + l }}`, "", "line 1 col 6: can only concatenate list (not 'int') to list"},
		{`{{ l - [1] }}`, "", "line 1 col 6: unsupported operand types for -: 'list' and 'list'"},
		{`{{ l / 2 }}`, "", "unsupported operand types for /: 'list' and 'int'"},
		{`{{ l // 2 }}`, "", "unsupported operand types for //: 'list' and 'int'"},
		{`{{ l % 2 }}`, "", "unsupported operand types for %: 'list' and 'int'"},
		{`{{ d ** 2 }}`, "", "unsupported operand types for **: 'dict' and 'int'"},
		{`{{ 1 / 0 }}`, "", "line 1 col 6: division by zero"},
		{`{{ 1 % 0 }}`, "", "division by zero"},
		{`{{ "%s" % 3 }}`, "", "string formatting with % is not supported, use the format filter"},
		// an error value gonja would carry on with still fails the render
		{`{{ (l * 2.5) is defined }}`, "", "can't multiply sequence (list) by non-int of type 'float'"},
	}
	for _, tt := range tests {
		out, err := Render("t", tt.src, vars)
		if tt.wantErr == "" {
			if err != nil || out != tt.want {
				t.Errorf("%s = %q, %v; want %q", tt.src, out, err, tt.want)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want one containing %q", tt.src, err, tt.wantErr)
		}
	}
}

// TestScopeFollowsEveryFilter: a trigger's scope (fleetwave.Snapshot.Scope,
// which the schema's owner check uses too) is every node that passes each
// filter the trigger sets, checked node by node against the filters'
// definitions on random fleets.
func TestScopeFollowsEveryFilter(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewSource(seed))
		snap := randomSnapshot(r, 5+r.Intn(40))
		snap.Workspaces["ws-b"] = &fleetwave.Workspace{Name: "ws-b", Organization: "acme"}
		for _, id := range snap.SortedNodeIDs() {
			if r.Intn(3) == 0 {
				snap.Nodes[id].Organization = []string{"acme", "globex"}[r.Intn(2)]
			}
		}
		snap.Triggers["org"] = &fleetwave.Trigger{Name: "org", BlockName: "operator", TargetOrganizations: []string{"acme"}}
		snap.Triggers["ws"] = &fleetwave.Trigger{Name: "ws", BlockName: "operator", TargetWorkspaces: []string{"ws-a"},
			Nodes: []string{"n001", "n002", "n003", "n004", "n005", "n006"}}
		// listed out of order, twice, and with ids of no node
		listed := []string{"n-none", "zz"}
		for _, id := range snap.SortedNodeIDs() {
			if r.Intn(4) == 0 {
				listed = append(listed, id, id)
			}
		}
		r.Shuffle(len(listed), func(i, j int) { listed[i], listed[j] = listed[j], listed[i] })
		snap.Triggers["listed"] = &fleetwave.Trigger{Name: "listed", BlockName: "operator", Nodes: listed}
		if seed%2 == 0 {
			snap.NodeIDs = slices.Sorted(maps.Keys(snap.Nodes)) // as the loader sets them
		}
		for _, name := range slices.Sorted(maps.Keys(snap.Triggers)) {
			tr := snap.Triggers[name]
			var want []string
			for _, id := range slices.Sorted(maps.Keys(snap.Nodes)) {
				n := snap.Nodes[id]
				org := n.Organization
				if org == "" && snap.Workspaces[n.Workspace] != nil {
					org = snap.Workspaces[n.Workspace].Organization
				}
				if (len(tr.Nodes) == 0 || slices.Contains(tr.Nodes, id)) &&
					(len(tr.TargetOrganizations) == 0 || slices.Contains(tr.TargetOrganizations, org)) &&
					(len(tr.TargetWorkspaces) == 0 || slices.Contains(tr.TargetWorkspaces, n.Workspace)) &&
					(tr.Selector.Empty() || tr.Selector.Matches(n.Labels)) {
					want = append(want, id)
				}
			}
			if got := Scope(snap, tr); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, trigger %s: Scope = %v, want %v", seed, name, got, want)
			}
		}
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
		keys := slices.Sorted(maps.Keys(s.Nodes[id].Labels))
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys {
			n.Labels[k] = s.Nodes[id].Labels[k]
		}
		c.Nodes[id] = &n
	}
	c.Triggers = map[string]*fleetwave.Trigger{}
	names := slices.Sorted(maps.Keys(s.Triggers))
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
