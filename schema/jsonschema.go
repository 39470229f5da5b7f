package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/encoding/jsonschema"

	"github.com/fleetwave/fleetwave"
)

// JSONSchemaID is the $id of the document ExportJSONSchema returns.
const JSONSchemaID = "https://fleetwave.dev/schema/fleetwave.json"

// ExportJSONSchema returns a JSON Schema (draft 2020-12) document generated
// from the embedded CUE definitions: one entry of $defs per kind
// ("config", "trigger", "block", ...), plus the shared definitions they
// reference, and a top-level oneOf over the kinds, so editors can check
// YAML and JSON object files. It covers what CUE expresses; the Go checks
// (durations, cron, time zones, label syntax, templates, references between
// objects) run only in fleetwave validate. An error means the binary itself
// is broken.
func ExportJSONSchema() ([]byte, error) {
	ctx, err := newContext()
	if err != nil {
		return nil, err
	}
	s := ctx.CompileBytes(schemaSource, cue.Filename("schema/cue/"+SchemaFile))
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	defs := map[string]any{}
	var oneOf []any
	kinds := make([]string, 0, len(definitions))
	for k := range definitions {
		kinds = append(kinds, string(k))
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		name := definitions[fleetwave.Kind(k)][0]
		expr, err := jsonschema.Generate(s.LookupPath(cue.ParsePath(name)), &jsonschema.GenerateConfig{
			NameFunc: func(_ cue.Value, p cue.Path) string {
				return strings.TrimPrefix(p.String(), "#")
			},
		})
		if err != nil {
			return nil, fmt.Errorf("json schema of %s: %w", name, err)
		}
		raw, err := ctx.BuildExpr(expr).MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("json schema of %s: %w", name, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("json schema of %s: %w", name, err)
		}
		if sub, ok := doc["$defs"].(map[string]any); ok {
			for n, d := range sub {
				defs[n] = d
			}
			delete(doc, "$defs")
		}
		delete(doc, "$schema")
		doc["title"] = "fleetwave " + k
		defs[k] = doc
		oneOf = append(oneOf, map[string]any{"$ref": "#/$defs/" + k})
	}
	// The label rules fleetwave checks in Go (CheckLabels), as keywords
	// editors apply too.
	if l, ok := defs["Labels"].(map[string]any); ok {
		part := fmt.Sprintf(`[A-Za-z0-9]([-A-Za-z0-9_.]{0,%d}[A-Za-z0-9])?`, maxLabelLen-2)
		l["maxProperties"] = maxLabels
		l["propertyNames"] = map[string]any{"pattern": `^(` + strings.Trim(dnsPrefixRE.String(), "^$") + `/)?` + part + `$`}
		l["additionalProperties"] = map[string]any{"type": "string", "pattern": `^` + part + `$`}
	}
	flattenDescriptions(defs)
	out := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         JSONSchemaID,
		"title":       "fleetwave config repository object",
		"description": "One object of a fleetwave config repository; its kind names the definition in $defs. Generated from the fleetwave CUE schema.",
		"oneOf":       oneOf,
		"$defs":       defs,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return buf.Bytes(), nil
}

// flattenDescriptions makes each description of x (taken from the comments
// of the CUE file, line breaks included) one paragraph, as the reference
// prints it.
func flattenDescriptions(x any) {
	switch v := x.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "description" {
				v[k] = strings.Join(strings.Fields(s), " ")
				continue
			}
			flattenDescriptions(e)
		}
	case []any:
		for _, e := range v {
			flattenDescriptions(e)
		}
	}
}
