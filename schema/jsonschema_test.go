package schema

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"cuelang.org/go/cue"
)

// TestJSONSchemaNamesEveryField checks that the exported document has one
// definition per kind, and that each names every field of its CUE
// definition.
func TestJSONSchemaNamesEveryField(t *testing.T) {
	doc := exportedSchema(t)
	if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", doc["$schema"])
	}
	defs := doc["$defs"].(map[string]any)
	ctx, _ := newContext()
	s := ctx.CompileBytes(schemaSource)
	for kind, names := range definitions {
		def, ok := defs[string(kind)].(map[string]any)
		if !ok {
			t.Errorf("no $defs entry for kind %s", kind)
			continue
		}
		props := def["properties"].(map[string]any)
		it, err := s.LookupPath(cue.ParsePath(names[0])).Fields(cue.Optional(true))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for it.Next() {
			n++
			if _, ok := props[it.Selector().Unquoted()]; !ok {
				t.Errorf("%s: field %s missing from the JSON Schema", kind, it.Selector().Unquoted())
			}
		}
		if n != len(props) {
			t.Errorf("%s: %d CUE fields, %d JSON Schema properties", kind, n, len(props))
		}
		if def["additionalProperties"] != false {
			t.Errorf("%s: definition is not closed", kind)
		}
	}
}

// TestJSONSchemaAcceptsExamplesAndRefusesBrokenFiles validates every YAML
// and JSON object of examples/fleet and of the scaffold against the
// exported document with a small validator of the keywords it uses, and
// checks that schema-level mistakes of the broken corpus are refused.
func TestJSONSchemaAcceptsExamplesAndRefusesBrokenFiles(t *testing.T) {
	doc := exportedSchema(t)
	dir := t.TempDir()
	if err := Scaffold(dir); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, root := range []string{filepath.Join("..", "examples", "fleet"), dir} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if _, ok := ObjectKeyForPath(filepath.ToSlash(rel)); !ok {
				return nil
			}
			x := decodeObjectFile(t, p)
			if err := validateJSONSchema(doc, doc, x, rel); err != nil {
				t.Errorf("%s: %v", p, err)
			}
			checked++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 20 {
		t.Errorf("validated only %d files", checked)
	}
	for _, c := range []struct{ file, src string }{
		{"unknown field", `{"kind": "node", "name": "n1", "colour": "blue"}`},
		{"bad criticality", `{"kind": "node", "name": "n1", "criticality": "urgent"}`},
		{"max_concurrent 0", `{"kind": "trigger", "name": "t", "block_name": "b", "max_concurrent": 0}`},
		{"percent above 100", `{"kind": "trigger", "name": "t", "block_name": "b", "failure_threshold_percent": 150}`},
		{"bad name", `{"kind": "node", "name": "Edge_1"}`},
		{"bad operator", `{"kind": "trigger", "name": "t", "block_name": "b", "selector": {"match_expressions": [{"key": "a", "operator": "equals"}]}}`},
		{"missing actions", `{"kind": "block", "name": "b"}`},
		{"unknown kind", `{"kind": "pod", "name": "p"}`},
	} {
		var x any
		if err := json.Unmarshal([]byte(c.src), &x); err != nil {
			t.Fatal(err)
		}
		if validateJSONSchema(doc, doc, x, "") == nil {
			t.Errorf("%s: accepted %s", c.file, c.src)
		}
	}
}

func exportedSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := ExportJSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the JSON Schema is not JSON: %v", err)
	}
	return doc
}

// decodeObjectFile reads a .cue, .yaml or .json object file as plain JSON data.
func decodeObjectFile(t *testing.T, p string) any {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, errs := parseFile(filepath.ToSlash(p), data, DefaultMaxFileSize)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", p, errs)
	}
	ctx, _ := newContext()
	raw, err := ctx.BuildFile(f).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		t.Fatal(err)
	}
	return x
}

// validateJSONSchema is a small validator of the draft 2020-12 keywords the
// exported document uses; it returns the first violation.
func validateJSONSchema(root map[string]any, s any, x any, at string) error {
	sch, ok := s.(map[string]any)
	if !ok {
		if s == false {
			return fmt.Errorf("%s: not allowed", at)
		}
		return nil
	}
	if ref, ok := sch["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		target, ok := root["$defs"].(map[string]any)[name]
		if !ok {
			return fmt.Errorf("%s: unresolved $ref %s", at, ref)
		}
		if err := validateJSONSchema(root, target, x, at); err != nil {
			return err
		}
	}
	if c, ok := sch["const"]; ok && fmt.Sprint(c) != fmt.Sprint(x) {
		return fmt.Errorf("%s: %v is not %v", at, x, c)
	}
	if e, ok := sch["enum"].([]any); ok && !slices.ContainsFunc(e, func(v any) bool { return fmt.Sprint(v) == fmt.Sprint(x) }) {
		return fmt.Errorf("%s: %v not in %v", at, x, e)
	}
	if ty, ok := sch["type"].(string); ok {
		var good bool
		switch ty {
		case "object":
			_, good = x.(map[string]any)
		case "array":
			_, good = x.([]any)
		case "string":
			_, good = x.(string)
		case "boolean":
			_, good = x.(bool)
		case "number":
			_, good = x.(float64)
		case "integer":
			f, isNum := x.(float64)
			good = isNum && f == math.Trunc(f)
		}
		if !good {
			return fmt.Errorf("%s: %v is not of type %s", at, x, ty)
		}
	}
	if f, ok := x.(float64); ok {
		if m, ok := sch["minimum"].(float64); ok && f < m {
			return fmt.Errorf("%s: %v < %v", at, f, m)
		}
		if m, ok := sch["maximum"].(float64); ok && f > m {
			return fmt.Errorf("%s: %v > %v", at, f, m)
		}
		if m, ok := sch["exclusiveMinimum"].(float64); ok && f <= m {
			return fmt.Errorf("%s: %v <= %v", at, f, m)
		}
	}
	if pat, ok := sch["pattern"].(string); ok {
		if str, ok := x.(string); ok && !regexp.MustCompile(pat).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", at, str, pat)
		}
	}
	for _, sub := range list(sch["allOf"]) {
		if err := validateJSONSchema(root, sub, x, at); err != nil {
			return err
		}
	}
	if one := list(sch["oneOf"]); len(one) > 0 {
		n := 0
		for _, sub := range one {
			if validateJSONSchema(root, sub, x, at) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: matches %d of the oneOf alternatives, expected 1", at, n)
		}
	}
	if not, ok := sch["not"]; ok && validateJSONSchema(root, not, x, at) == nil {
		return fmt.Errorf("%s: matches a 'not' schema", at)
	}
	if arr, ok := x.([]any); ok {
		for i, e := range arr {
			if err := validateJSONSchema(root, sch["items"], e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	if obj, ok := x.(map[string]any); ok {
		for _, r := range list(sch["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: required %s missing", at, r)
			}
		}
		props, _ := sch["properties"].(map[string]any)
		for k, v := range obj {
			if p, ok := props[k]; ok {
				if err := validateJSONSchema(root, p, v, at+"."+k); err != nil {
					return err
				}
			} else if ap, ok := sch["additionalProperties"]; ok {
				if err := validateJSONSchema(root, ap, v, at+"."+k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func list(x any) []any {
	l, _ := x.([]any)
	return l
}
