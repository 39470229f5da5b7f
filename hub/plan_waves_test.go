package hub

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestPlanFormsTheEnginesWaves: for random rollouts (lanes, max_concurrent,
// items skipped or blocked at creation, nodes draining), the waves `plan`
// shows are the waves the engine forms on a real redis-server when every
// attempt succeeds: the same nodes, lane by lane, wave by wave, and the
// same items kept apart (skipped, blocked) or waiting (node_draining).
func TestPlanFormsTheEnginesWaves(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	for run := range 40 {
		prefix := fmt.Sprintf("pw%d", run)
		clk := clock.NewFake(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
		e := engine.New(rdb, engine.WithPrefix(prefix), engine.WithClock(clk), engine.WithLogger(zerolog.Nop()))
		ctx := context.Background()
		if err := e.Load(ctx); err != nil {
			t.Fatal(err)
		}
		fence, err := e.Campaign(ctx, "hub-a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		n, mc, lanes := 1+rng.Intn(25), 1+rng.Intn(5), 1+rng.Intn(3)
		spec := fleetwave.RolloutSpec{BaseID: "r", MaxConcurrent: mc, FailureThresholdPercent: 100,
			Source: fleetwave.RolloutSource{Object: "trigger/r", Generation: 1, Kind: fleetwave.SourceScheduler}}
		snap := &fleetwave.Snapshot{Nodes: map[string]*fleetwave.Node{}}
		var drained []string
		for i := range n {
			node := fmt.Sprintf("n%02d", rng.Intn(1000)) // random dispatch order
			if snap.Nodes[node] != nil {
				continue
			}
			it := fleetwave.ItemSpec{Node: node, Block: "app", Action: fleetwave.ActionUpgrade, Generation: 1,
				TargetVersion: "2", ConfigHash: "h", ManagedBy: fmt.Sprintf("lane-%d", rng.Intn(lanes)),
				Payload: fleetwave.AttemptPayload{Command: "true", TimeoutSeconds: 60}}
			switch r := rng.Intn(10); {
			case r == 0:
				it.SkipReason = fleetwave.ReasonCLIManaged
			case r == 1:
				it.BlockReason, it.BlockMessage = "invalid_config", fmt.Sprintf("item %d", i)
			}
			nd := &fleetwave.Node{ID: node}
			if rng.Intn(8) == 0 && it.SkipReason == "" && it.BlockReason == "" {
				nd.Drain = true
				drained = append(drained, node)
			}
			snap.Nodes[node] = nd
			spec.Items = append(spec.Items, it)
		}
		pr := plannedRollout(snap, spec, spec.Items, clk.Now())
		want := planShape(pr)

		if _, err := e.SetDrained(ctx, fence, drained); err != nil {
			t.Fatal(err)
		}
		id, _, err := e.CreateRollout(ctx, fence, spec)
		if err != nil || id == "" {
			t.Fatalf("run %d: create: %q %v", run, id, err)
		}
		// every wave's attempts succeed; the next wave starts
		for range 3 * len(spec.Items) {
			if _, err := e.Step(ctx, fence); err != nil {
				t.Fatal(err)
			}
			polled := 0
			for node := range snap.Nodes {
				as, err := e.Poll(ctx, node, 10, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range as {
					polled++
					if err := e.Complete(ctx, node, fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultSuccess,
						Instance: &fleetwave.InstanceStatus{Block: a.Block, Version: a.TargetVersion, ConfigHash: a.ConfigHash,
							Generation: a.Generation, State: fleetwave.StateInstalled}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if polled == 0 {
				if _, err := e.Step(ctx, fence); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		_, items, err := e.Rollout(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := engineShape(items); got != want {
			t.Fatalf("run %d (seed %d): %d items, max_concurrent %d\nplan:\n%s\nengine:\n%s", run, seed, len(spec.Items), mc, want, got)
		}
	}
}

// planShape and engineShape write lanes and waves (nodes in dispatch
// order), the items apart and those waiting, one lane per line.
func planShape(pr PlannedRollout) string {
	var sb strings.Builder
	for _, l := range pr.Lanes {
		fmt.Fprintf(&sb, "%s:", l.Lane)
		for _, w := range l.Waves {
			var nodes []string
			for _, it := range w {
				nodes = append(nodes, it.Node)
			}
			fmt.Fprintf(&sb, " [%s]", strings.Join(nodes, " "))
		}
		sb.WriteString(" apart:" + nodesOf(l.Apart) + " waiting:" + nodesOf(l.Waiting) + "\n")
	}
	return sb.String()
}

func nodesOf(items []PlannedItem) string {
	var nodes []string
	for _, it := range items {
		nodes = append(nodes, it.Node)
	}
	slices.Sort(nodes)
	return strings.Join(nodes, ",")
}

func engineShape(items []fleetwave.Item) string {
	type lane struct {
		waves          map[int][]string
		apart, waiting []string
	}
	lanes := map[string]*lane{}
	for _, it := range items { // in dispatch order
		l := lanes[it.ManagedBy]
		if l == nil {
			l = &lane{waves: map[int][]string{}}
			lanes[it.ManagedBy] = l
		}
		switch {
		case it.Status == fleetwave.ItemSkipped || it.Status == fleetwave.ItemBlocked:
			l.apart = append(l.apart, it.Node)
		case it.Status == fleetwave.ItemPending:
			l.waiting = append(l.waiting, it.Node)
		default:
			l.waves[it.Wave] = append(l.waves[it.Wave], it.Node)
		}
	}
	var sb strings.Builder
	for _, name := range slices.Sorted(maps.Keys(lanes)) {
		l := lanes[name]
		fmt.Fprintf(&sb, "%s:", name)
		for w := 1; w <= len(l.waves); w++ {
			fmt.Fprintf(&sb, " [%s]", strings.Join(l.waves[w], " "))
		}
		slices.Sort(l.apart)
		slices.Sort(l.waiting)
		sb.WriteString(" apart:" + strings.Join(l.apart, ",") + " waiting:" + strings.Join(l.waiting, ",") + "\n")
	}
	return sb.String()
}
