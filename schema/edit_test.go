package schema

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// loadNode loads baseTree with the node file at p and returns the node, so
// an edited file is checked as the hub checks a commit: the whole tree.
func loadNode(t *testing.T, v *Validator, p string, data []byte) *fleetwave.Node {
	t.Helper()
	tree := baseTree()
	tree[p] = data
	snap, err := v.Load(tree)
	if err != nil {
		t.Fatalf("the tree with %s does not load: %v\n%s", p, err, data)
	}
	key, ok := ObjectKeyForPath(p)
	if !ok {
		t.Fatalf("%s is not an object path", p)
	}
	n := snap.Nodes[key.Name()]
	if n == nil {
		t.Fatalf("no node %s in the snapshot", key.Name())
	}
	return n
}

func boolp(b bool) *bool { return &b }

const cueNode = `// e1: the first edge node
kind:        "node"
name:        "e1"
criticality: "high" // pager duty

// routing
labels: {
	region: "eu-west" // the region
	env:    "prod"
	tier:   "frontend"
}
maintenance_windows: ["nightly"]
capabilities: ["gpu"]
`

const yamlNode = `# e2: an edge node
kind: node
name: e2   # the id
criticality: low

# routing labels
labels:
  region: us-east
  env: prod
capabilities: [a, b]   # what it can do
data_addresses:
  db: 10.0.0.1:5432
# the end
`

const jsonNode = `{
  "kind": "node",
  "name": "e3",
  "labels": {"region": "us-west", "env": "prod", "tier": "backend"},
  "maintenance_windows": ["nightly"]
}
`

