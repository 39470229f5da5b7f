package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// laneSpec returns a rollout spec whose item i is on node n<i+1> and in lane
// owners[i].
func laneSpec(base string, mc int, owners ...string) fleetwave.RolloutSpec {
	s := fleetwave.RolloutSpec{BaseID: base, MaxConcurrent: mc, Source: fleetwave.RolloutSource{Kind: fleetwave.SourceScheduler}}
	for i, o := range owners {
		it := itemSpec(fmt.Sprintf("n%d", i+1), "web", 1)
		it.ManagedBy = o
		s.Items = append(s.Items, it)
	}
	return s
}

func TestLanes(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		t.Run("lanes are independent: a stuck item in lane A does not stop lane B's waves", func(t *testing.T) {
			id, _ := h.create(laneSpec("lanes", 1, "team-a", "team-a", "team-b", "team-b", "team-b"))
			h.step()
			as := h.pollAll(5)
			if got := ids(as); len(got) != 2 || got[0] != "lanes.1.1" || got[1] != "lanes.3.1" {
				t.Fatalf("first step dispatched %v, want one item per lane", got)
			}
			// lane A's item never answers; lane B goes through three waves
			for wave := 2; wave <= 3; wave++ {
				for _, a := range as {
					if a.ManagedBy == "team-b" {
						h.complete(a, fleetwave.ResultSuccess)
					}
				}
				h.step()
				as = h.pollAll(5)
				if len(as) != 1 || as[0].ManagedBy != "team-b" {
					t.Fatalf("lane B wave %d dispatched %v", wave, ids(as))
				}
			}
			r, items := h.rollout(id)
			wantWave := []int{1, 0, 1, 2, 3}
			wantStatus := []fleetwave.ItemStatus{fleetwave.ItemInProgress, fleetwave.ItemPending,
				fleetwave.ItemCompleted, fleetwave.ItemCompleted, fleetwave.ItemInProgress}
			for i, it := range items {
				if it.Wave != wantWave[i] || it.Status != wantStatus[i] {
					t.Fatalf("item %s: wave %d %s, want wave %d %s", it.ID, it.Wave, it.Status, wantWave[i], wantStatus[i])
				}
			}
			if items[1].ManagedBy != "team-a" || items[1].Reason != fleetwave.ReasonLaneFull {
				t.Fatalf("waiting lane A item: managed_by %q reason %q", items[1].ManagedBy, items[1].Reason)
			}
			if r.Wave != 3 {
				t.Fatalf("rollout wave = %d, want the highest lane wave 3", r.Wave)
			}
		})
		t.Run("max_concurrent applies per lane", func(t *testing.T) {
			h.create(fleetwave.RolloutSpec{BaseID: "mc", MaxConcurrent: 2, Items: func() []fleetwave.ItemSpec {
				var out []fleetwave.ItemSpec
				for i := 1; i <= 6; i++ {
					it := itemSpec(fmt.Sprintf("m%d", i), "db", 1)
					it.ManagedBy = []string{"x", "y"}[i%2]
					out = append(out, it)
				}
				return out
			}()})
			if res := h.step(); res.Dispatched != 4 {
				t.Fatalf("dispatched %d, want 2 per lane", res.Dispatched)
			}
			_, items := h.rollout("mc")
			for _, it := range items[4:] {
				if it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonLaneFull {
					t.Fatalf("item %s: %s %q", it.ID, it.Status, it.Reason)
				}
			}
		})
	})
}

// berlin2am is a daily window 02:00-03:00 Europe/Berlin (01:00-02:00 UTC in winter).
var berlin2am = fleetwave.Window{Name: "night", Cron: "0 2 * * *", Duration: time.Hour, DurationText: "1h", Timezone: "Europe/Berlin"}

