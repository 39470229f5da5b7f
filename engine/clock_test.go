package engine

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
)

// TestTheEngineTimeNeverGoesBackwards: a step whose now was taken ten
// seconds before a rollout was created (it waited for a connection, for
// Redis or for a core; or it runs on a replica whose clock is behind) runs
// after the creation. Its items are dispatched at the creation's time, not
// before the rollout existed, and a result that comes with an even older
// now completes them no earlier than they were dispatched. The lease keeps
// its holder's clock.
func TestTheEngineTimeNeverGoesBackwards(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		behind := func(d time.Duration) *Engine {
			e := New(rdb, WithPrefix("test"), WithLogger(zerolog.Nop()), WithClock(clock.NewFake(h.clk.Now().Add(-d))))
			if err := e.Load(h.ctx); err != nil {
				t.Fatal(err)
			}
			return e
		}
		h.clk.Advance(10 * time.Second)
		created := h.clk.Now()
		id, _ := h.create(spec("web", 2, "web", 1, 2, 0))
		if _, err := behind(10*time.Second).Step(h.ctx, h.fence); err != nil {
			t.Fatal(err)
		}
		r, items := h.rollout(id)
		if !r.CreatedAt.Equal(created) {
			t.Fatalf("rollout created at %v, want %v", r.CreatedAt, created)
		}
		for _, it := range items {
			if it.Status != fleetwave.ItemInProgress || !it.DispatchedAt.Equal(created) {
				t.Fatalf("item %s: %s, dispatched at %v; want in_progress at the creation's time %v", it.ID, it.Status, it.DispatchedAt, created)
			}
		}

		late := behind(time.Minute)
		for _, a := range h.pollAll(2) {
			if err := late.Complete(h.ctx, a.Node, resultOf(a, fleetwave.ResultSuccess)); err != nil {
				t.Fatal(err)
			}
		}
		r, items = h.rollout(id)
		for _, it := range items {
			if it.Status != fleetwave.ItemCompleted || it.CompletedAt.Before(it.DispatchedAt) {
				t.Fatalf("item %s: %s, dispatched at %v, completed at %v", it.ID, it.Status, it.DispatchedAt, it.CompletedAt)
			}
		}
		if r.Status != fleetwave.RolloutCompleted || r.UpdatedAt.Before(created) {
			t.Fatalf("rollout %s, updated at %v (created at %v)", r.Status, r.UpdatedAt, created)
		}

		// the lease is the holder's: renewed by a clock behind the
		// engine's time, it expires a TTL after that clock's now
		if err := late.Renew(h.ctx, "hub-a", h.fence, time.Hour); err != nil {
			t.Fatal(err)
		}
		exp, err := rdb.HGet(h.ctx, "fw{test}:lease", "expires_at").Int64()
		if err != nil {
			t.Fatal(err)
		}
		if want := created.Add(-time.Minute + time.Hour).UnixMilli(); exp != want {
			t.Fatalf("lease expires at %d, want %d (the renewing clock's now plus the TTL)", exp, want)
		}
	})
}
