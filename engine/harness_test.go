package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// backends runs fn against a real redis-server and against miniredis (the
// embedded mode), through the same engine code.
func backends(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	t.Run("redis-server", func(t *testing.T) {
		fn(t, redistest.Start(t).Client(t))
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		fn(t, c)
	})
}

// harness is an engine on one backend with a fake clock and a leader fence.
type harness struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	clk   *clock.Fake
	e     *Engine
	fence int64
	// seen records every item status check observed, so randomized runs can
	// assert they reached every state.
	seen map[fleetwave.ItemStatus]bool
	// seenReason, seenRollout and outcomes record the item reasons, rollout
	// states and CreateRollout outcomes observed, for the same purpose.
	seenReason  map[string]bool
	seenRollout map[fleetwave.RolloutStatus]bool
	outcomes    map[CreateOutcome]int
	// chunks are the chunks each rollout's last read returned, with a
	// copy of them: the engine must never write a chunk it returned
	chunks map[string]returnedChunks
}

// returnedChunks are the chunks of one RolloutChunks and a deep copy.
type returnedChunks struct {
	chunks, copies [][]fleetwave.Item
}

func newHarness(t *testing.T, rdb redis.UniversalClient, opts ...Option) *harness {
	t.Helper()
	clk := clock.NewFake(t0)
	base := []Option{
		WithClock(clk),
		WithLogger(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)),
		WithRand(rand.New(rand.NewSource(1))),
		WithPrefix("test"),
	}
	e := New(rdb, append(base, opts...)...)
	ctx := context.Background()
	if err := e.Load(ctx); err != nil {
		t.Fatal(err)
	}
	fence, err := e.Campaign(ctx, "hub-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, ctx: ctx, rdb: rdb, clk: clk, e: e, fence: fence, seen: map[fleetwave.ItemStatus]bool{},
		seenReason: map[string]bool{}, seenRollout: map[fleetwave.RolloutStatus]bool{}, outcomes: map[CreateOutcome]int{}}
}

// spec returns a rollout spec over nodes n1..nN for block at generation gen.
func spec(base string, n int, block string, gen int64, maxConcurrent, maxRetries int) fleetwave.RolloutSpec {
	s := fleetwave.RolloutSpec{
		BaseID:        base,
		Source:        fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, base), Generation: gen, Kind: fleetwave.SourceScheduler},
		MaxConcurrent: maxConcurrent,
		MaxRetries:    maxRetries,
	}
	for i := 1; i <= n; i++ {
		s.Items = append(s.Items, itemSpec(fmt.Sprintf("n%d", i), block, gen))
	}
	return s
}

func itemSpec(node, block string, gen int64) fleetwave.ItemSpec {
	return fleetwave.ItemSpec{
		Node: node, Block: block, Action: fleetwave.ActionUpgrade, Generation: gen,
		TargetVersion: fmt.Sprintf("v%d", gen), ConfigHash: fmt.Sprintf("hash-%s-%d", block, gen),
		Payload: fleetwave.AttemptPayload{Command: "deploy " + block, TimeoutSeconds: 60, Config: "secret: s3cr3t"},
	}
}

func (h *harness) create(s fleetwave.RolloutSpec) (string, []string) {
	h.t.Helper()
	id, items, outcome, err := h.e.CreateRolloutOutcome(h.ctx, h.fence, s)
	if err != nil {
		h.t.Fatal(err)
	}
	h.outcomes[outcome]++
	h.check()
	return id, items
}

func (h *harness) step() StepResult {
	h.t.Helper()
	res, err := h.e.Step(h.ctx, h.fence)
	if err != nil {
		h.t.Fatal(err)
	}
	h.check()
	return res
}

