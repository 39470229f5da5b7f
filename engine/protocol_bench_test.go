package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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

// The script benchmarks time one script call each on a fresh prefix, so
// that the argument records (items, results) and the wave machinery are
// measured at their largest:
//
//	go test -run '^$' -bench 'CreateRollout|Complete|Step' -count=6 ./engine/

// redisCPU returns the CPU time the server used so far (INFO cpu: user +
// system), in ms. Unlike wall time it hardly moves with the load of the
// machine the benchmark shares.
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var ms float64
	for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
		_, rest, ok := strings.Cut(info, k)
		if !ok {
			b.Fatalf("INFO cpu lacks %s", k)
		}
		v, _, _ := strings.Cut(rest, "\r")
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			b.Fatal(err)
		}
		ms += f * 1000
	}
	return ms
}

// benchEngine is a leader engine on its own prefix of rdb.
// The server is emptied first, so every call meets the same state.
func benchEngine(b *testing.B, rdb redis.UniversalClient, prefix string) (*Engine, int64) {
	b.Helper()
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	e := New(rdb, WithClock(clock.NewFake(t0)), WithPrefix(prefix))
	if err := e.Load(ctx); err != nil {
		b.Fatal(err)
	}
	fence, err := e.Campaign(ctx, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	return e, fence
}

// BenchmarkCreateRollout: one CreateRollout of 10,000 items (18 fields each).
func BenchmarkCreateRollout(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	spec := benchSpec("bench", 10000, 1000, 100)
	var cost redisCost
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e, fence := benchEngine(b, rdb, fmt.Sprintf("c%d", i))
		var items []string
		timed(b, rdb, &cost, func() {
			var err error
			if _, items, err = e.CreateRollout(ctx, fence, spec); err != nil {
				b.Fatal(err)
			}
		})
		b.StartTimer()
		if len(items) != 10000 {
			b.Fatalf("%d items created, want 10000", len(items))
		}
	}
	cost.report(b)
}

// BenchmarkCreateRolloutAgain: the same 10,000 items sent again while they
// are pending (each reconcile plans the rollout's unfinished items again;
// the engine finds each instance busy and creates nothing).
func BenchmarkCreateRolloutAgain(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	spec := benchSpec("bench", 10000, 1000, 100)
	e, fence := benchEngine(b, rdb, "again")
	if _, _, err := e.CreateRollout(ctx, fence, spec); err != nil {
		b.Fatal(err)
	}
	var cost redisCost
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var items []string
		timed(b, rdb, &cost, func() {
			var err error
			if _, items, err = e.CreateRollout(ctx, fence, spec); err != nil {
				b.Fatal(err)
			}
		})
		b.StartTimer()
		if len(items) != 0 {
			b.Fatalf("%d items created again, want 0", len(items))
		}
	}
	cost.report(b)
}

// redisCost is what the timed parts of a benchmark cost the Redis server:
// its CPU time, and the instructions it ran when it runs under
// valgrind's callgrind (scripts/redis-instructions.sh): unlike time, that
// count does not move with the load of the machine.
type redisCost struct {
	cpuMS float64
	ir    float64
	irOK  bool
}

// report reports the costs per op: redis-cpu-ms/op, and redis-Ir/op under
// callgrind.
func (c *redisCost) report(b *testing.B) {
	b.ReportMetric(c.cpuMS/float64(b.N), "redis-cpu-ms/op")
	if c.irOK {
		b.ReportMetric(c.ir/float64(b.N), "redis-Ir/op")
	}
}

// timed runs work under the benchmark's timer (stopped around it), adding
// what it cost Redis to cost. The instruction count needs
// REDIS_CALLGRIND_OUT, the folder where callgrind writes its dumps.
func timed(b *testing.B, rdb redis.UniversalClient, cost *redisCost, work func()) {
	dir := os.Getenv("REDIS_CALLGRIND_OUT")
	pid := ""
	if dir != "" {
		pid = redisPid(b, rdb)
		if out, err := exec.Command("callgrind_control", "--zero", pid).CombinedOutput(); err != nil {
			b.Fatalf("callgrind_control --zero %s: %v: %s", pid, err, out)
		}
	}
	cpu0 := redisCPU(b, rdb)
	b.StartTimer()
	work()
	b.StopTimer()
	cost.cpuMS += redisCPU(b, rdb) - cpu0
	if dir != "" {
		cost.ir += callgrindDump(b, dir, pid)
		cost.irOK = true
	}
}