func TestMaintenanceWindows(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb) // the clock starts at 2026-01-01 00:00 UTC
		s := spec("win", 3, "web", 1, 1, 0)
		for i := range s.Items {
			s.Items[i].Windows = []fleetwave.Window{berlin2am}
			s.Items[i].Payload.TimeoutSeconds = 7200 // outlives the window
		}
		s.Items[2].ManagedBy = "other" // own lane
		s.Items[2].BypassWindows = true
		id, _ := h.create(s)
		opens := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)

		t.Run("bypass dispatches at once, the others wait with the next opening", func(t *testing.T) {
			h.step()
			as := h.pollAll(3)
			if len(as) != 1 || as[0].Node != "n3" {
				t.Fatalf("dispatched %v, want only the bypassing n3", ids(as))
			}
			_, items := h.rollout(id)
			it := items[0]
			if it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonMaintenanceWindow || !it.RetryAfter.Equal(opens) {
				t.Fatalf("item %s: %s %q retry_after %v, want maintenance_window until %v", it.ID, it.Status, it.Reason, it.RetryAfter, opens)
			}
		})
		t.Run("dispatched once the window opens", func(t *testing.T) {
			h.clk.Set(opens.Add(-time.Second))
			if res := h.step(); res.Dispatched != 0 {
				t.Fatalf("dispatched %d a second before the window", res.Dispatched)
			}
			h.clk.Set(opens)
			h.step()
			as := h.pollAll(3)
			if len(as) != 1 || as[0].Node != "n1" {
				t.Fatalf("dispatched %v at the opening", ids(as))
			}
			t.Run("a running attempt is not interrupted when the window closes", func(t *testing.T) {
				h.clk.Set(opens.Add(61 * time.Minute))
				h.step()
				if it := h.item(as[0].Item); it.Status != fleetwave.ItemInProgress {
					t.Fatalf("item after the window closed: %s", it.Status)
				}
				h.complete(as[0], fleetwave.ResultSuccess)
				h.step()
				if got := h.pollAll(3); len(got) != 0 {
					t.Fatalf("dispatched %v after the window closed", ids(got))
				}
				it := h.item(id + ".2")
				if next := opens.Add(24 * time.Hour); it.Reason != fleetwave.ReasonMaintenanceWindow || !it.RetryAfter.Equal(next) {
					t.Fatalf("item %s: %q until %v, want the next day's opening %v", it.ID, it.Reason, it.RetryAfter, next)
				}
			})
		})
		t.Run("an invalid window is refused", func(t *testing.T) {
			bad := spec("bad", 1, "db", 1, 1, 0)
			bad.Items[0].Windows = []fleetwave.Window{{Cron: "61 * * * *", Duration: time.Hour}}
			if _, _, err := h.e.CreateRollout(h.ctx, h.fence, bad); !errorsIs(err, ErrInvalidWindow) {
				t.Fatalf("error = %v", err)
			}
		})
	})
}

func TestWindowSetState(t *testing.T) {
	tests := []struct {
		name     string
		now      time.Time
		wantOpen bool
		wantNext time.Time
	}{
		{name: "before the tick it is closed until the tick", now: time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC), wantNext: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)},
		{name: "open at the tick itself", now: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC), wantOpen: true},
		{name: "open just before tick plus duration", now: time.Date(2026, 1, 1, 1, 59, 59, 0, time.UTC), wantOpen: true},
		{name: "closed at tick plus duration, next day's tick next", now: time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC), wantNext: time.Date(2026, 1, 2, 1, 0, 0, 0, time.UTC)},
		{name: "summer time moves the UTC opening", now: time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), wantOpen: true},
	}
	_, def, err := windowSetOf(fleetwave.ItemSpec{Windows: []fleetwave.Window{berlin2am}})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := parseWindowSet(def)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, next := ws.state(tt.now)
			if open != tt.wantOpen || !next.Equal(tt.wantNext) {
				t.Fatalf("state(%v) = %v %v, want %v %v", tt.now, open, next, tt.wantOpen, tt.wantNext)
			}
		})
	}
}

func TestSkipReason(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		s := spec("skip", 2, "web", 1, 1, 0)
		s.Items[1].SkipReason = fleetwave.ReasonCLIManaged
		id, items := h.create(s)
		if len(items) != 2 {
			t.Fatalf("created %v", items)
		}
		r, got := h.rollout(id)
		if got[1].Status != fleetwave.ItemSkipped || got[1].Reason != fleetwave.ReasonCLIManaged || r.Counters.Skipped != 1 || r.Counters.Pending != 1 {
			t.Fatalf("skipped item %s %q, counters %+v", got[1].Status, got[1].Reason, r.Counters)
		}
		if _, ok, _ := h.e.ActiveItem(h.ctx, "n2", "web"); ok {
			t.Fatal("a skipped item occupies its instance")
		}
		if id2, again := h.create(s); id2 != "" || len(again) != 0 {
			t.Fatalf("the same skip was recorded again: %q %v", id2, again)
		}
		all := spec("skip-all", 1, "db", 1, 1, 0)
		all.Items[0].SkipReason = fleetwave.ReasonCLIManaged
		id3, _ := h.create(all)
		if r, _ := h.rollout(id3); r.Status != fleetwave.RolloutCompleted {
			t.Fatalf("a rollout of skipped items only is %s", r.Status)
		}
	})
}

