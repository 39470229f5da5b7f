package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

func TestWaves(t *testing.T) {
	tests := []struct {
		name          string
		items         int
		maxConcurrent int
		wantWaves     []int // wave of each item, in dispatch order
	}{
		{name: "max_concurrent 1 over 3 items gives 3 waves", items: 3, maxConcurrent: 1, wantWaves: []int{1, 2, 3}},
		{name: "max_concurrent 2 over 5 items gives 3 waves", items: 5, maxConcurrent: 2, wantWaves: []int{1, 1, 2, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backends(t, func(t *testing.T, rdb redis.UniversalClient) {
				h := newHarness(t, rdb)
				id, items := h.create(spec("web", tt.items, "web", 1, tt.maxConcurrent, 0))
				if id != "web" || len(items) != tt.items {
					t.Fatalf("created %q with %d items", id, len(items))
				}
				for wave := 1; ; wave++ {
					if wave > tt.items+1 {
						t.Fatal("rollout did not complete")
					}
					h.step()
					r, _ := h.rollout(id)
					if r.Status == fleetwave.RolloutCompleted {
						break
					}
					if r.Wave != wave {
						t.Fatalf("rollout wave = %d, want %d", r.Wave, wave)
					}
					as := h.pollAll(tt.items)
					if len(as) == 0 || len(as) > tt.maxConcurrent {
						t.Fatalf("wave %d delivered %d attempts (max_concurrent %d)", wave, len(as), tt.maxConcurrent)
					}
					if again := h.step(); again.Dispatched != 0 {
						t.Fatalf("a second step within wave %d dispatched %d", wave, again.Dispatched)
					}
					for _, a := range as {
						h.complete(a, fleetwave.ResultSuccess)
					}
				}
				r, got := h.rollout(id)
				if r.Counters.Done != int64(tt.items) || r.Counters.Total != int64(tt.items) {
					t.Fatalf("counters %+v", r.Counters)
				}
				if r.Wave != len(slices.Compact(slices.Clone(tt.wantWaves))) {
					t.Fatalf("rollout ended at wave %d", r.Wave)
				}
				for i, it := range got {
					if it.Wave != tt.wantWaves[i] || it.Status != fleetwave.ItemCompleted || it.Attempts != 1 {
						t.Fatalf("item %d: wave %d status %s attempts %d, want wave %d", i, it.Wave, it.Status, it.Attempts, tt.wantWaves[i])
					}
				}
				obs, err := h.e.Observations(h.ctx)
				if err != nil {
					t.Fatal(err)
				}
				if in := obs.Instance(fleetwave.InstanceKey{Node: "n1", Block: "web"}); in == nil || in.Generation != 1 || in.Version != "v1" {
					t.Fatalf("observed instance after success = %+v", in)
				}
			})
		})
	}
}

func TestCreateRolloutIdempotency(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		t.Run("the same specs twice create nothing the second time", func(t *testing.T) {
			id, items := h.create(spec("web", 3, "web", 1, 1, 0))
			if id != "web" || len(items) != 3 {
				t.Fatalf("first: %q %v", id, items)
			}
			v1, _ := h.e.Version(h.ctx)
			id2, items2 := h.create(spec("web", 3, "web", 1, 1, 0))
			if id2 != "" || len(items2) != 0 {
				t.Fatalf("second created %q %v", id2, items2)
			}
			if v2, _ := h.e.Version(h.ctx); v2 != v1 {
				t.Fatalf("version moved from %d to %d though nothing changed", v1, v2)
			}
			c, _ := h.e.Counters(h.ctx)
			if c.Total != 3 || c.Pending != 3 {
				t.Fatalf("counters %+v", c)
			}
		})
		t.Run("a later spec of the same event joins its rollout", func(t *testing.T) {
			id, items := h.create(spec("web", 1, "db", 1, 1, 0)) // trigger/web generation 1 again
			if id != "web" || len(items) != 1 || items[0] != "web.4" {
				t.Fatalf("joined %q %v, want web [web.4]", id, items)
			}
		})
		t.Run("another event holding the base id gets a suffix", func(t *testing.T) {
			other := spec("web", 1, "cache", 1, 1, 0)
			other.Source.Object = fleetwave.Key(fleetwave.KindTrigger, "other")
			id, _ := h.create(other)
			if id != "web-2" {
				t.Fatalf("id = %q, want web-2", id)
			}
			// and the same other event finds web-2 again
			other.Items = []fleetwave.ItemSpec{itemSpec("n2", "cache", 1)}
			if id, _ := h.create(other); id != "web-2" {
				t.Fatalf("the same event again: %q, want web-2", id)
			}
		})
		t.Run("a newer generation supersedes the older rollout and its pending items", func(t *testing.T) {
			g2 := spec("web-g2", 3, "web", 2, 1, 0)
			g2.Source.Object, g2.Supersede = fleetwave.Key(fleetwave.KindTrigger, "web"), true
			id, items := h.create(g2)
			if id != "web-g2" || len(items) != 3 {
				t.Fatalf("created %q %v", id, items)
			}
			r, old := h.rollout("web")
			for _, it := range old {
				if it.Status != fleetwave.ItemSkipped || it.Reason != fleetwave.ReasonSuperseded {
					t.Fatalf("old item %s: %s %q", it.ID, it.Status, it.Reason)
				}
			}
			if r.Status != fleetwave.RolloutSuperseded || r.Counters.Skipped != 4 {
				t.Fatalf("old rollout %s %+v", r.Status, r.Counters)
			}
			it, ok, err := h.e.ActiveItem(h.ctx, "n1", "web")
			if err != nil || !ok || it.Generation != 2 || it.ID != "web-g2.1" {
				t.Fatalf("active item %+v %v %v", it, ok, err)
			}
			// a spec of the older generation is stale now
			_, items, outcome, err := h.e.CreateRolloutOutcome(h.ctx, h.fence, spec("web", 1, "api", 1, 1, 0))
			if err != nil || len(items) != 0 || outcome != OutcomeStaleGeneration {
				t.Fatalf("older generation: %v %s %v", items, outcome, err)
			}
		})
		t.Run("an older item in flight is left to finish", func(t *testing.T) {
			h.step() // dispatches web-g2.1 and web-2.1
			id, items := h.create(fleetwave.RolloutSpec{BaseID: "web-g3", MaxConcurrent: 1,
				Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "web"), Generation: 3},
				Items:  []fleetwave.ItemSpec{itemSpec("n1", "web", 3)}})
			if id != "" || len(items) != 0 {
				t.Fatalf("created %q %v over an in-flight item", id, items)
			}
			if it := h.item("web-g2.1"); it.Status != fleetwave.ItemInProgress {
				t.Fatalf("in-flight item is %s", it.Status)
			}
		})
	})
}

func TestTransientRetries(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb, WithBackoff(10*time.Second, time.Minute))
		id, items := h.create(spec("web", 1, "web", 1, 1, 2))
		h.step()
		for attempt := 1; attempt <= 3; attempt++ {
			as := h.poll("n1")
			if len(as) != 1 || as[0].ID != fmt.Sprintf("%s.%d", items[0], attempt) {
				t.Fatalf("attempt %d: polled %v", attempt, ids(as))
			}
			if as[0].Payload.Config != "secret: s3cr3t" {
				t.Fatalf("attempt lacks its payload: %+v", as[0].Payload)
			}
			h.complete(as[0], fleetwave.ResultTransient)
			it := h.item(items[0])
			if attempt == 3 {
				if it.Status != fleetwave.ItemFailed || it.RetryCount != 2 || it.Attempts != 3 {
					t.Fatalf("after max_retries: %s retry_count %d attempts %d", it.Status, it.RetryCount, it.Attempts)
				}
				break
			}
			if it.Status != fleetwave.ItemRetrying || it.Reason != fleetwave.ReasonBackoff || it.LastClass != fleetwave.ResultTransient {
				t.Fatalf("after transient: %s %q %s", it.Status, it.Reason, it.LastClass)
			}
			wait := it.RetryAfter.Sub(h.clk.Now())
			full := 10 * time.Second << (attempt - 1)
			if wait < full/2 || wait > full {
				t.Fatalf("backoff %v outside [%v, %v]", wait, full/2, full)
			}
			h.clk.Advance(wait - time.Millisecond)
			if res := h.step(); res.Dispatched != 0 {
				t.Fatalf("dispatched %d before retry_after", res.Dispatched)
			}
			if as := h.poll("n1"); len(as) != 0 {
				t.Fatalf("polled %v before retry_after", ids(as))
			}
			h.clk.Advance(time.Millisecond)
			if res := h.step(); res.Dispatched != 1 {
				t.Fatalf("dispatched %d at retry_after", res.Dispatched)
			}
		}
		r, _ := h.rollout(id)
		if r.Status != fleetwave.RolloutCompleted || r.Counters.Failed != 1 {
			t.Fatalf("rollout %s %+v", r.Status, r.Counters)
		}
	})
}

// TestARolloutsBackoffReplacesTheEngines: a rollout created with the
// config's backoff retries after that base, not the engine's, and its
// cap grows to it when larger.
func TestARolloutsBackoffReplacesTheEngines(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb, WithBackoff(10*time.Second, time.Minute))
		s := spec("web", 1, "web", 1, 1, 3)
		s.Backoff = 2 * time.Minute // above the engine's cap
		_, items := h.create(s)
		h.step()
		for attempt := 1; attempt <= 2; attempt++ {
			as := h.poll("n1")
			if len(as) != 1 {
				t.Fatalf("attempt %d: polled %v", attempt, ids(as))
			}
			h.complete(as[0], fleetwave.ResultTransient)
			it := h.item(items[0])
			wait := it.RetryAfter.Sub(h.clk.Now())
			full := 2 * time.Minute // base 2m; the cap is raised to it, so the second stays at 2m
			if wait < full/2 || wait > full {
				t.Fatalf("retry %d after %v, want within [%v, %v] (the rollout's backoff)", attempt, wait, full/2, full)
			}
			h.clk.Advance(wait)
			h.step()
		}
	})
}

