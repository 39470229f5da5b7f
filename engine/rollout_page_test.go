package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
)

// walkPage reads one page and checks what holds of every page: at most
// limit items, all of rollout id, and the rollout's counters those of the
// whole rollout (read with Rollout right after).
func (h *harness) walkPage(id, after string, limit int) ([]fleetwave.Item, bool) {
	h.t.Helper()
	r, items, more, err := h.e.RolloutPage(h.ctx, id, after, limit)
	if err != nil {
		h.t.Fatalf("page of %s after %q: %v", id, after, err)
	}
	whole, all := h.rollout(id)
	if r.ID != id || r.Counters != whole.Counters || r.Counters.Total != int64(len(all)) {
		h.t.Fatalf("page of %s after %q: rollout %s with counters %+v, want %s with the whole rollout's %+v (%d items)",
			id, after, r.ID, r.Counters, id, whole.Counters, len(all))
	}
	if len(items) > limit {
		h.t.Fatalf("page of %s after %q: %d items, limit %d", id, after, len(items), limit)
	}
	for _, it := range items {
		if it.Rollout != id {
			h.t.Fatalf("page of %s holds item %s of rollout %s", id, it.ID, it.Rollout)
		}
	}
	return items, more
}

func itemIDs(items []fleetwave.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// TestRolloutPageWalksEveryItemOnceInOrder: following the cursors returns
// every item of a rollout exactly once, in dispatch order, while items
// change state and new nodes join the rollout during the walk; the pages
// carry the counters of the whole rollout.
func TestRolloutPageWalksEveryItemOnceInOrder(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		full := spec("web", 9, "web", 1, 2, 0)
		first := full
		first.Items = full.Items[:7]
		id, _ := h.create(first)

		var walked []fleetwave.Item
		page, more := h.walkPage(id, "", 3)
		walked = append(walked, page...)
		if len(page) != 3 || !more {
			t.Fatalf("first page: %d items, more %v; want 3 and more", len(page), more)
		}

		// between pages: a wave runs (statuses change), and two nodes
		// that reported later join the same event as new items
		h.step()
		for _, a := range h.pollAll(9) {
			h.complete(a, fleetwave.ResultSuccess)
		}
		h.step()
		joined := full
		joined.Items = full.Items[7:]
		if got, newItems := h.create(joined); got != id || len(newItems) != 2 {
			t.Fatalf("joining spec: rollout %s with %v, want %s with 2 new items", got, newItems, id)
		}

		for more {
			page, more = h.walkPage(id, walked[len(walked)-1].ID, 3)
			walked = append(walked, page...)
			if len(walked) > 9 {
				t.Fatalf("the walk returned %d items, the rollout holds 9: %v", len(walked), itemIDs(walked))
			}
		}
		_, all := h.rollout(id)
		if !slices.Equal(itemIDs(walked), itemIDs(all)) {
			t.Fatalf("walk %v, want every item once in dispatch order %v", itemIDs(walked), itemIDs(all))
		}
		// the statuses are read per page: the items read after the wave
		// show it
		if last := walked[len(walked)-1]; last.ID != id+".9" || last.Status != all[8].Status {
			t.Fatalf("last item %s is %s, want %s.9 as %s", last.ID, last.Status, id, all[8].Status)
		}

		// the last item as cursor: an empty last page
		r, items, more, err := h.e.RolloutPage(h.ctx, id, id+".9", 3)
		if err != nil || len(items) != 0 || more || r.ID != id {
			t.Fatalf("page after the last item: %s, %d items, more %v, %v; want none and no more", r.ID, len(items), more, err)
		}
		// one page for all: no more
		if items, more := h.walkPage(id, "", 9); len(items) != 9 || more {
			t.Fatalf("page of 9 of 9 items: %d items, more %v", len(items), more)
		}
	})
}

// TestRolloutPageRefusesForeignCursors: a cursor that is not an item of the
// rollout is ErrInvalidCursor; an unknown rollout is ErrNotFound.
func TestRolloutPageRefusesForeignCursors(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		web, _ := h.create(spec("web", 3, "web", 1, 2, 0))
		db, _ := h.create(spec("db", 3, "db", 1, 2, 0))
		for _, after := range []string{db + ".1", web + ".0", web + ".4", web + ".01", web + ".x", web + ".", web, "n1"} {
			_, items, _, err := h.e.RolloutPage(h.ctx, web, after, 2)
			if !errors.Is(err, ErrInvalidCursor) || items != nil {
				t.Errorf("cursor %q: %d items, %v; want ErrInvalidCursor", after, len(items), err)
			}
		}
		if _, _, _, err := h.e.RolloutPage(h.ctx, "nope", "", 2); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown rollout: %v, want ErrNotFound", err)
		}
		if _, _, _, err := h.e.RolloutPage(h.ctx, web, "", 0); err == nil {
			t.Error("limit 0 answered a page, want an error")
		}
	})
}

// BenchmarkRolloutPage reads a rollout of 10,000 items as the console's
// first page (500 items) and whole (Rollout: again, with nothing changed,
// and anew, by an Engine that kept nothing):
//
//	go test -run XXX -bench RolloutPage ./engine/
func BenchmarkRolloutPage(b *testing.B) {
	const n, page = 10000, 500
	ctx := context.Background()
	rdb := benchRedis(b)
	e := New(rdb, WithClock(clock.NewFake(t0)), WithPrefix("bench"))
	if err := e.Load(ctx); err != nil {
		b.Fatal(err)
	}
	fence, err := e.Campaign(ctx, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	id, _, err := e.CreateRollout(ctx, fence, benchSpec("bench", n, n, 100))
	if err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("first_page_%d_of_%d", page, n), func(b *testing.B) {
		for b.Loop() {
			if _, items, more, err := e.RolloutPage(ctx, id, "", page); err != nil || len(items) != page || !more {
				b.Fatalf("%d items, more %v, %v", len(items), more, err)
			}
		}
	})
	b.Run(fmt.Sprintf("last_page_%d_of_%d", page, n), func(b *testing.B) {
		after := fmt.Sprintf("%s.%d", id, n-page)
		for b.Loop() {
			if _, items, more, err := e.RolloutPage(ctx, id, after, page); err != nil || len(items) != page || more {
				b.Fatalf("%d items, more %v, %v", len(items), more, err)
			}
		}
	})
	b.Run(fmt.Sprintf("whole_%d", n), func(b *testing.B) {
		for b.Loop() {
			if _, items, err := e.Rollout(ctx, id); err != nil || len(items) != n {
				b.Fatalf("%d items, %v", len(items), err)
			}
		}
	})
	b.Run(fmt.Sprintf("whole_%d_anew", n), func(b *testing.B) {
		var cost redisCost
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			fresh := New(rdb, WithClock(clock.NewFake(t0)), WithPrefix("bench"))
			timed(b, rdb, &cost, func() {
				if _, items, err := fresh.Rollout(ctx, id); err != nil || len(items) != n || items[n-1].Node == "" {
					b.Fatalf("%d items, %v", len(items), err)
				}
			})
			b.StartTimer()
		}
		cost.report(b)
	})
}
