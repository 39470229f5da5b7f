package engine

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// outboxLine renders events as "kind rollout/item status reason" lines.
func outboxLines(evs []OutboxEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		id := ev.Rollout
		if ev.Kind == OutboxItem {
			id = ev.Item
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", ev.Kind, id, ev.Status, ev.Reason)
	}
	return b.String()
}

func (h *harness) outbox() []OutboxEvent {
	h.t.Helper()
	evs, err := h.e.ReadOutbox(h.ctx, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

func TestOutbox(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		id, _ := h.create(spec("web", 3, "web", 1, 2, 0))
		h.step()
		as := h.pollAll(3)
		h.complete(as[0], fleetwave.ResultSuccess)
		h.complete(as[1], fleetwave.ResultPermanent)
		h.step()
		h.complete(h.poll("n3")[0], fleetwave.ResultSuccess)
		want := "rollout web active created\n" +
			"item web.1 completed \n" +
			"item web.2 blocked permanent_failure\n" +
			"item web.3 completed \n" +
			"rollout web completed \n"

		t.Run("every transition Git must show is recorded with it, in order", func(t *testing.T) {
			evs := h.outbox()
			if got := outboxLines(evs); got != want {
				t.Fatalf("outbox:\n%s\nwant:\n%s", got, want)
			}
			ev := evs[1]
			if ev.Rollout != id || ev.Node != "n1" || ev.Block != "web" || ev.Generation != 1 || !ev.At.Equal(t0) || ev.ID == "" {
				t.Fatalf("item event %+v", ev)
			}
		})
		t.Run("unacknowledged events are read again, also by a restarted engine", func(t *testing.T) {
			if got := outboxLines(h.outbox()); got != want {
				t.Fatalf("second read:\n%s", got)
			}
			// a new process: new Engine on the same Redis, no state carried over
			e2 := New(rdb, WithPrefix("test"), WithClock(h.clk), WithLogger(zerolog.New(zerolog.NewTestWriter(t))),
				WithRand(rand.New(rand.NewSource(2))))
			if err := e2.Load(h.ctx); err != nil {
				t.Fatal(err)
			}
			evs, err := e2.ReadOutbox(h.ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := outboxLines(evs); got != "rollout web active created\nitem web.1 completed \n" {
				t.Fatalf("restarted engine read:\n%s", got)
			}
		})
		t.Run("a deposed leader acknowledges nothing", func(t *testing.T) {
			evs := h.outbox()
			_, err := h.e.AckOutbox(h.ctx, h.fence-1, evs[0].ID)
			mustErr(t, err, ErrStaleFence)
			if got := outboxLines(h.outbox()); got != want {
				t.Fatalf("after a stale ack:\n%s", got)
			}
		})
		t.Run("acknowledged events are gone, the rest stays", func(t *testing.T) {
			evs := h.outbox()
			n, err := h.e.AckOutbox(h.ctx, h.fence, evs[0].ID, evs[1].ID, evs[1].ID)
			if err != nil || n != 2 {
				t.Fatalf("ack: %d, %v", n, err)
			}
			rest := strings.SplitN(want, "\n", 3)[2]
			if got := outboxLines(h.outbox()); got != rest {
				t.Fatalf("after ack:\n%s\nwant:\n%s", got, rest)
			}
			e2 := New(rdb, WithPrefix("test"), WithClock(h.clk))
			evs, err = e2.ReadOutbox(h.ctx, 100)
			if err != nil || outboxLines(evs) != rest {
				t.Fatalf("restarted engine after ack: %v\n%s", err, outboxLines(evs))
			}
			ids := make([]string, len(evs))
			for i, ev := range evs {
				ids[i] = ev.ID
			}
			if _, err := h.e.AckOutbox(h.ctx, h.fence, ids...); err != nil {
				t.Fatal(err)
			}
			if evs := h.outbox(); evs != nil {
				t.Fatalf("outbox not empty: %s", outboxLines(evs))
			}
			if n, err := h.rdb.XLen(h.ctx, h.e.key("outbox")).Result(); err != nil || n != 0 {
				t.Fatalf("stream holds %d entries (%v)", n, err)
			}
		})
		t.Run("operator actions, halts and items created terminal are recorded", func(t *testing.T) {
			s := spec("ops", 3, "db", 1, 1, 0)
			s.FailureThresholdPercent = 30
			s.Items[2].SkipReason = "cli_managed"
			rid, _ := h.create(s)
			h.step()
			h.complete(h.poll("n1")[0], fleetwave.ResultPermanent)
			h.step()
			for _, action := range []string{ActionPause, ActionResume, ActionCancel} {
				if err := h.e.SetRolloutState(h.ctx, h.fence, rid, action, "alice"); err != nil {
					t.Fatal(err)
				}
				h.check()
			}
			want := "rollout ops active created\n" +
				"item ops.3 skipped cli_managed\n" +
				"item ops.1 blocked permanent_failure\n" +
				"rollout ops blocked failure_threshold\n" +
				"rollout ops paused pause\n" +
				"rollout ops active resume\n" +
				"item ops.2 skipped cancelled\n" +
				"rollout ops cancelled cancel\n"
			if got := outboxLines(h.outbox()); got != want {
				t.Fatalf("outbox:\n%s\nwant:\n%s", got, want)
			}
		})
	})
}

func TestLaneDepths(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb, WithBackoff(time.Second, time.Second))
		s := spec("lanes", 5, "web", 1, 2, 1)
		s.Items[3].ManagedBy = "team-a"
		s.Items[4].ManagedBy = "team-a"
		h.create(s)
		depths := func(want map[string]LaneDepth) {
			t.Helper()
			got, err := h.e.LaneDepths(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("lane depths %v, want %v", got, want)
			}
		}
		depths(map[string]LaneDepth{"": {Pending: 3}, "team-a": {Pending: 2}})
		h.step()
		depths(map[string]LaneDepth{"": {Pending: 1, InFlight: 2}, "team-a": {InFlight: 2}})
		as := h.pollAll(5) // n1, n2 (default lane), n4, n5 (team-a)
		h.complete(as[0], fleetwave.ResultSuccess)
		h.complete(as[2], fleetwave.ResultTransient) // retrying: still in flight
		depths(map[string]LaneDepth{"": {Pending: 1, InFlight: 1}, "team-a": {InFlight: 2}})
		h.complete(as[1], fleetwave.ResultSuccess) // empties the wave: n3 starts
		depths(map[string]LaneDepth{"": {InFlight: 1}, "team-a": {InFlight: 2}})
		h.complete(as[3], fleetwave.ResultSuccess)
		h.clk.Advance(2 * time.Second)
		h.step() // the retry of n4
		h.complete(h.poll("n4")[0], fleetwave.ResultSuccess)
		h.complete(h.poll("n3")[0], fleetwave.ResultSuccess)
		depths(map[string]LaneDepth{"": {}, "team-a": {}})
	})
}

func TestStatusTip(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		tip := func() string {
			t.Helper()
			v, err := h.e.StatusTip(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if got := tip(); got != "" {
			t.Fatalf("status tip before any record: %q, want none", got)
		}
		v0, err := h.e.Version(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.e.RecordStatusTip(h.ctx, h.fence, "c1"); err != nil {
			t.Fatal(err)
		}
		if err := h.e.RecordStatusTip(h.ctx, h.fence, "c2"); err != nil {
			t.Fatal(err)
		}
		if got := tip(); got != "c2" {
			t.Fatalf("status tip %q, want the last recorded, c2", got)
		}
		if v, err := h.e.Version(h.ctx); err != nil || v != v0 {
			t.Fatalf("version %d after recording the tip (err %v), want %d: a record is no change to report", v, err, v0)
		}
		if err := h.e.RecordStatusTip(h.ctx, h.fence+1, "c3"); !errors.Is(err, ErrStaleFence) {
			t.Fatalf("record under another fence: %v, want ErrStaleFence", err)
		}
		if got := tip(); got != "c2" {
			t.Fatalf("status tip %q after a refused record, want c2", got)
		}
	})
}