func TestPermanentFailure(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		_, items := h.create(spec("web", 1, "web", 4, 1, 3))
		h.step()
		as := h.poll("n1")
		h.complete(as[0], fleetwave.ResultPermanent)
		it := h.item(items[0])
		if it.Status != fleetwave.ItemBlocked || it.Reason != "permanent_failure" || it.RetryCount != 0 {
			t.Fatalf("after permanent: %s %q retries %d", it.Status, it.Reason, it.RetryCount)
		}
		tests := []struct {
			name    string
			gen     int64
			created bool
		}{
			{name: "the same generation is not created again", gen: 4, created: false},
			{name: "a newer generation is created", gen: 5, created: true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				id, _ := h.create(spec("web-again", 1, "web", tt.gen, 1, 3))
				if (id != "") != tt.created {
					t.Fatalf("created = %q, want created %v", id, tt.created)
				}
			})
		}
	})
}

func TestDeadlines(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Run("an attempt never delivered before its deadline is retried", func(t *testing.T) {
			h := newHarness(t, rdb, WithPrefix("undelivered"), WithBackoff(time.Second, time.Second))
			_, items := h.create(spec("web", 1, "web", 1, 1, 3))
			h.step()
			h.clk.Advance(60*time.Second + DefaultDeliveryGrace)
			if res := h.step(); res.Expired != 1 {
				t.Fatalf("expired = %d", res.Expired)
			}
			if as := h.poll("n1"); len(as) != 0 {
				t.Fatalf("expired attempt delivered: %v", ids(as))
			}
			it := h.item(items[0])
			if it.Status != fleetwave.ItemRetrying || it.RetryCount != 1 {
				t.Fatalf("after deadline: %s retry_count %d", it.Status, it.RetryCount)
			}
			h.clk.Advance(time.Second)
			h.step()
			as := h.poll("n1")
			if len(as) != 1 || as[0].ID != items[0]+".2" {
				t.Fatalf("retry polled %v", ids(as))
			}
			if it := h.item(items[0]); it.Wave != 1 || it.Attempts != 2 {
				t.Fatalf("retried item: wave %d attempts %d, want its wave 1 and 2 attempts", it.Wave, it.Attempts)
			}
		})
		t.Run("an attempt popped after its deadline is not handed out and counts as undelivered", func(t *testing.T) {
			h := newHarness(t, rdb, WithPrefix("popped-late"), WithBackoff(time.Second, time.Second))
			_, items := h.create(spec("web", 1, "web", 1, 1, 3))
			h.step()
			h.clk.Advance(60*time.Second + DefaultDeliveryGrace) // before any Step settles it
			if as := h.poll("n1"); len(as) != 0 {
				t.Fatalf("attempt past its deadline handed out: %v", ids(as))
			}
			if res := h.step(); res.Expired != 1 {
				t.Fatalf("expired = %d", res.Expired)
			}
			// never delivered: retried with backoff, not ambiguous
			if it := h.item(items[0]); it.Status != fleetwave.ItemRetrying || it.RetryCount != 1 {
				t.Fatalf("after deadline: %s %q retry_count %d", it.Status, it.Reason, it.RetryCount)
			}
		})
		t.Run("an attempt whose poll's client left is closed at the next step, long before its deadline", func(t *testing.T) {
			for _, written := range []bool{false, true} {
				h := newHarness(t, rdb, WithPrefix(fmt.Sprintf("not-handed-%v", written)), WithBackoff(time.Second, time.Second))
				_, items := h.create(spec("web", 2, "web", 1, 2, 3))
				h.step()
				as := h.poll("n1")
				if len(as) != 1 {
					t.Fatalf("polled %v", ids(as))
				}
				if err := h.e.NotHanded(h.ctx, "n1", []string{as[0].ID}, written); err != nil {
					t.Fatal(err)
				}
				h.clk.Advance(time.Millisecond) // far from its deadline
				if res := h.step(); res.Expired != 1 {
					t.Fatalf("written=%v: expired = %d, want 1 at the next step", written, res.Expired)
				}
				it := h.item(items[0])
				switch {
				case !written && (it.Status != fleetwave.ItemRetrying || it.RetryCount != 1):
					// never sent: never delivered, retried
					t.Fatalf("never sent: %s %q retry_count %d, want retrying", it.Status, it.Reason, it.RetryCount)
				case written && (it.Status != fleetwave.ItemAmbiguous || it.Reason != fleetwave.ReasonAwaitingReport):
					// perhaps received: never replayed blindly, the report decides
					t.Fatalf("perhaps sent: %s %q, want ambiguous awaiting a report", it.Status, it.Reason)
				}
				// the other node's attempt, and a closed one, are left alone
				other := h.poll("n2")
				if len(other) != 1 {
					t.Fatalf("n2 polled %v", ids(other))
				}
				h.complete(other[0], fleetwave.ResultSuccess)
				if err := h.e.NotHanded(h.ctx, "n2", []string{other[0].ID}, written); err != nil {
					t.Fatal(err)
				}
				h.clk.Advance(time.Millisecond)
				if res := h.step(); res.Expired != 0 {
					t.Fatalf("a completed attempt expired again: %d", res.Expired)
				}
				if it := h.item(items[1]); it.Status != fleetwave.ItemCompleted {
					t.Fatalf("completed item now %s", it.Status)
				}
			}
		})
		t.Run("attempts an agent says it never received are sent again at once, those it holds are left alone", func(t *testing.T) {
			h := newHarness(t, rdb, WithPrefix("receipt"), WithBackoff(time.Second, time.Second))
			_, items := h.create(spec("web", 2, "web", 1, 2, 3))
			h.step()
			pollWith := func(node string, rc fleetwave.Receipt) []fleetwave.Attempt {
				t.Helper()
				if rc.Resume {
					h.e.Resume(h.ctx, node, rc.Delivered)
				}
				as, err := h.e.PollWith(h.ctx, node, 10, 0, rc.Delivered)
				if err != nil {
					t.Fatal(err)
				}
				h.check()
				return as
			}
			// n1's answer is lost on its way (a hub that died answering);
			// n2's arrives
			lost := h.poll("n1")
			got := h.poll("n2")
			if len(lost) != 1 || len(got) != 1 || lost[0].Delivery != 1 || got[0].Delivery != 1 {
				t.Fatalf("first deliveries %+v %+v, want one attempt each, numbered 1", lost, got)
			}
			// a poll that says nothing of a failure changes nothing
			pollWith("n1", fleetwave.Receipt{})
			h.clk.Advance(time.Millisecond)
			if res := h.step(); res.Expired != 0 {
				t.Fatalf("expired = %d before any agent said it lost an answer", res.Expired)
			}
			// n1's agent comes back: it holds no delivery (a second look
			// finds nothing more)
			if ids := h.e.Resume(h.ctx, "n1", 0); len(ids) != 1 || ids[0] != lost[0].ID {
				t.Fatalf("resumed %v, want n1's attempt %s", ids, lost[0].ID)
			}
			pollWith("n1", fleetwave.Receipt{Delivered: 0, Resume: true})
			// n2's agent holds delivery 1
			pollWith("n2", fleetwave.Receipt{Delivered: 1, Resume: true})
			h.clk.Advance(time.Millisecond) // far from the deadlines
			if res := h.step(); res.Expired != 1 {
				t.Fatalf("expired = %d, want n1's attempt closed at the next step", res.Expired)
			}
			if it := h.item(items[0]); it.Status != fleetwave.ItemRetrying || it.RetryCount != 1 {
				// never delivered: retried, not ambiguous (nothing ran)
				t.Fatalf("n1's item %s %q retry_count %d, want retrying", it.Status, it.Reason, it.RetryCount)
			}
			if it := h.item(items[1]); it.Status != fleetwave.ItemInProgress {
				t.Fatalf("n2's item %s, want still in progress (its agent holds it)", it.Status)
			}
			h.clk.Advance(2 * time.Second)
			h.step()
			again := pollWith("n1", fleetwave.Receipt{})
			if len(again) != 1 || again[0].ID != items[0]+".2" || again[0].Delivery != 2 {
				t.Fatalf("sent again: %+v, want attempt 2 of %s in delivery 2", again, items[0])
			}
			// what an agent says it received is dropped from what is kept
			pollWith("n1", fleetwave.Receipt{Delivered: 2})
			if n := rdb.ZCard(h.ctx, h.e.key("dlv", "n1")).Val(); n != 0 {
				t.Fatalf("%d deliveries kept after the agent said it received them", n)
			}
			// a counter Redis lost comes back above what the agent holds
			h.complete(again[0], fleetwave.ResultSuccess)
			rdb.Del(h.ctx, h.e.key("dseq", "n2"))
			h.complete(got[0], fleetwave.ResultSuccess)
			_, items2 := h.create(spec("web", 2, "web", 2, 2, 3))
			h.step()
			if as := pollWith("n2", fleetwave.Receipt{Delivered: 7}); len(as) != 1 || as[0].Delivery != 8 || as[0].Item != items2[1] {
				t.Fatalf("after the counter was lost: %+v, want %s in delivery 8", as, items2[1])
			}
		})
		t.Run("an agent that stopped part way through an answer gets again what it did not take", func(t *testing.T) {
			h := newHarness(t, rdb, WithPrefix("partway"), WithBackoff(time.Second, time.Second))
			s := spec("web", 0, "web", 1, 3, 3)
			s.Items = []fleetwave.ItemSpec{itemSpec("n1", "web", 1), itemSpec("n1", "db", 1), itemSpec("n1", "cache", 1)}
			h.create(s)
			h.step()
			as := h.poll("n1")
			if len(as) != 3 {
				t.Fatalf("one answer of %d attempts, want the node's three", len(as))
			}
			for i, a := range as {
				if a.Delivery != int64(i+1) {
					t.Fatalf("attempt %d of the answer numbered %d, want %d (one number per attempt, in order)", i, a.Delivery, i+1)
				}
			}
			// the agent journalled the first, then stopped while running it:
			// it says so at its next start
			if ids := h.e.Resume(h.ctx, "n1", as[0].Delivery); !slices.Equal(ids, []string{as[1].ID, as[2].ID}) {
				t.Fatalf("resumed %v, want the two attempts the agent did not take: %s %s", ids, as[1].ID, as[2].ID)
			}
			h.clk.Advance(time.Millisecond)
			if res := h.step(); res.Expired != 2 {
				t.Fatalf("expired = %d, want the two attempts not taken closed at the next step", res.Expired)
			}
			for i, a := range as {
				want := fleetwave.ItemRetrying // never delivered: nothing ran
				if i == 0 {
					want = fleetwave.ItemInProgress // the agent runs it
				}
				if it := h.item(a.Item); it.Status != want {
					t.Fatalf("item %s (attempt %d of the answer) %s %q, want %s", a.Item, i, it.Status, it.Reason, want)
				}
			}
		})
		t.Run("a delivered attempt without result makes its item ambiguous", func(t *testing.T) {
			h := newHarness(t, rdb, WithPrefix("popped"), WithBackoff(time.Second, time.Second))
			_, items := h.create(spec("web", 1, "web", 1, 1, 3))
			h.step()
			if as := h.poll("n1"); len(as) != 1 {
				t.Fatalf("polled %v", ids(as))
			}
			h.clk.Advance(60*time.Second + DefaultDeliveryGrace)
			h.step()
			if it := h.item(items[0]); it.Status != fleetwave.ItemAmbiguous || it.Reason != fleetwave.ReasonAwaitingReport {
				t.Fatalf("after deadline: %s %q", it.Status, it.Reason)
			}
		})
		tests := []struct {
			name       string
			oneShot    bool
			sentOffset time.Duration // report SentAt relative to the dispatch
			show       bool          // the report shows the instance at the target
			journal    bool          // the report journals the attempt
			ended      string        // before the report, the rollout is cancelled or superseded
			want       fleetwave.ItemStatus
			wantReason string
		}{
			{name: "a newer report showing the target completes an ambiguous item", sentOffset: time.Minute, show: true, want: fleetwave.ItemCompleted},
			{name: "a newer report not showing the target makes it pending again", sentOffset: time.Minute, want: fleetwave.ItemPending},
			{name: "a report older than the dispatch leaves it ambiguous", sentOffset: -time.Minute, show: true, want: fleetwave.ItemAmbiguous, wantReason: fleetwave.ReasonAwaitingReport},
			{name: "a one-shot action not shown that the agent journalled is blocked, never replayed", oneShot: true, journal: true, sentOffset: time.Minute, want: fleetwave.ItemBlocked, wantReason: "ambiguous_one_shot"},
			{name: "a one-shot action the agent never journalled waits for a report sent after it became ambiguous", oneShot: true, sentOffset: time.Minute, want: fleetwave.ItemAmbiguous, wantReason: fleetwave.ReasonAwaitingReport},
			{name: "a one-shot action a later report does not journal never ran: pending again", oneShot: true, sentOffset: 2 * time.Minute, want: fleetwave.ItemPending},
			{name: "an item of a cancelled rollout a newer report does not show is skipped, not sent again", sentOffset: time.Minute, ended: "cancelled", want: fleetwave.ItemSkipped, wantReason: "cancelled"},
			{name: "an item of a superseded rollout a newer report does not show is skipped, not left pending", sentOffset: time.Minute, ended: "superseded", want: fleetwave.ItemSkipped, wantReason: fleetwave.ReasonSuperseded},
			{name: "a one-shot action of a cancelled rollout that the agent journalled is blocked: it may have run", oneShot: true, journal: true, sentOffset: time.Minute, ended: "cancelled", want: fleetwave.ItemBlocked, wantReason: "ambiguous_one_shot"},
			{name: "a one-shot action of a superseded rollout that the agent journalled is blocked: it may have run", oneShot: true, journal: true, sentOffset: time.Minute, ended: "superseded", want: fleetwave.ItemBlocked, wantReason: "ambiguous_one_shot"},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h := newHarness(t, rdb, WithPrefix(fmt.Sprintf("amb%d", i)))
				s := spec("web", 1, "web", 7, 1, 3)
				s.Items[0].Payload.OneShot = tt.oneShot
				id, items := h.create(s)
				h.step()
				dispatched := h.clk.Now()
				as := h.poll("n1")
				if len(as) != 1 {
					t.Fatalf("polled %d", len(as))
				}
				h.clk.Advance(90 * time.Second)
				h.step()
				it := h.item(items[0])
				if it.Status != fleetwave.ItemAmbiguous || it.Reason != fleetwave.ReasonAwaitingReport {
					t.Fatalf("delivered without result: %s %q", it.Status, it.Reason)
				}
				if res := h.step(); res.Dispatched != 0 {
					t.Fatalf("an ambiguous item was dispatched again")
				}
				switch tt.ended {
				case "cancelled":
					if err := h.e.SetRolloutState(h.ctx, h.fence, id, ActionCancel, "alice"); err != nil {
						t.Fatal(err)
					}
				case "superseded":
					next := spec("web-g8", 1, "web", 8, 1, 3)
					next.Source.Object, next.Supersede = s.Source.Object, true
					h.create(next)
				}
				if r, _ := h.rollout(id); tt.ended != "" && string(r.Status) != tt.ended {
					t.Fatalf("rollout %s, want %s", r.Status, tt.ended)
				}
				in := fleetwave.InstanceStatus{Block: "web", Version: "v6", ConfigHash: "hash-web-6", Generation: 6}
				if tt.show {
					in = fleetwave.InstanceStatus{Block: "web", Version: "v7", ConfigHash: "hash-web-7", Generation: 7}
				}
				rep := fleetwave.Report{Node: "n1", Instances: []fleetwave.InstanceStatus{in}, SentAt: dispatched.Add(tt.sentOffset)}
				if tt.journal {
					rep.Attempts = []string{as[0].ID}
				}
				h.report(rep)
				it = h.item(items[0])
				if it.Status != tt.want || it.Reason != tt.wantReason {
					t.Fatalf("after report: %s %q, want %s %q", it.Status, it.Reason, tt.want, tt.wantReason)
				}
				if tt.want == fleetwave.ItemPending {
					h.step()
					as := h.poll("n1")
					if len(as) != 1 || as[0].ID != items[0]+".2" {
						t.Fatalf("pending-again item polled %v", ids(as))
					}
					if r, _ := h.rollout(id); r.Wave != 2 {
						t.Fatalf("re-dispatch in wave %d", r.Wave)
					}
				}
				obs, err := h.e.Observations(h.ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := obs.Instance(fleetwave.InstanceKey{Node: "n1", Block: "web"}); got == nil || got.Generation != in.Generation {
					t.Fatalf("observation = %+v", got)
				}
			})
		}
	})
}

