package engine

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
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
				randomRun(t, rdb, seed, 200, false)
			})
		})
	}
}

func randomRun(t *testing.T, rdb redis.UniversalClient, seed int64, ops int, resent bool) {
	rng := rand.New(rand.NewSource(seed))
	h := newHarness(t, rdb, WithBackoff(5*time.Second, 40*time.Second), WithRand(rand.New(rand.NewSource(seed))))
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	blocks := []string{"a", "b"}
	created := map[string]bool{}           // item ids
	var finished []fleetwave.AttemptResult // results applied
	gen := map[string]int64{"a": 1, "b": 1}
	capOf := map[string]int{"a": 2, "b": 1}

	for op := 0; op < ops; op++ {
		switch k := rng.Intn(12); {
		case k < 2: // a trigger event: a BRC generation whose nodes arrive over several specs
			block := blocks[rng.Intn(len(blocks))]
			if rng.Intn(3) == 0 {
				gen[block]++
				capOf[block] = 1 + rng.Intn(3)
			}
			g := gen[block]
			if rng.Intn(3) == 0 && g > 1 {
				g-- // a lagging replica's plan of the previous generation
			}
			s := fleetwave.RolloutSpec{
				BaseID:        fmt.Sprintf("%s-g%d", block, g),
				Source:        fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, block), Generation: g, Kind: fleetwave.SourceScheduler},
				MaxConcurrent: capOf[block],
				MaxRetries:    rng.Intn(3),
				Budget:        block,
				BudgetCap:     capOf[block],
				Supersede:     true,
			}
			for _, n := range nodes {
				if rng.Intn(2) == 0 {
					it := itemSpec(n, block, g)
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
		case k == 10: // a one-shot manual request in the BRC's budget
			block := blocks[rng.Intn(len(blocks))]
			s := fleetwave.RolloutSpec{
				BaseID:        fmt.Sprintf("manual-req%d", op),
				Source:        fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindRollout, fmt.Sprintf("req%d", op)), Kind: fleetwave.SourceManual},
				MaxConcurrent: 1 + rng.Intn(2),
				Budget:        block,
				BudgetCap:     capOf[block],
				Once:          true,
			}
			op := rng.Intn(2) == 0
			for _, n := range nodes {
				if rng.Intn(2) == 0 {
					it := itemSpec(n, block, gen[block])
					it.Payload.Operational = op
					s.Items = append(s.Items, it)
				}
			}
			for range 2 { // asked twice: the second finds every instance taken
				_, items := h.create(s)
				for _, id := range items {
					if created[id] {
						t.Fatalf("item id %s handed out twice", id)
					}
					created[id] = true
				}
			}
		case k == 11: // nodes drain and come back
			var drained []string
			for _, n := range nodes {
				if rng.Intn(4) == 0 {
					drained = append(drained, n)
				}
			}
			if _, err := h.e.SetDrained(h.ctx, h.fence, drained); err != nil {
				t.Fatal(err)
			}
			h.check()
		case k < 4:
			h.step()
		case k < 7: // poll a node and answer some attempts
			for _, a := range h.poll(nodes[rng.Intn(len(nodes))]) {
				switch rng.Intn(5) {
				case 0, 1:
					h.complete(a, fleetwave.ResultSuccess)
					finished = append(finished, resultOf(a, fleetwave.ResultSuccess))
				case 2:
					h.complete(a, fleetwave.ResultTransient)
					finished = append(finished, resultOf(a, fleetwave.ResultTransient))
				case 3:
					h.complete(a, fleetwave.ResultPermanent)
					finished = append(finished, resultOf(a, fleetwave.ResultPermanent))
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
				res := finished[rng.Intn(len(finished))]
				same := rng.Intn(2) == 0
				if !same {
					// another result for the attempt: never applied
					res.Class = map[fleetwave.ResultClass]fleetwave.ResultClass{fleetwave.ResultSuccess: fleetwave.ResultPermanent,
						fleetwave.ResultTransient: fleetwave.ResultSuccess, fleetwave.ResultPermanent: fleetwave.ResultTransient}[res.Class]
				}
				it := h.item(res.AttemptID[:strings.LastIndex(res.AttemptID, ".")])
				// the same result is answered as recorded while the
				// attempt is its item's last, stale once another was made
				want := ErrStaleAttempt
				if same && it.LastAttempt == res.AttemptID {
					want = ErrResultRecorded
				}
				if err := h.e.Complete(h.ctx, it.Node, res); !errors.Is(err, want) {
					t.Fatalf("replayed result %s %s (item %s, last attempt %s): %v, want %v", res.AttemptID, res.Class, it.Status, it.LastAttempt, err, want)
				}
				if after := h.item(it.ID); after.Status != it.Status || after.Reason != it.Reason || after.LastClass != it.LastClass {
					t.Fatalf("replayed result %s %s changed its item: %s/%s/%s -> %s/%s/%s", res.AttemptID, res.Class,
						it.Status, it.Reason, it.LastClass, after.Status, after.Reason, after.LastClass)
				}
				h.check()
			}
		}
	}

	// Drain: lift every drain, answer everything with success until every
	// rollout is done (superseded ones finish what they had in flight).
	if _, err := h.e.SetDrained(h.ctx, h.fence, nil); err != nil {
		t.Fatal(err)
	}
	for round := 0; ; round++ {
		rs, err := h.e.Rollouts(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, r := range rs {
			if !r.Status.Finished() || r.Counters.Pending+r.Counters.InProgress > 0 {
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
	if resent {
		namedCreated(t, h, created)
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
	if seen != len(created) {
		t.Fatalf("rollouts hold %d items, %d were created", seen, len(created))
	}
	if resent {
		return // its path differs from run to run (see sentTwice)
	}
	for _, st := range []fleetwave.ItemStatus{fleetwave.ItemPending, fleetwave.ItemInProgress,
		fleetwave.ItemRetrying, fleetwave.ItemAmbiguous, fleetwave.ItemCompleted, fleetwave.ItemFailed,
		fleetwave.ItemBlocked, fleetwave.ItemSkipped} {
		if !h.seen[st] {
			t.Errorf("the run never reached status %s: widen it", st)
		}
	}
	for _, r := range []string{fleetwave.ReasonInstanceBusy, fleetwave.ReasonNodeDraining, fleetwave.ReasonSuperseded} {
		if !h.seenReason[r] {
			t.Errorf("no item ever waited or ended with reason %s: widen the run", r)
		}
	}
	if !h.seenRollout[fleetwave.RolloutSuperseded] {
		t.Error("no rollout was ever superseded: widen the run")
	}
	for _, o := range []CreateOutcome{OutcomeCreated, OutcomeJoined, OutcomeStaleGeneration} {
		if h.outcomes[o] == 0 {
			t.Errorf("no spec ever had outcome %s: widen the run (outcomes %v)", o, h.outcomes)
		}
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

// TestRandomizedLeaders drives a real redis-server with two competing
// engines (hub-a, hub-b) on one fake clock: random rollouts over random
// nodes, blocks, owners (lanes), maintenance windows and skip reasons;
// random agent results (success, transient, permanent, none); pause,
// resume and cancel; lease campaigns with the clock jumping past the TTL;
// and engine "crashes" (the Engine value is dropped and a new one built on
// the same Redis). After every operation it checks harness.check (in flight
// per lane <= max_concurrent, one active item per instance, counters exact)
// and the leadership invariants: a call under a deposed fence is refused,
// every attempt carries the fence of the leader whose Step dispatched it
// (or of the valid lease, when a result started the next wave),
// and an ambiguous item leaves that state only through a report of its node.
func TestRandomizedLeaders(t *testing.T) {
	for _, seed := range []int64{4, 5, 6} {
		t.Run(fmt.Sprintf("seed %d keeps every invariant", seed), func(t *testing.T) {
			leaderRun(t, redistest.Start(t).Client(t), seed, 300, false)
		})
	}
}

// contender is one hub replica of leaderRun.
type contender struct {
	owner string
	e     *Engine
	fence int64
}

func leaderRun(t *testing.T, rdb redis.UniversalClient, seed int64, ops int, resent bool) {
	rng := rand.New(rand.NewSource(seed))
	h := newHarness(t, rdb, WithBackoff(5*time.Second, 40*time.Second), WithRand(rand.New(rand.NewSource(seed))))
	const ttl = 30 * time.Second
	build := func() *Engine {
		e := New(rdb, WithClock(h.clk), WithPrefix("test"), WithBackoff(5*time.Second, 40*time.Second),
			WithRand(rand.New(rand.NewSource(rng.Int63()))))
		if err := e.Load(h.ctx); err != nil {
			t.Fatal(err)
		}
		return e
	}
	hubs := []*contender{{owner: "hub-a", e: h.e, fence: h.fence}, {owner: "hub-b", e: build()}}
	nodes := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	blocks := []string{"a", "b", "c"}
	owners := []string{"", "team-x", "team-y"}
	windows := [][]fleetwave.Window{
		{{Name: "tens", Cron: "*/10 * * * *", Duration: 3 * time.Minute}},
		{{Name: "hourly", Cron: "0 * * * *", Duration: 15 * time.Minute, Timezone: "Europe/Berlin"},
			{Name: "half", Cron: "30 * * * *", Duration: 5 * time.Minute}},
	}
	gen := map[string]int64{}
	created := map[string]bool{}
	attemptFence := map[string]int64{} // attempt id -> fence it was dispatched under
	ambiguous := map[string]bool{}     // items last seen ambiguous
	var rollouts []string
	accepted, refused := 0, 0

	epoch := func() int64 {
		n, err := rdb.Get(h.ctx, h.e.key("epoch")).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		lf, _ := rdb.HGet(h.ctx, h.e.key("lease"), "fence").Int64()
		if lf != n {
			return -1 // lease resigned or replaced: nobody may write
		}
		return n
	}
	// fenced runs a leader-only call of c and checks it was accepted
	// exactly when c's fence is the current one.
	fenced := func(c *contender, what string, call func() error) bool {
		t.Helper()
		want := c.fence != 0 && c.fence == epoch()
		err := call()
		switch {
		case want && err != nil:
			t.Fatalf("%s by %s at the current fence %d: %v", what, c.owner, c.fence, err)
		case !want && !errors.Is(err, ErrStaleFence):
			t.Fatalf("%s by %s at deposed fence %d (epoch %d): %v", what, c.owner, c.fence, epoch(), err)
		}
		if want {
			accepted++
		} else {
			refused++
		}
		return want
	}
	// audit checks the attempts and ambiguous items after an operation;
	// stepFence is the fence new attempts may carry (0: none may be made) and
	// reportNode the node whose report was just applied.
	audit := func(stepFence int64, reportNode string) {
		t.Helper()
		h.check()
		for _, rid := range rollouts {
			_, items := h.rollout(rid)
			for _, it := range items {
				if it.LastAttempt != "" {
					if _, known := attemptFence[it.LastAttempt]; !known {
						f, err := rdb.HGet(h.ctx, h.e.key("i", it.ID), "a_fence").Int64()
						if err != nil {
							t.Fatal(err)
						}
						if stepFence == 0 || f != stepFence {
							t.Fatalf("attempt %s has fence %d; the Step that made it ran at %d", it.LastAttempt, f, stepFence)
						}
						attemptFence[it.LastAttempt] = f
					}
				}
				if it.Status == fleetwave.ItemAmbiguous {
					ambiguous[it.ID] = true
				} else if ambiguous[it.ID] {
					if reportNode != it.Node {
						t.Fatalf("item %s left ambiguous (now %s) without a report of %s", it.ID, it.Status, it.Node)
					}
					delete(ambiguous, it.ID)
				}
			}
		}
	}

	for op := 0; op < ops; op++ {
		c := hubs[rng.Intn(len(hubs))]
		if rng.Intn(10) < 7 { // mostly the current leader, when there is one
			for _, o := range hubs {
				if o.fence != 0 && o.fence == epoch() {
					c = o
				}
			}
		}
		switch k := rng.Intn(20); {
		case k < 3: // create
			s := fleetwave.RolloutSpec{BaseID: fmt.Sprintf("r%d", op), MaxConcurrent: 1 + rng.Intn(3),
				MaxRetries: rng.Intn(3), FailureThresholdPercent: float64(rng.Intn(2) * 50)}
			for _, b := range blocks {
				if rng.Intn(2) == 0 {
					continue
				}
				gen[b]++
				for _, n := range nodes {
					if rng.Intn(2) == 0 {
						continue
					}
					it := itemSpec(n, b, gen[b])
					it.ManagedBy = owners[rng.Intn(len(owners))]
					it.Payload.OneShot = rng.Intn(5) == 0
					if w := rng.Intn(4); w < len(windows) {
						it.Windows = windows[w]
						it.BypassWindows = rng.Intn(4) == 0
					}
					if rng.Intn(8) == 0 {
						it.SkipReason = fleetwave.ReasonCLIManaged
					}
					s.Items = append(s.Items, it)
				}
			}
			var id string
			var items []string
			if fenced(c, "CreateRollout", func() (err error) {
				id, items, err = c.e.CreateRollout(h.ctx, c.fence, s)
				return err
			}) && id != "" {
				rollouts = append(rollouts, id)
			}
			for _, it := range items {
				if created[it] {
					t.Fatalf("item id %s handed out twice", it)
				}
				created[it] = true
			}
			audit(0, "")
		case k < 7:
			ran := fenced(c, "Step", func() error { _, err := c.e.Step(h.ctx, c.fence); return err })
			f := int64(0)
			if ran {
				f = c.fence
			}
			audit(f, "")
		case k < 11: // an agent polls and answers some attempts
			n := nodes[rng.Intn(len(nodes))]
			as, err := c.e.Poll(h.ctx, n, 10, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				if f, ok := attemptFence[a.ID]; !ok || f != a.Fence {
					t.Fatalf("delivered attempt %s with fence %d, dispatched at %d (%v)", a.ID, a.Fence, f, ok)
				}
				class := []fleetwave.ResultClass{fleetwave.ResultSuccess, fleetwave.ResultSuccess,
					fleetwave.ResultTransient, fleetwave.ResultPermanent, ""}[rng.Intn(5)]
				if class == "" {
					continue // result lost
				}
				res := resultOf(a, class)
				if err := c.e.Complete(h.ctx, n, res); err != nil && !errors.Is(err, ErrStaleAttempt) {
					t.Fatal(err)
				}
			}
			// a result that empties a wave starts the next one under the
			// fence of the lease, only while that lease is valid
			wave := int64(0)
			if f := epoch(); f > 0 {
				exp, _ := rdb.HGet(h.ctx, h.e.key("lease"), "expires_at").Int64()
				if exp > h.clk.Now().UnixMilli() {
					wave = f
				}
			}
			audit(wave, "")
		case k < 12:
			n := nodes[rng.Intn(len(nodes))]
			if err := c.e.Report(h.ctx, reportFor(t, h, n, blocks, func() bool { return rng.Intn(2) == 0 })); err != nil {
				t.Fatal(err)
			}
			audit(0, n)
		case k < 14: // time passes, sometimes past the lease TTL
			h.clk.Advance(time.Duration(rng.Intn(60)) * time.Second)
		case k < 16: // campaign (or renew by re-campaigning)
			c = hubs[rng.Intn(len(hubs))]
			f, err := c.e.Campaign(h.ctx, c.owner, ttl)
			switch {
			case err == nil:
				if f < c.fence {
					t.Fatalf("%s got fence %d after %d", c.owner, f, c.fence)
				}
				c.fence = f
			case !errors.Is(err, ErrNotLeader):
				t.Fatal(err)
			}
		case k < 17: // crash: the process restarts and keeps nothing but its name
			c.e = build()
			if rng.Intn(2) == 0 {
				c.fence = 0
			}
		case k < 18 && len(rollouts) > 0: // operator action
			id := rollouts[rng.Intn(len(rollouts))]
			action := []string{ActionPause, ActionResume, ActionCancel, ActionResume}[rng.Intn(4)]
			want := c.fence != 0 && c.fence == epoch()
			err := c.e.SetRolloutState(h.ctx, c.fence, id, action, c.owner)
			if (want && err != nil && !errors.Is(err, ErrInvalidState)) || (!want && !errors.Is(err, ErrStaleFence)) {
				t.Fatalf("%s %s by %s (current %v): %v", action, id, c.owner, want, err)
			}
			audit(0, "")
		case k < 19: // more time passes: a stuck attempt expires
			h.clk.Advance(time.Duration(rng.Intn(3)) * time.Minute)
		default: // the leader resigns
			if rng.Intn(2) == 0 && c.fence != 0 && c.e.Resign(h.ctx, c.owner, c.fence) == nil {
				audit(0, "")
			}
		}
	}

	// Drain: one leader resumes what is held and answers everything.
	h.clk.Advance(time.Hour)
	lead := hubs[0]
	f, err := lead.e.Campaign(h.ctx, lead.owner, 100*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lead.fence = f
	for round := 0; ; round++ {
		rs, err := h.e.Rollouts(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, r := range rs {
			switch r.Status {
			case fleetwave.RolloutCompleted, fleetwave.RolloutCancelled:
				continue
			case fleetwave.RolloutPaused, fleetwave.RolloutBlocked:
				err := lead.e.SetRolloutState(h.ctx, lead.fence, r.ID, ActionResume, "drain")
				if err != nil && !(resent && errors.Is(err, ErrInvalidState)) { // resumed by a dropped answer's sending
					t.Fatal(err)
				}
			}
			open++
		}
		if open == 0 {
			break
		}
		if round > 300 {
			t.Fatalf("%d rollouts still open after draining", open)
		}
		h.clk.Advance(2 * time.Minute)
		if _, err := lead.e.Step(h.ctx, lead.fence); err != nil {
			t.Fatal(err)
		}
		audit(lead.fence, "")
		for _, n := range nodes {
			as, err := lead.e.Poll(h.ctx, n, 50, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				if err := lead.e.Complete(h.ctx, n, resultOf(a, fleetwave.ResultSuccess)); err != nil {
					t.Fatal(err)
				}
			}
			if err := lead.e.Report(h.ctx, reportFor(t, h, n, blocks, func() bool { return true })); err != nil {
				t.Fatal(err)
			}
			// a result that emptied its wave started the next one under the
			// drain's lease (valid for 100 hours)
			audit(lead.fence, n)
		}
	}
	if resent {
		rollouts = namedCreated(t, h, created)
	}
	seen := 0
	for _, rid := range rollouts {
		_, items := h.rollout(rid)
		for _, it := range items {
			if !created[it.ID] || !it.Status.Terminal() {
				t.Fatalf("item %s: created %v, status %s", it.ID, created[it.ID], it.Status)
			}
			seen++
		}
	}
	if seen != len(created) {
		t.Fatalf("rollouts hold %d items, %d were created", seen, len(created))
	}
	c, _ := h.e.Counters(h.ctx)
	if c.Total != int64(len(created)) || c.Pending != 0 || c.InProgress != 0 {
		t.Fatalf("after drain: counters %+v for %d created items", c, len(created))
	}
	if refused == 0 || accepted == 0 || len(attemptFence) == 0 {
		t.Fatalf("weak run: %d fenced calls accepted, %d refused, %d attempts", accepted, refused, len(attemptFence))
	}
	for _, st := range []fleetwave.ItemStatus{fleetwave.ItemAmbiguous, fleetwave.ItemRetrying, fleetwave.ItemSkipped, fleetwave.ItemBlocked} {
		if !h.seen[st] && !resent { // a resent run's path differs from run to run (see sentTwice)
			t.Errorf("the run never reached status %s: widen it", st)
		}
	}
	t.Logf("%d rollouts, %d items, %d attempts, fenced calls %d accepted / %d refused, counters %+v",
		len(rollouts), len(created), len(attemptFence), accepted, refused, c)
}