// benchRedis starts the server of a script benchmark and returns its
// client. Under callgrind Redis runs some 50 times slower: a script of
// 2,000 items then outlasts the client's default 5 s read timeout.
func benchRedis(b *testing.B) *redis.Client {
	b.Helper()
	srv := redistest.Start(b)
	if os.Getenv("REDIS_CALLGRIND_OUT") == "" {
		return srv.Client(b)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Minute, WriteTimeout: time.Minute})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// redisPid is the server's process id (INFO server).
func redisPid(b *testing.B, rdb redis.UniversalClient) string {
	b.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "process_id:")
	if !ok {
		b.Fatal("INFO server lacks process_id")
	}
	v, _, _ := strings.Cut(rest, "\r")
	return strings.TrimSpace(v)
}

// callgrindDump has callgrind dump the counts since its last zeroing and
// returns the instructions they add up to (the dump's summary line).
func callgrindDump(b *testing.B, dir, pid string) float64 {
	b.Helper()
	before, _ := filepath.Glob(filepath.Join(dir, "*."+pid+".*"))
	if out, err := exec.Command("callgrind_control", "--dump", pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control --dump %s: %v: %s", pid, err, out)
	}
	after, _ := filepath.Glob(filepath.Join(dir, "*."+pid+".*"))
	for _, f := range after {
		if slices.Contains(before, f) {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "summary: "); ok {
				ir, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					b.Fatalf("%s: %v", f, err)
				}
				return ir
			}
		}
		b.Fatalf("%s: no summary line", f)
	}
	b.Fatalf("callgrind wrote no dump in %s", dir)
	return 0
}

// benchAgents is how many agents talk to the engine at once in the
// protocol benchmarks.
const benchAgents = 16

// byAgents runs agent(w) for each of benchAgents agents at once and waits
// for them all.
func byAgents(agent func(w int)) {
	var wg sync.WaitGroup
	for w := range benchAgents {
		wg.Go(func() { agent(w) })
	}
	wg.Wait()
}

// waveStarted is an engine under prefix with spec's rollout created and
// its first wave started.
func waveStarted(b *testing.B, rdb redis.UniversalClient, prefix string, spec fleetwave.RolloutSpec) *Engine {
	ctx := context.Background()
	e, fence := benchEngine(b, rdb, prefix)
	if _, _, err := e.CreateRollout(ctx, fence, spec); err != nil {
		b.Fatal(err)
	}
	if _, err := e.Step(ctx, fence); err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkStep: one Step that starts a wave of 1,000 items of a rollout of
// 10,000 (the scan, plan and apply of a full wave).
func BenchmarkStep(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	spec := benchSpec("bench", 10000, 1000, 1000)
	var cost redisCost
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e, fence := benchEngine(b, rdb, fmt.Sprintf("s%d", i))
		if _, _, err := e.CreateRollout(ctx, fence, spec); err != nil {
			b.Fatal(err)
		}
		var res StepResult
		timed(b, rdb, &cost, func() {
			var err error
			if res, err = e.Step(ctx, fence); err != nil {
				b.Fatal(err)
			}
		})
		b.StartTimer()
		if res.Dispatched != 1000 {
			b.Fatalf("%d dispatched, want 1000", res.Dispatched)
		}
	}
	cost.report(b)
}