func TestFencing(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		ctx := context.Background()
		old := h.fence
		if f, err := h.e.Campaign(ctx, "hub-a", time.Hour); err != nil || f != old {
			t.Fatalf("campaign by the holder: fence %d (%v), want %d", f, err, old)
		}
		_, err := h.e.Campaign(ctx, "hub-b", time.Hour)
		mustErr(t, err, ErrNotLeader)
		// the refusal says whose lease and until when: the time to campaign again
		var held *LeaseHeldError
		if !errors.As(err, &held) || held.Holder != "hub-a" || !held.ExpiresAt.Equal(h.clk.Now().Add(time.Hour).Truncate(time.Millisecond)) {
			t.Fatalf("campaign refused with %#v, want hub-a's lease until %s", err, h.clk.Now().Add(time.Hour))
		}

		h.clk.Advance(time.Hour + time.Millisecond)
		fresh, err := h.e.Campaign(ctx, "hub-b", time.Hour)
		if err != nil || fresh <= old {
			t.Fatalf("campaign after expiry: fence %d (%v), old %d", fresh, err, old)
		}
		tests := []struct {
			name string
			call func() error
			want error
		}{
			{name: "step with the old fence is refused", want: ErrStaleFence, call: func() error {
				_, err := h.e.Step(ctx, old)
				return err
			}},
			{name: "create with the old fence is refused", want: ErrStaleFence, call: func() error {
				_, _, err := h.e.CreateRollout(ctx, old, spec("web", 1, "web", 1, 1, 0))
				return err
			}},
			{name: "renew by the deposed leader fails", want: ErrNotLeader, call: func() error {
				return h.e.Renew(ctx, "hub-a", old, time.Hour)
			}},
			{name: "resign by the deposed leader fails", want: ErrNotLeader, call: func() error {
				return h.e.Resign(ctx, "hub-a", old)
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				mustErr(t, tt.call(), tt.want)
			})
		}
		if rs, _ := h.e.Rollouts(ctx); len(rs) != 0 {
			t.Fatalf("a stale leader created %d rollouts", len(rs))
		}
		h.fence = fresh
		if id, _ := h.create(spec("web", 1, "web", 1, 1, 0)); id != "web" {
			t.Fatalf("new leader created %q", id)
		}
		if err := h.e.Renew(ctx, "hub-b", fresh, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := h.e.Resign(ctx, "hub-b", fresh); err != nil {
			t.Fatal(err)
		}
		_, err = h.e.Step(ctx, fresh)
		mustErr(t, err, ErrStaleFence)
		next, err := h.e.Campaign(ctx, "hub-a", time.Hour)
		if err != nil || next <= fresh {
			t.Fatalf("campaign after resign: %d (%v)", next, err)
		}
	})
}

