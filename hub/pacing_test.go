package hub

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

func TestPacerSpacesStepsAskedForBySoon(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := pacer{spacing: func(took time.Duration) time.Duration { return max(took, time.Second) }}
	if w := p.wait(t0); w > 0 {
		t.Fatalf("the first step waits %v, want none", w)
	}
	p.ran(t0, t0.Add(200*time.Millisecond)) // a short step: the floor applies
	if w := p.wait(t0.Add(300 * time.Millisecond)); w != 900*time.Millisecond {
		t.Fatalf("wait after a 200ms step = %v, want 900ms", w)
	}
	if w := p.wait(t0.Add(1300 * time.Millisecond)); w > 0 {
		t.Fatalf("wait once the spacing passed = %v, want none", w)
	}
	p.ran(t0.Add(2*time.Second), t0.Add(5*time.Second)) // a 3s step: as long again
	if w := p.wait(t0.Add(5 * time.Second)); w != 3*time.Second {
		t.Fatalf("wait after a 3s step = %v, want 3s", w)
	}
}

// TestStatusWritesAreSpacedByTheirOwnDuration: results are written at
// most every status.interval, and no sooner than the last write took.
// TestTicksWaitForTheSpacing: a paced loop whose steps take longer than its
// interval runs them spaced by their duration, not back to back because a
// tick was waiting when a step ended. (Only lower bounds on the gaps are
// asserted: a loaded machine makes them longer, never shorter.)
func TestTicksWaitForTheSpacing(t *testing.T) {
	const took = 40 * time.Millisecond
	var mu sync.Mutex
	var starts, ends []time.Time
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &Hub{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.runPaced(ctx, pacedLoop{every: 5 * time.Millisecond, spacing: func(d time.Duration) time.Duration { return d },
			now: make(chan struct{}), soon: make(chan struct{}), step: func(context.Context) {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				time.Sleep(took)
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
			}})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(ends)
		mu.Unlock()
		if n >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d steps in 10s with an interval of 5ms", n)
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(ends); i++ {
		gap := starts[i].Sub(ends[i-1])
		if steps := ends[i-1].Sub(starts[i-1]); gap < steps-2*time.Millisecond {
			t.Fatalf("step %d started %v after the previous one ended, which took %v: the ticks ran it back to back", i, gap, steps)
		}
	}
}

func TestStatusWritesAreSpacedByTheirOwnDuration(t *testing.T) {
	h := &Hub{cfg: Config{Status: StatusConfig{Interval: Duration(2 * time.Second)}}}
	for took, want := range map[time.Duration]time.Duration{
		300 * time.Millisecond: 2 * time.Second,
		2 * time.Second:        2 * time.Second,
		7 * time.Second:        7 * time.Second,
	} {
		if got := h.statusSpacing(took); got != want {
			t.Fatalf("statusSpacing(%v) = %v, want %v", took, got, want)
		}
	}
}

func snapOf(commit string, objects map[string]string, triggers ...*fleetwave.Trigger) *fleetwave.Snapshot {
	s := &fleetwave.Snapshot{Commit: commit, Objects: map[fleetwave.ObjectKey]fleetwave.Object{}, Triggers: map[string]*fleetwave.Trigger{}}
	for k, hash := range objects {
		s.Objects[fleetwave.ObjectKey(k)] = fleetwave.Object{Hash: hash}
	}
	for _, t := range triggers {
		s.Triggers[t.Name] = t
	}
	return s
}

func TestChangedTriggersAreThoseOfACommitThatChangedOnlyBRCs(t *testing.T) {
	web := &fleetwave.Trigger{Name: "web", TriggerType: fleetwave.TriggerReconciliation}
	db := &fleetwave.Trigger{Name: "db"}
	nightly := &fleetwave.Trigger{Name: "nightly", TriggerType: fleetwave.TriggerSchedule}
	base := map[string]string{"trigger/web": "w1", "trigger/db": "d1", "trigger/nightly": "s1", "node/n1": "n1", "block/b": "b1"}
	prev := snapOf("c1", base, web, db, nightly)
	with := func(commit string, change map[string]string) *fleetwave.Snapshot {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range change {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return snapOf(commit, m, web, db, nightly, &fleetwave.Trigger{Name: "new"})
	}
	cases := []struct {
		name string
		next *fleetwave.Snapshot
		want []string // nil: the whole plan decides
	}{
		{"one BRC changed", with("c2", map[string]string{"trigger/web": "w2"}), []string{"web"}},
		{"a BRC added, one changed", with("c2", map[string]string{"trigger/new": "x", "trigger/db": "d2"}), []string{"db", "new"}},
		{"a schedule BRC changed", with("c2", map[string]string{"trigger/nightly": "s2"}), []string{}},
		{"a BRC removed", with("c2", map[string]string{"trigger/db": ""}), []string{}},
		{"a node changed too", with("c2", map[string]string{"trigger/web": "w2", "node/n1": "n2"}), nil},
		{"a node removed", with("c2", map[string]string{"node/n1": ""}), nil},
		{"a block changed", with("c2", map[string]string{"block/b": "b2"}), nil},
		{"the same commit", with("c1", map[string]string{"trigger/web": "w2"}), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := changedTriggers(prev, c.next)
			if c.want == nil {
				if got != nil {
					t.Fatalf("changed = %v, want nil (the whole plan)", got)
				}
				return
			}
			if len(got) != len(c.want) {
				t.Fatalf("changed = %v, want %v", got, c.want)
			}
			for _, n := range c.want {
				if !got[n] {
					t.Fatalf("changed = %v, want %v", got, c.want)
				}
			}
		})
	}
	if got := changedTriggers(nil, prev); got != nil {
		t.Fatalf("first snapshot: changed = %v, want nil", got)
	}
}