// BenchmarkComplete: the 1,000 results of a wave, sent by 16 agents at
// once (group commit: a few complete scripts of up to 256 results), which
// also start the next wave.
func BenchmarkComplete(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	const nodes = 1000
	spec := benchSpec("bench", 2*nodes, nodes, nodes)
	var cost redisCost
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := waveStarted(b, rdb, fmt.Sprintf("k%d", i), spec)
		var results [benchAgents][]fleetwave.AttemptResult
		var owners [benchAgents][]string
		for n := range nodes {
			node := fmt.Sprintf("n%d", n)
			as, err := e.Poll(ctx, node, 10, 0)
			if err != nil || len(as) != 1 {
				b.Fatalf("poll %s: %d attempts, %v", node, len(as), err)
			}
			results[n%benchAgents] = append(results[n%benchAgents], resultOf(as[0], fleetwave.ResultSuccess))
			owners[n%benchAgents] = append(owners[n%benchAgents], node)
		}
		timed(b, rdb, &cost, func() {
			byAgents(func(w int) {
				for j, res := range results[w] {
					if err := e.Complete(ctx, owners[w][j], res); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.StartTimer()
	}
	cost.report(b)
}

// BenchmarkPoll: the 1,000 polls that take a wave's attempts, one per
// node, 16 agents at a time (each pop numbers its delivery: pop.lua).
func BenchmarkPoll(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	const nodes = 1000
	spec := benchSpec("bench", nodes, nodes, nodes)
	var cost redisCost
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := waveStarted(b, rdb, fmt.Sprintf("p%d", i), spec)
		timed(b, rdb, &cost, func() {
			byAgents(func(w int) {
				for n := w; n < nodes; n += benchAgents {
					node := fmt.Sprintf("n%d", n)
					if as, err := e.Poll(ctx, node, 10, 0); err != nil || len(as) != 1 {
						b.Errorf("poll %s: %d attempts, %v", node, len(as), err)
						return
					}
				}
			})
		})
		b.StartTimer()
	}
	cost.report(b)
}

// counted is the number of items counted in m.
func counted(m map[StatusReason]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// BenchmarkGauges: one read of the fleet gauges (a /metrics scrape) of
// 10,000 nodes that each sent a full report, 100 of them again since the
// last read, and an open rollout of 10,000 items (one per node, 100 at a
// time) of which a wave completed and the next started since the last
// read.
func BenchmarkGauges(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	e, fence := benchEngine(b, rdb, "g")
	const nodes, wave = 10000, 100
	report := func(n int) {
		r := fleetwave.Report{Node: fmt.Sprintf("n%d", n), SentAt: t0, AgentVersion: "1.0.0", Capabilities: []string{"systemd"}}
		for k := range 3 {
			r.Instances = append(r.Instances, fleetwave.InstanceStatus{Block: fmt.Sprintf("b%d", k), Version: "1.2.3",
				ConfigHash: "c0ffee", Generation: 4, State: fleetwave.StateRunning})
		}
		if err := e.Report(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	for n := range nodes {
		report(n)
	}
	// a wave in flight; next completes it (the same script starts the
	// one after), or starts a new rollout once the last completed
	rollouts, w := 0, 0
	start := func() {
		rollouts++
		if _, _, err := e.CreateRollout(ctx, fence, benchSpec(fmt.Sprintf("g%d", rollouts), nodes, nodes, wave)); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Step(ctx, fence); err != nil {
			b.Fatal(err)
		}
		w = 0
	}
	next := func() {
		if w == nodes/wave {
			start()
			return
		}
		for n := w * wave; n < (w+1)*wave; n++ {
			node := fmt.Sprintf("n%d", n)
			as, err := e.Poll(ctx, node, 10, 0)
			if err != nil || len(as) != 1 {
				b.Fatalf("%s polled %d attempts (%v), want its item of wave %d", node, len(as), err, w)
			}
			if err := e.Complete(ctx, node, resultOf(as[0], fleetwave.ResultSuccess)); err != nil {
				b.Fatal(err)
			}
		}
		w++
	}
	start()
	g, err := e.Gauges(ctx)
	if err != nil || len(g.Reports) != nodes {
		b.Fatalf("%d reports read (%v), want %d", len(g.Reports), err, nodes)
	}
	if n := g.Items[StatusReason{"in_progress", ""}]; n != wave || counted(g.Items) != nodes {
		b.Fatalf("items counted: %v, want %d, %d of them in progress", g.Items, nodes, wave)
	}
	var cost redisCost
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for n := range 100 {
			report((i*100 + n) % nodes)
		}
		next()
		timed(b, rdb, &cost, func() {
			if _, err := e.Gauges(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
	cost.report(b)
}

// BenchmarkPollRegistry: Polls of distinct nodes registering and leaving
// the mux's registry of waiting Polls, 512 at once on the machine's
// cores, as held polls come and go at 100,000 agents (no attempt queued).
func BenchmarkPollRegistry(b *testing.B) {
	e := New(redistest.Start(b).Client(b), WithPrefix("reg"))
	var next atomic.Int64
	b.SetParallelism(256)
	b.RunParallel(func(pb *testing.PB) {
		node := fmt.Sprintf("n%d", next.Add(1))
		for pb.Next() {
			w := &waiter{node: node, max: 1, got: make(chan popped, 1)}
			e.register(w)
			if !e.unregister(w) {
				<-w.got
			}
		}
	})
}

// BenchmarkHeldPollsHandOut: a wave of 5,000 attempts handed to the held
// polls of its 5,000 nodes (the mux's path: one announcement, the pops,
// each poll's delivery), then a one-item rollout of another node started
// right after it, as a push lands during a wave. It reports when the
// wave's first and last polls returned and when the other node's did,
// each counted from the end of the wave's step (its script, ~0.5 s, is
// reported apart: nothing is handed out before it ends).
//
//	go test -run '^$' -bench HeldPollsHandOut -benchtime 5x -count 4 ./engine/
func BenchmarkHeldPollsHandOut(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	const nodes = 5000
	var first, last, other, stepped time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e, fence := benchEngine(b, rdb, fmt.Sprintf("h%d", i))
		if _, _, err := e.CreateRollout(ctx, fence, benchSpec("bench", nodes, nodes, nodes)); err != nil {
			b.Fatal(err)
		}
		probe := fleetwave.RolloutSpec{BaseID: "probe", MaxConcurrent: 1, Source: fleetwave.RolloutSource{Kind: fleetwave.SourceScheduler},
			Items: []fleetwave.ItemSpec{itemSpec("other", "b9", 1)}}
		got := make(chan time.Time, nodes+1)
		var otherAt time.Time
		var wg sync.WaitGroup
		for n := range nodes + 1 {
			node := fmt.Sprintf("n%d", n)
			if n == nodes {
				node = "other"
			}
			wg.Go(func() {
				as, err := e.Poll(ctx, node, 10, time.Minute)
				if err != nil || len(as) != 1 {
					b.Errorf("poll %s: %d attempts, %v", node, len(as), err)
				}
				if node == "other" {
					otherAt = time.Now()
				} else {
					got <- time.Now()
				}
			})
		}
		for e.WaitingPolls() < nodes+1 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the mux subscribed and looked
		b.StartTimer()
		start := time.Now()
		if res, err := e.Step(ctx, fence); err != nil || res.Dispatched != nodes {
			b.Fatalf("step: %d dispatched, %v", res.Dispatched, err)
		}
		stepEnd := time.Now()
		if _, _, err := e.CreateRollout(ctx, fence, probe); err != nil {
			b.Fatal(err)
		}
		if res, err := e.Step(ctx, fence); err != nil || res.Dispatched != 1 {
			b.Fatalf("step of the other rollout: %d dispatched, %v", res.Dispatched, err)
		}
		wg.Wait()
		b.StopTimer()
		close(got)
		var lo, hi time.Time
		for t := range got {
			if lo.IsZero() || t.Before(lo) {
				lo = t
			}
			if t.After(hi) {
				hi = t
			}
		}
		stepped += stepEnd.Sub(start)
		first += lo.Sub(stepEnd)
		last += hi.Sub(stepEnd)
		other += otherAt.Sub(stepEnd)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(stepped), "step-ms")
	b.ReportMetric(ms(first), "first-ms")
	b.ReportMetric(ms(last), "last-ms")
	b.ReportMetric(ms(other), "other-ms")
}
