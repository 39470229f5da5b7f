package schema

import (
	"slices"
	"strings"
	"testing"
)

// TestJSONSchemaDescribesEveryProperty: every property of every $defs
// entry of the JSON Schema export (nested objects included) carries a
// description, taken from the comment above the field in the CUE file.
func TestJSONSchemaDescribesEveryProperty(t *testing.T) {
	defs := exportedSchema(t)["$defs"].(map[string]any)
	var missing []string
	props := 0
	var walk func(s any, at string)
	walk = func(s any, at string) {
		m, ok := s.(map[string]any)
		if !ok {
			return
		}
		if ps, ok := m["properties"].(map[string]any); ok {
			for name, p := range ps {
				props++
				if d, _ := p.(map[string]any)["description"].(string); strings.TrimSpace(d) == "" {
					missing = append(missing, at+"."+name)
				}
				walk(p, at+"."+name)
			}
		}
		walk(m["items"], at+"[]")
		walk(m["additionalProperties"], at+".*")
		for _, k := range []string{"allOf", "anyOf", "oneOf"} {
			if l, ok := m[k].([]any); ok {
				for _, e := range l {
					walk(e, at)
				}
			}
		}
	}
	for name, d := range defs {
		walk(d, name)
	}
	if props < 90 {
		t.Errorf("walked only %d properties: the export's shape changed", props)
	}
	slices.Sort(missing)
	for _, p := range missing {
		t.Errorf("%s: no description (write a comment above the field in schema/cue/%s)", p, SchemaFile)
	}
}

// TestReferenceDescribesEveryField: every field row of the reference's
// tables has a description cell.
func TestReferenceDescribesEveryField(t *testing.T) {
	ref, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	header := false
	for i, line := range strings.Split(string(ref), "\n") {
		if !strings.HasPrefix(line, "|") {
			header = false
			continue
		}
		cells := tableCells(line)
		if cells[0] == "field" {
			header = true
			if cells[len(cells)-1] != "description" {
				t.Fatalf("line %d: a field table without a description column: %s", i+1, line)
			}
			continue
		}
		if !header || strings.Trim(cells[0], "-") == "" {
			continue // another table, or the header's rule
		}
		rows++
		if len(cells) != 5 {
			t.Errorf("line %d: %d cells, want 5: %s", i+1, len(cells), line)
			continue
		}
		if cells[4] == "" {
			t.Errorf("line %d: field %s has no description", i+1, cells[0])
		}
	}
	if rows < 90 {
		t.Errorf("found only %d field rows: the reference's shape changed", rows)
	}
}

// tableCells splits a Markdown table row into its trimmed cells (an
// escaped pipe, \|, stays in its cell).
func tableCells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}
