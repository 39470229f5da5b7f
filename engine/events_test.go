package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// brcSpec is the spec of generation gen of BRC name over nodes, as the
// reconciler plans it: one event per generation, the BRC's budget, older
// generations superseded.
func brcSpec(name string, gen int64, maxConcurrent int, nodes ...string) fleetwave.RolloutSpec {
	s := fleetwave.RolloutSpec{
		BaseID:        fmt.Sprintf("%s-g%d", name, gen),
		Source:        fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, name), Generation: gen, Kind: fleetwave.SourceScheduler},
		MaxConcurrent: maxConcurrent,
		Budget:        name,
		BudgetCap:     maxConcurrent,
		Supersede:     true,
	}
	for _, n := range nodes {
		s.Items = append(s.Items, itemSpec(n, name, gen))
	}
	return s
}

func TestOneRolloutPerEvent(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		t.Run("nodes that report later join the generation's rollout in a later wave", func(t *testing.T) {
			id, _ := h.create(brcSpec("db", 1, 1, "n1"))
			h.step()
			a := h.poll("n1")
			if id != "db-g1" || len(a) != 1 {
				t.Fatalf("first: %q, polled %v", id, ids(a))
			}
			for _, n := range []string{"n2", "n3"} {
				if id, items := h.create(brcSpec("db", 1, 1, n)); id != "db-g1" || len(items) != 1 {
					t.Fatalf("%s joined %q %v, want db-g1", n, id, items)
				}
			}
			if res := h.step(); res.Dispatched != 0 {
				t.Fatalf("a joined item started while the wave is in flight (max_concurrent 1): %+v", res)
			}
			if it := h.item("db-g1.2"); it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonLaneFull {
				t.Fatalf("joined item: %s %q, want pending lane_full", it.Status, it.Reason)
			}
			h.complete(a[0], fleetwave.ResultSuccess) // starts wave 2 at once
			got := h.poll("n2")
			if len(got) != 1 || got[0].Item != "db-g1.2" {
				t.Fatalf("wave 2 polled %v", ids(got))
			}
			if it := h.item("db-g1.2"); it.Wave != 2 {
				t.Fatalf("joined item in wave %d, want 2", it.Wave)
			}
			h.complete(got[0], fleetwave.ResultSuccess)
			rs, err := h.e.Rollouts(h.ctx)
			if err != nil || len(rs) != 1 {
				t.Fatalf("%d rollouts for one event (%v)", len(rs), err)
			}
		})
		t.Run("a completed rollout is reopened by a late node", func(t *testing.T) {
			h.step()
			for _, a := range h.poll("n3") {
				h.complete(a, fleetwave.ResultSuccess)
			}
			if r, _ := h.rollout("db-g1"); r.Status != fleetwave.RolloutCompleted {
				t.Fatalf("rollout %s, want completed", r.Status)
			}
			if id, items := h.create(brcSpec("db", 1, 1, "n4")); id != "db-g1" || len(items) != 1 {
				t.Fatalf("late node joined %q %v", id, items)
			}
			if r, _ := h.rollout("db-g1"); r.Status != fleetwave.RolloutActive || r.Counters.Total != 4 {
				t.Fatalf("reopened rollout %s %+v", r.Status, r.Counters)
			}
		})
		t.Run("a cancelled rollout takes no more items", func(t *testing.T) {
			if err := h.e.SetRolloutState(h.ctx, h.fence, "db-g1", ActionCancel, "alice"); err != nil {
				t.Fatal(err)
			}
			_, items, outcome, err := h.e.CreateRolloutOutcome(h.ctx, h.fence, brcSpec("db", 1, 1, "n5"))
			if err != nil || len(items) != 0 || outcome != OutcomeCancelled {
				t.Fatalf("after cancel: %v %s %v", items, outcome, err)
			}
			h.check()
		})
	})
}

