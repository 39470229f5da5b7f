package engine

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// TestRandomized drives the engine with seeded random operations (creates
// over overlapping instances, steps, polls, random results or none, clock
// jumps, reports, replayed results) and checks the invariants after every
// operation (harness.check): in-flight <= max_concurrent, at most one active
// item per instance, counters sum to total and match the items, every item
// where its status says. It then drains the queue and expects every rollout
// completed and every created item accounted for.
func TestRandomized(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		t.Run(fmt.Sprintf("seed %d keeps every invariant", seed), func(t *testing.T) {
			backends(t, func(t *testing.T, rdb redis.UniversalClient) {
				randomRun(t, rdb, seed, 150)
			})
		})
	}
}

func randomRun(t *testing.T, rdb redis.UniversalClient, seed int64, ops int) {
	rng := rand.New(rand.NewSource(seed))
	h := newHarness(t, rdb, WithBackoff(5*time.Second, 40*time.Second), WithRand(rand.New(rand.NewSource(seed))))
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	blocks := []string{"a", "b"}
	created := map[string]bool{} // item ids
	var finished []fleetwave.Attempt
	gen := map[string]int64{"a": 1, "b": 1}

	for op := 0; op < ops; op++ {
		switch k := rng.Intn(10); {
		case k < 2: // create
			block := blocks[rng.Intn(len(blocks))]
			if rng.Intn(3) == 0 {
				gen[block]++
			}
			s := fleetwave.RolloutSpec{
				BaseID:        fmt.Sprintf("%s-g%d", block, gen[block]),
				MaxConcurrent: 1 + rng.Intn(3),
				MaxRetries:    rng.Intn(3),
			}
			for _, n := range nodes {
				if rng.Intn(2) == 0 {
					it := itemSpec(n, block, gen[block]-int64(rng.Intn(2)))
					it.Payload.OneShot = rng.Intn(4) == 0
					s.Items = append(s.Items, it)
				}
			}
			_, items := h.create(s)
			for _, id := range items {
				if created[id] {
					t.Fatalf("item id %s handed out twice", id)
				}
				created[id] = true
			}
		case k < 4:
			h.step()
		case k < 7: // poll a node and answer some attempts
			for _, a := range h.poll(nodes[rng.Intn(len(nodes))]) {
				switch rng.Intn(5) {
				case 0, 1:
					h.complete(a, fleetwave.ResultSuccess)
					finished = append(finished, a)
				case 2:
					h.complete(a, fleetwave.ResultTransient)
					finished = append(finished, a)
				case 3:
					h.complete(a, fleetwave.ResultPermanent)
					finished = append(finished, a)
				default: // result lost
				}
			}
		case k < 8:
			h.clk.Advance(time.Duration(rng.Intn(120)) * time.Second)
		case k < 9: // a report showing the target of some active items
			n := nodes[rng.Intn(len(nodes))]
			h.report(reportFor(t, h, n, blocks, func() bool { return rng.Intn(2) == 0 }))
		default: // a replayed result is never applied twice
			if len(finished) > 0 {
				a := finished[rng.Intn(len(finished))]
				err := h.e.Complete(h.ctx, a.Node, fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess})
				if !errors.Is(err, ErrStaleAttempt) {
					t.Fatalf("replayed result for %s: %v", a.ID, err)
				}
				h.check()
			}
		}
	}

	// Drain: answer everything with success until every rollout is done.
	for round := 0; ; round++ {
		rs, err := h.e.Rollouts(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, r := range rs {
			if r.Status != fleetwave.RolloutCompleted {
				open++
			}
		}
		if open == 0 {
			break
		}
		if round > 200 {
			t.Fatalf("%d rollouts still open after draining", open)
		}
		h.clk.Advance(2 * time.Minute)
		h.step()
		for _, n := range nodes {
			for _, a := range h.poll(n) {
				h.complete(a, fleetwave.ResultSuccess)
			}
			h.report(reportFor(t, h, n, blocks, func() bool { return true }))
		}
	}
	c, err := h.e.Counters(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Total != int64(len(created)) || c.Pending != 0 || c.InProgress != 0 {
		t.Fatalf("after drain: counters %+v for %d created items", c, len(created))
	}
	seen := 0
	rs, _ := h.e.Rollouts(h.ctx)
	for _, r := range rs {
		_, items := h.rollout(r.ID)
		for _, it := range items {
			if !created[it.ID] || !it.Status.Terminal() {
				t.Fatalf("item %s: created %v, status %s", it.ID, created[it.ID], it.Status)
			}
			seen++
		}
	}
	for _, st := range []fleetwave.ItemStatus{fleetwave.ItemPending, fleetwave.ItemInProgress,
		fleetwave.ItemRetrying, fleetwave.ItemAmbiguous, fleetwave.ItemCompleted, fleetwave.ItemFailed,
		fleetwave.ItemBlocked, fleetwave.ItemSkipped} {
		if !h.seen[st] {
			t.Errorf("the run never reached status %s: widen it", st)
		}
	}
	if seen != len(created) {
		t.Fatalf("rollouts hold %d items, %d were created", seen, len(created))
	}
}

// reportFor builds a full report of node, showing the target of each active
// item for which show() is true (and an old revision otherwise).
func reportFor(t *testing.T, h *harness, node string, blocks []string, show func() bool) fleetwave.Report {
	t.Helper()
	r := fleetwave.Report{Node: node, SentAt: h.clk.Now()}
	for _, b := range blocks {
		it, ok, err := h.e.ActiveItem(h.ctx, node, b)
		if err != nil {
			t.Fatal(err)
		}
		in := fleetwave.InstanceStatus{Block: b, Generation: 0, ConfigHash: "old"}
		if ok && show() {
			in = fleetwave.InstanceStatus{Block: b, Generation: it.Generation, ConfigHash: it.ConfigHash, Version: it.TargetVersion}
		}
		r.Instances = append(r.Instances, in)
	}
	return r
}
