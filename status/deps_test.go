package status_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps: the status documents are a contract of their own; the package
// imports the shared nouns (the root package), the standard library and
// the YAML library, nothing else.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "github.com/fleetwave/fleetwave/status").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatal("go list gave no imports")
	}
	for _, imp := range imports {
		std := !strings.Contains(strings.Split(imp, "/")[0], ".")
		if !std && imp != "github.com/fleetwave/fleetwave" && imp != "go.yaml.in/yaml/v3" {
			t.Errorf("status imports %s: it imports only the root package, the standard library and go.yaml.in/yaml/v3", imp)
		}
	}
}
