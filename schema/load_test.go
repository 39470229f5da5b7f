package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// baseTree is a small valid tree; each broken case changes a few files.
func baseTree() map[string][]byte {
	return map[string][]byte{
		"fleetwave.yaml":  []byte("kind: config\nname: fleetwave\nmaintenance_windows:\n  nightly:\n    cron: \"0 2 * * *\"\n    duration: 2h\n"),
		"blocks/web.yaml": []byte("kind: block\nname: web\nactions:\n  install:\n    command: echo install\n  upgrade:\n    command: echo upgrade\n    timeout: 30s\n"),
		"brc/web.yaml":    []byte("kind: trigger\nname: web\nblock_name: web\ntarget_version: \"1.0\"\n"),
		"nodes/n1.yaml":   []byte("kind: node\nname: n1\nlabels:\n  env: prod\n"),
		"nodes/n2.cue":    []byte("kind: \"node\"\nname: \"n2\"\nworkspace: \"ws\"\n"),
		"README.md":       []byte("# not an object\n"),
		"status/x.yaml":   []byte("not: [valid\n"),
	}
}

func with(changes map[string]string) map[string][]byte {
	t := baseTree()
	for p, c := range changes {
		if c == "" {
			delete(t, p)
			continue
		}
		t[p] = []byte(c)
	}
	return t
}

func errorLines(err error) ([]string, error) {
	var verr *fleetwave.ValidationError
	if !errors.As(err, &verr) {
		return nil, fmt.Errorf("error %v (%T) is not a *fleetwave.ValidationError", err, err)
	}
	lines := make([]string, len(verr.Errors))
	for i, fe := range verr.Errors {
		lines[i] = fe.Error()
	}
	return lines, nil
}

func TestBaseTreeIsValid(t *testing.T) {
	snap, err := newValidator(t).Load(baseTree())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(snap.Objects) != 5 {
		t.Errorf("objects = %d, want 5 (README.md and status/ ignored)", len(snap.Objects))
	}
	if snap.Config.MaxConcurrent != 10 || snap.Config.MaxRetries != 3 || snap.Config.BackoffText != "10s" ||
		snap.Config.ReconcileMode != "enforce" || snap.Config.FailureThresholdPercent != 100 || len(snap.Config.PriorityOrder) != 3 {
		t.Errorf("config defaults not applied: %+v", snap.Config)
	}
	if got := snap.Blocks["web"].Actions["upgrade"].TimeoutText; got != "30s" {
		t.Errorf("an explicit timeout must win over the default, got %q", got)
	}
}

