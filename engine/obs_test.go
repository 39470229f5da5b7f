package engine

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// TestObservationsDecodedOnceStayCurrent: the engine keeps the
// observations it decoded, yet every read shows what Redis holds now:
// a report another engine (another hub replica) stored, an instance a
// result changed, a node's report alone. What a caller does to a report
// it got does not reach the next read.
func TestObservationsDecodedOnceStayCurrent(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		other := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
		report := func(e *Engine, node, version string, caps ...string) {
			t.Helper()
			if err := e.Report(h.ctx, fleetwave.Report{Node: node, SentAt: h.clk.Now(), Capabilities: caps,
				Instances: []fleetwave.InstanceStatus{{Block: "web", Version: version, Generation: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		read := func() fleetwave.Observations {
			t.Helper()
			obs, err := h.e.Observations(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return obs
		}
		report(h.e, "n1", "1.0", "gpu")
		report(h.e, "n2", "1.0")
		obs := read()
		if v := obs["n1"].Instances[0].Version; v != "1.0" || obs["n1"].Capabilities[0] != "gpu" {
			t.Fatalf("n1 observed as %+v", obs["n1"])
		}
		// a caller changing what it got
		obs["n1"].Instances[0].Version = "changed by a caller"
		obs["n1"].Capabilities[0] = "changed by a caller"
		obs = read()
		if v := obs["n1"].Instances[0].Version; v != "1.0" || obs["n1"].Capabilities[0] != "gpu" {
			t.Fatalf("a caller's change reached the next read: %+v", obs["n1"])
		}
		// another replica takes a new report of n1
		h.clk.Advance(1)
		report(other, "n1", "2.0", "gpu", "tpm")
		obs = read()
		if v := obs["n1"].Instances[0].Version; v != "2.0" || len(obs["n1"].Capabilities) != 2 {
			t.Fatalf("n1 after another replica's report: %+v", obs["n1"])
		}
		if v := obs["n2"].Instances[0].Version; v != "1.0" {
			t.Fatalf("n2 observed as %+v", obs["n2"])
		}
		// an instance changed without a new report (as a result does)
		if err := rdb.HSet(h.ctx, h.e.key("obsi", "n2"), "web", `{"block":"web","version":"3.0","generation":2}`).Err(); err != nil {
			t.Fatal(err)
		}
		if obs = read(); obs["n2"].Instances[0].Version != "3.0" || obs["n2"].Instances[0].Generation != 2 {
			t.Fatalf("n2 after its instance changed: %+v", obs["n2"])
		}
		if got, want := len(h.e.obs.nodes), 2; got != want {
			t.Fatalf("%d nodes kept decoded, want %d", got, want)
		}
	})
}
