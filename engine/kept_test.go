package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// interleave runs another client's call amid the engine's next read of a
// rollout's change marks, where Redis may run it: between two commands
// of a plain pipeline (after the marks, before the rollout's record), or
// before or after a MULTI/EXEC transaction, never inside it.
type interleave struct {
	armed atomic.Bool
	fired atomic.Bool
	other func()
}

func (h *interleave) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *interleave) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *interleave) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		marks := -1
		for i, c := range cmds {
			if c.Name() == "zrangebyscore" && strings.Contains(c.String(), ":ichg:") {
				marks = i
			}
		}
		if marks < 0 || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		h.fired.Store(true)
		if cmds[0].Name() == "multi" {
			h.other()
			return next(ctx, cmds)
		}
		err := next(ctx, cmds[:marks+1])
		h.other()
		if err2 := next(ctx, cmds[marks+1:]); err == nil {
			err = err2
		}
		return err
	}
}

// TestARolloutIsNeverNewerThanItsItems: a result lands while another
// replica reads the rollout (the item's change mark already read, the
// rollout's record not yet): the read gives a completed rollout only with
// its items completed. Its marks, counter and record were a plain
// pipeline, which let the result's script run between them: the rollout
// read completed, its item in progress (a hub's end-to-end test saw it).
func TestARolloutIsNeverNewerThanItsItems(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		hook := &interleave{}
		rdb.AddHook(hook)
		h := newHarness(t, rdb)
		reader := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
		id, _ := h.create(spec("web", 1, "web", 1, 1, 0))
		h.step()
		a := h.poll("n1")[0]
		if _, _, err := reader.Rollout(h.ctx, id); err != nil { // its items kept
			t.Fatal(err)
		}
		hook.other = func() {
			if err := h.e.Complete(h.ctx, a.Node, resultOf(a, fleetwave.ResultSuccess)); err != nil {
				t.Error(err)
			}
		}
		hook.armed.Store(true)
		r, items, err := reader.Rollout(h.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !hook.fired.Load() {
			t.Fatal("the result did not land during the read")
		}
		if r.Status != fleetwave.RolloutCompleted || items[0].Status != fleetwave.ItemCompleted {
			t.Fatalf("rollout %s with its item %s; want both completed", r.Status, items[0].Status)
		}
	})
}
