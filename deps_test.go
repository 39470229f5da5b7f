package fleetwave_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps enforces the import direction of ARCHITECTURE.md:
// cmd -> hub|agent|api -> gitsync|schema|reconciler|engine|status -> fleetwave.
func TestDeps(t *testing.T) {
	const mod = "github.com/fleetwave/fleetwave"
	capabilities := []string{"gitsync", "schema", "reconciler", "engine", "status"}
	bad := map[string]map[string]string{ // package -> forbidden import -> reason
		"": {"*": "the root package holds shared nouns only: standard library imports"},
		"agent": {"api": "agents share only the wire format", "hub": "agents talk HTTP to the hub", "engine": "agents never touch Redis", "status": "agents never read status",
			"gitsync": "agents never touch Git", "schema": "agents run what they are sent", "reconciler": "agents do not plan"},
		"api": {"hub": "the API reads the hub through its own interface", "agent": "edge packages do not import each other",
			"engine": "the API goes through the hub", "gitsync": "the API goes through the hub", "reconciler": "the API goes through the hub"},
		"hub": {"agent": "the hub drives agents over HTTP only", "cmd/fleetwave": "cmd is the top"},
	}
	for _, c := range capabilities {
		bad[c] = map[string]string{"hub": "capabilities are wired by hub", "api": "capabilities are wired by hub", "agent": "capabilities are wired by hub"}
		for _, other := range capabilities {
			if other != c {
				bad[c][other] = "capability packages never import each other"
			}
		}
	}
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}|{{join .Imports " "}}`, mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, "|")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/")
		rules, ok := bad[rel]
		if !ok {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if rel == "" && (strings.Contains(strings.Split(imp, "/")[0], ".")) {
				t.Errorf("%s imports %s: %s", pkg, imp, rules["*"])
				continue
			}
			if !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			target := strings.TrimPrefix(imp, mod+"/")
			if reason, ok := rules[target]; ok {
				t.Errorf("%s imports %s: %s", pkg, imp, reason)
			}
		}
	}
}
