package engine

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// TestInvalidConfigItemIsCreatedBlocked: an instance whose rendered config
// failed its block's config_schema gets an item that is counted and visible
// (blocked, with the message) but never dispatched, and is not re-created
// until a newer generation.
func TestInvalidConfigItemIsCreatedBlocked(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		s := spec("web", 2, "web", 3, 5, 3)
		s.Items[1].BlockReason = "invalid_config"
		s.Items[1].BlockMessage = "rendered config does not satisfy config_schema: port: expected int"
		s.Items[1].ConfigHash = ""
		s.Items[1].Payload = fleetwave.AttemptPayload{}
		id, items := h.create(s)
		h.step()
		as := h.pollAll(2)
		if len(as) != 1 || as[0].Node != "n1" {
			t.Fatalf("dispatched %v, want only n1", ids(as))
		}
		blocked := h.item(items[1])
		if blocked.Status != fleetwave.ItemBlocked || blocked.Reason != "invalid_config" ||
			blocked.Message != s.Items[1].BlockMessage || blocked.Attempts != 0 {
			t.Fatalf("n2 item = %+v, want blocked invalid_config with the message and no attempt", blocked)
		}
		h.complete(as[0], fleetwave.ResultSuccess)
		r, _ := h.rollout(id)
		if r.Status != fleetwave.RolloutCompleted || r.Counters.Total != 2 || r.Counters.Done != 1 || r.Counters.Failed != 1 {
			t.Fatalf("rollout %s counters %+v", r.Status, r.Counters)
		}

		again := spec("web-again", 2, "web", 3, 5, 3)
		again.Items = again.Items[1:]
		again.Items[0].BlockReason, again.Items[0].BlockMessage = s.Items[1].BlockReason, s.Items[1].BlockMessage
		again.Items[0].ConfigHash = ""
		if id, _ := h.create(again); id != "" {
			t.Fatalf("the same blocked instance and generation was created again as %s", id)
		}
		fixed := spec("web-fixed", 2, "web", 4, 5, 3)
		fixed.Items = fixed.Items[1:]
		if id, _ := h.create(fixed); id == "" {
			t.Fatal("a newer generation with a valid config was not created")
		}
		h.step()
		if as := h.poll("n2"); len(as) != 1 {
			t.Fatalf("n2 got %d attempts after the fix, want 1", len(as))
		}
	})
}
