package schema

import (
	"os"
	"os/exec"
	"path/filepath"
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