func TestCompleteChecks(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.create(spec("web", 2, "web", 1, 2, 0))
		h.step()
		a := h.poll("n1")[0]
		tests := []struct {
			name string
			node string
			res  fleetwave.AttemptResult
			want error
		}{
			{name: "a result from another node is refused", node: "n2", res: fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess}, want: ErrWrongNode},
			{name: "an unknown attempt is refused", node: "n1", res: fleetwave.AttemptResult{AttemptID: "nope.1.1", Fence: a.Fence, Class: fleetwave.ResultSuccess}, want: ErrUnknownAttempt},
			{name: "a result with another fence is stale", node: "n1", res: fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence + 1, Class: fleetwave.ResultSuccess}, want: ErrStaleAttempt},
			{name: "an unknown class is invalid", node: "n1", res: fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: "maybe"}, want: ErrInvalidResult},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				mustErr(t, h.e.Complete(h.ctx, tt.node, tt.res), tt.want)
				if it := h.item(a.Item); it.Status != fleetwave.ItemInProgress {
					t.Fatalf("refused result changed the item to %s", it.Status)
				}
			})
		}
		t.Run("a second result for the same attempt is stale", func(t *testing.T) {
			h.complete(a, fleetwave.ResultSuccess)
			mustErr(t, h.e.Complete(h.ctx, "n1", fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultPermanent}), ErrStaleAttempt)
			if it := h.item(a.Item); it.Status != fleetwave.ItemCompleted {
				t.Fatalf("item is %s", it.Status)
			}
		})
		t.Run("the same result sent again is recorded, applied once", func(t *testing.T) {
			before := h.item(a.Item)
			mustErr(t, h.e.Complete(h.ctx, "n1", resultOf(a, fleetwave.ResultSuccess)), ErrResultRecorded)
			// another exit code, another fence: another result
			other := resultOf(a, fleetwave.ResultSuccess)
			other.ExitCode = 3
			mustErr(t, h.e.Complete(h.ctx, "n1", other), ErrStaleAttempt)
			other = resultOf(a, fleetwave.ResultSuccess)
			other.Fence++
			mustErr(t, h.e.Complete(h.ctx, "n1", other), ErrStaleAttempt)
			if it := h.item(a.Item); it != before {
				t.Fatalf("the result sent again changed its item:\n%+v\nwas\n%+v", it, before)
			}
			h.check()
		})
	})
}

func TestReadsAndPoll(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		t.Run("an unknown rollout is not found", func(t *testing.T) {
			_, _, err := h.e.Rollout(h.ctx, "missing")
			mustErr(t, err, ErrNotFound)
		})
		t.Run("rollouts are listed newest first", func(t *testing.T) {
			h.create(spec("a", 1, "x", 1, 1, 0))
			h.create(spec("b", 1, "y", 1, 1, 0))
			rs, err := h.e.Rollouts(h.ctx)
			if err != nil || len(rs) != 2 || rs[0].ID != "b" || rs[1].ID != "a" {
				t.Fatalf("rollouts %v (%v)", rs, err)
			}
			if !rs[0].CreatedAt.Equal(t0) || rs[0].Source.Generation != 1 {
				t.Fatalf("rollout record %+v", rs[0])
			}
		})
		t.Run("a poll with a cancelled context returns early", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := h.e.Poll(ctx, "idle", 1, time.Hour)
			if err == nil {
				t.Fatal("poll on a cancelled context returned no error")
			}
		})
		t.Run("the payload stays out of item records", func(t *testing.T) {
			h.step()
			as := h.poll("n1")
			if len(as) != 2 {
				t.Fatalf("polled %d", len(as))
			}
			m, _ := h.rdb.HGetAll(h.ctx, h.e.key("i", as[0].Item)).Result()
			for k, v := range m {
				if v == "secret: s3cr3t" || k == "payload" {
					t.Fatalf("item record holds the payload in %s", k)
				}
			}
			h.complete(as[0], fleetwave.ResultSuccess)
			if n, _ := h.rdb.Exists(h.ctx, h.e.key("ip", as[0].Item)).Result(); n != 0 {
				t.Fatal("finished item keeps its attempt template (payload)")
			}
			if q, _ := h.rdb.LRange(h.ctx, h.e.key("q", "n1"), 0, -1).Result(); len(q) != 0 {
				t.Fatalf("delivered attempts stay queued: %d entries", len(q))
			}
		})
	})
}

func TestFailureThreshold(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		s := spec("web", 3, "web", 1, 1, 0)
		s.FailureThresholdPercent = 30
		id, _ := h.create(s)
		h.step()
		h.complete(h.poll("n1")[0], fleetwave.ResultPermanent)
		if res := h.step(); res.Dispatched != 0 {
			t.Fatalf("dispatched %d past the failure threshold", res.Dispatched)
		}
		r, _ := h.rollout(id)
		if r.Status != fleetwave.RolloutBlocked || r.Reason != fleetwave.ReasonFailureThreshold || r.Counters.Pending != 2 {
			t.Fatalf("rollout %s %q %+v", r.Status, r.Reason, r.Counters)
		}
		t.Run("a newer generation supersedes the halted rollout's pending items", func(t *testing.T) {
			id2, items := h.create(spec("web-g2", 3, "web", 2, 3, 0))
			if id2 == "" || len(items) != 3 {
				t.Fatalf("created %q %v", id2, items)
			}
			h.step()
			if as := h.pollAll(3); len(as) != 3 {
				t.Fatalf("new generation dispatched %v", ids(as))
			}
			if r, _ := h.rollout(id); r.Counters.Skipped != 2 || r.Status != fleetwave.RolloutBlocked {
				t.Fatalf("halted rollout %s %+v", r.Status, r.Counters)
			}
		})
	})
}

func TestLongPollWakesOnDispatch(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.create(spec("web", 2, "web", 1, 2, 0))
		t.Run("an empty queue makes the poll wait its whole wait", func(t *testing.T) {
			start := time.Now()
			as, err := h.e.Poll(h.ctx, "n1", 5, 1500*time.Millisecond)
			if err != nil || len(as) != 0 {
				t.Fatalf("poll without attempts returned %v (%v)", ids(as), err)
			}
			if took := time.Since(start); took < time.Second {
				t.Fatalf("poll ended after %v, before its wait", took)
			}
		})
		t.Run("a waiting poll returns the attempt Step dispatches", func(t *testing.T) {
			type result struct {
				as   []fleetwave.Attempt
				err  error
				took time.Duration
			}
			done := make(chan result, 1)
			started := make(chan struct{})
			go func() {
				close(started)
				start := time.Now()
				as, err := h.e.Poll(context.Background(), "n1", 5, 5*time.Second)
				done <- result{as, err, time.Since(start)}
			}()
			<-started
			time.Sleep(200 * time.Millisecond) // let it block
			if res := h.step(); res.Dispatched != 2 {
				t.Fatalf("dispatched %d", res.Dispatched)
			}
			got := <-done
			if got.err != nil || len(got.as) != 1 || got.as[0].Node != "n1" {
				t.Fatalf("long poll returned %v (%v)", ids(got.as), got.err)
			}
			if got.took >= 4*time.Second {
				t.Fatalf("long poll took %v: not woken by the dispatch", got.took)
			}
			// popping delivers: n1's queue is empty, n2's (not polled) holds
			// its attempt
			if n, err := rdb.LLen(h.ctx, h.e.key("q", "n1")).Result(); err != nil || n != 0 {
				t.Fatalf("n1's queue holds %d entries (%v) after its poll", n, err)
			}
			if n, err := rdb.LLen(h.ctx, h.e.key("q", "n2")).Result(); err != nil || n != 1 {
				t.Fatalf("n2's queue holds %d entries (%v), want 1", n, err)
			}
		})
		t.Run("a cancelled wait ends the poll", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := h.e.Poll(ctx, "idle", 1, time.Hour)
				done <- err
			}()
			time.Sleep(200 * time.Millisecond)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled poll returned %v", err)
			}
			if took := time.Since(start); took >= 5*time.Second {
				t.Fatalf("cancelled poll took %v", took)
			}
		})
	})
}