func TestSetRolloutState(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		id, _ := h.create(spec("ops", 6, "web", 1, 2, 0))
		h.step()
		first := h.pollAll(6)
		set := func(action, actor string) {
			t.Helper()
			if err := h.e.SetRolloutState(h.ctx, h.fence, id, action, actor); err != nil {
				t.Fatal(err)
			}
			h.check()
		}
		t.Run("pause stops new dispatch, in-flight attempts finish", func(t *testing.T) {
			set(ActionPause, "alice")
			for _, a := range first {
				h.complete(a, fleetwave.ResultSuccess)
			}
			if res := h.step(); res.Dispatched != 0 {
				t.Fatalf("paused rollout dispatched %d", res.Dispatched)
			}
			r, _ := h.rollout(id)
			if r.Status != fleetwave.RolloutPaused || r.Reason != "paused" || r.Counters.Done != 2 || !r.UpdatedAt.Equal(h.clk.Now()) {
				t.Fatalf("rollout %s %q %+v at %v", r.Status, r.Reason, r.Counters, r.UpdatedAt)
			}
		})
		t.Run("resume dispatches again", func(t *testing.T) {
			h.clk.Advance(time.Minute)
			set(ActionResume, "bob")
			if res := h.step(); res.Dispatched != 2 {
				t.Fatalf("resumed rollout dispatched %d", res.Dispatched)
			}
		})
		t.Run("cancel skips pending items, in-flight ones finish", func(t *testing.T) {
			set(ActionCancel, "carol")
			r, items := h.rollout(id)
			if r.Status != fleetwave.RolloutCancelled || r.Counters.Skipped != 2 || r.Counters.InProgress != 2 {
				t.Fatalf("cancelled rollout %s %+v", r.Status, r.Counters)
			}
			if items[5].Reason != "cancelled" {
				t.Fatalf("pending item after cancel: %s %q", items[5].Status, items[5].Reason)
			}
			for _, a := range h.pollAll(6) {
				h.complete(a, fleetwave.ResultSuccess)
			}
			if r, _ := h.rollout(id); r.Status != fleetwave.RolloutCancelled || r.Counters.Done != 4 {
				t.Fatalf("after in-flight finished: %s %+v", r.Status, r.Counters)
			}
		})
		t.Run("history records actor and time", func(t *testing.T) {
			hist, err := h.e.RolloutHistory(h.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) != 3 || hist[0].Actor != "alice" || hist[1].Action != ActionResume ||
				hist[1].From != fleetwave.RolloutPaused || hist[2].To != fleetwave.RolloutCancelled || !hist[0].At.Equal(t0) {
				t.Fatalf("history %+v", hist)
			}
		})
		t.Run("errors", func(t *testing.T) {
			mustErr(t, h.e.SetRolloutState(h.ctx, h.fence, "nope", ActionPause, "x"), ErrNotFound)
			mustErr(t, h.e.SetRolloutState(h.ctx, h.fence, id, ActionResume, "x"), ErrInvalidState)
			mustErr(t, h.e.SetRolloutState(h.ctx, h.fence, id, "explode", "x"), ErrInvalidState)
			mustErr(t, h.e.SetRolloutState(h.ctx, h.fence-1, id, ActionPause, "x"), ErrStaleFence)
			_, err := h.e.RolloutHistory(h.ctx, "nope")
			mustErr(t, err, ErrNotFound)
		})
		t.Run("resume lifts a failure-threshold halt", func(t *testing.T) {
			s := spec("thr", 3, "db", 1, 1, 0)
			s.FailureThresholdPercent = 30
			id, _ := h.create(s)
			h.step()
			h.complete(h.poll("n1")[0], fleetwave.ResultPermanent)
			h.step()
			if r, _ := h.rollout(id); r.Status != fleetwave.RolloutBlocked {
				t.Fatalf("rollout %s", r.Status)
			}
			if err := h.e.SetRolloutState(h.ctx, h.fence, id, ActionResume, "dave"); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"n2", "n3"} {
				h.step()
				as := h.poll(n)
				if len(as) != 1 {
					t.Fatalf("%s after resume: %v", n, ids(as))
				}
				h.complete(as[0], fleetwave.ResultSuccess)
			}
			h.step()
			if r, _ := h.rollout(id); r.Status != fleetwave.RolloutCompleted || r.Counters.Done != 2 || r.Counters.Failed != 1 {
				t.Fatalf("rollout %s %+v", r.Status, r.Counters)
			}
		})
	})
}

func TestRolloutLanes(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		two, _ := h.create(laneSpec("two", 1, "team-b", "team-a", "team-b"))
		other := laneSpec("one", 1, "team-c")
		other.Items[0].Block = "db" // another instance of n1
		one, _ := h.create(other)
		lanes, err := h.e.RolloutLanes(h.ctx, []string{two, one, "none"})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(lanes); got != "map[one:[team-c] two:[team-a team-b]]" {
			t.Fatalf("lanes %s", got)
		}
	})
}
