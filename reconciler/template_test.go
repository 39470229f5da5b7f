package reconciler

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// TestRenderedConfigMustBeAMapping plans one instance per template and
// checks that every rendered config that is not one YAML mapping blocks
// its item with invalid_config (never dispatched, listed as a problem),
// with a message naming the shape and no rendered value, and that an empty
// rendering is "no config" only for a block without config_schema.
func TestRenderedConfigMustBeAMapping(t *testing.T) {
	tests := []struct {
		name, template string
		schema         string // the block's config_schema
		wantMsg        string // "" = the item is dispatchable
	}{
		{"a mapping", "node: {{ node.id }}\nport: 8080\n", "", ""},
		{"invalid YAML", "node: {{ node.id }}\n  port: [8080\n", "", "rendered config is not valid YAML"},
		{"a list", "- {{ node.id }}\n- secret-value\n", "", "rendered config is a list, expected a YAML mapping"},
		{"a scalar", "{{ node.id }}-secret-value\n", "", "rendered config is a single value (str), expected a YAML mapping"},
		{"a number", "42\n", "", "rendered config is a single value (int), expected a YAML mapping"},
		{"an explicit null", "null\n", "", "rendered config is a single value (null), expected a YAML mapping"},
		{"two documents", "a: 1\n---\nb: 2\n", "", "rendered config holds 2 YAML documents, expected one mapping"},
		{"empty without config_schema", "", "", ""},
		{"comments only without config_schema", "# nothing to configure\n\n", "", ""},
		{"empty with config_schema", "{# nothing #}\n", "{port?: int}", "rendered config is empty, expected a YAML mapping (the block has a config_schema)"},
		{"a mapping with config_schema", "port: 8080\n", "{port?: int}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := testSnapshot()
			snap.Blocks["operator"].ConfigSchema = tt.schema
			snap.Triggers["op"].BlockConfigTemplate = tt.template
			opts := Options{ValidateConfig: func(schema, rendered string) error { return nil }}
			plan := PlanWith(snap, nil, now, opts)
			if len(plan.Rollouts) != 1 || len(plan.Rollouts[0].Items) != 3 {
				t.Fatalf("plan = %+v, want one rollout of 3 items", plan.Rollouts)
			}
			for _, it := range plan.Rollouts[0].Items {
				if tt.wantMsg == "" {
					if it.BlockReason != "" {
						t.Fatalf("%s: blocked %s: %s", it.Node, it.BlockReason, it.BlockMessage)
					}
					continue
				}
				if it.BlockReason != ReasonInvalidConfig || !strings.Contains(it.BlockMessage, "block operator: "+tt.wantMsg) {
					t.Fatalf("%s: blocked %q: %q, want %s: ...%s", it.Node, it.BlockReason, it.BlockMessage, ReasonInvalidConfig, tt.wantMsg)
				}
				if it.Payload.Command != "" || it.Payload.Config != "" {
					t.Fatalf("%s: a blocked item carries a payload: %+v", it.Node, it.Payload)
				}
				if strings.Contains(it.BlockMessage, "secret-value") {
					t.Fatalf("%s: the message prints a rendered value: %s", it.Node, it.BlockMessage)
				}
			}
			if want := 0; tt.wantMsg != "" {
				want = 3
				if len(plan.Problems) != want {
					t.Fatalf("problems = %+v, want %d", plan.Problems, want)
				}
				for _, p := range plan.Problems {
					if p.Reason != ReasonInvalidConfig {
						t.Fatalf("problem %+v, want reason %s", p, ReasonInvalidConfig)
					}
				}
			}
		})
	}
}

// TestConfigShapeErrorKind: the shape check wraps ErrConfigNotMapping and
// runs before config_schema (which is not asked about a list).
func TestConfigShapeErrorKind(t *testing.T) {
	asked := false
	r := newRenderer(Options{ValidateConfig: func(string, string) error { asked = true; return nil }})
	b := &fleetwave.Block{Name: "web", ConfigSchema: "{a?: int}"}
	_, err := r.renderBlock(b, "t", "- a\n", nil, "")
	if !errors.Is(err, ErrConfigNotMapping) || errors.Is(err, ErrTemplate) {
		t.Fatalf("err = %v, want ErrConfigNotMapping", err)
	}
	if asked {
		t.Fatal("config_schema was checked on a list")
	}
	if _, err := r.renderBlock(b, "t", "a: 1\n", nil, ""); err != nil || !asked {
		t.Fatalf("a mapping: err = %v, schema asked = %v", err, asked)
	}
}

// TestConfigShapeAnswersCachedAsParsed: the shape check's cache answers
// what parsing answers, for the same config rendered for blocks with and
// without a config_schema and of other names (the messages name the
// block), asked again and again.
func TestConfigShapeAnswersCachedAsParsed(t *testing.T) {
	blocks := []*fleetwave.Block{nil, {Name: "web"}, {Name: "web", ConfigSchema: "{...}"}, {Name: "db"}, {Name: "db", ConfigSchema: "{port: int}"}}
	configs := []string{"", "---\n", "port: 80\n", "- a\n- b\n", "42\n", "a: 1\n---\nb: 2\n", "a: [\n", "*x\n", "\x01\x00web", "port: 81\n"}
	for range 2 {
		for _, b := range blocks {
			for _, c := range configs {
				want, got := parseConfigShape(b, c), checkConfigShape(b, c)
				if (want == nil) != (got == nil) || want != nil && (want.Error() != got.Error() || !errors.Is(got, ErrConfigNotMapping)) {
					t.Fatalf("block %+v, config %q: cached %v, parsed %v", b, c, got, want)
				}
			}
		}
	}
	if errEmpty := checkConfigShape(blocks[2], ""); errEmpty == nil || checkConfigShape(blocks[1], "") != nil {
		t.Fatal("an empty config: want an error only for the block with a config_schema")
	}
}