// TestWakeEndsAWaitingPoll: Wake ends the waiting Polls of a node at
// once, without attempts and without taking anything from its queue; the
// other nodes' Polls keep waiting, and an attempt dispatched afterwards
// reaches the node's next Poll. A wake that finds no waiting Poll ends the
// node's next one.
func TestWakeEndsAWaitingPoll(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		type result struct {
			as  []fleetwave.Attempt
			err error
		}
		done := map[string]chan result{}
		for _, n := range []string{"n1", "n1", "n2"} {
			ch := make(chan result, 2)
			if done[n] != nil {
				ch = done[n]
			}
			done[n] = ch
			go func() {
				as, err := h.e.Poll(context.Background(), n, 5, time.Minute)
				ch <- result{as, err}
			}()
		}
		// the three wait, and the subscription is confirmed: its
		// confirmation claims every waiting Poll for a moment, and a wake
		// while a node's Polls are claimed ends only its next one
		waitMux(t, h.e, 3)
		h.e.Wake([]string{"n1", "n3"})
		for range 2 {
			select {
			case got := <-done["n1"]:
				if got.err != nil || len(got.as) != 0 {
					t.Fatalf("woken poll returned %v, %v; want nothing", ids(got.as), got.err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a woken poll still waits")
			}
		}
		select {
		case got := <-done["n2"]:
			t.Fatalf("n2's poll ended at n1's wake: %v, %v", ids(got.as), got.err)
		default:
		}
		waitMux(t, h.e, 1)
		// n2 still waits and gets its attempt; n1's next poll gets its own
		h.create(spec("web", 2, "web", 1, 2, 0))
		if _, err := h.e.Step(h.ctx, h.fence); err != nil {
			t.Fatal(err)
		}
		if got := <-done["n2"]; got.err != nil || len(got.as) != 1 || got.as[0].Node != "n2" {
			t.Fatalf("n2's poll returned %v, %v", ids(got.as), got.err)
		}
		as, err := h.e.Poll(h.ctx, "n1", 5, time.Minute)
		if err != nil || len(as) != 1 || as[0].Node != "n1" {
			t.Fatalf("n1's poll after the wake returned %v, %v", ids(as), err)
		}
		// a wake while none of the node's polls waits (one may be between
		// two waits) ends its next poll at once
		h.e.Wake([]string{"n1"})
		start := time.Now()
		as, err = h.e.Poll(h.ctx, "n1", 5, time.Minute)
		if err != nil || len(as) != 0 || time.Since(start) >= 30*time.Second {
			t.Fatalf("n1's poll after a wake without a waiting poll returned %v, %v after %v", ids(as), err, time.Since(start))
		}
	})
}

// waitMux waits until n Polls wait and the mux's subscription is
// confirmed.
func waitMux(t *testing.T, e *Engine, n int) {
	t.Helper()
	settled := func() bool {
		subscribed, _, waiting := e.mux.state()
		return subscribed && waiting == n
	}
	deadline := time.Now().Add(30 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatalf("%d polls waiting, want %d with the subscription confirmed", e.WaitingPolls(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLongPoll(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.create(spec("web", 1, "web", 1, 1, 0))
		v0, _ := h.e.Version(h.ctx)
		type result struct {
			as  []fleetwave.Attempt
			err error
		}
		done := make(chan result, 1)
		go func() {
			as, err := h.e.Poll(context.Background(), "n1", 5, time.Minute)
			done <- result{as, err}
		}()
		if _, err := h.e.Step(h.ctx, h.fence); err != nil {
			t.Fatal(err)
		}
		got := <-done
		if got.err != nil || len(got.as) != 1 || got.as[0].Node != "n1" || got.as[0].Fence != h.fence {
			t.Fatalf("long poll returned %+v (%v)", got.as, got.err)
		}
		if got.as[0].Deadline.IsZero() || !got.as[0].Deadline.Equal(t0.Add(60*time.Second+DefaultDeliveryGrace)) {
			t.Fatalf("deadline %v", got.as[0].Deadline)
		}
		if v, _ := h.e.Version(h.ctx); v <= v0 {
			t.Fatalf("version %d did not move from %d", v, v0)
		}
	})
}

func TestObservations(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.create(spec("obs", 1, "web", 1, 1, 0))
		h.step()
		as := h.poll("n1")
		if len(as) != 1 {
			t.Fatalf("polled %d attempts", len(as))
		}
		res := fleetwave.AttemptResult{AttemptID: as[0].ID, Fence: as[0].Fence, Class: fleetwave.ResultSuccess,
			Instance: &fleetwave.InstanceStatus{Block: "web", Version: "v1", Generation: 1, UpdatedAt: t0.Add(2 * time.Second)}}
		if err := h.e.Complete(h.ctx, "n1", res); err != nil {
			t.Fatal(err)
		}
		instance := func() *fleetwave.InstanceStatus {
			obs, err := h.e.Observations(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return obs.Instance(fleetwave.InstanceKey{Node: "n1", Block: "web"})
		}
		t.Run("a report sent before the result does not roll the observation back", func(t *testing.T) {
			h.report(fleetwave.Report{Node: "n1", SentAt: t0.Add(time.Second)})
			if in := instance(); in == nil || in.Version != "v1" {
				t.Fatalf("instance = %+v, want the result's v1 kept", in)
			}
		})
		t.Run("a newer report replaces it", func(t *testing.T) {
			h.report(fleetwave.Report{Node: "n1", SentAt: t0.Add(3 * time.Second),
				Instances: []fleetwave.InstanceStatus{{Block: "web", Version: "v9", Generation: 1}}})
			if in := instance(); in == nil || in.Version != "v9" {
				t.Fatalf("instance = %+v, want v9", in)
			}
		})
		t.Run("a newer report without the instance removes it", func(t *testing.T) {
			h.report(fleetwave.Report{Node: "n1", SentAt: t0.Add(4 * time.Second)})
			if in := instance(); in != nil {
				t.Fatalf("instance = %+v, want none", in)
			}
		})
		t.Run("the observations of some nodes are those of Observe", func(t *testing.T) {
			h.report(fleetwave.Report{Node: "n2", SentAt: t0.Add(5 * time.Second),
				Instances: []fleetwave.InstanceStatus{{Block: "web", Version: "v2", Generation: 1}}})
			all, v, err := h.e.Observe(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			some, v2, err := h.e.ObserveNodes(h.ctx, []string{"n2", "never-reported", "n1"})
			if err != nil {
				t.Fatal(err)
			}
			if v2 != v || len(some) != 2 || !reflect.DeepEqual(some["n1"], all["n1"]) || !reflect.DeepEqual(some["n2"], all["n2"]) {
				t.Fatalf("ObserveNodes = %v (version %d), want n1 and n2 as Observe has them %v (version %d)", some, v2, all, v)
			}
			if _, ok := some["never-reported"]; ok {
				t.Fatal("a node that never reported is observed")
			}
		})
	})
}

func TestStalePlanIsDropped(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		observe := func() int64 {
			t.Helper()
			_, v, err := h.e.Observe(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		h.create(spec("web", 1, "web", 1, 1, 0))
		h.step()
		before := observe() // observations read while the item still runs
		// the result comes from a replica whose clock is a minute behind:
		// by time it finished before the read, in fact after it
		late := New(rdb, WithPrefix("test"), WithClock(clock.NewFake(h.clk.Now().Add(-time.Minute))))
		a := h.poll("n1")[0]
		if err := late.Complete(h.ctx, "n1", fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess,
			Instance: &fleetwave.InstanceStatus{Block: a.Block, Version: a.TargetVersion, ConfigHash: a.ConfigHash, Generation: a.Generation}}); err != nil {
			t.Fatal(err)
		}

		stale := spec("web", 1, "web", 1, 1, 0)
		stale.ObservedVersion = before
		if id, _ := h.create(stale); id != "" {
			t.Fatalf("a plan made before the item finished created rollout %s", id)
		}
		fresh := spec("web", 1, "web", 1, 1, 0)
		fresh.ObservedVersion = observe() // drift seen after the item finished
		if id, _ := h.create(fresh); id == "" {
			t.Fatal("a plan made after the item finished created nothing")
		}
	})
}

// TestAPlanOfANewerGenerationIsStaleWhenAnOlderItemEnds: generation 2 is
// planned while generation 1's install still runs (the plan reads "not
// installed": install); the install ends before the plan is recorded. The
// plan is stale (it would install again), the next one upgrades.
func TestAPlanOfANewerGenerationIsStaleWhenAnOlderItemEnds(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.create(spec("web", 1, "web", 1, 1, 0))
		h.step()
		_, before, err := h.e.Observe(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := h.poll("n1")[0]
		if err := h.e.Complete(h.ctx, "n1", fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess,
			Instance: &fleetwave.InstanceStatus{Block: a.Block, Version: a.TargetVersion, ConfigHash: a.ConfigHash, Generation: a.Generation}}); err != nil {
			t.Fatal(err)
		}
		stale := spec("web", 1, "web", 2, 1, 0)
		stale.Items[0].Action = fleetwave.ActionInstall
		stale.ObservedVersion = before
		if id, _ := h.create(stale); id != "" {
			t.Fatalf("a generation 2 plan made while generation 1 ran created rollout %s", id)
		}
		_, after, err := h.e.Observe(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		fresh := spec("web", 1, "web", 2, 1, 0)
		fresh.ObservedVersion = after
		if id, _ := h.create(fresh); id == "" {
			t.Fatal("a generation 2 plan made after generation 1 ended created nothing")
		}
	})
}

func TestHealthGateNeedsTheItemsOwnGeneration(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		_, ids := h.create(spec("gate", 1, "web", 3, 1, 0))
		h.step()
		a := h.poll("n1")[0]
		res := fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess,
			Instance: &fleetwave.InstanceStatus{Block: "web", Version: a.TargetVersion, ConfigHash: a.ConfigHash, Generation: 2, UpdatedAt: t0}}
		if err := h.e.Complete(h.ctx, "n1", res); err != nil {
			t.Fatal(err)
		}
		h.check()
		if it := h.item(ids[0]); it.Status != fleetwave.ItemInProgress || it.Reason != fleetwave.ReasonReportMismatch {
			t.Fatalf("a success reporting generation 2 for a generation-3 item = %s/%s, want in_progress/report_mismatch", it.Status, it.Reason)
		}
		h.clk.Advance(time.Second)
		h.report(fleetwave.Report{Node: "n1", SentAt: h.clk.Now(), Instances: []fleetwave.InstanceStatus{{Block: "web", Version: a.TargetVersion, ConfigHash: a.ConfigHash, Generation: 3}}})
		if it := h.item(ids[0]); it.Status != fleetwave.ItemCompleted {
			t.Fatalf("after a report at generation 3: %s, want completed", it.Status)
		}
	})
}

