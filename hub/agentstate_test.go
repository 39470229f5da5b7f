package hub

import (
	"fmt"
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
