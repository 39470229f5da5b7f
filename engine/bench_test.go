package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// Run the report with
//
//	FLEETWAVE_BENCH=1 go test -run TestBenchReport -v ./engine/
//
// and the Go benchmark with
//
//	go test -run '^$' -bench BenchmarkTransitions ./engine/

// benchSpec is a rollout of n items over nodes nodes (block-major order, so
// each wave of up to nodes items has one item per node).
func benchSpec(base string, n, nodes, maxConcurrent int) fleetwave.RolloutSpec {
	s := fleetwave.RolloutSpec{BaseID: base, MaxConcurrent: maxConcurrent, Source: fleetwave.RolloutSource{Kind: fleetwave.SourceScheduler}}
	for i := range n {
		it := itemSpec(fmt.Sprintf("n%d", i%nodes), fmt.Sprintf("b%d", i/nodes), 1)
		it.Payload.TimeoutSeconds = 3600
		s.Items = append(s.Items, it)
	}
	return s
}

// transitionRun creates a rollout of n items and drives it to completion:
// the hub steps in a loop while agents workers poll their nodes and answer
// success at once. It returns the wall time and the item transitions
// (create + dispatch + delivery + completion = 4 per item).
func transitionRun(tb testing.TB, rdb redis.UniversalClient, prefix string, n, nodes, maxConcurrent, agents int) (time.Duration, int) {
	ctx := context.Background()
	clk := clock.NewFake(t0) // time stands still: nothing expires
	e := New(rdb, WithClock(clk), WithPrefix(prefix))
	if err := e.Load(ctx); err != nil {
		tb.Fatal(err)
	}
	fence, err := e.Campaign(ctx, "bench", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	id, _, err := e.CreateRollout(ctx, fence, benchSpec("bench", n, nodes, maxConcurrent))
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				idle := true
				for node := w; node < nodes; node += agents {
					name := fmt.Sprintf("n%d", node)
					as, err := e.Poll(ctx, name, 100, 0)
					if err != nil {
						tb.Error(err)
						return
					}
					for _, a := range as {
						idle = false
						if err := e.Complete(ctx, name, resultOf(a, fleetwave.ResultSuccess)); err != nil {
							tb.Error(err)
							return
						}
					}
				}
				select {
				case <-done:
					return
				default:
				}
				if idle {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	for {
		if _, err := e.Step(ctx, fence); err != nil {
			tb.Fatal(err)
		}
		r, err := rdb.HGet(ctx, e.key("r", id), "status").Result()
		if err != nil {
			tb.Fatal(err)
		}
		if r == string(fleetwave.RolloutCompleted) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	close(done)
	wg.Wait()
	return elapsed, 4 * n
}

func BenchmarkTransitions(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	b.ResetTimer()
	var total time.Duration
	var transitions int
	for i := 0; b.Loop(); i++ {
		d, tr := transitionRun(b, rdb, fmt.Sprintf("b%d", i), 1000, 100, 100, 4)
		total += d
		transitions += tr
	}
	b.ReportMetric(float64(transitions)/total.Seconds(), "transitions/s")
}

// commandCalls sums the calls of INFO commandstats (every command Redis
// ran, those inside scripts included).
func commandCalls(tb testing.TB, rdb redis.UniversalClient) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, "calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		sum += n
	}
	return sum
}

func TestBenchReport(t *testing.T) {
	if os.Getenv("FLEETWAVE_BENCH") != "1" {
		t.Skip("set FLEETWAVE_BENCH=1 to run the engine benchmark report")
	}
	srv := redistest.Start(t)
	rt := &redistest.Trips{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
	rdb.AddHook(rt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	var rows [][2]string
	row := func(k, v string) { rows = append(rows, [2]string{k, v}) }

	// 1. transitions per second and round trips per transition
	const n, nodes, mc, agents = 5000, 500, 500, 8
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	calls0, rt0 := commandCalls(t, rdb), rt.N()
	d, tr := transitionRun(t, rdb, "tput", n, nodes, mc, agents)
	calls, trips := commandCalls(t, rdb)-calls0-1, rt.N()-rt0-1
	row("items / nodes / max_concurrent / agent workers", fmt.Sprintf("%d / %d / %d / %d", n, nodes, mc, agents))
	row("item transitions per second", fmt.Sprintf("%.0f (%d in %v)", float64(tr)/d.Seconds(), tr, d.Round(time.Millisecond)))
	row("client round trips per transition", fmt.Sprintf("%.2f (%d; includes idle polls and status reads)", float64(trips)/float64(tr), trips))
	row("Redis commands per transition", fmt.Sprintf("%.2f (%d, commandstats, script-internal calls included)", float64(calls)/float64(tr), calls))

	// 2. makespan: 10,000 items, max_concurrent 200, 100 ms actions; the
	// client has the hub's pool size (waiting polls hold no connection)
	const msMC = 200
	mrdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	t.Cleanup(func() { _ = mrdb.Close() })
	ms, ideal := makespan(t, mrdb, 10000, msMC, 100*time.Millisecond)
	row("makespan 10,000 nodes, max_concurrent 200, 100 ms actions", fmt.Sprintf("%v (ideal %v, %.2fx; +%v per wave of %d)",
		ms.Round(time.Millisecond), ideal, ms.Seconds()/ideal.Seconds(), ((ms-ideal)/(10000/msMC)).Round(100*time.Microsecond), msMC))

	// 3. the same server under redis-benchmark
	if bin, err := exec.LookPath("redis-benchmark"); err == nil {
		out, err := exec.Command(bin, "-s", srv.Addr, "-t", "set,get", "-n", "100000", "-q").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if l = strings.TrimSpace(l[strings.LastIndex(l, "\r")+1:]); l != "" {
				k, v, _ := strings.Cut(l, ":")
				row("redis-benchmark "+k, strings.TrimSpace(v))
			}
		}
	}
	var sb strings.Builder
	sb.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-58s  %s\n", r[0], r[1])
	}
	t.Log(sb.String())
}

// makespan runs a rollout of n items on n nodes (one lane) with
// max_concurrent mc, whose n agents each take action to answer, on the real
// clock; it returns the time from creation to completion and the ideal
// n/mc*action. The agents long-poll like the real agent (its default wait)
// and all wait before the rollout is created.
func makespan(t *testing.T, rdb redis.UniversalClient, n, mc int, action time.Duration) (time.Duration, time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := New(rdb, WithPrefix("makespan"))
	if err := e.Load(ctx); err != nil {
		t.Fatal(err)
	}
	fence, err := e.Campaign(ctx, "bench", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for node := range n {
		wg.Add(1)
		go func() { // one agent per node: long polls, one attempt at a time
			defer wg.Done()
			name := fmt.Sprintf("n%d", node)
			for ctx.Err() == nil {
				as, err := e.Poll(ctx, name, 16, agentPollWait) // as the agent asks the hub
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if len(as) == 0 {
					continue
				}
				time.Sleep(action)
				if err := e.Complete(ctx, name, resultOf(as[0], fleetwave.ResultSuccess)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// every agent waits before the rollout exists, as a connected fleet does
	for deadline := time.Now().Add(time.Minute); e.WaitingPolls() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d agents wait", e.WaitingPolls(), n)
		}
	}
	// n nodes, one item each
	id, _, err := e.CreateRollout(ctx, fence, benchSpec("ms", n, n, mc))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// the hub steps every StepInterval (default 200 ms); waves start from
	// the result that empties the previous one, not from Step. The end is
	// looked for every 5 ms so the figure is exact to 5 ms.
	var stepped time.Time
	for {
		if time.Since(stepped) >= hubStepInterval {
			if _, err := e.Step(ctx, fence); err != nil {
				t.Fatal(err)
			}
			stepped = time.Now()
		}
		st, err := rdb.HGet(ctx, e.key("r", id), "status").Result()
		if err != nil {
			t.Fatal(err)
		}
		if st == string(fleetwave.RolloutCompleted) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return elapsed, time.Duration(n/mc) * action
}

// agentPollWait is the agent's default long-poll wait (agent.DefaultPollWait).
const agentPollWait = 10 * time.Second

// hubStepInterval is the hub's default step_interval (hub/config.go).
const hubStepInterval = 200 * time.Millisecond
