package engine

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestObservationsDecodedOnceStayCurrent: the engine keeps the
// observations it decoded, yet every read shows what Redis holds now:
// a report another engine (another hub replica) stored, an instance a
// result changed, a node's report alone. What a caller does to a report
// it got does not reach the next read.
func TestObservationsDecodedOnceStayCurrent(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		other := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
		report := func(e *Engine, node, version string, caps ...string) {
			t.Helper()
			if err := e.Report(h.ctx, fleetwave.Report{Node: node, SentAt: h.clk.Now(), Capabilities: caps,
				Instances: []fleetwave.InstanceStatus{{Block: "web", Version: version, Generation: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		read := func() fleetwave.Observations {
			t.Helper()
			obs, err := h.e.Observations(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return obs
		}
		report(h.e, "n1", "1.0", "gpu")
		report(h.e, "n2", "1.0")
		obs := read()
		if v := obs["n1"].Instances[0].Version; v != "1.0" || obs["n1"].Capabilities[0] != "gpu" {
			t.Fatalf("n1 observed as %+v", obs["n1"])
		}
		// a caller changing what it got
		obs["n1"].Instances[0].Version = "changed by a caller"
		obs["n1"].Capabilities[0] = "changed by a caller"
		obs = read()
		if v := obs["n1"].Instances[0].Version; v != "1.0" || obs["n1"].Capabilities[0] != "gpu" {
			t.Fatalf("a caller's change reached the next read: %+v", obs["n1"])
		}
		// another replica takes a new report of n1
		h.clk.Advance(1)
		report(other, "n1", "2.0", "gpu", "tpm")
		obs = read()
		if v := obs["n1"].Instances[0].Version; v != "2.0" || len(obs["n1"].Capabilities) != 2 {
			t.Fatalf("n1 after another replica's report: %+v", obs["n1"])
		}
		if v := obs["n2"].Instances[0].Version; v != "1.0" {
			t.Fatalf("n2 observed as %+v", obs["n2"])
		}
		// an instance a result changed, without a new report
		h.create(spec("r", 2, "web", 2, 2, 0))
		h.step()
		for _, a := range h.poll("n2") {
			h.complete(a, fleetwave.ResultSuccess)
		}
		if obs = read(); obs["n2"].Instances[0].Version != "v2" || obs["n2"].Instances[0].Generation != 2 {
			t.Fatalf("n2 after its instance changed: %+v", obs["n2"])
		}
		if v := obs["n1"].Instances[0].Version; v != "2.0" {
			t.Fatalf("n1 changed with n2: %+v", obs["n1"])
		}
		if got, want := len(h.e.obs.nodes), 2; got != want {
			t.Fatalf("%d nodes kept decoded, want %d", got, want)
		}

		// the shared reports are what a copy says, and a later change
		// replaces them rather than changing what a caller holds
		shared, err := h.e.ObservationsShared(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if obs = read(); !reflect.DeepEqual(shared, obs) {
			t.Fatalf("shared observations %+v, copied %+v", shared, obs)
		}
		h.clk.Advance(1)
		report(other, "n1", "3.0")
		again, err := h.e.ObservationsShared(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v := again["n1"].Instances[0].Version; v != "3.0" {
			t.Fatalf("n1 shared after its new report: %+v", again["n1"])
		}
		if v := shared["n1"].Instances[0].Version; v != "2.0" || len(shared["n1"].Capabilities) != 2 {
			t.Fatalf("a report held from an earlier shared read changed under its caller: %+v", shared["n1"])
		}
		if again["n2"] != shared["n2"] {
			t.Fatal("n2, unchanged, was copied for a shared read")
		}
	})
}

// obsReads counts the HGETALLs of keys containing what (":obsi:": the
// nodes whose instances a client read; ":i:": the items).
type obsReads struct {
	what string
	n    atomic.Int64
}

func (r *obsReads) count(cmd redis.Cmder) {
	if (cmd.Name() == "hgetall" || cmd.Name() == "hmget") && strings.Contains(fmt.Sprint(cmd.Args()[1]), r.what) {
		r.n.Add(1)
	}
}
func (r *obsReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *obsReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.count(cmd); return next(ctx, cmd) }
}
func (r *obsReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.count(c)
		}
		return next(ctx, cmds)
	}
}

// TestObserveReadsOnlyChangedNodes: after its first read, Observe reads
// again only the nodes whose observation a script changed since, and what
// it returns is what a new Engine reading every node finds, after any mix
// of reports (this replica's and another's) and results. When the change
// counter goes back (Redis lost writes), the keys' incarnation changed (a
// flush) or fullObserveEvery passed, it
// reads every node again, and finds what the marks could not tell.
func TestObserveReadsOnlyChangedNodes(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		reads := &obsReads{what: ":obsi:"}
		rdb.AddHook(reads)
		h := newHarness(t, rdb)
		other := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
		const nodes = 40
		rnd := rand.New(rand.NewSource(7))
		report := func(e *Engine, node int) {
			t.Helper()
			r := fleetwave.Report{Node: fmt.Sprintf("n%d", node), SentAt: h.clk.Now()}
			for b := range rnd.Intn(3) {
				r.Instances = append(r.Instances, fleetwave.InstanceStatus{Block: fmt.Sprintf("b%d", b),
					Version: fmt.Sprint(rnd.Intn(5)), Generation: int64(rnd.Intn(3))})
			}
			if rnd.Intn(2) == 0 {
				r.Capabilities = []string{"gpu"}
			}
			if err := e.Report(h.ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		// observe reads through h.e and checks it against a new Engine's
		// full read; it returns how many nodes h.e read
		observe := func(what string) int64 {
			t.Helper()
			before := reads.n.Load()
			got, gotVer, err := h.e.Observe(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			n := reads.n.Load() - before
			fresh := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
			want, wantVer, err := fresh.Observe(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if gotVer != wantVer || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: observed at %d: %d nodes, a full read at %d: %d nodes", what, gotVer, len(got), wantVer, len(want))
			}
			// ObserveNodes (the push plan's read) agrees, and keeps nothing
			some, _, err := h.e.ObserveNodes(h.ctx, []string{"n1", "n5", "gone"})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(some, fleetwave.Observations{"n1": want["n1"], "n5": want["n5"]}) {
				t.Fatalf("%s: ObserveNodes disagrees with a full read", what)
			}
			return n
		}
		for i := range nodes {
			report(h.e, i)
		}
		if n := observe("first read"); n != nodes {
			t.Fatalf("the first read read %d nodes, want %d", n, nodes)
		}
		if n := observe("nothing changed"); n != 0 {
			t.Fatalf("a read with nothing changed read %d nodes", n)
		}
		for round := range 30 {
			h.clk.Advance(time.Second)
			changed := map[int]bool{}
			for range rnd.Intn(4) {
				node := rnd.Intn(nodes)
				changed[node] = true
				report([]*Engine{h.e, other}[rnd.Intn(2)], node)
			}
			if round%10 == 0 { // a result changes the instance of block web on n1 and n2
				h.create(spec(fmt.Sprintf("r%d", round), 2, "web", int64(round+1), 2, 0))
				h.step()
				for _, node := range []string{"n1", "n2"} {
					for _, a := range h.poll(node) {
						h.complete(a, fleetwave.ResultSuccess)
					}
				}
				changed[1], changed[2] = true, true
			}
			if n := observe(fmt.Sprintf("round %d", round)); n != int64(len(changed)) {
				t.Fatalf("round %d: read %d nodes, %d changed", round, n, len(changed))
			}
		}
		// Redis lost writes: the counter is back below the last read, and
		// n3 shows what the lost timeline did not
		ver, err := rdb.Get(h.ctx, h.e.key("version")).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(h.ctx, h.e.key("version"), ver-5, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(h.ctx, h.e.key("obsi", "n3"), "lost", `{"block":"lost","version":"9"}`).Err(); err != nil {
			t.Fatal(err)
		}
		if n := observe("counter back"); n != nodes {
			t.Fatalf("after the counter went back, read %d nodes, want %d", n, nodes)
		}
		// a flush (or a restart without data) removes the incarnation
		if err := rdb.Del(h.ctx, h.e.key("incarnation")).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(h.ctx, h.e.key("obsi", "n5"), "flushed", `{"block":"flushed","version":"2"}`).Err(); err != nil {
			t.Fatal(err)
		}
		if n := observe("incarnation gone"); n != nodes {
			t.Fatalf("after the incarnation was gone, read %d nodes, want %d", n, nodes)
		}
		// a change no script marked (none does that) waits for the next full read
		if err := rdb.HSet(h.ctx, h.e.key("obsi", "n4"), "unmarked", `{"block":"unmarked","version":"1"}`).Err(); err != nil {
			t.Fatal(err)
		}
		obs, _, err := h.e.Observe(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range obs["n4"].Instances {
			if in.Block == "unmarked" {
				t.Fatal("an incremental read read n4, which no script marked")
			}
		}
		h.clk.Advance(fullObserveEvery)
		if n := observe("after fullObserveEvery"); n != nodes {
			t.Fatalf("after fullObserveEvery, read %d nodes, want %d", n, nodes)
		}
	})
}

// TestRolloutReadsOnlyChangedItems: Rollout keeps the items of an open
// rollout and reads again only those a script wrote since (a wave's), and
// the items joined to it since; a finished rollout is not kept. (Every
// harness test checks what it returns against a read of every item.)
func TestRolloutReadsOnlyChangedItems(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		reads := &obsReads{what: ":i:"}
		rdb.AddHook(reads)
		h := newHarness(t, rdb)
		id, _ := h.create(spec("web", 20, "web", 1, 5, 0))
		// another Engine reads (the harness's reads its own after each step)
		e := New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test"))
		read := func() ([]fleetwave.Item, int64) {
			t.Helper()
			before := reads.n.Load()
			_, items, err := e.Rollout(h.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return items, reads.n.Load() - before
		}
		if _, n := read(); n != 20 {
			t.Fatalf("first read: %d items read, want 20", n)
		}
		if _, n := read(); n != 0 {
			t.Fatalf("nothing changed: %d items read", n)
		}
		h.step() // the first wave: 5 items dispatched
		// the wave writes the 5 it dispatched and the next ones it looked
		// at (their reason), not the rollout's 20
		if items, n := read(); n < 5 || n >= 20 || items[0].Status != fleetwave.ItemInProgress {
			t.Fatalf("after a wave of 5: %d items read (want 5 to 19), first %s", n, items[0].Status)
		}
		more := spec("web", 22, "web", 1, 5, 0) // two items join
		more.Items = more.Items[20:]
		h.create(more)
		if items, n := read(); n != 2 || len(items) != 22 {
			t.Fatalf("after 2 items joined: %d items read (want 2), %d items", n, len(items))
		}
		for range 10 {
			for _, a := range h.pollAll(22) {
				h.complete(a, fleetwave.ResultSuccess)
			}
			h.step()
		}
		r, items, err := e.Rollout(h.ctx, id)
		if err != nil || r.Status != fleetwave.RolloutCompleted || len(items) != 22 {
			t.Fatalf("rollout %s with %d items, %v; want completed with 22", r.Status, len(items), err)
		}
		if _, n := read(); n != 22 {
			t.Fatalf("a finished rollout: %d items read, want all 22 (not kept)", n)
		}
	})
}

// TestObserveNodesOneRoundTrip: a push's plan reads the observations of
// its BRC's few nodes in one round trip (each waits behind the scripts of
// a wave in progress), and finds what a full read finds, for a node with a
// report, one with instances alone and one never seen; a scope of more
// than half a pipeline chunk finds the same.
func TestObserveNodesOneRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		for i := range 30 {
			r := fleetwave.Report{Node: fmt.Sprintf("n%d", i), SentAt: h.clk.Now()}
			if i%3 == 0 {
				r.Instances = []fleetwave.InstanceStatus{{Block: "web", Version: fmt.Sprint(i), Generation: 1}}
			}
			h.report(r)
		}
		// an instance without a report: the item of a result, on a node
		// that never sent a full report
		s := spec("r", 0, "web", 1, 1, 0)
		s.Items = []fleetwave.ItemSpec{itemSpec("lone", "web", 1)}
		h.create(s)
		h.step()
		as := h.poll("lone")
		if len(as) != 1 {
			t.Fatalf("lone polled %d attempts, want 1", len(as))
		}
		h.complete(as[0], fleetwave.ResultSuccess)
		all, version, err := h.e.Observe(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if all["lone"] == nil {
			t.Fatal("the node with an instance and no report is not observed")
		}
		trips := &redistest.Trips{}
		rdb.AddHook(trips)
		few := []string{"n3", "lone", "never-reported", "n4"}
		before := trips.N()
		got, gotVer, err := h.e.ObserveNodes(h.ctx, few)
		if err != nil {
			t.Fatal(err)
		}
		if n := trips.N() - before; n != 1 {
			t.Errorf("ObserveNodes of %d nodes took %d round trips, want 1", len(few), n)
		}
		want := fleetwave.Observations{"n3": all["n3"], "lone": all["lone"], "n4": all["n4"]}
		if gotVer != version || !reflect.DeepEqual(got, want) {
			t.Fatalf("ObserveNodes(%v) = %v at %d, want %v at %d", few, got, gotVer, want, version)
		}
		many := []string{"lone"}
		for i := range pipelineChunk {
			many = append(many, fmt.Sprintf("n%d", i))
		}
		reads := &obsReads{what: ":obsi:"}
		rdb.AddHook(reads)
		got, _, err = h.e.ObserveNodes(h.ctx, many)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, all) {
			t.Fatalf("ObserveNodes of %d nodes found %d nodes, a full read %d", len(many), len(got), len(all))
		}
		// a scope that is most of the fleet (a BRC of every node) reads
		// only what changed since the last read, as Observe does, and
		// hands out copies
		if n := reads.n.Load(); n != 0 {
			t.Errorf("ObserveNodes of most of the fleet, nothing changed, read %d nodes again", n)
		}
		got["n3"].Instances[0].Version = "changed by the caller"
		h.report(fleetwave.Report{Node: "n4", SentAt: h.clk.Now(), Capabilities: []string{"gpu"}})
		got, gotVer, err = h.e.ObserveNodes(h.ctx, many)
		if err != nil {
			t.Fatal(err)
		}
		if n := reads.n.Load(); n != 1 {
			t.Errorf("ObserveNodes of most of the fleet, one node changed, read %d nodes again", n)
		}
		all, version, err = New(rdb, WithClock(h.clk), WithLogger(zerolog.Nop()), WithPrefix("test")).Observe(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if gotVer != version || !reflect.DeepEqual(got, all) {
			t.Fatalf("ObserveNodes of most of the fleet at %d, a new Engine's full read at %d: they differ", gotVer, version)
		}
		// a large scope that is a small part of the fleet reads its nodes
		// alone, whatever changed
		mid := many[:pipelineChunk/2+1] // lone, n0 to n999
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < 4*len(mid); i += 16 {
					if err := h.e.Report(h.ctx, fleetwave.Report{Node: fmt.Sprintf("m%d", i), SentAt: h.clk.Now()}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if _, _, err := h.e.Observe(h.ctx); err != nil {
			t.Fatal(err)
		}
		from := reads.n.Load()
		got, _, err = h.e.ObserveNodes(h.ctx, mid)
		if err != nil {
			t.Fatal(err)
		}
		if n := reads.n.Load() - from; n != int64(len(all)) {
			t.Errorf("ObserveNodes of %d of %d nodes read %d nodes, want its %d observed ones", len(mid), 4*len(mid)+len(all), n, len(all))
		}
		if !reflect.DeepEqual(got, all) {
			t.Fatalf("ObserveNodes of %d nodes found %d nodes, a full read %d", len(mid), len(got), len(all))
		}
	})
}
