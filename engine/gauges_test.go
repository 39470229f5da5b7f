package engine

import (
	"maps"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// TestGaugesCountTheOpenRolloutsItems: the gauges count the items of the
// open rollouts by status and reason as Rollout reads them, after each
// change (a wave started, results, a retry, a rollout finished); a
// finished rollout's items are not counted. The scripts count them as
// they write them; a rollout created before they did is read item by item.
func TestGaugesCountTheOpenRolloutsItems(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		web, _ := h.create(spec("web", 5, "web", 1, 2, 1))
		db, _ := h.create(spec("db", 2, "db", 1, 2, 0))
		// what a new Engine, which keeps nothing yet, reads of the items
		want := func(ids ...string) map[StatusReason]int {
			t.Helper()
			fresh := New(rdb, WithClock(h.clk), WithPrefix("test"))
			out := map[StatusReason]int{}
			for _, id := range ids {
				_, items, err := fresh.Rollout(h.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range items {
					out[StatusReason{string(it.Status), it.Reason}]++
				}
			}
			return out
		}
		check := func(what string, ids ...string) {
			t.Helper()
			g, err := h.e.Gauges(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if w := want(ids...); !maps.Equal(g.Items, w) {
				t.Fatalf("%s: items counted %v, want %v", what, g.Items, w)
			}
		}
		check("created", web, db)
		h.step()
		check("first waves started", web, db)
		as := h.pollAll(5)
		for _, a := range as {
			class := fleetwave.ResultSuccess
			if a.Node == "n1" && a.Block == "web" {
				class = fleetwave.ResultTransient
			}
			h.complete(a, class)
		}
		check("results: db done, web's next wave, n1 retrying", web)
		g, _ := h.e.Gauges(h.ctx)
		if g.Items[StatusReason{"retrying", "backoff"}] != 1 || g.Items[StatusReason{"completed", ""}] != 1 {
			t.Fatalf("items counted %v, want web's n1 retrying and n2 completed", g.Items)
		}

		// a rollout an older build created has no counts: its items are
		// read one by one
		if err := rdb.HDel(h.ctx, h.e.key("r", web), "isr").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Del(h.ctx, h.e.key("isr", web)).Err(); err != nil {
			t.Fatal(err)
		}
		check("a rollout without counts", web)
	})
}