func TestMaxConcurrentHoldsAcrossGenerations(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		nodes := []string{"n1", "n2", "n3", "n4"}
		h.create(brcSpec("web", 1, 2, nodes...))
		h.step()
		g1 := h.pollAll(4)
		if len(g1) != 2 {
			t.Fatalf("generation 1 started %d, want 2", len(g1))
		}
		// generation 2 arrives while two items of generation 1 run
		if id, _ := h.create(brcSpec("web", 2, 2, nodes...)); id != "web-g2" {
			t.Fatalf("created %q", id)
		}
		if r, _ := h.rollout("web-g1"); r.Status != fleetwave.RolloutSuperseded {
			t.Fatalf("generation 1 is %s, want superseded", r.Status)
		}
		if res := h.step(); res.Dispatched != 0 {
			t.Fatalf("generation 2 started %d items while generation 1 holds the whole cap", res.Dispatched)
		}
		h.complete(g1[0], fleetwave.ResultSuccess) // frees one place: generation 2 takes it at once
		started := h.pollAll(4)
		if len(started) != 1 || started[0].Generation != 2 {
			t.Fatalf("after one result: %v", ids(started))
		}
		h.complete(g1[1], fleetwave.ResultSuccess)
		h.step()
		if more := h.pollAll(4); len(more) != 0 {
			// generation 2's wave 1 holds one item in flight: its next wave
			// waits for it, whatever room the budget has
			t.Fatalf("a second item of wave 1 started: %v", ids(more))
		}
		// n1 and n2 had generation 1 in flight when generation 2 was
		// planned: the next plan adds them to generation 2's rollout
		if _, items := h.create(brcSpec("web", 2, 2, nodes...)); len(items) != 2 {
			t.Fatalf("the next plan joined %v, want n1 and n2", items)
		}
		h.complete(started[0], fleetwave.ResultSuccess)
		if next := h.pollAll(4); len(next) != 2 {
			t.Fatalf("wave 2 of generation 2 started %v, want 2", ids(next))
		}
	})
}

// TestAReopenedRolloutCountsAgainstItsBudget: a completed rollout that a
// wave of another rollout of its budget dropped from the budget (it was
// idle) and that a late node then reopens counts against the budget
// again, so the next generation cannot start past max_concurrent.
func TestAReopenedRolloutCountsAgainstItsBudget(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.create(brcSpec("app", 1, 3, "n1"))
		h.step()
		first := h.pollAll(1)
		h.complete(first[0], fleetwave.ResultSuccess)
		if r, _ := h.rollout("app-g1"); r.Status != fleetwave.RolloutCompleted {
			t.Fatalf("app-g1 is %s, want completed", r.Status)
		}
		// a one-shot request of the same BRC starts a wave: the budget
		// drops the idle, completed app-g1
		req := fleetwave.RolloutSpec{
			BaseID:        "manual-migrate",
			Source:        fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindRollout, "migrate"), Generation: 1, Kind: fleetwave.SourceManual},
			MaxConcurrent: 3, Budget: "app", BudgetCap: 3, Once: true,
			Items: []fleetwave.ItemSpec{itemSpec("n9", "app", 1)},
		}
		req.Items[0].Payload.Operational = true
		h.create(req)
		h.step()
		migrate := h.poll("n9")
		if len(migrate) != 1 {
			t.Fatalf("the request started %v", ids(migrate))
		}
		h.complete(migrate[0], fleetwave.ResultSuccess)
		// a late node reopens app-g1 and its item runs
		if id, items := h.create(brcSpec("app", 1, 3, "n2")); id != "app-g1" || len(items) != 1 {
			t.Fatalf("the late node joined %q %v", id, items)
		}
		h.step()
		late := h.poll("n2")
		if len(late) != 1 {
			t.Fatalf("the late item: polled %v", ids(late))
		}
		// generation 2 over three other nodes: one place is taken by
		// app-g1's late item
		h.create(brcSpec("app", 2, 3, "n3", "n4", "n5"))
		h.step()
		if got := append(append(h.poll("n3"), h.poll("n4")...), h.poll("n5")...); len(got) != 2 {
			t.Fatalf("generation 2 started %v while app-g1 holds one of 3 places, want 2", ids(got))
		}
	})
}

