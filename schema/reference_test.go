package schema

import (
	"os"
	"path/filepath"
	"regexp"
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

// TestJSONSchemaLabelKeywordsAgreeWithCheckLabels: the label limits the
// JSON Schema states as keywords (maxProperties, the key and value
// patterns) accept and refuse what CheckLabels does.
func TestJSONSchemaLabelKeywordsAgreeWithCheckLabels(t *testing.T) {
	labels := exportedSchema(t)["$defs"].(map[string]any)["Labels"].(map[string]any)
	if labels["maxProperties"] != float64(maxLabels) {
		t.Fatalf("maxProperties %v, want %d", labels["maxProperties"], maxLabels)
	}
	keyRE := regexp.MustCompile(labels["propertyNames"].(map[string]any)["pattern"].(string))
	valueRE := regexp.MustCompile(labels["additionalProperties"].(map[string]any)["pattern"].(string))
	for _, s := range []string{"a", "tier", "A-b_c.d", "x1", strings.Repeat("a", 63), strings.Repeat("a", 64), "", "-a", "a-", "a b",
		"example.com/tier", "a.b.c/x", "Example.com/x", "example/x", "example.com/", "/x", "é", "a/b/c"} {
		if got, want := keyRE.MatchString(s), labelKeyProblem(s) == ""; got != want {
			t.Errorf("key %q: JSON Schema accepts %v, CheckLabels %v", s, got, want)
		}
		if !strings.Contains(s, "/") {
			if got, want := valueRE.MatchString(s), labelValueProblem(s) == ""; got != want {
				t.Errorf("value %q: JSON Schema accepts %v, CheckLabels %v", s, got, want)
			}
		}
	}
}
