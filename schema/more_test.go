package schema

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fleetwave/fleetwave"
)

func TestEveryProblemOfATreeIsReportedSorted(t *testing.T) {
	tree := with(map[string]string{
		"nodes/n2.cue":     "kind: \"node\"\nname: \"n2\"\ncriticality: \"urgent\"\n",
		"brc/web.yaml":     "kind: trigger\nname: web\nblock_name: web\nnodes: [n1, ghost]\nmax_concurrent: 0\n",
		"blocks/api.json":  "{\"kind\": \"block\", \"name\": \"api\", \"actions\": {\"install\": {\"command\": \"x\", \"timeout\": \"soon\"}}}",
		"nodes/n1.yaml":    "kind: node\nname: n1\nlabels: {\"a b\": c}\n",
		"rollouts/r1.yaml": "kind: rollout\nname: r1\nbrc: web\n",
	})
	_, err := newValidator(t).Load(tree)
	got, lerr := errorLines(err)
	if lerr != nil {
		t.Fatal(lerr)
	}
	want := []string{
		`blocks/api.json:1:85: actions.install.timeout: invalid duration "soon", expected a Go duration such as "90s" or "5m"`,
		`brc/web.yaml:5:17: max_concurrent: invalid value 0 (out of bound >=1)`,
		`nodes/n1.yaml:3:10: labels.a b: invalid label key "a b", expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit (optionally prefixed by "example.com/")`,
		`nodes/n2.cue:3:14: criticality: invalid value "urgent", expected one of "high", "low", "medium"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNormalize(t *testing.T) {
	yamlSrc := []byte("kind: node\nname: n1\nlabels:\n  region: eu\n  env: prod\ncapabilities: [a, b]\n")
	jsonSrc := []byte(`{"name": "n1", "capabilities": ["a", "b"], "labels": {"env": "prod", "region": "eu"}, "kind": "node"}`)
	cueSrc := []byte("package x\n\n// a comment\nkind: \"node\"\nname: \"n1\"\nlabels: env: \"prod\"\nlabels: region: \"eu\"\ncapabilities: [\"a\", \"b\"]\n")
	changed := []byte("kind: node\nname: n1\nlabels:\n  region: us\n  env: prod\ncapabilities: [a, b]\n")
	norm := func(p string, b []byte) string {
		t.Helper()
		out, err := Normalize(p, b)
		if err != nil {
			t.Fatalf("Normalize(%s): %v", p, err)
		}
		return string(out)
	}
	y, j, c := norm("nodes/n1.yaml", yamlSrc), norm("nodes/n1.json", jsonSrc), norm("nodes/n1.cue", cueSrc)
	want := `{"capabilities":["a","b"],"kind":"node","labels":{"env":"prod","region":"eu"},"name":"n1"}`
	if y != want {
		t.Errorf("yaml normalized to %s, want %s", y, want)
	}
	if j != y || c != y {
		t.Errorf("equivalent files normalize differently:\nyaml %s\njson %s\ncue  %s", y, j, c)
	}
	if norm("nodes/n1.yaml", changed) == y {
		t.Error("a changed value must change the normalized form")
	}
	if _, err := Normalize("nodes/n1.yaml", []byte("kind: [")); err == nil {
		t.Error("Normalize accepted a YAML syntax error")
	}
	// Object.Hash follows the normalized content, not the format.
	v := newValidator(t)
	a, err := v.Load(with(map[string]string{"nodes/n1.yaml": string(yamlSrc)}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Load(with(map[string]string{"nodes/n1.yaml": "", "nodes/n1.json": string(jsonSrc)}))
	if err != nil {
		t.Fatal(err)
	}
	if a.Objects["node/n1"].Hash != b.Objects["node/n1"].Hash {
		t.Errorf("hash differs between the YAML and the JSON form of one node")
	}
}

func TestObjectKeyForPath(t *testing.T) {
	cases := []struct {
		path string
		want fleetwave.ObjectKey
		ok   bool
	}{
		{"brc/x.cue", "trigger/x", true},
		{"fleetwave.cue", "config/fleetwave", true},
		{"fleetwave.yml", "config/fleetwave", true},
		{"nodes/n1.yaml", "node/n1", true},
		{"blocks/web.json", "block/web", true},
		{"organizations/acme.cue", "organization/acme", true},
		{"workspaces/w.cue", "workspace/w", true},
		{"rollouts/r.cue", "rollout/r", true},
		{"approvals/a.yaml", "approval/a", true},
		{"README.md", "", false},
		{"status/nodes/n1.yaml", "", false},
		{"cue.mod/module.cue", "", false},
		{"nodes/.hidden.cue", "", false},
		{"nodes/sub/n1.cue", "", false},
		{"nodes/../fleetwave.cue", "", false},
		{"/nodes/n1.cue", "", false},
		{"other.cue", "", false},
		{"nodes/n1.txt", "", false},
	}
	for _, tc := range cases {
		got, ok := ObjectKeyForPath(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ObjectKeyForPath(%q) = %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestScaffoldOutputLoadsCleanly(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Scaffold(dir); err != nil {
		t.Fatalf("Scaffold: %v", err)
	}
	snap, err := newValidator(t).LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir(scaffold):\n%v", err)
	}
	sys := snap.Triggers["fleetwave-agent"]
	if sys == nil || sys.BlockName != "fleetwave-agent" || len(sys.Nodes) != 0 || !sys.Selector.Empty() {
		t.Errorf("system BRC = %+v, want a fleet-wide trigger of block fleetwave-agent", sys)
	}
	if sys != nil && sys.TargetVersion != fleetwave.Version {
		t.Errorf("system BRC targets %q, want the running version %q", sys.TargetVersion, fleetwave.Version)
	}
	if snap.Nodes["example-node"] == nil || snap.Blocks["example"] == nil || snap.Config.ReconcileMode != "observe" {
		t.Errorf("scaffold snapshot incomplete: nodes %v blocks %v mode %q", snap.SortedNodeIDs(), len(snap.Blocks), snap.Config.ReconcileMode)
	}
	for _, p := range []string{"cue.mod/module.cue", VendoredSchemaPath, "README.md", "notes.txt"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s missing after Scaffold: %v", p, err)
		}
	}
	vendored, _ := os.ReadFile(filepath.Join(dir, VendoredSchemaPath))
	if string(vendored) != string(schemaSource) {
		t.Error("the vendored schema differs from the embedded one")
	}
	if err := Scaffold(dir); err == nil {
		t.Error("Scaffold must refuse a directory that already holds fleetwave.cue")
	}
}

func TestLoadDirRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := Scaffold(dir); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.cue")
	if err := os.WriteFile(outside, []byte("kind: \"node\"\nname: \"linked\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "nodes", "linked.cue")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "notes.txt")); err != nil { // not an object file: ignored
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "notes.cue")); err != nil { // outside the layout: reported as such
		t.Fatal(err)
	}
	_, err := newValidator(t).LoadDir(dir)
	got, lerr := errorLines(err)
	if lerr != nil {
		t.Fatal(lerr)
	}
	want := "nodes/linked.cue: symbolic links are not allowed here, expected a regular file or folder\n" +
		"notes.cue: " + layoutMessage
	if strings.Join(got, "\n") != want {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

func TestConcurrentLoadsAgree(t *testing.T) {
	v := newValidator(t)
	tree := baseTree()
	var wg sync.WaitGroup
	hashes := make([]string, 8)
	for i := range hashes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snap, err := v.Load(tree)
			if err != nil {
				t.Error(err)
				return
			}
			hashes[i] = snap.Objects["trigger/web"].Hash
		}()
	}
	wg.Wait()
	for _, h := range hashes[1:] {
		if h != hashes[0] || h == "" {
			t.Fatalf("concurrent loads disagree: %v", hashes)
		}
	}
}

func TestWithMaxFileSize(t *testing.T) {
	v, err := New(WithMaxFileSize(16))
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Load(baseTree())
	got, lerr := errorLines(err)
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(got) == 0 || !strings.Contains(got[0], "expected at most 16") {
		t.Errorf("errors = %v, want size errors", got)
	}
}

func FuzzLoad(f *testing.F) {
	for p, b := range baseTree() {
		f.Add(p, b)
	}
	f.Add("nodes/x.cue", []byte("kind: \"node\"\nname: \"x\"\nlabels: {a: \"b\"}\n"))
	f.Add("brc/x.json", []byte(`{"kind":"trigger","name":"x","block_name":"web","selector":{"match_expressions":[{"key":"a","operator":"in"}]}}`))
	f.Add("fleetwave.yaml", []byte("a: &a [*a]\n"))
	v, err := New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string, data []byte) {
		tree := baseTree()
		tree[p] = data
		snap, err := v.Load(tree)
		if (snap == nil) == (err == nil) {
			t.Fatalf("Load returned snapshot %v and error %v", snap != nil, err)
		}
		_, _ = Normalize(p, data)
	})
}

// TestLoadDirReadsLikeLoad writes a tree of 300 node files to disk: what
// LoadDir reads (in parallel) validates as Load does with the same bytes,
// and a file above the size limit is reported by path, not read.
func TestLoadDirReadsLikeLoad(t *testing.T) {
	dir := t.TempDir()
	tree := baseTree()
	for i := range 300 {
		tree[fmt.Sprintf("nodes/n%03d.yaml", i+100)] = fmt.Appendf(nil, "kind: node\nname: n%03d\nlabels:\n  env: prod\n  rack: r%d\n", i+100, i%7)
	}
	for p, b := range tree {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v := newValidator(t)
	fromDir, err := v.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fromMap, err := v.Load(tree)
	if err != nil {
		t.Fatal(err)
	}
	if len(fromDir.Objects) != len(fromMap.Objects) || len(fromDir.Nodes) != len(fromMap.Nodes) || len(fromMap.Nodes) < 301 {
		t.Fatalf("LoadDir: %d objects, %d nodes; Load: %d objects", len(fromDir.Objects), len(fromDir.Nodes), len(fromMap.Objects))
	}
	for k, o := range fromMap.Objects {
		if fromDir.Objects[k].Hash != o.Hash {
			t.Fatalf("%s: LoadDir hash %q, Load hash %q", k, fromDir.Objects[k].Hash, o.Hash)
		}
	}
	big := bytes.Repeat([]byte("# padding\n"), 20)
	if err := os.WriteFile(filepath.Join(dir, "nodes", "n150.yaml"), append(big, tree["nodes/n150.yaml"]...), 0o644); err != nil {
		t.Fatal(err)
	}
	small, err := New(WithMaxFileSize(150))
	if err != nil {
		t.Fatal(err)
	}
	_, err = small.LoadDir(dir)
	got, lerr := errorLines(err)
	if lerr != nil {
		t.Fatal(lerr)
	}
	if want := fmt.Sprintf("nodes/n150.yaml: file is %d bytes, expected at most 150", len(big)+len(tree["nodes/n150.yaml"])); !slices.Contains(got, want) {
		t.Fatalf("errors %v, want %q among them", got, want)
	}
}