func TestBrokenTrees(t *testing.T) {
	cases := []struct {
		name    string
		changes map[string]string
		want    []string
	}{
		{"a YAML syntax error names its line", map[string]string{"nodes/n1.yaml": "kind: node\nname: n1\nlabels: [a\n"}, []string{"nodes/n1.yaml:2: invalid YAML: did not find expected ',' or ']'"}},
		{"a JSON syntax error names its line and column", map[string]string{"nodes/n3.json": "{\n  \"kind\": \"node\",\n  \"name\": \"n3\"\n  \"labels\": {}\n}\n"}, []string{"nodes/n3.json:4:3: invalid JSON: invalid character '\"' after object key:value pair"}},
		{"a CUE syntax error names its line and column", map[string]string{"nodes/n2.cue": "kind: \"node\"\nname: \"n2\n"}, []string{"nodes/n2.cue:2:7: invalid CUE: string literal not terminated"}},
		{"a kind that does not match the folder is refused", map[string]string{"brc/web.yaml": "kind: block\nname: web\nactions: {install: {command: x}}\n"}, []string{"brc/web.yaml:1:1: kind: found \"block\", expected \"trigger\" (the kind of files in brc/)"}},
		{"a missing kind is reported", map[string]string{"nodes/n1.yaml": "name: n1\n"}, []string{"nodes/n1.yaml:1:1: kind: required field is missing, expected \"node\" (the kind of files in nodes/)"}},
		{"the name must equal the file name stem", map[string]string{"nodes/n1.yaml": "kind: node\nname: n9\n"}, []string{"nodes/n1.yaml:2:1: name: found \"n9\", expected \"n1\" (the file name without its extension)"}},
		{"names must be DNS-label-like", map[string]string{"nodes/N_1.yaml": "kind: node\nname: N_1\n"}, []string{"nodes/N_1.yaml:2:7: name: invalid value \"N_1\" (out of bound =~\"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$\")"}},
		{"unknown fields are refused", map[string]string{"nodes/n1.yaml": "kind: node\nname: n1\ncolour: blue\n"}, []string{"nodes/n1.yaml:3:1: colour: field not allowed"}},
		{"a criticality outside high, medium, low is refused", map[string]string{"nodes/n1.yaml": "kind: node\nname: n1\ncriticality: urgent\n"}, []string{"nodes/n1.yaml:3:14: criticality: invalid value \"urgent\", expected one of \"high\", \"low\", \"medium\""}},
		{"label keys and values are checked", map[string]string{"nodes/n1.yaml": "kind: node\nname: n1\nlabels:\n  -bad: x\n  ok: \"\"\n  example.com/team: a\n"}, []string{"nodes/n1.yaml:4:3: labels.-bad: invalid label key \"-bad\", expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit (optionally prefixed by \"example.com/\")", "nodes/n1.yaml:5:3: labels.ok: invalid label value \"\", expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit"}},
		{"at most 16 labels per node", map[string]string{"nodes/n1.yaml": "kind: node\nname: n1\nlabels: {a: x, b: x, c: x, d: x, e: x, f: x, g: x, h: x, i: x, j: x, k: x, l: x, m: x, n: x, o: x, p: x, q: x}\n"}, []string{"nodes/n1.yaml:3:1: labels: found 17 labels, expected at most 16"}},
		{"max_concurrent must be at least 1 and percents within 0..100", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: web\nmax_concurrent: 0\nfailure_threshold_percent: 150\n"}, []string{"brc/web.yaml:4:17: max_concurrent: invalid value 0 (out of bound >=1)", "brc/web.yaml:5:28: failure_threshold_percent: invalid value 150 (out of bound <=100)"}},
		{"durations must parse", map[string]string{"blocks/web.yaml": "kind: block\nname: web\nactions:\n  install:\n    command: echo\n    timeout: 5 minutes\n  upgrade:\n    command: echo\n"}, []string{"blocks/web.yaml:6:5: actions.install.timeout: invalid duration \"5 minutes\", expected a Go duration such as \"90s\" or \"5m\""}},
		{"a schedule trigger needs a valid cron expression and time zone", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: web\ntrigger_type: schedule\naction_name: install\ncron_expression: \"61 * * * *\"\ntimezone: Mars/Olympus\n"}, []string{"brc/web.yaml:6:1: cron_expression: invalid cron expression \"61 * * * *\" (end of range (61) above maximum (59): 61), expected 5 fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily", "brc/web.yaml:7:1: timezone: unknown time zone \"Mars/Olympus\", expected an IANA name such as \"UTC\" or \"Europe/Berlin\""}},
		{"a schedule trigger without cron_expression is refused", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: web\ntrigger_type: schedule\naction_name: install\n"}, []string{"brc/web.yaml:1:1: cron_expression: required field is missing (trigger_type is schedule)"}},
		{"selector operators are checked", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: web\nselector:\n  match_expressions:\n    - key: env\n      operator: equals\n      values: [prod]\n"}, []string{"brc/web.yaml:7:17: selector.match_expressions[0].operator: invalid value \"equals\", expected one of \"doesnotexist\", \"exists\", \"in\", \"notin\""}},
		{"an oversized file is refused", map[string]string{"nodes/n3.yaml": "kind: node\nname: n3\n#" + strings.Repeat("x", 1<<20) + "\n"}, []string{"nodes/n3.yaml: file is 1048598 bytes, expected at most 1048576"}},
		{"the same object in two files is a duplicate", map[string]string{"nodes/n1.cue": "kind: \"node\"\nname: \"n1\"\n"}, []string{"nodes/n1.yaml:1:1: duplicate object node/n1: already defined in nodes/n1.cue (one file per object)"}},
		{"a missing config is reported", map[string]string{"fleetwave.yaml": ""}, []string{"fleetwave.cue: missing the kind:config object, expected fleetwave.cue, fleetwave.yaml or fleetwave.json at the repository root"}},
		{"a trigger must name an existing block", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: api\n"}, []string{"brc/web.yaml:3:1: block_name: block \"api\" does not exist, expected a definition blocks/api"}},
		{"a trigger's action must exist in its block", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: web\naction_name: apply\n"}, []string{"brc/web.yaml:4:1: action_name: block \"web\" has no action \"apply\" (run when the version or config differs; action_name defaults to upgrade), expected one of [install upgrade]"}},
		{"desired_state absent needs an uninstall action", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: web\ndesired_state: absent\n"}, []string{"brc/web.yaml:4:1: desired_state: block \"web\" has no action \"uninstall\" (needed for desired_state absent), expected one of [install upgrade]"}},
		{"trigger nodes and targets must exist", map[string]string{"brc/web.yaml": "kind: trigger\nname: web\nblock_name: web\nnodes: [n1, n7]\ntarget_organizations: [acme]\ntarget_workspaces: [ws, other]\nmaintenance_window: weekend\n"}, []string{"brc/web.yaml:4:13: nodes[1]: node \"n7\" does not exist, expected a record nodes/n7", "brc/web.yaml:5:24: target_organizations[0]: organization \"acme\" is not defined, expected a record organizations/acme or a node or workspace in it", "brc/web.yaml:6:25: target_workspaces[1]: workspace \"other\" is not defined, expected a record workspaces/other or a node in it", "brc/web.yaml:7:1: maintenance_window: maintenance window \"weekend\" is not defined, expected one of the maintenance_windows of fleetwave.yaml"}},
		{"node maintenance windows must be defined in the config", map[string]string{"nodes/n2.cue": "kind: \"node\"\nname: \"n2\"\nmaintenance_windows: [\"nightly\", \"sunday\"]\n"}, []string{"nodes/n2.cue:3:34: maintenance_windows[1]: maintenance window \"sunday\" is not defined, expected one of the maintenance_windows of fleetwave.yaml"}},
		{"rollouts and approvals must reference an existing trigger and nodes", map[string]string{
			"rollouts/r1.yaml":  "kind: rollout\nname: r1\nbrc: api\nnodes: [n1, n9]\n",
			"approvals/a1.json": "{\"kind\": \"approval\", \"name\": \"a1\", \"brc\": \"web\", \"target_version\": \"2.0\", \"nodes\": [\"n5\"]}",
		}, []string{"approvals/a1.json:1:85: nodes[0]: node \"n5\" does not exist, expected a record nodes/n5", "rollouts/r1.yaml:3:1: brc: trigger \"api\" does not exist, expected a BRC brc/api", "rollouts/r1.yaml:4:13: nodes[1]: node \"n9\" does not exist, expected a record nodes/n9"}},
		{"CUE object files must be plain data", map[string]string{"nodes/n2.cue": "import \"strings\"\nkind: \"node\"\nname: strings.ToLower(\"N2\")\nlabels: {for x in [1] {a: \"b\"}}\n"}, []string{"nodes/n2.cue:1:1: found an import, expected plain data (fields, structs, lists, literals)", "nodes/n2.cue:3:7: found an expression, expected plain data (fields, structs, lists, literals)", "nodes/n2.cue:4:10: found a comprehension, expected plain data (fields, structs, lists, literals)"}},
		{"a YAML file with two documents is refused", map[string]string{"nodes/n1.yaml": "kind: node\nname: n1\n---\nkind: node\nname: n1\n"}, []string{"nodes/n1.yaml: found 2 YAML documents, expected one object (a mapping with kind and name)"}},
		{"a reference to an invalid object is not reported twice", map[string]string{"blocks/web.yaml": "kind: block\nname: web\n"}, []string{"blocks/web.yaml:1:1: actions: required field is missing"}},
	}
	v := newValidator(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := v.Load(with(tc.changes))
			if snap != nil {
				t.Errorf("Load returned a snapshot for a broken tree")
			}
			got, lerr := errorLines(err)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