func TestDrainedNodesWait(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		if _, err := h.e.SetDrained(h.ctx, h.fence, []string{"n1"}); err != nil {
			t.Fatal(err)
		}
		_, items := h.create(brcSpec("web", 1, 2, "n1", "n2"))
		h.step()
		as := h.pollAll(2)
		if len(as) != 1 || as[0].Node != "n2" {
			t.Fatalf("polled %v, want n2 only", ids(as))
		}
		h.complete(as[0], fleetwave.ResultSuccess)
		if it := h.item(items[0]); it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonNodeDraining {
			t.Fatalf("drained node's item: %s %q", it.Status, it.Reason)
		}
		if changed, err := h.e.SetDrained(h.ctx, h.fence, nil); err != nil || !changed {
			t.Fatalf("undrain: %v %v", changed, err)
		}
		h.step()
		if as := h.poll("n1"); len(as) != 1 || as[0].Item != items[0] {
			t.Fatalf("after undrain polled %v", ids(as))
		}
	})
}

func TestOneShotEventWaitsForABusyInstance(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.create(brcSpec("web", 1, 1, "n1"))
		h.step()
		upgrade := h.poll("n1")
		restart := fleetwave.RolloutSpec{
			BaseID:        "manual-restart",
			Source:        fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindRollout, "restart"), Generation: 1, Kind: fleetwave.SourceManual},
			MaxConcurrent: 1, Budget: "web", BudgetCap: 1, Once: true,
			Items: []fleetwave.ItemSpec{itemSpec("n1", "web", 1)},
		}
		restart.Items[0].Payload.Operational = true
		id, items := h.create(restart)
		if id != "manual-restart" || len(items) != 1 {
			t.Fatalf("the request created %q %v, want one waiting item", id, items)
		}
		h.step()
		if it := h.item(items[0]); it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonInstanceBusy {
			t.Fatalf("restart item %s %q, want pending instance_busy", it.Status, it.Reason)
		}
		if again, more := h.create(restart); again != "" || len(more) != 0 {
			t.Fatalf("the same request again created %q %v", again, more)
		}
		h.complete(upgrade[0], fleetwave.ResultSuccess)
		h.step()
		as := h.poll("n1")
		if len(as) != 1 || as[0].Item != items[0] {
			t.Fatalf("after the upgrade polled %v, want the restart", ids(as))
		}
		if it, ok, _ := h.e.ActiveItem(h.ctx, "n1", "web"); !ok || it.ID != items[0] {
			t.Fatalf("the restart does not hold the instance: %+v %v", it, ok)
		}
	})
}

func TestAHeldRolloutDispatchesNothingUntilReleased(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		s := brcSpec("web", 1, 2, "n1")
		s.Hold = fleetwave.ReasonClaim
		id, _ := h.create(s)
		h.step()
		if as := h.poll("n1"); len(as) != 0 {
			t.Fatalf("a held rollout dispatched %v", ids(as))
		}
		if r, _ := h.rollout(id); r.Reason != fleetwave.ReasonClaim {
			t.Fatalf("reason %q, want claim", r.Reason)
		}
		if ok, err := h.e.Release(h.ctx, h.fence, id, "other"); err != nil || ok {
			t.Fatalf("release of another hold: %v %v", ok, err)
		}
		if ok, err := h.e.Release(h.ctx, h.fence, id, fleetwave.ReasonClaim); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		h.step()
		if as := h.poll("n1"); len(as) != 1 {
			t.Fatalf("released rollout polled %v", ids(as))
		}
		if _, err := h.e.Release(h.ctx, h.fence, "nope", fleetwave.ReasonClaim); !errorsIs(err, ErrNotFound) {
			t.Fatalf("release of an unknown rollout: %v", err)
		}
	})
}

func TestAFailureCountHaltsTheRollout(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		s := brcSpec("db", 1, 1, "n1", "n2", "n3", "n4")
		s.FailureThreshold = 2 // "stop after 2 failures", whatever the percentage
		id, _ := h.create(s)
		for i := 1; i <= 2; i++ {
			h.step()
			as := h.pollAll(4)
			if len(as) != 1 {
				t.Fatalf("wave %d polled %v", i, ids(as))
			}
			h.complete(as[0], fleetwave.ResultPermanent)
		}
		h.step()
		if as := h.pollAll(4); len(as) != 0 {
			t.Fatalf("a third item started after 2 failures: %v", ids(as))
		}
		r, _ := h.rollout(id)
		if r.Status != fleetwave.RolloutBlocked || r.Reason != fleetwave.ReasonFailureThreshold || r.FailureThreshold != 2 {
			t.Fatalf("rollout %s %q threshold %d, want blocked by failure_threshold 2", r.Status, r.Reason, r.FailureThreshold)
		}
		// a resume counts failures from there: two more may fail
		if err := h.e.SetRolloutState(h.ctx, h.fence, id, ActionResume, "ops"); err != nil {
			t.Fatal(err)
		}
		h.step()
		as := h.pollAll(4)
		if len(as) != 1 {
			t.Fatalf("after resume polled %v", ids(as))
		}
		h.complete(as[0], fleetwave.ResultPermanent)
		h.step()
		if as := h.pollAll(4); len(as) != 1 {
			t.Fatalf("one failure after the resume halted it: %v", ids(as))
		}
	})
}