// TestHealthGateComparesVersionAndState: a success whose reported instance
// is at the item's generation but not at its target version, or not in
// its desired state, does not count as done: the item stays in progress
// until its deadline, then is ambiguous; a report that never shows the
// target blocks it (report_mismatch), one that does completes it.
func TestHealthGateComparesVersionAndState(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		tests := []struct {
			name    string
			desired fleetwave.DesiredState
			got     fleetwave.InstanceStatus // what the result reports (block, generation filled in)
			later   *fleetwave.InstanceStatus
			want    fleetwave.ItemStatus
			reason  string
		}{
			{name: "another version stays in progress, then a report that never shows it blocks it",
				got: fleetwave.InstanceStatus{Version: "v0"}, want: fleetwave.ItemBlocked, reason: fleetwave.ReasonReportMismatch},
			{name: "another version, then a report at the target completes it",
				got: fleetwave.InstanceStatus{Version: "v0"}, later: &fleetwave.InstanceStatus{Version: "v5"}, want: fleetwave.ItemCompleted},
			{name: "stopped while running is desired",
				desired: fleetwave.StateRunning, got: fleetwave.InstanceStatus{Version: "v5", State: fleetwave.StateStopped}, want: fleetwave.ItemBlocked, reason: fleetwave.ReasonReportMismatch},
			{name: "absent while installed is desired",
				desired: fleetwave.StateInstalled, got: fleetwave.InstanceStatus{Version: "v5", State: fleetwave.StateAbsent}, want: fleetwave.ItemBlocked, reason: fleetwave.ReasonReportMismatch},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h := newHarness(t, rdb, WithPrefix(fmt.Sprintf("hg%d", i)), WithDeliveryGrace(time.Second))
				s := spec("gate", 1, "web", 5, 1, 0)
				s.Items[0].DesiredState = tt.desired
				_, ids := h.create(s)
				h.step()
				a := h.poll("n1")[0]
				in := tt.got
				in.Block, in.Generation, in.ConfigHash = "web", 5, a.ConfigHash
				if err := h.e.Complete(h.ctx, "n1", fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess, Instance: &in}); err != nil {
					t.Fatal(err)
				}
				h.check()
				if it := h.item(ids[0]); it.Status != fleetwave.ItemInProgress || it.Reason != fleetwave.ReasonReportMismatch {
					t.Fatalf("a success reporting %+v = %s/%s, want in_progress/report_mismatch", in, it.Status, it.Reason)
				}
				h.clk.Advance(2 * time.Minute) // past the deadline
				h.step()
				if it := h.item(ids[0]); it.Status != fleetwave.ItemAmbiguous {
					t.Fatalf("past the deadline: %s, want ambiguous", it.Status)
				}
				rep := in
				if tt.later != nil {
					rep.Version = tt.later.Version
				}
				h.clk.Advance(time.Second)
				h.report(fleetwave.Report{Node: "n1", SentAt: h.clk.Now(), Instances: []fleetwave.InstanceStatus{rep}})
				if it := h.item(ids[0]); it.Status != tt.want || it.Reason != tt.reason {
					t.Fatalf("after the report: %s/%s, want %s/%s", it.Status, it.Reason, tt.want, tt.reason)
				}
			})
		}
	})
}

func TestDeliveryMux(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Run("fifty waiting polls share four connections and all get their attempt", func(t *testing.T) {
			opts := rdb.(*redis.Client).Options()
			small := redis.NewClient(&redis.Options{Network: opts.Network, Addr: opts.Addr, PoolSize: 4})
			t.Cleanup(func() { _ = small.Close() })
			h := newHarness(t, small, WithPrefix("mux"))
			const n = 50
			h.create(spec("web", n, "web", 1, n, 0))
			type result struct {
				node string
				as   []fleetwave.Attempt
				err  error
			}
			got := make(chan result, n)
			for i := range n {
				node := fmt.Sprintf("n%d", i+1)
				go func() {
					as, err := h.e.Poll(context.Background(), node, 5, 10*time.Second)
					got <- result{node, as, err}
				}()
			}
			for deadline := time.Now().Add(5 * time.Second); h.e.WaitingPolls() != n; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d polls wait, want %d", h.e.WaitingPolls(), n)
				}
			}
			start := time.Now()
			if res := h.step(); res.Dispatched != n {
				t.Fatalf("dispatched %d", res.Dispatched)
			}
			for range n {
				r := <-got
				if r.err != nil || len(r.as) != 1 || r.as[0].Node != r.node {
					t.Fatalf("poll of %s returned %v (%v)", r.node, ids(r.as), r.err)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("the polls took %v to get their attempts: not woken by the dispatch", took)
			}
			if w := h.e.WaitingPolls(); w != 0 {
				t.Fatalf("%d polls still counted as waiting", w)
			}
		})
		t.Run("an attempt announced while no poll of its node waited goes to its next poll", func(t *testing.T) {
			h := newHarness(t, rdb, WithPrefix("unclaimed"))
			h.create(spec("web", 1, "web", 1, 1, 0))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _, _ = h.e.Poll(ctx, "other", 1, time.Minute) }() // keeps the subscription up
			// n1 polls once in this subscription, then stops waiting
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if as, err := h.e.Poll(h.ctx, "n1", 1, 50*time.Millisecond); err != nil || len(as) != 0 {
					t.Fatalf("poll before the wave: %v (%v)", ids(as), err)
				}
				confirmed, _, _ := h.e.mux.state()
				if confirmed || time.Now().After(deadline) {
					break
				}
			}
			if res := h.step(); res.Dispatched != 1 {
				t.Fatalf("dispatched %d", res.Dispatched)
			}
			time.Sleep(100 * time.Millisecond) // the announcement reaches the mux, no n1 poll waits
			start := time.Now()
			as, err := h.e.Poll(h.ctx, "n1", 1, 3*time.Second)
			if err != nil || len(as) != 1 {
				t.Fatalf("the next poll of n1 returned %v (%v)", ids(as), err)
			}
			if took := time.Since(start); took > time.Second {
				t.Fatalf("the next poll of n1 waited %v for an attempt already queued", took)
			}
		})
	})
	t.Run("a Redis that lost its scripts still hands a waiting poll its attempt", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		h := newHarness(t, rdb, WithPrefix("noscript"))
		h.create(spec("web", 1, "web", 1, 1, 0))
		type result struct {
			as  []fleetwave.Attempt
			err error
		}
		got := make(chan result, 1)
		go func() {
			as, err := h.e.Poll(context.Background(), "n1", 1, 10*time.Second)
			got <- result{as, err}
		}()
		// the poll waits on a confirmed subscription: what is queued now
		// is popped by the mux, with a pipelined EVALSHA
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			subscribed, _, waiting := h.e.mux.state()
			ready := subscribed && waiting == 1
			if ready {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the poll does not wait on a confirmed subscription")
			}
		}
		time.Sleep(50 * time.Millisecond) // the confirmation's own pop is done
		if err := rdb.ScriptFlush(h.ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if res := h.step(); res.Dispatched != 1 {
			t.Fatalf("dispatched %d", res.Dispatched)
		}
		r := <-got
		if r.err != nil || len(r.as) != 1 || r.as[0].Delivery != 1 {
			t.Fatalf("the waiting poll returned %+v (%v), want its attempt in delivery 1", r.as, r.err)
		}
	})
	t.Run("a wave is popped in chunks, and a one-node rollout's attempt does not wait for the wave's pops", func(t *testing.T) {
		h := newHarness(t, redistest.Start(t).Client(t), WithPrefix("beside"))
		const n = 3*popChunk + 1 // four pipelines
		release := make(chan struct{})
		var armed atomic.Bool
		var wavePipes, largest atomic.Int64
		// once armed, the wave's pipelines after its first wait for release
		h.e.mux.beforePop = func(nodes []string) {
			if !armed.Load() || nodes[0] == "other" {
				return
			}
			if int64(len(nodes)) > largest.Load() {
				largest.Store(int64(len(nodes)))
			}
			if wavePipes.Add(1) > 1 {
				select {
				case <-release:
				case <-time.After(20 * time.Second):
				}
			}
		}
		h.create(spec("wave", n, "web", 1, n, 0))
		type result struct {
			node string
			as   []fleetwave.Attempt
			err  error
		}
		wave, other := make(chan result, n), make(chan result, 1)
		poll := func(node string, to chan result) {
			as, err := h.e.Poll(context.Background(), node, 5, 40*time.Second)
			to <- result{node, as, err}
		}
		// the first poll of a node in a subscription looks at its queue
		// itself, and may find the wave there before the mux does: each
		// node polls once briefly first, so the polls below leave it to
		// the mux
		go poll("other", other)
		waitMux(t, h.e, 1)
		for i := range n {
			if as, err := h.e.Poll(h.ctx, fmt.Sprintf("n%d", i+1), 5, time.Millisecond); err != nil || len(as) != 0 {
				t.Fatalf("poll before the wave: %v (%v)", ids(as), err)
			}
		}
		for i := range n {
			go poll(fmt.Sprintf("n%d", i+1), wave)
		}
		waitMux(t, h.e, n+1)
		armed.Store(true)
		if res := h.step(); res.Dispatched != n {
			t.Fatalf("dispatched %d of the wave, want %d", res.Dispatched, n)
		}
		check := func(r result) {
			t.Helper()
			if r.err != nil || len(r.as) != 1 || r.as[0].Node != r.node {
				t.Fatalf("poll of %s returned %v (%v), want its attempt", r.node, ids(r.as), r.err)
			}
		}
		// the first chunk is handed out while the others wait
		select {
		case r := <-wave:
			check(r)
		case <-time.After(10 * time.Second):
			t.Fatal("no poll of the wave got its attempt before the wave's last pops ran")
		}
		h.create(fleetwave.RolloutSpec{BaseID: "probe", MaxConcurrent: 1,
			Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "probe"), Generation: 1, Kind: fleetwave.SourceScheduler},
			Items:  []fleetwave.ItemSpec{itemSpec("other", "db", 1)}})
		if res := h.step(); res.Dispatched != 1 {
			t.Fatalf("dispatched %d of the one-node rollout, want 1", res.Dispatched)
		}
		select {
		case r := <-other:
			check(r)
		case <-time.After(10 * time.Second):
			t.Fatal("the one-node rollout's attempt waited for the wave's pops")
		}
		for deadline := time.Now().Add(10 * time.Second); len(wave)+1 < popChunk && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if got := len(wave) + 1; got != popChunk {
			t.Fatalf("%d polls of the wave answered while its last pops wait, want the first chunk's %d", got, popChunk)
		}
		close(release)
		for range n - 1 {
			check(<-wave)
		}
		if l := largest.Load(); l > popChunk {
			t.Fatalf("a pipeline of %d pops, want at most %d", l, popChunk)
		}
	})
	t.Run("the subscriber ends when no poll waits and the next poll starts it again", func(t *testing.T) {
		h := newHarness(t, redistest.Start(t).Client(t), WithPrefix("idle"))
		h.e.mux.idle = 100 * time.Millisecond // before the first Poll starts the subscriber
		h.create(spec("web", 1, "web", 1, 1, 0))
		if as, err := h.e.Poll(h.ctx, "n1", 1, 50*time.Millisecond); err != nil || len(as) != 0 {
			t.Fatalf("poll before the wave: %v (%v)", ids(as), err)
		}
		running := func() bool {
			_, running, _ := h.e.mux.state()
			return running
		}
		for deadline := time.Now().Add(5 * time.Second); running(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the subscriber still runs with no poll waiting")
			}
		}
		done := make(chan []fleetwave.Attempt, 1)
		go func() {
			as, _ := h.e.Poll(context.Background(), "n1", 1, 10*time.Second)
			done <- as
		}()
		for deadline := time.Now().Add(5 * time.Second); h.e.WaitingPolls() == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the poll does not wait")
			}
		}
		time.Sleep(100 * time.Millisecond) // subscribed again
		h.step()
		select {
		case as := <-done:
			if len(as) != 1 {
				t.Fatalf("poll returned %v", ids(as))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the restarted subscriber never handed out the attempt")
		}
	})
	t.Run("an attempt queued while the subscription was down is found when it comes back", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		h := newHarness(t, rdb, WithPrefix("resub"))
		h.create(spec("web", 1, "web", 1, 1, 0))
		done := make(chan []fleetwave.Attempt, 1)
		go func() {
			as, _ := h.e.Poll(context.Background(), "n1", 1, 20*time.Second)
			done <- as
		}()
		time.Sleep(300 * time.Millisecond) // the poll waits, the mux is subscribed
		if err := rdb.Do(h.ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		// the wave is announced while nobody listens
		if res := h.step(); res.Dispatched != 1 {
			t.Fatalf("dispatched %d", res.Dispatched)
		}
		select {
		case as := <-done:
			if len(as) != 1 || as[0].Node != "n1" {
				t.Fatalf("poll returned %v", ids(as))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting poll never got the attempt announced while the subscription was down")
		}
	})
}

