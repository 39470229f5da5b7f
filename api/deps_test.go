package api

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
		"github.com/fleetwave/fleetwave/agent":   "edge packages do not import each other; agents speak only the wire format",
		"github.com/fleetwave/fleetwave/hub":     "the hub wires the api, not the reverse",
		"github.com/fleetwave/fleetwave/engine":  "the api reads the hub through the Hub interface",
		"github.com/fleetwave/fleetwave/gitsync": "the api reads the hub through the Hub interface",
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