// TestALostResultFromTheAgent: an agent stopped while it ran an attempt
// says so at its next start (class lost): a one-shot action is never run
// again (blocked, ambiguous_one_shot), another is retried at once, as
// after a transient failure, instead of waiting for the deadline.
func TestALostResultFromTheAgent(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		s := brcSpec("db", 1, 2, "n1", "n2")
		s.Items[0].Payload.OneShot = true
		s.MaxRetries = 2
		_, items := h.create(s)
		h.step()
		for _, a := range h.pollAll(2) {
			h.complete(a, fleetwave.ResultLost)
		}
		if it := h.item(items[0]); it.Status != fleetwave.ItemBlocked || it.Reason != "ambiguous_one_shot" {
			t.Fatalf("one-shot after lost: %s %q", it.Status, it.Reason)
		}
		if it := h.item(items[1]); it.Status != fleetwave.ItemRetrying || it.LastClass != fleetwave.ResultLost {
			t.Fatalf("converging after lost: %s %q", it.Status, it.LastClass)
		}
	})
}

// TestASupersededRolloutStartsNothingAgain: what a superseded rollout had
// in flight finishes, but never runs again: an attempt that fails
// transiently is not retried, and an ambiguous item that a report shows
// not in effect is not made pending (a superseded rollout starts no
// wave, so it would wait for ever, holding its instance from every later
// generation). Both end skipped (superseded), and the newer generation
// then takes their instances.
func TestASupersededRolloutStartsNothingAgain(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb, WithBackoff(time.Second, time.Second))
		h.create(func() fleetwave.RolloutSpec {
			s := brcSpec("web", 1, 2, "n1", "n2")
			s.MaxRetries = 3
			return s
		}())
		h.step()
		g1 := h.pollAll(2)
		if len(g1) != 2 {
			t.Fatalf("generation 1 started %v, want n1 and n2", ids(g1))
		}
		if id, items := h.create(brcSpec("web", 2, 2, "n1", "n2")); id != "" || len(items) != 0 {
			t.Fatalf("generation 2 created %q %v while generation 1 runs on both nodes", id, items)
		}
		if r, _ := h.rollout("web-g1"); r.Status != fleetwave.RolloutSuperseded {
			t.Fatalf("generation 1 is %s, want superseded", r.Status)
		}

		h.complete(g1[0], fleetwave.ResultTransient) // n1: a failure that would be retried
		h.clk.Advance(10 * time.Minute)              // n2: its result never comes
		h.step()
		if again := h.pollAll(2); len(again) != 0 {
			t.Fatalf("the superseded rollout ran again: %v", ids(again))
		}
		if it := h.item(g1[1].Item); it.Status != fleetwave.ItemAmbiguous {
			t.Fatalf("n2's item %s, want ambiguous", it.Status)
		}
		h.report(reportFor(t, h, "n2", []string{"web"}, func() bool { return false }))
		for _, a := range g1 {
			if it := h.item(a.Item); it.Status != fleetwave.ItemSkipped || it.Reason != fleetwave.ReasonSuperseded {
				t.Fatalf("%s's item of the superseded rollout: %s %q, want skipped superseded", a.Node, it.Status, it.Reason)
			}
		}
		// both instances are free: the next plan of generation 2 takes them
		if id, items := h.create(brcSpec("web", 2, 2, "n1", "n2")); id != "web-g2" || len(items) != 2 {
			t.Fatalf("generation 2 created %q %v, want both nodes", id, items)
		}
		h.step()
		g2 := h.pollAll(2)
		if len(g2) != 2 || g2[0].Generation != 2 || g2[1].Generation != 2 {
			t.Fatalf("generation 2 started %v", ids(g2))
		}
	})
}