func TestABrokenResultFailsAlone(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb, WithPrefix("poison"))
		_, items := h.create(spec("web", 2, "web", 1, 2, 0))
		h.step()
		as := h.pollAll(2)
		if len(as) != 2 {
			t.Fatalf("polled %v", ids(as))
		}
		// corrupt data: the first item lost its block
		if err := rdb.HDel(h.ctx, h.e.key("i", items[0]), "block").Err(); err != nil {
			t.Fatal(err)
		}
		if as[0].Item == items[0] {
			as[0], as[1] = as[1], as[0] // the good result first: it is applied before the other breaks
		}
		var batch []*completion
		for _, a := range as {
			args, err := resultArgs(a.Node, resultOf(a, fleetwave.ResultSuccess), 0.5)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, &completion{args: args})
		}
		h.e.runCompletions(h.ctx, batch) // one group, as concurrent Completes would be
		fine, broken := batch[0], batch[1]
		if broken.err == nil {
			t.Fatal("the result of the corrupt item was accepted")
		}
		if fine.err != nil {
			t.Fatalf("the other result of the group failed with it: %v", fine.err)
		}
		if it := h.item(items[1]); it.Status != fleetwave.ItemCompleted {
			t.Fatalf("the other item is %s", it.Status)
		}
		h.check() // counters still add up
	})
}

// TestAFailureKeepsTheTailOfItsOutput: a failed attempt's output (the
// agent's redacted tail) stays on its item, cut to its last
// MaxOutputTail bytes; a success keeps none.
func TestAFailureKeepsTheTailOfItsOutput(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		_, ids := h.create(spec("out", 2, "web", 1, 2, 0))
		h.step()
		as := h.pollAll(2)
		long := strings.Repeat("x", MaxOutputTail) + "the end"
		res := resultOf(as[0], fleetwave.ResultPermanent)
		res.Output, res.ExitCode = long, 3
		if err := h.e.Complete(h.ctx, as[0].Node, res); err != nil {
			t.Fatal(err)
		}
		ok := resultOf(as[1], fleetwave.ResultSuccess)
		ok.Output = "fine"
		if err := h.e.Complete(h.ctx, as[1].Node, ok); err != nil {
			t.Fatal(err)
		}
		failed, done := h.item(as[0].Item), h.item(as[1].Item)
		if len(failed.Output) != MaxOutputTail || !strings.HasSuffix(failed.Output, "the end") {
			t.Fatalf("failed item output: %d bytes, ends %q", len(failed.Output), failed.Output[max(0, len(failed.Output)-10):])
		}
		if done.Output != "" {
			t.Fatalf("a success kept output %q", done.Output)
		}
		_ = ids
	})
}

// TestAPermanentResultKeepsAKnownReason: an agent's permanent result may
// name a reason the engine knows (agent_upgrade_failed); anything else is
// permanent_failure.
func TestAPermanentResultKeepsAKnownReason(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		_, ids := h.create(spec("reason", 2, "web", 1, 2, 0))
		h.step()
		for i, reason := range []string{fleetwave.ReasonAgentUpgradeFailed, "made_up"} {
			a := h.poll(fmt.Sprintf("n%d", i+1))[0]
			res := resultOf(a, fleetwave.ResultPermanent)
			res.Reason = reason
			if err := h.e.Complete(h.ctx, a.Node, res); err != nil {
				t.Fatal(err)
			}
		}
		_, items := h.rollout(ids[0][:strings.Index(ids[0], ".")])
		if items[0].Reason != fleetwave.ReasonAgentUpgradeFailed || items[1].Reason != "permanent_failure" {
			t.Fatalf("reasons %q, %q", items[0].Reason, items[1].Reason)
		}
	})
}

// TestObserveReadsManyNodesInChunks: the observations of more nodes than
// one pipelined round trip carries are read whole, each node once.
func TestObserveReadsManyNodesInChunks(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	h := newHarness(t, rdb)
	n := pipelineChunk + pipelineChunk/4 // three chunks of observations
	for i := range n {
		node := fmt.Sprintf("n%05d", i)
		if err := h.e.Report(h.ctx, fleetwave.Report{Node: node, SentAt: t0,
			Instances: []fleetwave.InstanceStatus{{Block: "web", Version: node}}}); err != nil {
			t.Fatal(err)
		}
	}
	obs, _, err := h.e.Observe(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs) != n {
		t.Fatalf("%d nodes observed, want %d", len(obs), n)
	}
	for node, r := range obs {
		if len(r.Instances) != 1 || r.Instances[0].Version != node {
			t.Fatalf("%s observed as %+v", node, r)
		}
	}
}

