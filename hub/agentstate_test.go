package hub

import (
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