func (h *harness) poll(node string) []fleetwave.Attempt {
	h.t.Helper()
	as, err := h.e.Poll(h.ctx, node, 10, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.check()
	return as
}

func (h *harness) complete(a fleetwave.Attempt, class fleetwave.ResultClass) {
	h.t.Helper()
	res := resultOf(a, class)
	if err := h.e.Complete(h.ctx, a.Node, res); err != nil {
		h.t.Fatal(err)
	}
	h.check()
}

func (h *harness) report(r fleetwave.Report) {
	h.t.Helper()
	if err := h.e.Report(h.ctx, r); err != nil {
		h.t.Fatal(err)
	}
	h.check()
}

// rollout reads rollout id through h.e, which keeps the items of open
// rollouts and reads again only those a script marked changed, and
// checks it against a new Engine's read of every item: run after every
// step of every harness test, this finds any write of an item that does
// not mark it.
func (h *harness) rollout(id string) (fleetwave.Rollout, []fleetwave.Item) {
	h.t.Helper()
	r, chunks, err := h.e.RolloutChunks(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	// the chunks the last read returned are as they were (a chunk the
	// engine changed is a new one), and every chunk but the last is full
	items := []fleetwave.Item{}
	for i, c := range chunks {
		if i < len(chunks)-1 && len(c) != KeptChunk {
			h.t.Fatalf("rollout %s: chunk %d of %d holds %d items, want %d", id, i, len(chunks), len(c), KeptChunk)
		}
		items = append(items, c...)
	}
	if last, ok := h.chunks[id]; ok {
		for i := range last.chunks {
			if !reflect.DeepEqual(last.chunks[i], last.copies[i]) {
				h.t.Fatalf("rollout %s: chunk %d changed after it was returned", id, i)
			}
		}
	}
	if h.chunks == nil {
		h.chunks = map[string]returnedChunks{}
	}
	copies := make([][]fleetwave.Item, len(chunks))
	for i, c := range chunks {
		copies[i] = slices.Clone(c)
	}
	h.chunks[id] = returnedChunks{chunks: chunks, copies: copies}
	fresh := New(h.rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix(h.e.keyBase[3:len(h.e.keyBase)-2]))
	wr, want, err := fresh.Rollout(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if !reflect.DeepEqual(r, wr) || !reflect.DeepEqual(items, want) {
		for i := range min(len(items), len(want)) {
			if items[i] != want[i] {
				h.t.Fatalf("rollout %s: item %d as kept %+v, as read whole %+v", id, i, items[i], want[i])
			}
		}
		h.t.Fatalf("rollout %s as kept: %d items, as read whole: %d", id, len(items), len(want))
	}
	return r, items
}

func (h *harness) item(id string) fleetwave.Item {
	h.t.Helper()
	rid := id[:strings.LastIndex(id, ".")]
	_, items := h.rollout(rid)
	for _, it := range items {
		if it.ID == id {
			return it
		}
	}
	h.t.Fatalf("item %s not found", id)
	return fleetwave.Item{}
}

// pollAll polls nodes n1..nN.
func (h *harness) pollAll(n int) []fleetwave.Attempt {
	h.t.Helper()
	var out []fleetwave.Attempt
	for i := 1; i <= n; i++ {
		out = append(out, h.poll(fmt.Sprintf("n%d", i))...)
	}
	return out
}

func sum(c fleetwave.Counters) int64 { return c.Done + c.InProgress + c.Pending + c.Failed + c.Skipped }

// check asserts the invariants that must hold after every operation:
// counters (per rollout and fleet) sum to their total and match the items'
// statuses; a rollout never has more than max_concurrent items in flight;
// at most one active item per block instance, and it is the one the
// instance points to; every item is where its status says (no item lost);
// LaneDepths matches the lanes' sets; LaneCounters matches the items of
// each lane.
func (h *harness) check() {
	h.t.Helper()
	ctx := h.ctx
	rollouts, err := h.e.Rollouts(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	var fleet fleetwave.Counters
	laneCount := map[string]fleetwave.Counters{} // from the items
	depths := map[string]LaneDepth{}             // from the lanes' sets
	active := map[fleetwave.InstanceKey]string{}
	budgets := map[string]*budgetUse{} // budget -> items in flight per lane, over its rollouts
	deadlines := h.zset("deadlines")
	retry := h.zset("retry")
	for _, r := range rollouts {
		h.seenRollout[r.Status] = true
		if got := sum(r.Counters); got != r.Counters.Total {
			h.t.Fatalf("rollout %s counters sum to %d, total %d: %+v", r.ID, got, r.Counters.Total, r.Counters)
		}
		_, items := h.rollout(r.ID)
		var recount fleetwave.Counters
		inFlight := map[string]int{} // per lane
		lanes, err := h.rdb.HKeys(ctx, h.e.key("r", r.ID, "lanes")).Result()
		if err != nil {
			h.t.Fatal(err)
		}
		pending, inflightSet := map[string]bool{}, map[string]bool{}
		for _, lane := range lanes {
			d := depths[lane]
			for id := range h.zset("r:" + r.ID + ":p:" + lane) {
				pending[id] = true
				d.Pending++
			}
			for id := range h.set("r:" + r.ID + ":f:" + lane) {
				inflightSet[id] = true
				d.InFlight++
			}
			depths[lane] = d
		}
		for _, it := range items {
			recount.Add(it.Status, 1)
			h.seen[it.Status] = true
			h.seenReason[it.Reason] = true
			fleet.Add(it.Status, 1)
			lc := laneCount[it.ManagedBy]
			lc.Add(it.Status, 1)
			laneCount[it.ManagedBy] = lc
			switch it.Status {
			case fleetwave.ItemInProgress, fleetwave.ItemRetrying, fleetwave.ItemAmbiguous:
				inFlight[it.ManagedBy]++
			}
			queued := false
			if it.Status == fleetwave.ItemPending {
				q, err := h.rdb.HGet(ctx, h.e.key("i", it.ID), "q").Result()
				if err != nil {
					h.t.Fatal(err)
				}
				queued = q == "1"
			}
			if queued {
				// waits behind the instance's holder (one-shot events):
				// never the holder itself
				got, _ := h.rdb.HGet(ctx, h.e.key("inst", it.Node, it.Block), "active").Result()
				if got == it.ID {
					h.t.Fatalf("queued item %s holds its instance", it.ID)
				}
			} else if it.Status.Active() {
				k := fleetwave.InstanceKey{Node: it.Node, Block: it.Block}
				if other, dup := active[k]; dup {
					h.t.Fatalf("instance %s has two active items: %s and %s", k, other, it.ID)
				}
				active[k] = it.ID
				got, err := h.rdb.HGet(ctx, h.e.key("inst", it.Node, it.Block), "active").Result()
				if err != nil || got != it.ID {
					h.t.Fatalf("instance %s points to %q (%v), want %s", k, got, err, it.ID)
				}
			}
			if (it.Status == fleetwave.ItemPending) != pending[it.ID] {
				h.t.Fatalf("item %s is %s but in pending set = %v", it.ID, it.Status, pending[it.ID])
			}
			if (inFlightStatus(it.Status)) != inflightSet[it.ID] {
				h.t.Fatalf("item %s is %s but in in-flight set = %v", it.ID, it.Status, inflightSet[it.ID])
			}
			if it.Status == fleetwave.ItemInProgress && !deadlines[it.LastAttempt] {
				h.t.Fatalf("item %s is in progress but attempt %s has no deadline", it.ID, it.LastAttempt)
			}
			// a paused rollout holds its retries out of the retry set
			held := it.Status == fleetwave.ItemRetrying && r.Status == fleetwave.RolloutPaused
			if !held && (it.Status == fleetwave.ItemRetrying) != retry[it.ID] {
				h.t.Fatalf("item %s is %s but in retry set = %v", it.ID, it.Status, retry[it.ID])
			}
		}
		if recount != r.Counters {
			h.t.Fatalf("rollout %s counters %+v, items say %+v", r.ID, r.Counters, recount)
		}
		h.checkStatusReasons(r.ID, items)
		for lane, n := range inFlight {
			if n > max(r.MaxConcurrent, 1) {
				h.t.Fatalf("rollout %s lane %q has %d items in flight, max_concurrent %d", r.ID, lane, n, r.MaxConcurrent)
			}
		}
		if b, err := h.rdb.HMGet(ctx, h.e.key("r", r.ID), "budget", "budget_cap").Result(); err == nil && b[0] != nil && b[0] != "" {
			bud := budgets[b[0].(string)]
			if bud == nil {
				bud = &budgetUse{inFlight: map[string]int{}}
				budgets[b[0].(string)] = bud
			}
			capv, _ := strconv.Atoi(fmt.Sprint(b[1]))
			for lane, n := range inFlight {
				bud.inFlight[lane] += n
				if n > 0 {
					bud.cap = max(bud.cap, capv) // the caps of the rollouts with work in flight
				}
			}
		}
		if r.Status == fleetwave.RolloutCompleted && (recount.Pending+recount.InProgress) != 0 {
			h.t.Fatalf("rollout %s completed with active items: %+v", r.ID, recount)
		}
	}
	for name, b := range budgets {
		for lane, n := range b.inFlight {
			if n > max(b.cap, 1) {
				h.t.Fatalf("budget %s lane %q has %d items in flight over its rollouts, cap %d", name, lane, n, b.cap)
			}
		}
	}
	got, err := h.e.LaneDepths(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for lane, d := range got {
		if d != depths[lane] {
			h.t.Fatalf("lane %q depth %+v, its sets hold %+v", lane, d, depths[lane])
		}
	}
	for lane, d := range depths {
		if _, ok := got[lane]; !ok && d != (LaneDepth{}) {
			h.t.Fatalf("lane %q missing from LaneDepths, its sets hold %+v", lane, d)
		}
	}
	lanesGot, err := h.e.LaneCounters(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for lane, want := range laneCount {
		if got := lanesGot[lane]; got != want {
			h.t.Fatalf("lane %q counters %+v, items say %+v", lane, got, want)
		}
	}
	for lane, got := range lanesGot {
		if _, ok := laneCount[lane]; !ok && got.Total != 0 {
			h.t.Fatalf("lane %q counters %+v, but no item is in it", lane, got)
		}
	}
	c, err := h.e.Counters(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	if c != fleet {
		h.t.Fatalf("fleet counters %+v, items say %+v", c, fleet)
	}
	if sum(c) != c.Total {
		h.t.Fatalf("fleet counters sum to %d, total %d", sum(c), c.Total)
	}
}

// budgetUse is what check counts of one budget (a BRC) over its rollouts.
type budgetUse struct {
	inFlight map[string]int
	cap      int
}

// checkStatusReasons asserts that the scripts' count of rollout id's items
// by status and reason (what the gauges read) matches its items.
func (h *harness) checkStatusReasons(id string, items []fleetwave.Item) {
	h.t.Helper()
	want := map[string]int64{}
	for _, it := range items {
		want[string(it.Status)+"\n"+it.Reason]++
	}
	kept, err := h.rdb.HGetAll(h.ctx, h.e.key("isr", id)).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	got := map[string]int64{}
	for k, v := range kept {
		if n, _ := strconv.ParseInt(v, 10, 64); n != 0 {
			got[k] = n
		}
	}
	if !maps.Equal(got, want) {
		h.t.Fatalf("rollout %s: items counted by status and reason %v, items say %v", id, got, want)
	}
}

func inFlightStatus(s fleetwave.ItemStatus) bool {
	return s == fleetwave.ItemInProgress || s == fleetwave.ItemRetrying || s == fleetwave.ItemAmbiguous
}

func (h *harness) zset(name string) map[string]bool {
	h.t.Helper()
	ids, err := h.rdb.ZRange(h.ctx, h.e.key(name), 0, -1).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return toSet(ids)
}

func (h *harness) set(name string) map[string]bool {
	h.t.Helper()
	ids, err := h.rdb.SMembers(h.ctx, h.e.key(name)).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return toSet(ids)
}

func toSet(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func ids(as []fleetwave.Attempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.ID
	}
	sort.Strings(out)
	return out
}

func mustErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

func errorsIs(err, want error) bool { return errors.Is(err, want) }

// resultOf is an agent's result for attempt a: a success reports the
// instance as the agent leaves it (at the attempt's generation, version,
// config and desired state), so the health gate counts it done.
func resultOf(a fleetwave.Attempt, class fleetwave.ResultClass) fleetwave.AttemptResult {
	res := fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: class}
	if class == fleetwave.ResultSuccess {
		state := a.DesiredState
		if state == "" {
			state = fleetwave.StateInstalled
		}
		res.Instance = &fleetwave.InstanceStatus{Block: a.Block, Version: a.TargetVersion, ConfigHash: a.ConfigHash,
			Generation: a.Generation, State: state}
	}
	return res
}
