package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReferenceIsCurrent: docs/reference.md is what `fleetwave schema
// reference` prints from the CUE definitions (regenerate it with
// `go run ./cmd/fleetwave schema reference > docs/reference.md`).
func TestReferenceIsCurrent(t *testing.T) {
	want, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", ReferenceFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: run `go run ./cmd/fleetwave schema reference > %s`", ReferenceFile, ReferenceFile)
	}
}

// TestReferenceCoversEveryField: every field the JSON Schema export lists
// for a kind has a row in the reference, and the reference lists no field
// the export lacks: the reference, the JSON Schema and the CUE
// definitions agree.
func TestReferenceCoversEveryField(t *testing.T) {
	ref, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	defs := exportedSchema(t)["$defs"].(map[string]any)
	sections := strings.Split(string(ref), "\n## ")
	for kind, names := range definitions {
		def := names[0]
		var props []string
		for p := range defs[string(kind)].(map[string]any)["properties"].(map[string]any) {
			props = append(props, p)
		}
		var sec string
		for _, s := range sections {
			if strings.HasPrefix(s, def+"\n") {
				sec = s
			}
		}
		if sec == "" {
			t.Errorf("the reference has no section %s", def)
			continue
		}
		for _, p := range props {
			if !strings.Contains(sec, "| `"+p+"` |") {
				t.Errorf("%s.%s: in the JSON Schema, not in the reference", def, p)
			}
		}
		rows := 0
		for _, line := range strings.Split(sec, "\n") {
			if strings.HasPrefix(line, "| `") && !strings.Contains(strings.SplitN(line, "|", 3)[1], ".") {
				rows++
			}
		}
		if rows != len(props) {
			t.Errorf("%s: %d top-level fields in the reference, %d in the JSON Schema", def, rows, len(props))
		}
	}
}