// TestEditNodeFileKeepsTheRestAsWritten: the exact text of each format's
// edits: only the edited field changes, comments and layout stay.
func TestEditNodeFileKeepsTheRestAsWritten(t *testing.T) {
	newLabels := map[string]string{"region": "eu-west", "env": "staging", "example.com/role": "db"}
	tests := []struct {
		name, path, in string
		labels         map[string]string
		drain          *bool
		want           string
	}{
		{"cue: labels replaced, kept keys in place, new ones after", "nodes/e1.cue", cueNode, newLabels, nil,
			strings.Replace(cueNode, "labels: {\n\tregion: \"eu-west\" // the region\n\tenv:    \"prod\"\n\ttier:   \"frontend\"\n}",
				"labels: {\n\tregion:             \"eu-west\"\n\tenv:                \"staging\"\n\t\"example.com/role\": \"db\"\n}", 1)},
		{"cue: labels removed with their comment", "nodes/e1.cue", cueNode, map[string]string{}, nil,
			strings.Replace(cueNode, "// routing\nlabels: {\n\tregion: \"eu-west\" // the region\n\tenv:    \"prod\"\n\ttier:   \"frontend\"\n}\n", "", 1)},
		{"cue: drain added at the end", "nodes/e1.cue", cueNode, nil, boolp(true), cueNode + "drain: true\n"},
		{"cue: labels added when absent", "nodes/e1.cue", "kind: \"node\"\nname: \"e1\" // id\n", map[string]string{"b": "2", "a": "1"}, nil,
			"kind: \"node\"\nname: \"e1\" // id\nlabels: {\n\ta: \"1\"\n\tb: \"2\"\n}\n"},
		{"cue: one-line labels stay on one line", "nodes/e1.cue", "kind: \"node\"\nname: \"e1\"\nlabels: { tier: \"web\" }\ndrain: false\n", map[string]string{"tier": "db", "true": "yes"}, nil,
			"kind: \"node\"\nname: \"e1\"\nlabels: {tier: \"db\", \"true\": \"yes\"}\ndrain: false\n"},
		{"cue: drain false set, then removed", "nodes/e1.cue", "kind: \"node\"\nname: \"e1\"\ndrain: false // not now\nlabels: a: \"b\"\n", nil, boolp(true),
			"kind: \"node\"\nname: \"e1\"\ndrain: true // not now\nlabels: a: \"b\"\n"},
		{"cue: undrain removes the field and its comment", "nodes/e1.cue", "kind: \"node\"\nname: \"e1\"\n// maintenance\ndrain: true // until friday\nlabels: a: \"b\"\n", nil, boolp(false),
			"kind: \"node\"\nname: \"e1\"\nlabels: a: \"b\"\n"},

		{"yaml: labels replaced in their block", "nodes/e2.yaml", yamlNode, newLabels, nil,
			strings.Replace(yamlNode, "labels:\n  region: us-east\n  env: prod\n", "labels:\n  region: eu-west\n  env: staging\n  example.com/role: db\n", 1)},
		{"yaml: labels removed with their head comment", "nodes/e2.yaml", yamlNode, map[string]string{}, nil,
			strings.Replace(yamlNode, "# routing labels\nlabels:\n  region: us-east\n  env: prod\n", "", 1)},
		{"yaml: drain added after the last field", "nodes/e2.yaml", yamlNode, nil, boolp(true),
			strings.Replace(yamlNode, "  db: 10.0.0.1:5432\n", "  db: 10.0.0.1:5432\ndrain: true\n", 1)},
		{"yaml: labels added, values YAML would read otherwise quoted", "nodes/e2.yaml", "kind: node\nname: e2\n", map[string]string{"on": "true", "v": "1.0", "w": "x"}, nil,
			"kind: node\nname: e2\nlabels:\n  \"on\": \"true\"\n  v: \"1.0\"\n  w: x\n"},
		{"yaml: flow labels stay flow", "nodes/e2.yaml", "kind: node\nname: e2\nlabels: {a: b,\n  c: d}  # two\ndrain: true\n", map[string]string{"a": "z"}, boolp(false),
			"kind: node\nname: e2\nlabels: {a: z}  # two\n"},
		{"yaml: a file without a final newline", "nodes/e2.yaml", "kind: node\nname: e2", nil, boolp(true), "kind: node\nname: e2\ndrain: true\n"},
		{"yaml: CRLF lines", "nodes/e2.yaml", "kind: node\r\nname: e2\r\nlabels:\r\n    a: b\r\n", map[string]string{"a": "c"}, boolp(true),
			"kind: node\r\nname: e2\r\nlabels:\r\n    a: c\r\ndrain: true\r\n"},

		{"json: one-line labels replaced in place", "nodes/e3.json", jsonNode, newLabels, nil,
			strings.Replace(jsonNode, `{"region": "us-west", "env": "prod", "tier": "backend"}`, `{"region": "eu-west", "env": "staging", "example.com/role": "db"}`, 1)},
		{"json: labels removed", "nodes/e3.json", jsonNode, map[string]string{}, nil,
			strings.Replace(jsonNode, "  \"labels\": {\"region\": \"us-west\", \"env\": \"prod\", \"tier\": \"backend\"},\n", "", 1)},
		{"json: drain added as the last member", "nodes/e3.json", jsonNode, nil, boolp(true),
			strings.Replace(jsonNode, "[\"nightly\"]\n}", "[\"nightly\"],\n  \"drain\": true\n}", 1)},
		{"json: a block of labels stays a block", "nodes/e3.json", "{\n\t\"kind\": \"node\",\n\t\"name\": \"e3\",\n\t\"labels\": {\n\t\t\"a\": \"b\"\n\t},\n\t\"drain\": true\n}\n",
			map[string]string{"a": "b", "c": "d"}, boolp(false),
			"{\n\t\"kind\": \"node\",\n\t\"name\": \"e3\",\n\t\"labels\": {\n\t\t\"a\": \"b\",\n\t\t\"c\": \"d\"\n\t}\n}\n"},
		{"json: the first member removed", "nodes/e3.json", `{"labels": {"a": "b"}, "kind": "node", "name": "e3"}`, map[string]string{}, nil,
			`{"kind": "node", "name": "e3"}`},
		{"json: labels added to a one-line object", "nodes/e3.json", `{"kind":"node","name":"e3"}`, map[string]string{"a": "b"}, boolp(true),
			`{"kind":"node","name":"e3", "labels": {"a": "b"}, "drain": true}`},
	}
	v := newValidator(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := loadNode(t, v, tt.path, []byte(tt.in))
			out, err := EditNodeFile(tt.path, []byte(tt.in), tt.labels, tt.drain)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Fatalf("edited file:\n%s\nwant:\n%s", out, tt.want)
			}
			checkEdited(t, loadNode(t, v, tt.path, out), orig, tt.labels, tt.drain)
		})
	}
}

