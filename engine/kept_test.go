package engine

import (
	"context"
	"reflect"
	"slices"
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

// TestRolloutChunksShareWhatDidNotChange: RolloutChunks returns a large
// rollout's items in chunks of KeptChunk; a later read returns the same
// chunk (same address) where none of its items changed, a new one where
// one did or items were appended, and never writes a chunk it returned
// (the harness checks that after every step of every test too). Rollout
// gives the same items in one slice.
func TestRolloutChunksShareWhatDidNotChange(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		id, _ := h.create(spec("web", 2*KeptChunk+500, "web", 1, 5, 0))
		e := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
		read := func() [][]fleetwave.Item {
			t.Helper()
			_, chunks, err := e.RolloutChunks(h.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			_, items, err := e.Rollout(h.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var flat []fleetwave.Item
			for _, c := range chunks {
				flat = append(flat, c...)
			}
			if !reflect.DeepEqual(flat, items) {
				t.Fatalf("Rollout's %d items are not RolloutChunks' %d", len(items), len(flat))
			}
			return chunks
		}
		same := func(a, b []fleetwave.Item) bool { return &a[0] == &b[0] }
		c1 := read()
		if len(c1) != 3 || len(c1[0]) != KeptChunk || len(c1[2]) != 500 {
			t.Fatalf("%d chunks (%d, ..., %d items): want 3 of %d, %d and 500", len(c1), len(c1[0]), len(c1[len(c1)-1]), KeptChunk, KeptChunk)
		}
		copy0 := slices.Clone(c1[0])
		if c2 := read(); !same(c1[0], c2[0]) || !same(c1[1], c2[1]) || !same(c1[2], c2[2]) {
			t.Fatal("nothing changed, yet a chunk is new")
		}
		h.step() // dispatches the first 5 items, all in the first chunk
		c3 := read()
		if same(c1[0], c3[0]) || c3[0][0].Status != fleetwave.ItemInProgress {
			t.Fatalf("the first chunk's items were dispatched: want a new chunk saying so, got the same: %t, %s", same(c1[0], c3[0]), c3[0][0].Status)
		}
		if !same(c1[1], c3[1]) || !same(c1[2], c3[2]) {
			t.Fatal("the wave changed the first chunk only, yet another chunk is new")
		}
		if !reflect.DeepEqual(c1[0], copy0) {
			t.Fatal("the first chunk returned before was written")
		}
		more := spec("web", 2*KeptChunk+600, "web", 1, 5, 0) // 100 items join
		more.Items = more.Items[2*KeptChunk+500:]
		h.create(more)
		c4 := read()
		if len(c4) != 3 || len(c4[2]) != 600 || same(c3[2], c4[2]) || len(c3[2]) != 500 {
			t.Fatalf("after 100 items joined: chunks %d, last of %d items (the one before %d): want 3, a new last one of 600", len(c4), len(c4[2]), len(c3[2]))
		}
		if !same(c3[1], c4[1]) {
			t.Fatal("items joined the last chunk, yet the second is new")
		}
	})
}

// itemReads counts, while armed, the items a read asks Redis for (one
// HMGET each).
type itemReads struct {
	armed atomic.Bool
	n     atomic.Int64
}

func (h *itemReads) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *itemReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *itemReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() {
			for _, c := range cmds {
				if c.Name() == "hmget" {
					h.n.Add(1)
				}
			}
		}
		return next(ctx, cmds)
	}
}

// TestAChunkedCreationIsReadAsItsChunksLand: the Engine that creates a
// rollout in chunks reads each chunk's items into the ones it keeps, in
// the background, as the chunks land. Its next read of the rollout (the
// first status write after the creation) reads again only the items
// changed since, not the rollout whole, and gives what a whole read
// gives. At 100,000 items that whole read was the slowest status write
// of every run.
func TestAChunkedCreationIsReadAsItsChunksLand(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		reads := &itemReads{}
		rdb.AddHook(reads)
		const n, wave = 2*CreateChunk + 500, 40
		res, err := h.e.CreateRolloutResult(h.ctx, h.fence, spec("web", n, "web", 1, wave, 0))
		if err != nil {
			t.Fatal(err)
		}
		// (not len(res.Items): on a loaded machine a chunk's script can
		// outlast the client's read timeout, and the script sent again
		// creates nothing new; read below counts the rollout's items)
		if res.ID == "" {
			t.Fatalf("no rollout created: %+v", res)
		}
		h.e.warming.finish.Wait()
		// what each read asks Redis for
		read := func() ([]fleetwave.Item, int64) {
			t.Helper()
			reads.n.Store(0)
			reads.armed.Store(true)
			_, items, err := h.e.Rollout(h.ctx, res.ID)
			reads.armed.Store(false)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != n {
				t.Fatalf("%d items read, want %d", len(items), n)
			}
			return items, reads.n.Load()
		}
		before, got := read()
		if got != 0 {
			t.Fatalf("the first read after the creation asked for %d of its %d items, want none", got, n)
		}
		// the first wave: its items change (h.step would read the
		// rollout after it)
		if _, err := h.e.Step(h.ctx, h.fence); err != nil {
			t.Fatal(err)
		}
		items, got := read()
		changed := 0
		for i := range items {
			if items[i] != before[i] {
				changed++
			}
		}
		if changed < wave || got != int64(changed) {
			t.Fatalf("the read after the first wave asked for %d items, want the %d it changed (at least the wave's %d)", got, changed, wave)
		}
		fresh := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
		_, whole, err := fresh.Rollout(h.ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(items, whole) {
			t.Fatal("the items read as the chunks landed are not those a whole read gives")
		}
	})
}
