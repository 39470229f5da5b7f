package agent

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDeps keeps the package's imports pointing one way (non-test files only).
func TestDeps(t *testing.T) {
	badDeps := map[string]string{
		"github.com/fleetwave/fleetwave/api":     "edge packages do not import each other; agents speak only the wire format",
		"github.com/fleetwave/fleetwave/hub":     "an agent never reaches the hub's internals",
		"github.com/fleetwave/fleetwave/engine":  "agents never talk to Redis",
		"github.com/fleetwave/fleetwave/gitsync": "agents never talk to Git",
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if why, bad := badDeps[path]; bad {
				t.Errorf("%s imports %s: %s", e.Name(), path, why)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
