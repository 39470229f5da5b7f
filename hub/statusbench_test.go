package hub

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// BenchmarkStatusWrite measures one status write of the hub (statusFiles,
// then the commit) during a fleet-wide rollout of n nodes that all
// reported, with a generation mark per node, one wave (max_concurrent
// n/20, as the scale runs) completed between two writes, with a real
// redis-server and a real mirror. Run it without -race (a CPU profile's
// timed writes: -tagfocus write=timed; the first write, of every document,
// is reported apart as first-write-ms, write=first):
//
//	go test -run '^$' -bench 'StatusWrite/10k' -benchtime 15x ./hub/
//	go test -run '^$' -bench 'StatusWrite/100k' -benchtime 5x -timeout 30m ./hub/
func BenchmarkStatusWrite(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) { benchStatusWrite(b, n) })
	}
}

func benchStatusWrite(b *testing.B, nodes int) {
	wave := nodes / 20
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	e := engine.New(redistest.Start(b).Client(b), engine.WithClock(clk), engine.WithLogger(zerolog.Nop()))
	if err := e.Load(ctx); err != nil {
		b.Fatal(err)
	}
	h := &Hub{eng: e, clock: clk, log: zerolog.Nop()}
	repo, err := gitsync.Open(ctx, gitsync.Source{URL: gittest.NewRemote(b, map[string]string{"README.md": "fleet\n"}), Dir: filepath.Join(b.TempDir(), "mirror")},
		gitsync.WithStatusBranch("fleetwave/status"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = repo.Close() })
	fence, err := e.Campaign(ctx, "hub-a", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	h.repo, h.fence, h.metrics = repo, fence, newMetrics(h)
	h.cfg.StaleAfter = Duration(time.Hour)
	snap := &fleetwave.Snapshot{Nodes: map[string]*fleetwave.Node{}}
	marks := map[fleetwave.ObjectKey]int64{}
	spec := fleetwave.RolloutSpec{BaseID: "web", MaxConcurrent: wave,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "web"), Generation: 2, Kind: fleetwave.SourceScheduler}}
	for i := range nodes {
		id := fmt.Sprintf("node-%06d", i)
		snap.Nodes[id] = &fleetwave.Node{ID: id, Labels: map[string]string{"role": "web"}}
		marks[fleetwave.Key(fleetwave.KindNode, id)] = 1
		r := fleetwave.Report{Node: id, AgentVersion: "1.0.0", SentAt: clk.Now(),
			Instances: []fleetwave.InstanceStatus{{Block: "web", Version: "1", Generation: 1, State: fleetwave.StateInstalled}}}
		if err := h.Report(ctx, r); err != nil {
			b.Fatal(err)
		}
		spec.Items = append(spec.Items, fleetwave.ItemSpec{Node: id, Block: "web", Action: fleetwave.ActionUpgrade, Generation: 2,
			TargetVersion: "2", Payload: fleetwave.AttemptPayload{Command: "true", TimeoutSeconds: 600}})
	}
	h.snapshot = snap
	if err := repo.SeedHighWater(marks); err != nil {
		b.Fatal(err)
	}
	id, _, err := e.CreateRollout(ctx, fence, spec)
	if err != nil {
		b.Fatal(err)
	}
	write := func() {
		sb, err := h.statusFiles(ctx, map[string]bool{id: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.repo.WriteStatus(ctx, sb.files, "Status"); err != nil {
			b.Fatal(err)
		}
		for _, p := range sb.rendered {
			h.rendered[p].data = nil // landed
		}
	}
	h.engineStep(ctx)
	// the first write holds every document (each node's, every part):
	// reported apart, with its steps (labelled write=first in a profile)
	first := startLaps(time.Now(), 0)
	var sb statusBatch
	pprof.Do(ctx, pprof.Labels("write", "first"), func(context.Context) { sb, err = h.statusFiles(ctx, map[string]bool{id: true}, first) })
	if err != nil {
		b.Fatal(err)
	}
	res, err := h.repo.WriteStatus(ctx, sb.files, "Status")
	if err != nil {
		b.Fatal(err)
	}
	first.Took(res.Steps)
	for _, p := range sb.rendered {
		h.rendered[p].data = nil // landed
	}
	var steps []string
	for _, s := range first.Steps {
		steps = append(steps, fmt.Sprintf("%s %v", s.Name, s.Took.Round(time.Millisecond)))
	}
	b.ReportMetric(float64(time.Since(first.Start).Milliseconds()), "first-write-ms")
	b.Logf("the first write, %d documents: %s", len(sb.files), strings.Join(steps, ", "))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// the wave in flight completes; the next one starts
		_, items, err := e.Rollout(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, it := range items {
			if it.Status != fleetwave.ItemInProgress {
				continue
			}
			as, err := e.Poll(ctx, it.Node, 1, 0)
			if err != nil || len(as) != 1 {
				b.Fatalf("poll %s: %v, %v", it.Node, as, err)
			}
			a := as[0]
			res := fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess,
				Instance: &fleetwave.InstanceStatus{Block: a.Block, Version: a.TargetVersion, ConfigHash: a.ConfigHash, Generation: a.Generation, State: fleetwave.StateInstalled}}
			if err := e.Complete(ctx, it.Node, res); err != nil {
				b.Fatal(err)
			}
			done++
		}
		if done == 0 {
			b.Fatalf("write %d: no wave in flight (b.N %d above the rollout's %d waves?)", b.N, b.N, nodes/wave)
		}
		clk.Advance(time.Second)
		h.engineStep(ctx)
		b.StartTimer()
		// labelled: -tagfocus write=timed leaves out the setup and the first write
		pprof.Do(ctx, pprof.Labels("write", "timed"), func(context.Context) { write() })
	}
}