// TestALargeSpecIsCreatedInChunksAsOneRollout: a spec of more items than
// one script takes becomes one rollout with every item, in order, and
// says which spec became which item; sent again, it creates nothing.
func TestALargeSpecIsCreatedInChunksAsOneRollout(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	h := newHarness(t, rdb)
	n := 2*CreateChunk + 7
	s := spec("big", n, "web", 1, 50, 0)
	r, err := h.e.CreateRolloutResult(h.ctx, h.fence, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "big" || r.Outcome != OutcomeCreated || len(r.Items) != n || len(r.Created) != n {
		t.Fatalf("created %q %s with %d items (%d indexes), want big created with %d", r.ID, r.Outcome, len(r.Items), len(r.Created), n)
	}
	for i, id := range r.Items {
		if want := fmt.Sprintf("big.%d", i+1); id != want || r.Created[i] != i {
			t.Fatalf("item %d is %s from spec %d, want %s from spec %d", i, id, r.Created[i], want, i)
		}
	}
	ro, items := h.rollout("big")
	if ro.Counters.Total != int64(n) || len(items) != n || items[n-1].Node != fmt.Sprintf("n%d", n) {
		t.Fatalf("rollout has %d items (counted %d), want %d in order", len(items), ro.Counters.Total, n)
	}
	again, err := h.e.CreateRolloutResult(h.ctx, h.fence, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Items) != 0 {
		t.Fatalf("sent again: %d items created", len(again.Items))
	}
}

// TestARolloutFillingStartsNoWaveBelowItsCap: while a rollout created in
// chunks still gets them, a Step starts no wave smaller than its
// max_concurrent (at 100,000 items the first wave took the first chunk's
// 2,000 where the cap was 5,000); a wave as wide as the cap starts at
// once, and the last chunk, or the fill's grace after a creation that
// stopped midway, lets a smaller one start.
func TestARolloutFillingStartsNoWaveBelowItsCap(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	h := newHarness(t, rdb)
	n := 2*CreateChunk + 500
	inProgress := func(id string) int64 {
		ro, _ := h.rollout(id)
		return ro.Counters.InProgress
	}
	// what the rollout's readers are told: filling while its chunks come
	// (a status write leaves its items for later), by both reads
	filling := func(id string) bool {
		t.Helper()
		ro, _ := h.rollout(id)
		all, err := h.e.Rollouts(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			if r.ID == id && r.Filling != ro.Filling {
				t.Fatalf("%s: Rollouts says filling %v, Rollout %v", id, r.Filling, ro.Filling)
			}
		}
		return ro.Filling
	}
	// a Step after each chunk, as the leader's loop runs one every 200 ms
	var fills []bool
	create := func(ctx context.Context, s fleetwave.RolloutSpec) ([]int64, error) {
		var seen []int64
		fills = nil
		h.e.afterChunk = func(int) {
			fills = append(fills, filling(s.BaseID))
			h.step()
			seen = append(seen, inProgress(s.BaseID))
		}
		defer func() { h.e.afterChunk = nil }()
		_, err := h.e.CreateRolloutResult(ctx, h.fence, s)
		return seen, err
	}

	// a cap the second chunk reaches: its wave starts then, whole
	capped := CreateChunk + CreateChunk/2
	seen, err := create(h.ctx, spec("wide", n, "web", 1, capped, 0))
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{0, int64(capped), int64(capped)}; !slices.Equal(seen, want) {
		t.Fatalf("in progress after each chunk: %v, want %v", seen, want)
	}
	if want := []bool{true, true, false}; !slices.Equal(fills, want) {
		t.Fatalf("filling after each chunk: %v, want %v", fills, want)
	}

	// a cap above the rollout's size: its one wave waits for the last chunk
	seen, err = create(h.ctx, spec("whole", n, "db", 1, n+100, 0))
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{0, 0, int64(n)}; !slices.Equal(seen, want) {
		t.Fatalf("in progress after each chunk: %v, want %v", seen, want)
	}

	// a creation that stops after its first chunk (the leader lost): the
	// rollout waits for the rest at most fillGrace, then runs what it has
	ctx, cancel := context.WithCancel(h.ctx)
	h.e.afterChunk = func(int) { cancel() }
	_, err = h.e.CreateRolloutResult(ctx, h.fence, spec("cut", n, "cache", 1, n, 0))
	h.e.afterChunk = nil
	if err == nil {
		t.Fatal("the creation went on after its context ended")
	}
	h.step()
	h.clk.Advance(fillGrace - time.Second)
	h.step()
	if got := inProgress("cut"); got != 0 {
		t.Fatalf("%d items dispatched within the fill's grace, want 0", got)
	}
	if !filling("cut") {
		t.Fatal("a creation cut within the fill's grace: the rollout is not filling")
	}
	h.clk.Advance(2 * time.Second)
	if filling("cut") {
		t.Fatal("the fill's grace passed: the rollout still filling")
	}
	h.step()
	if got := inProgress("cut"); got != CreateChunk {
		t.Fatalf("%d items dispatched once the fill's grace passed, want the first chunk's %d", got, CreateChunk)
	}
}

// TestAWaveTakesMaxConcurrentItemsAboveAThousand: a lane's scan once read
// at most 1,000 pending ids, so a BRC with max_concurrent 5000 ran in
// waves of 1,000.
func TestAWaveTakesMaxConcurrentItemsAboveAThousand(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	h := newHarness(t, rdb)
	h.create(spec("wide", 1700, "web", 1, 1500, 0))
	h.step()
	ro, _ := h.rollout("wide")
	if ro.Counters.InProgress != 1500 || ro.Counters.Pending != 200 {
		t.Fatalf("first wave: %+v, want 1500 in progress and 200 pending", ro.Counters)
	}
}

// bothPolled creates a rollout over n1 and n2, starts its wave and takes
// both attempts on h's Engine; it returns n1's.
func bothPolled(t *testing.T, h *harness) fleetwave.Attempt {
	t.Helper()
	h.create(spec("web", 2, "web", 1, 2, 3))
	h.step()
	var n1 fleetwave.Attempt
	for _, n := range []string{"n1", "n2"} {
		as := h.poll(n)
		if len(as) != 1 {
			t.Fatalf("%s polled %v", n, ids(as))
		}
		if n == "n1" {
			n1 = as[0]
		}
	}
	return n1
}

// TestAReportWantedReachesEveryEngine: a Step that makes an item
// ambiguous announces its node on Redis, so that another Engine (another
// hub replica, where the node's agent holds its poll) learns that the
// node's report is wanted and ends the node's waiting Poll at once, as
// the leader's own Engine does. Before, only the leader's hub knew (from
// its Step's answer), and the agent reported at its usual interval.
func TestAReportWantedReachesEveryEngine(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		heard := make(chan []string, 4)
		follower := New(rdb, WithClock(h.clk), WithPrefix("test"), WithReportWanted(func(nodes []string) { heard <- nodes }))
		if err := follower.Load(h.ctx); err != nil {
			t.Fatal(err)
		}
		n1 := bothPolled(t, h)
		// n1's and n2's agents poll the follower now, and wait there
		polled := map[string]chan error{}
		for _, n := range []string{"n1", "n2"} {
			done := make(chan error, 1)
			polled[n] = done
			go func() {
				as, err := follower.Poll(context.Background(), n, 5, time.Minute)
				if err == nil && len(as) > 0 {
					err = fmt.Errorf("polled %v", ids(as))
				}
				done <- err
			}()
		}
		waitMux(t, follower, 2)
		// n1's result comes; n2's is lost: at its deadline its item
		// awaits n2's report
		h.complete(n1, fleetwave.ResultSuccess)
		h.clk.Advance(time.Minute + DefaultDeliveryGrace)
		res, err := h.e.Step(h.ctx, h.fence)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.AwaitingReport, []string{"n2"}) {
			t.Fatalf("the leader's Step awaits %v, want [n2]", res.AwaitingReport)
		}
		select {
		case nodes := <-heard:
			if !slices.Equal(nodes, []string{"n2"}) {
				t.Fatalf("the follower heard %v, want [n2]", nodes)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the follower never heard that n2's report is wanted")
		}
		select {
		case err := <-polled["n2"]:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("n2's poll on the follower still waits")
		}
		select {
		case err := <-polled["n1"]:
			t.Fatalf("n1's poll ended at n2's announcement: %v", err)
		default:
		}
	})
}

// TestAnEngineThatMissedTheAnnouncementAsksAtTheNodesNextPoll: the
// follower's Engine holds no Poll, so it does not follow the
// announcements, when the leader's Step makes n2's item await n2's
// report. n2's next Poll there ends at once all the same, and the
// callback of WithReportWanted learns n2: the Poll's own look asks
// whether an item of its node awaits a report. Before, the follower never
// learnt, and n2's agent reported at its usual interval. A Poll of a node
// with nothing awaiting waits as before, and so does n2's next Poll
// within the minute (a look comes with every Poll while the subscription
// is down).
func TestAnEngineThatMissedTheAnnouncementAsksAtTheNodesNextPoll(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		var mu sync.Mutex
		var heard []string
		follower := New(rdb, WithClock(h.clk), WithPrefix("test"), WithReportWanted(func(nodes []string) {
			mu.Lock()
			heard = append(heard, nodes...)
			mu.Unlock()
		}))
		if err := follower.Load(h.ctx); err != nil {
			t.Fatal(err)
		}
		heardNow := func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(heard)
		}
		n1 := bothPolled(t, h)
		h.complete(n1, fleetwave.ResultSuccess)
		h.clk.Advance(time.Minute + DefaultDeliveryGrace)
		if res := h.step(); !slices.Equal(res.AwaitingReport, []string{"n2"}) {
			t.Fatalf("the leader's Step awaits %v, want [n2]", res.AwaitingReport)
		}
		if got := heardNow(); len(got) != 0 {
			t.Fatalf("the follower heard %v before any poll, want nothing (it follows no announcement)", got)
		}
		// n2's agent polls the follower, for up to an hour
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		defer cancel()
		as, err := follower.Poll(ctx, "n2", 5, time.Hour)
		if err != nil {
			t.Fatalf("n2's poll on the follower: %v (it waited instead of ending for the report)", err)
		}
		if len(as) != 0 {
			t.Fatalf("n2's poll on the follower handed out %v", ids(as))
		}
		if got := heardNow(); !slices.Equal(got, []string{"n2"}) {
			t.Fatalf("the follower heard %v, want [n2]", got)
		}
		// n1 awaits nothing; n2 was asked less than a minute ago: both wait
		for _, n := range []string{"n1", "n2"} {
			const wait = 300 * time.Millisecond
			start := time.Now()
			if as, err := follower.Poll(h.ctx, n, 5, wait); err != nil || len(as) != 0 {
				t.Fatalf("%s's next poll: %v %v", n, ids(as), err)
			}
			if took := time.Since(start); took < wait {
				t.Fatalf("%s's next poll ended after %v, before its wait of %v", n, took, wait)
			}
		}
		if got := heardNow(); slices.Contains(got, "n1") {
			t.Fatalf("the follower heard %v, want no n1", got)
		}
	})
}
