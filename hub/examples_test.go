package hub

import (
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
)

// TestExampleFleetRendersValidConfigs: every template of examples/fleet
// renders, on every node in scope, a config its block's config_schema
// accepts: the demo never starts with blocked items.
func TestExampleFleetRendersValidConfigs(t *testing.T) {
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := v.LoadDir("../examples/fleet")
	if err != nil {
		t.Fatal(err)
	}
	opts := reconciler.Options{ValidateConfig: schema.ValidateConfig,
		Credential: func(scope, name string, n int) (string, error) { return "placeholder-credential-value", nil }}
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	plan := reconciler.PlanWith(snap, fleetwave.Observations{}, now, opts)
	for _, p := range plan.Problems {
		t.Errorf("%s on %s (brc %s): %s: %s", p.Block, p.Node, p.Trigger, p.Reason, p.Message)
	}
	items := 0
	for _, r := range plan.Rollouts {
		for _, it := range r.Items {
			items++
			if it.BlockReason != "" {
				t.Errorf("%s: blocked %s: %s", it.Instance(), it.BlockReason, it.BlockMessage)
			}
		}
	}
	if items == 0 {
		t.Fatal("the example fleet plans nothing")
	}
}
