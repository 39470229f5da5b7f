package engine

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

func TestFenceFloor(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		var floor atomic.Int64
		h := newHarness(t, rdb, WithFenceFloor(func(context.Context) (int64, error) { return floor.Load(), nil }))
		if h.fence != 1 {
			t.Fatalf("first fence %d, want 1", h.fence)
		}
		t.Run("after the data is lost the fence goes above the floor", func(t *testing.T) {
			if err := rdb.FlushAll(h.ctx).Err(); err != nil {
				t.Fatal(err)
			}
			floor.Store(7)
			f, err := h.e.Campaign(h.ctx, "hub-a", time.Hour)
			if err != nil || f != 8 {
				t.Fatalf("campaign after FLUSHALL with floor 7: fence %d (%v), want 8", f, err)
			}
			_, err = h.e.Step(h.ctx, h.fence)
			mustErr(t, err, ErrStaleFence)
			h.fence = f
		})
		t.Run("a floor at the current epoch keeps the lease", func(t *testing.T) {
			floor.Store(8)
			if f, err := h.e.Campaign(h.ctx, "hub-a", time.Hour); err != nil || f != 8 {
				t.Fatalf("fence %d (%v), want 8", f, err)
			}
		})
		t.Run("a floor above the epoch voids another owner's lease", func(t *testing.T) {
			floor.Store(20)
			f, err := h.e.Campaign(h.ctx, "hub-b", time.Hour)
			if err != nil || f != 21 {
				t.Fatalf("fence %d (%v), want 21", f, err)
			}
			mustErr(t, h.e.Renew(h.ctx, "hub-a", 8, time.Hour), ErrNotLeader)
		})
		t.Run("without a floor the engine's own highest fence is one", func(t *testing.T) {
			if err := rdb.FlushAll(h.ctx).Err(); err != nil {
				t.Fatal(err)
			}
			floor.Store(0)
			if f, err := h.e.Campaign(h.ctx, "hub-a", time.Hour); err != nil || f != 22 {
				t.Fatalf("fence %d (%v), want 22", f, err)
			}
		})
		t.Run("a floor error fails the campaign", func(t *testing.T) {
			boom := errors.New("git unreachable")
			e := New(rdb, WithPrefix("test"), WithClock(h.clk), WithFenceFloor(func(context.Context) (int64, error) { return 0, boom }))
			if _, err := e.Campaign(h.ctx, "hub-c", time.Hour); !errors.Is(err, boom) {
				t.Fatalf("error = %v", err)
			}
		})
	})
}

// TestRedisRestart restarts redis-server (no persistence) under the engine:
// the client dials whichever server is current.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	var addr atomic.Value
	addr.Store(srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: "current", Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", addr.Load().(string))
	}})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHarness(t, rdb)
	ctx := h.ctx
	// a few leader changes so the epoch is well above 1
	for range 3 {
		if err := h.e.Resign(ctx, "hub-a", h.fence); err != nil {
			t.Fatal(err)
		}
		f, err := h.e.Campaign(ctx, "hub-a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		h.fence = f
	}
	before := h.fence
	h.create(spec("web", 1, "web", 1, 1, 0))
	h.step()
	as := h.poll("n1")
	if len(as) != 1 || as[0].Fence != before {
		t.Fatalf("attempts %+v", as)
	}

	srv2 := redistest.Start(t)
	_ = rdb.ShutdownNoSave(ctx).Err() // the connection drops: an error is expected
	addr.Store(srv2.Addr)

	mustErr(t, h.e.Renew(ctx, "hub-a", before, time.Hour), ErrNotLeader)
	after, err := h.e.Campaign(ctx, "hub-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("fence after the restart %d, before %d: went back", after, before)
	}
	if h.e.runID == "" {
		t.Fatal("run_id of the new server not recorded")
	}
}

// TestRedisRestartKeepingData simulates a restart that kept the data (a
// changed run_id): the holder's lease is replaced by a higher fence.
func TestRedisRestartKeepingData(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	h := newHarness(t, rdb)
	ctx := h.ctx
	if h.e.runID == "" {
		t.Fatal("run_id not recorded at campaign")
	}
	h.create(spec("web", 1, "web", 1, 1, 0))
	h.step()
	as := h.poll("n1")
	old := h.fence

	t.Run("campaign by the holder after a restart gets a new epoch", func(t *testing.T) {
		h.e.runID = "a-previous-server"
		f, err := h.e.Campaign(ctx, "hub-a", time.Hour)
		if err != nil || f <= old {
			t.Fatalf("fence %d (%v), old %d", f, err, old)
		}
		_, err = h.e.Step(ctx, old)
		mustErr(t, err, ErrStaleFence)
		if len(as) != 1 || as[0].Fence >= f {
			t.Fatalf("attempt dispatched before the restart carries fence %d, new %d", as[0].Fence, f)
		}
		h.fence = f
	})
	t.Run("renew after a restart drops the lease, the next campaign bumps", func(t *testing.T) {
		h.e.runID = "a-previous-server"
		mustErr(t, h.e.Renew(ctx, "hub-a", h.fence, time.Hour), ErrNotLeader)
		_, err := h.e.Step(ctx, h.fence)
		mustErr(t, err, ErrStaleFence)
		f, err := h.e.Campaign(ctx, "hub-a", time.Hour)
		if err != nil || f <= h.fence {
			t.Fatalf("fence %d (%v), old %d", f, err, h.fence)
		}
		h.fence = f
		if err := h.e.Renew(ctx, "hub-a", f, time.Hour); err != nil {
			t.Fatalf("renew without a restart: %v", err)
		}
	})
	// the attempt of the old epoch still completes (agents are checked
	// against the attempt, not the lease)
	h.complete(as[0], fleetwave.ResultSuccess)
}

