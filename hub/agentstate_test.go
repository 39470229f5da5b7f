package hub

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// TestAgentPathDoesNotWaitForTheHubLock: what every poll asks (whether
// its node owes a report) and what a reconcile adds to the version history
// never wait for the hub's lock, which reconciles and status commits hold
// for their own work; and the history keeps each node's versions once, at
// most historyMaxVersions, the newest.
func TestAgentPathDoesNotWaitForTheHubLock(t *testing.T) {
	h := &Hub{}
	h.asks.await([]string{"n1"})
	h.mu.Lock() // held throughout, as by a long status commit
	defer h.mu.Unlock()
	done := make(chan bool, 1)
	go func() {
		wants := h.WantsReport("n1")
		obs := fleetwave.Observations{}
		for i := range historyMaxVersions + 5 {
			obs["n1"] = &fleetwave.Report{Node: "n1", Instances: []fleetwave.InstanceStatus{{Block: "web", Version: string(rune('a' + i))}, {Block: "db", Version: "1", State: fleetwave.StateAbsent}}}
			h.history.observe(obs)
			h.history.observe(obs) // the same version again: kept once
		}
		done <- wants
	}()
	select {
	case wants := <-done:
		if !wants {
			t.Fatal("a node with an ambiguous item was not asked for a report")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agents' path waited for the hub's lock")
	}
	got := h.history.of(nil)["n1"]
	if len(got) != 1 || len(got["web"]) != historyMaxVersions || got["web"][0] != "f" || got["web"][historyMaxVersions-1] != string(rune('a'+historyMaxVersions+4)) {
		t.Fatalf("history %v: want web's newest %d versions once each, no absent instance", got, historyMaxVersions)
	}
	if !h.history.reported("n1", "web", "x") || h.history.reported("n1", "web", "a") || h.history.reported("n1", "db", "1") {
		t.Fatal("reported disagrees with the history")
	}
}

// TestHistoryTakenStaysAsItWas: what of hands out is the history's own
// maps, not copies (a status write takes every node's), so a version
// added afterwards must not show in a history taken before it, and
// readers of a taken history never race the reconcile that adds to it
// (-race, as make test runs it).
func TestHistoryTakenStaysAsItWas(t *testing.T) {
	var v versionHistory
	report := func(node string, versions ...string) fleetwave.Observations {
		r := &fleetwave.Report{Node: node}
		for i, ver := range versions {
			r.Instances = append(r.Instances, fleetwave.InstanceStatus{Block: fmt.Sprintf("b%d", i), Version: ver})
		}
		return fleetwave.Observations{node: r}
	}
	v.observe(report("n1", "1", "1"))
	all, one := v.of(nil), v.of([]string{"n1", "n2"})
	if len(one) != 1 || !slices.Equal(one["n1"]["b0"], []string{"1"}) {
		t.Fatalf("of(n1, n2) = %v: want n1's history alone", one)
	}
	v.observe(report("n1", "2", "1"))
	v.observe(report("n2", "1"))
	for name, taken := range map[string]map[string]map[string][]string{"of(nil)": all, "of(n1, n2)": one} {
		if len(taken) != 1 || !slices.Equal(taken["n1"]["b0"], []string{"1"}) || !slices.Equal(taken["n1"]["b1"], []string{"1"}) {
			t.Errorf("%s taken before the new versions changed to %v", name, taken)
		}
	}
	now := v.of(nil)
	if !slices.Equal(now["n1"]["b0"], []string{"1", "2"}) || !slices.Equal(now["n2"]["b0"], []string{"1"}) {
		t.Fatalf("history now %v: want n1's b0 at 1 then 2, and n2", now)
	}

	// a reader of taken histories beside the reconcile adding versions
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, m := range v.of(nil) {
				for _, vs := range m {
					_ = slices.Contains(vs, "x")
				}
			}
		}
	})
	for i := range 3 * historyMaxVersions {
		v.observe(report("n1", fmt.Sprint(i), fmt.Sprint(i%3)))
	}
	close(stop)
	wg.Wait()
	if got := v.of(nil)["n1"]["b0"]; len(got) != historyMaxVersions || got[len(got)-1] != fmt.Sprint(3*historyMaxVersions-1) {
		t.Fatalf("n1's b0 kept %v: want the newest %d", got, historyMaxVersions)
	}
}

// TestReportAsksAreOncePerNodeUnderConcurrentPolls: polls of many nodes
// at once ask each node missing from the observations for a report
// exactly once, whichever of its concurrent polls comes first; a report
// taken after the reconcile, or an ambiguous item recorded meanwhile,
// each decide for their node only.
func TestReportAsksAreOncePerNodeUnderConcurrentPolls(t *testing.T) {
	const nodes, pollers = 5000, 8
	var r reportAsks
	now := time.Now()
	known := map[string]*fleetwave.Node{}
	for i := range nodes {
		known[fmt.Sprintf("n%d", i)] = &fleetwave.Node{}
	}
	r.reconciled(map[string]bool{"n0": true}, now, &fleetwave.Snapshot{Nodes: known})
	r.took("n1", [32]byte{}, now.Add(time.Second)) // reported after the reconcile read
	asked := make([][]bool, pollers)
	var wg sync.WaitGroup
	for p := range pollers {
		asked[p] = make([]bool, nodes)
		wg.Go(func() {
			for i := range nodes {
				asked[p][i] = r.wants(fmt.Sprintf("n%d", i), now.Add(2*time.Second))
			}
		})
	}
	wg.Wait()
	for i := range nodes {
		n := 0
		for p := range pollers {
			if asked[p][i] {
				n++
			}
		}
		want := 1
		if i < 2 {
			want = 0 // n0 observed, n1 reported after the reconcile read
		}
		if n != want {
			t.Fatalf("n%d asked %d times by %d concurrent polls, want %d", i, n, pollers, want)
		}
	}
	// an ambiguous item asks an observed node too, each node once a minute
	r.await([]string{"n0", "n7"})
	if soon := now.Add(3 * time.Second); !r.wants("n0", soon) || r.wants("n7", soon) || r.wants("n8", soon) {
		t.Fatal("await: want n0 asked at once, n7 and n8 (asked a second ago) not")
	}
	later := now.Add(2*time.Second + reportAskEvery)
	if !r.wants("n7", later) {
		t.Fatal("await: n7 not asked again once the minute was over")
	}
	if _, _, at, ok := r.took("n7", [32]byte{1}, later); !ok || !at.Equal(later) {
		t.Fatalf("took n7: asked at %v (%v), want %v", at, ok, later)
	}
	if r.wants("n7", later.Add(2*reportAskEvery)) {
		t.Fatal("n7 reported after the reconcile: asked again")
	}
}

// BenchmarkHistoryOfFleet is a status write's read of the whole fleet's
// version history (two blocks a node, a few versions each):
//
//	go test -run '^$' -bench HistoryOfFleet -benchmem ./hub/
func BenchmarkHistoryOfFleet(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			var v versionHistory
			for ver := range 3 {
				obs := fleetwave.Observations{}
				for i := range n {
					node := fmt.Sprintf("node-%06d", i)
					obs[node] = &fleetwave.Report{Node: node, Instances: []fleetwave.InstanceStatus{
						{Block: "web", Version: fmt.Sprint(ver)}, {Block: "db", Version: "1"}}}
				}
				v.observe(obs)
			}
			for b.Loop() {
				if got := v.of(nil); len(got) != n {
					b.Fatalf("%d nodes in the history, want %d", len(got), n)
				}
			}
		})
	}
}
