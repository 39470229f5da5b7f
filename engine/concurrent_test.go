package engine

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestConcurrentAgentsOnTwoReplicas drives the concurrent paths the
// randomized test does not: agents long-polling both replicas at once
// (the delivery mux), results committed in groups (and starting waves),
// the leader stepping meanwhile. Agents answer success, transient,
// permanent, or nothing (a lost result, later settled by a report). While
// it runs, every attempt must be handed out once, and no lane may ever
// hold more than max_concurrent items in flight; at the end every item is
// terminal and every invariant of harness.check holds.
func TestConcurrentAgentsOnTwoReplicas(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	h := newHarness(t, rdb, WithBackoff(time.Second, 4*time.Second))
	follower := New(rdb, WithClock(h.clk), WithPrefix("test"), WithBackoff(time.Second, 4*time.Second))
	if err := follower.Load(h.ctx); err != nil {
		t.Fatal(err)
	}
	engines := []*Engine{h.e, follower}
	const nodes, blocks, mc = 20, 3, 5
	s := fleetwave.RolloutSpec{BaseID: "busy", MaxConcurrent: mc, MaxRetries: 2,
		Source: fleetwave.RolloutSource{Kind: fleetwave.SourceScheduler}}
	for b := range blocks {
		for n := 1; n <= nodes; n++ {
			it := itemSpec(fmt.Sprintf("n%d", n), fmt.Sprintf("b%d", b), 1)
			it.ManagedBy = []string{"team-a", "team-b"}[n%2]
			s.Items = append(s.Items, it)
		}
	}
	id, _ := h.create(s)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	delivered := map[string]bool{}
	var wg sync.WaitGroup
	for n := 1; n <= nodes; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", n)
			rng := rand.New(rand.NewSource(int64(n)))
			for ctx.Err() == nil {
				e := engines[rng.Intn(2)]
				as, err := e.Poll(ctx, node, 4, time.Duration(20+rng.Intn(80))*time.Millisecond)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				for _, a := range as {
					mu.Lock()
					twice := delivered[a.ID]
					delivered[a.ID] = true
					mu.Unlock()
					if twice {
						t.Errorf("attempt %s handed out twice", a.ID)
					}
					class := []fleetwave.ResultClass{fleetwave.ResultSuccess, fleetwave.ResultSuccess,
						fleetwave.ResultSuccess, fleetwave.ResultTransient, fleetwave.ResultPermanent, ""}[rng.Intn(6)]
					if class == "" {
						continue // the result is lost
					}
					res := resultOf(a, class)
					if err := engines[rng.Intn(2)].Complete(ctx, node, res); err != nil && !errorsIs(err, ErrStaleAttempt) {
						t.Error(err)
					}
				}
			}
		}()
	}

	// the leader steps while time passes; lost results make items
	// ambiguous, and reports (showing the target or not) settle them
	rng := rand.New(rand.NewSource(7))
	deadline := time.Now().Add(60 * time.Second)
	for {
		h.clk.Advance(2 * time.Second)
		// not h.step, h.report: their full check reads many keys one by
		// one, which only a quiet engine keeps consistent
		if _, err := h.e.Step(h.ctx, h.fence); err != nil {
			t.Fatal(err)
		}
		{
			node := fmt.Sprintf("n%d", 1+rng.Intn(nodes))
			var bs []string
			for b := range blocks {
				bs = append(bs, fmt.Sprintf("b%d", b))
			}
			if err := h.e.Report(h.ctx, reportFor(t, h, node, bs, func() bool { return rng.Intn(2) == 0 })); err != nil {
				t.Fatal(err)
			}
		}
		for _, lane := range []string{"team-a", "team-b"} {
			if n, err := rdb.SCard(h.ctx, h.e.key("r", id, "f", lane)).Result(); err != nil || n > mc {
				t.Fatalf("lane %s holds %d items in flight (max_concurrent %d, %v)", lane, n, mc, err)
			}
		}
		// the engine's own read: comparing it with a whole read (h.rollout)
		// needs a quiet engine, which the agents above do not leave; the
		// comparison runs once they stopped
		r, _, err := h.e.Rollout(h.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sum(r.Counters) != r.Counters.Total {
			t.Fatalf("counters %+v do not add up", r.Counters)
		}
		if r.Status == fleetwave.RolloutCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout still %s after 60s: %+v", r.Status, r.Counters)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	h.check()
	_, items := h.rollout(id)
	retried, final := 0, map[fleetwave.ItemStatus]int{}
	for _, it := range items {
		if !it.Status.Terminal() {
			t.Fatalf("item %s is %s after the rollout completed", it.ID, it.Status)
		}
		final[it.Status]++
		if it.Attempts > 1 {
			retried++
		}
	}
	if final[fleetwave.ItemCompleted] == 0 || final[fleetwave.ItemBlocked] == 0 || retried == 0 {
		t.Fatalf("the run did not go through enough paths: %v, %d items with several attempts", final, retried)
	}
	if len(delivered) < nodes*blocks {
		t.Fatalf("%d attempts delivered for %d items", len(delivered), nodes*blocks)
	}
}