// TestRestartOfTheSameHubTakesAHigherFence: a hub restarted with a fixed
// hub id is a new process (NewOwner) and takes a new, strictly higher fence
// at once, without waiting for its old lease to expire; the earlier process,
// had it only been paused, is fenced out like any deposed leader and does
// not get the lease back.
func TestRestartOfTheSameHubTakesAHigherFence(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		ctx := h.ctx
		newEngine := func() *Engine {
			e := New(rdb, WithPrefix("test"), WithClock(h.clk), WithLogger(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)))
			if err := e.Load(ctx); err != nil {
				t.Fatal(err)
			}
			return e
		}
		lease := func() map[string]string {
			m, err := rdb.HGetAll(ctx, "fw{test}:lease").Result()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}

		t.Run("a new engine under the same owner gets a higher fence", func(t *testing.T) {
			f, err := newEngine().Campaign(ctx, "hub-a", time.Hour)
			if err != nil || f <= h.fence {
				t.Fatalf("campaign by a new engine as hub-a: fence %d (%v), held %d", f, err, h.fence)
			}
			_, err = h.e.Step(ctx, h.fence)
			mustErr(t, err, ErrStaleFence)
			mustErr(t, h.e.Renew(ctx, "hub-a", h.fence, time.Hour), ErrNotLeader)
			h.fence = f
		})

		t.Run("each restart with a new instance raises the fence, the old process is fenced out", func(t *testing.T) {
			prev, prevOwner, prevFence := (*Engine)(nil), "", h.fence
			for i := range 5 {
				e, owner := newEngine(), NewOwner("hub-a")
				f, err := e.Campaign(ctx, owner, time.Hour) // the old lease has an hour left
				if err != nil || f <= prevFence {
					t.Fatalf("restart %d: fence %d (%v), want above %d", i, f, err, prevFence)
				}
				l := lease()
				if _, inst := splitOwner(owner); l["owner"] != "hub-a" || l["instance"] != inst || l["fence"] != fenceArg(f) {
					t.Fatalf("restart %d: lease %v, want hub-a, instance %s, fence %d", i, l, inst, f)
				}
				if prev != nil {
					_, err := prev.Step(ctx, prevFence)
					mustErr(t, err, ErrStaleFence)
					mustErr(t, prev.Renew(ctx, prevOwner, prevFence, time.Hour), ErrNotLeader)
					// having held a lease, the old process waits like any
					// other replica: the new one keeps it
					_, err = prev.Campaign(ctx, prevOwner, time.Hour)
					mustErr(t, err, ErrNotLeader)
					if err := e.Renew(ctx, owner, f, time.Hour); err != nil {
						t.Fatalf("restart %d: renew by the new process: %v", i, err)
					}
				}
				if again, err := e.Campaign(ctx, owner, time.Hour); err != nil || again != f {
					t.Fatalf("restart %d: campaign by the holder: fence %d (%v), want %d", i, again, err, f)
				}
				prev, prevOwner, prevFence = e, owner, f
			}
			h.e, h.fence = prev, prevFence
			if _, err := h.e.Step(ctx, h.fence); err != nil {
				t.Fatalf("step by the newest process: %v", err)
			}

			t.Run("a new process of another hub id still waits for the lease", func(t *testing.T) {
				_, err := newEngine().Campaign(ctx, NewOwner("hub-b"), time.Hour)
				mustErr(t, err, ErrNotLeader)
			})
			t.Run("the hub id alone resigns the lease at its fence", func(t *testing.T) {
				mustErr(t, h.e.Resign(ctx, "hub-a", h.fence-1), ErrNotLeader)
				mustErr(t, h.e.Resign(ctx, "hub-b", h.fence), ErrNotLeader)
				if err := h.e.Resign(ctx, "hub-a", h.fence); err != nil {
					t.Fatal(err)
				}
				if l := lease(); len(l) != 0 {
					t.Fatalf("lease after resign: %v", l)
				}
			})
		})
	})
}
