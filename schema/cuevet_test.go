package schema

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCueVetAcceptsExamplesAndScaffold runs the real `cue vet` on every
// object of examples/fleet and of a scaffolded repository, against the
// schema file Scaffold vendors, so that what fleetwave accepts, CUE's own
// tool accepts too. YAML and JSON files are vetted as they are; .cue object
// files (no package clause, so not loadable beside the schema's package)
// are vetted in their normalized JSON form. The cue binary comes from
// $CUE_BIN or PATH:
//
//	GOBIN=$(mktemp -d) go install cuelang.org/go/cmd/cue@v0.17.1
func TestCueVetAcceptsExamplesAndScaffold(t *testing.T) {
	cue := cueBinary(t)
	scaffold := t.TempDir()
	if err := Scaffold(scaffold); err != nil {
		t.Fatal(err)
	}
	schemaFile := filepath.Join(scaffold, filepath.FromSlash(VendoredSchemaPath))
	tmp := t.TempDir()
	byDef := map[string][]string{}
	for _, root := range []string{filepath.Join("..", "examples", "fleet"), scaffold} {
		files := readTree(t, root)
		for p, data := range files {
			key, _ := ObjectKeyForPath(p)
			def := definitions[key.Kind()][0]
			file := filepath.Join(root, filepath.FromSlash(p))
			if strings.HasSuffix(p, ".cue") {
				norm, err := Normalize(p, data)
				if err != nil {
					t.Fatal(err)
				}
				file = filepath.Join(tmp, strings.ReplaceAll(root+"/"+p, "/", "_")+".json")
				if err := os.WriteFile(file, norm, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			byDef[def] = append(byDef[def], file)
		}
	}
	n := 0
	for def, files := range byDef {
		out, err := exec.Command(cue, append([]string{"vet", "-c", "-d", def, schemaFile}, files...)...).CombinedOutput()
		if err != nil {
			t.Errorf("cue vet -d %s refused:\n%s", def, out)
		}
		n += len(files)
	}
	t.Logf("cue vet accepted %d object files", n)
}

// TestVetArgs checks the cue vet runs VetArgs builds (the scale report's
// baseline for fleetwave validate): one definition per folder, .cue
// objects and files outside the layout left out, runs split every perRun
// files. With a cue binary (always in CI) it runs them on examples/fleet,
// which cue vet must accept, and on a copy with one node's criticality
// misspelt, which it must refuse: the runs vet the files they name
// against the right definition.
func TestVetArgs(t *testing.T) {
	files := []string{"nodes/b.json", "nodes/a.yaml", "nodes/c.cue", "brc/x.yaml", "fleetwave.cue", "README.md", "nodes/sub/d.yaml", "other/e.yaml"}
	got := VetArgs("/s/schema.cue", "/r", files, 1)
	want := [][]string{
		{"vet", "-c", "-d", "#Trigger", "/s/schema.cue", "/r/brc/x.yaml"},
		{"vet", "-c", "-d", "#Node", "/s/schema.cue", "/r/nodes/a.yaml"},
		{"vet", "-c", "-d", "#Node", "/s/schema.cue", "/r/nodes/b.json"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("VetArgs(perRun 1) = %q, want %q", got, want)
	}
	if got := VetArgs("/s/schema.cue", "/r", files, 0); len(got) != 2 || len(got[1]) != 7 {
		t.Fatalf("VetArgs(perRun 0) = %q, want a run for brc/ and one for both node files", got)
	}

	cue := cueBinary(t)
	schemaFile := filepath.Join(t.TempDir(), "schema.cue")
	if err := os.WriteFile(schemaFile, Source(), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tree := readTree(t, filepath.Join("..", "examples", "fleet"))
	for p, data := range tree {
		f := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vet := func() (vetted int, refused string) {
		for _, args := range VetArgs(schemaFile, dir, slices.Collect(maps.Keys(tree)), 2) {
			vetted += len(args) - 5
			if out, err := exec.Command(cue, args...).CombinedOutput(); err != nil {
				refused += string(out)
			}
		}
		return vetted, refused
	}
	n, refused := vet()
	if n == 0 || refused != "" {
		t.Fatalf("cue vet of examples/fleet's %d YAML and JSON objects: refused %q", n, refused)
	}
	bad := filepath.Join(dir, "nodes", "edge-04.yaml")
	if err := os.WriteFile(bad, append(tree["nodes/edge-04.yaml"], "criticality: urgent\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, refused := vet(); !strings.Contains(refused, "edge-04.yaml") {
		t.Fatalf("cue vet accepted a node with criticality urgent (output %q)", refused)
	}
}

// cueBinary is the real cue command, from $CUE_BIN or PATH: required in CI
// (.ci/run installs it), the test skipped without it elsewhere.
func cueBinary(t *testing.T) string {
	t.Helper()
	cue := os.Getenv("CUE_BIN")
	if cue == "" {
		cue, _ = exec.LookPath("cue")
	}
	if cue == "" && os.Getenv("CI") != "" {
		t.Fatal("no cue binary in CI: .ci/run installs it with go install cuelang.org/go/cmd/cue@v0.17.1")
	}
	if cue == "" {
		t.Skip("no cue binary: set CUE_BIN or put cue in PATH (GOBIN=$(mktemp -d) go install cuelang.org/go/cmd/cue@v0.17.1)")
	}
	return cue
}