// checkEdited requires got to be orig with exactly the edits.
func checkEdited(t *testing.T, got, orig *fleetwave.Node, labels map[string]string, drain *bool) {
	t.Helper()
	want := *orig
	want.Labels = maps.Clone(orig.Labels)
	if labels != nil {
		want.Labels = nil
		if len(labels) > 0 {
			want.Labels = maps.Clone(labels)
		}
	}
	if drain != nil {
		want.Drain = *drain
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("edited node = %+v\nwant %+v", *got, want)
	}
}

// TestEditNodeFileLayoutsTheSpliceCannotTake: a YAML flow mapping at the
// top is written again from its node tree; duplicate CUE fields (CUE
// unifies them) become one; each still checks out as the edited object.
func TestEditNodeFileLayoutsTheSpliceCannotTake(t *testing.T) {
	v := newValidator(t)
	tests := []struct {
		name, path, in string
		labels         map[string]string
		drain          *bool
		contains       []string
	}{
		{"yaml flow mapping at the top", "nodes/f1.yaml", "{kind: node, name: f1, labels: {a: b}} # all in one\n",
			map[string]string{"a": "c", "d": "e"}, boolp(true), []string{"# all in one", "a: c", "d: e", "drain: true"}},
		{"yaml flow mapping, labels removed", "nodes/f1.yaml", "{kind: node, name: f1, labels: {a: b}, drain: true}\n",
			map[string]string{}, boolp(false), []string{"kind: node"}},
		{"cue labels written twice", "nodes/f2.cue", "kind: \"node\"\nname: \"f2\"\nlabels: a: \"1\"\n// more\nlabels: b: \"2\"\n",
			map[string]string{"b": "3", "c": "4"}, nil, []string{"labels: {b: \"3\", c: \"4\"}"}},
		{"cue drain written twice", "nodes/f2.cue", "kind: \"node\"\nname: \"f2\"\ndrain: true\ndrain: true\n", nil, boolp(false), []string{"name: \"f2\"\n"}},
		{"cue fields on one line", "nodes/f2.cue", "kind: \"node\", name: \"f2\", drain: true, labels: {a: \"b\"}\n", map[string]string{}, boolp(false), []string{"kind: \"node\", name: \"f2\""}},
		{"cue drain sharing a line", "nodes/f2.cue", "kind: \"node\", drain: true, name: \"f2\" // one line\n", nil, boolp(false), []string{"kind: \"node\", name: \"f2\" // one line\n"}},
		{"json with a key written twice", "nodes/f3.json", `{"kind": "node", "name": "f3", "labels": {"a": "b"}, "labels": {"c": "d"}}`,
			map[string]string{"x": "y"}, nil, []string{`"labels": {"x": "y"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := loadNode(t, v, tt.path, []byte(tt.in))
			out, err := EditNodeFile(tt.path, []byte(tt.in), tt.labels, tt.drain)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.contains {
				if !strings.Contains(string(out), want) {
					t.Fatalf("edited file lacks %q:\n%s", want, out)
				}
			}
			checkEdited(t, loadNode(t, v, tt.path, out), orig, tt.labels, tt.drain)
		})
	}
}

// TestEditNodeFileFallbacks: the rewrites from the node tree and the AST,
// on their own, keep comments and check out too.
func TestEditNodeFileFallbacks(t *testing.T) {
	v := newValidator(t)
	labels := map[string]string{"env": "staging", "example.com/role": "db"}
	out, err := encodeYAML([]byte(yamlNode), labels, boolp(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# e2: an edge node", "# the id", "# routing labels", "# what it can do", "example.com/role: db", "drain: true"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("YAML rewrite lacks %q:\n%s", want, out)
		}
	}
	checkEdited(t, loadNode(t, v, "nodes/e2.yaml", out), loadNode(t, v, "nodes/e2.yaml", []byte(yamlNode)), labels, boolp(true))
	out, err = formatCUE("nodes/e1.cue", []byte(cueNode), labels, boolp(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"// e1: the first edge node", "// pager duty", "// routing", "\"example.com/role\": \"db\"", "drain: true"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("CUE rewrite lacks %q:\n%s", want, out)
		}
	}
	checkEdited(t, loadNode(t, v, "nodes/e1.cue", out), loadNode(t, v, "nodes/e1.cue", []byte(cueNode)), labels, boolp(true))
}

func TestEditNodeFileUnchangedAndRefused(t *testing.T) {
	same := map[string]string{"region": "us-east", "env": "prod"}
	out, err := EditNodeFile("nodes/e2.yaml", []byte(yamlNode), same, boolp(false))
	if err != nil || string(out) != yamlNode {
		t.Fatalf("an edit to the same object changed the file (%v):\n%s", err, out)
	}
	_, err = EditNodeFile("nodes/e2.yaml", []byte(yamlNode), map[string]string{"Bad Key": "x", "ok": "", "fine": "yes"}, nil)
	var le *LabelsError
	if !errors.As(err, &le) || len(le.Problems) != 2 || le.Problems[0].Key != "Bad Key" || le.Problems[1].Key != "ok" {
		t.Fatalf("invalid labels: %v (%+v)", err, le)
	}
	if _, err := EditNodeFile("brc/web.yaml", []byte("kind: trigger\nname: web\nblock_name: web\n"), nil, boolp(true)); !errors.Is(err, ErrNotEditable) {
		t.Fatalf("a trigger file edited as a node: %v", err)
	}
	if _, err := EditNodeFile("nodes/x.yaml", []byte("kind: node\nname: [x\n"), nil, boolp(true)); !errors.Is(err, ErrNotEditable) {
		t.Fatalf("a broken file edited: %v", err)
	}
}

func TestCheckLabels(t *testing.T) {
	tests := []struct {
		labels map[string]string
		want   []string // key: problem prefix
	}{
		{map[string]string{"env": "prod", "example.com/role": "db", "a.b_c-d": "X.y_z-1"}, nil},
		{map[string]string{"-env": "prod"}, []string{"-env: invalid label key"}},
		{map[string]string{"Example.com/x": "y"}, []string{"Example.com/x: invalid label key \"Example.com/x\": the prefix"}},
		{map[string]string{"x": strings.Repeat("v", 64)}, []string{"x: invalid label value"}},
		{map[string]string{strings.Repeat("k", 64): "v"}, []string{strings.Repeat("k", 64) + ": invalid label key"}},
		{map[string]string{"x": ""}, []string{"x: invalid label value \"\""}},
		{map[string]string{"x": "a b"}, []string{"x: invalid label value"}},
	}
	for _, tt := range tests {
		var got []string
		for _, p := range CheckLabels(tt.labels) {
			got = append(got, p.Key+": "+p.Problem)
		}
		if len(got) != len(tt.want) {
			t.Fatalf("CheckLabels(%v) = %q, want %q", tt.labels, got, tt.want)
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tt.want[i]) {
				t.Fatalf("CheckLabels(%v) = %q, want %q", tt.labels, got, tt.want)
			}
		}
	}
	many := map[string]string{}
	for i := range 40 {
		many[strings.Repeat("k", i+1)+"-"] = "v"
	}
	probs := CheckLabels(many)
	if len(probs) != maxLabelProblems || probs[0].Problem != "found 40 labels, expected at most 16" || !strings.HasPrefix(probs[len(probs)-1].Problem, "and ") {
		t.Fatalf("40 bad labels: %d problems, first %+v, last %+v", len(probs), probs[0], probs[len(probs)-1])
	}
	// the rules are the loader's: a valid set loads, an invalid one does not
	v := newValidator(t)
	for _, labels := range []map[string]string{{"example.com/role": "db"}, {"-x": "y"}} {
		data := "kind: node\nname: lab\nlabels:\n"
		for k, val := range labels {
			data += "  \"" + k + "\": \"" + val + "\"\n"
		}
		tree := baseTree()
		tree["nodes/lab.yaml"] = []byte(data)
		_, err := v.Load(tree)
		if (err == nil) != (CheckLabels(labels) == nil) {
			t.Fatalf("labels %v: loader says %v, CheckLabels %v", labels, err, CheckLabels(labels))
		}
	}
}

// FuzzEditNodeFile edits arbitrary files: EditNodeFile never panics, and
// what it returns is the edited object (it checks that itself: here, that
// the check holds for the labels and drain asked for).
func FuzzEditNodeFile(f *testing.F) {
	for _, s := range []string{cueNode, yamlNode, jsonNode, "kind: node\nname: x\nlabels: {a: b,\n  c: d}  # two\n",
		"{kind: node, name: f1, labels: {a: b}}\n", "kind: \"node\", name: \"f2\", drain: true, labels: {a: \"b\"}\n",
		`{"labels": {"a": "b"}, "kind": "node", "name": "e3"}`, "kind: node\r\nname: e2\r\nlabels:\r\n    a: b\r\n", "kind: node\nname: e2"} {
		for i, ext := range []string{".cue", ".yaml", ".json"} {
			f.Add(s, ext, "a=b,example.com/c=d", uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, data, ext, labelSpec string, mode uint8) {
		file := "nodes/x" + ext
		var labels map[string]string
		if mode&1 == 1 {
			labels = map[string]string{}
			for _, kv := range strings.Split(labelSpec, ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					labels[k] = v
				}
			}
		}
		var drain *bool
		if mode&2 == 2 {
			drain = boolp(mode&4 == 4)
		}
		if _, err := Normalize(file, []byte(data)); err == nil && (labels == nil || CheckLabels(labels) == nil) {
			// the splices on their own (EditNodeFile turns a panic into an
			// error): a panic fails here
			_, _ = spliceCUE(file, []byte(data), labels, drain)
			_, _ = formatCUE(file, []byte(data), labels, drain)
			_, _ = spliceYAML([]byte(data), labels, drain)
			_, _ = encodeYAML([]byte(data), labels, drain)
			_, _ = spliceJSON([]byte(data), labels, drain)
		}
		out, err := EditNodeFile(file, []byte(data), labels, drain)
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatal(err)
			}
			return
		}
		norm, err := Normalize(file, out)
		if err != nil {
			t.Fatalf("an edited file does not parse: %v\n%s", err, out)
		}
		var got map[string]any
		if err := json.Unmarshal(norm, &got); err != nil {
			t.Fatal(err)
		}
		if labels != nil {
			gl, _ := got["labels"].(map[string]any)
			if len(gl) != len(labels) {
				t.Fatalf("labels %v, want %v:\n%s", gl, labels, out)
			}
			for k, v := range labels {
				if gl[k] != v {
					t.Fatalf("labels %v, want %v:\n%s", gl, labels, out)
				}
			}
		}
		if drain != nil && (got["drain"] == true) != *drain {
			t.Fatalf("drain %v, want %v:\n%s", got["drain"], *drain, out)
		}
	})
}
