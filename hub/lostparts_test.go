package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
	"github.com/fleetwave/fleetwave/status"
)

// engineHub is a hub of only an engine, on a real redis-server, and its
// fake clock.
func engineHub(t *testing.T, hooks ...redis.Hook) (*Hub, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	client := redistest.Start(t).Client(t)
	for _, hk := range hooks {
		client.AddHook(hk)
	}
	e := engine.New(client, engine.WithClock(clk), engine.WithLogger(zerolog.Nop()))
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &Hub{eng: e, clock: clk, log: zerolog.Nop()}, clk
}

// TestALostRolloutInPartsIsClosedWholly: Git holds an unfinished rollout of
// 2,500 items in parts and the engine (a real redis-server) does not know
// it. The hub closes it from its document and every part: pending items
// skipped, the ones in flight blocked, the completed ones kept, and writes
// it back in parts.
func TestALostRolloutInPartsIsClosedWholly(t *testing.T) {
	h, clk := engineHub(t)
	ctx := context.Background()

	r := fleetwave.Rollout{ID: "web-g7", Status: fleetwave.RolloutActive, Wave: 2, CreatedAt: clk.Now(), UpdatedAt: clk.Now()}
	var items []fleetwave.Item
	for i := range 2500 {
		it := fleetwave.Item{ID: fmt.Sprintf("web-g7.%d", i+1), Rollout: r.ID, Node: fmt.Sprintf("n%04d", i), Block: "web",
			Action: "upgrade", Generation: 7, Status: fleetwave.ItemPending, Source: fleetwave.SourceScheduler}
		switch {
		case i < 1000:
			it.Status, it.Wave = fleetwave.ItemCompleted, 1
		case i < 1100:
			it.Status, it.Wave = fleetwave.ItemInProgress, 2
		}
		items = append(items, it)
		r.Counters.Add(it.Status, 1)
	}
	files, err := status.RolloutFiles(status.NewRollout(r, items))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("the rollout's files: %d, want its document and 3 parts", len(files))
	}
	lost := h.closeLostRollouts(ctx, []string{r.ID}, func(p string) ([]byte, bool) { b, ok := files[p]; return b, ok }, map[string]fleetwave.RequestStatus{})
	out := lost[r.ID]
	if len(out) != 4 {
		t.Fatalf("closed rollout written as %d files, want 4", len(out))
	}
	d, err := status.ReadRollout(r.ID, out[status.RolloutPath(r.ID)], func(p string) ([]byte, bool) { b, ok := out[p]; return b, ok })
	if err != nil {
		t.Fatal(err)
	}
	if d.Rollout.Status != fleetwave.RolloutCancelled || d.Rollout.Reason != fleetwave.ReasonStateLost {
		t.Fatalf("closed rollout is %s (%s), want cancelled (state_lost)", d.Rollout.Status, d.Rollout.Reason)
	}
	count := map[fleetwave.ItemStatus]int{}
	for _, it := range d.Items {
		count[it.Status]++
	}
	if count[fleetwave.ItemCompleted] != 1000 || count[fleetwave.ItemBlocked] != 100 || count[fleetwave.ItemSkipped] != 1400 || len(d.Items) != 2500 {
		t.Fatalf("closed items %v of %d, want 1000 completed, 100 blocked, 1400 skipped", count, len(d.Items))
	}
	if c := d.Rollout.Counters; c.Total != 2500 || c.Done != 1000 || c.Skipped != 1400 {
		t.Fatalf("closed counters %+v", c)
	}
}

// TestAnUnchangedReportAsksForNoReconcile: a node's first report, one that
// says something new, one after a long silence and one the hub asked for
// each ask for a reconcile; a periodic report that says what the last one
// said does not (at 100,000 agents those kept a reconcile of the whole
// fleet running all the time).
func TestAnUnchangedReportAsksForNoReconcile(t *testing.T) {
	h, clk := engineHub(t)
	ctx := context.Background()
	h.reconcileSoon, h.cfg = make(chan struct{}, 1), Config{StaleAfter: Duration(2 * time.Minute)}
	report := func(version string) bool {
		t.Helper()
		clk.Advance(30 * time.Second)
		r := fleetwave.Report{Node: "n1", AgentVersion: "1.0.0", SentAt: clk.Now(),
			Instances: []fleetwave.InstanceStatus{{Block: "web", Version: version, Generation: 1}}}
		if err := h.Report(ctx, r); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.reconcileSoon:
			return true
		default:
			return false
		}
	}
	if !report("1") {
		t.Error("the first report asked for no reconcile")
	}
	if report("1") {
		t.Error("a report that says what the last said asked for a reconcile")
	}
	if !report("2") {
		t.Error("a report with a new version asked for no reconcile")
	}
	clk.Advance(2 * time.Minute)
	if !report("2") {
		t.Error("the first report after a silence longer than half of stale_after asked for no reconcile")
	}
	h.asks.mu.Lock()
	h.asks.asked = map[string]time.Time{"n1": clk.Now()}
	h.asks.mu.Unlock()
	if !report("2") {
		t.Error("a report the hub asked for (Redis had lost the node's) asked for no reconcile")
	}
}
