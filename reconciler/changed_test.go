package reconciler

import (
	"fmt"
	"maps"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// changedPair is a snapshot of n nodes, a few blocks and BRCs (commit c1)
// and the next one (c2), which edits, adds or removes some of each as r
// draws; the next one does not say what changed.
func changedPair(r *rand.Rand, n int) (prev, next *fleetwave.Snapshot) {
	prev = &fleetwave.Snapshot{Commit: "c1", Objects: map[fleetwave.ObjectKey]fleetwave.Object{}, Triggers: map[string]*fleetwave.Trigger{}}
	put := func(s *fleetwave.Snapshot, k fleetwave.ObjectKey, hash string) {
		s.Objects[k] = fleetwave.Object{Key: k, Path: string(k), Hash: hash}
		if k.Kind() == fleetwave.KindTrigger {
			s.Triggers[k.Name()] = &fleetwave.Trigger{Name: k.Name()}
		}
	}
	for i := range n {
		put(prev, fleetwave.Key(fleetwave.KindNode, fmt.Sprintf("n%06d", i)), "h0")
	}
	for i := range 4 {
		put(prev, fleetwave.Key(fleetwave.KindBlock, fmt.Sprintf("b%d", i)), "h0")
		put(prev, fleetwave.Key(fleetwave.KindTrigger, fmt.Sprintf("t%d", i)), "h0")
	}
	next = &fleetwave.Snapshot{Commit: "c2", Objects: maps.Clone(prev.Objects), Triggers: maps.Clone(prev.Triggers)}
	kinds := []fleetwave.Kind{fleetwave.KindTrigger, fleetwave.KindTrigger, fleetwave.KindTrigger, fleetwave.KindNode, fleetwave.KindBlock}
	for range r.Intn(4) {
		kind := kinds[r.Intn(len(kinds))]
		k := fleetwave.Key(kind, fmt.Sprintf("t%d", r.Intn(6)))
		switch kind {
		case fleetwave.KindNode:
			k = fleetwave.Key(kind, fmt.Sprintf("n%06d", r.Intn(n+2)))
		case fleetwave.KindBlock:
			k = fleetwave.Key(kind, fmt.Sprintf("b%d", r.Intn(6)))
		}
		switch r.Intn(4) {
		case 0: // removed
			delete(next.Objects, k)
			delete(next.Triggers, k.Name())
		case 1: // written again as it was
			if o, ok := prev.Objects[k]; ok {
				put(next, k, o.Hash)
			}
		default:
			put(next, k, fmt.Sprintf("h%d", 1+r.Intn(3)))
		}
	}
	return prev, next
}

// TestChangedTriggersToldMatchesWhole: a snapshot that says which objects
// may have changed since prev (any superset of those that did) gets from
// ChangedTriggers what a comparison of every object gets, for random
// edits, additions and removals of BRCs, nodes and blocks; one that says
// so of another commit is compared whole.
func TestChangedTriggersToldMatchesWhole(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	seen := map[string]int{}
	for i := range 2000 {
		prev, next := changedPair(r, 20)
		want := ChangedTriggers(prev, next)
		var told []fleetwave.ObjectKey
		for _, k := range slices.Sorted(maps.Keys(prev.Objects)) {
			o, ok := next.Objects[k]
			if !ok || o != prev.Objects[k] || r.Intn(10) == 0 { // and some that did not change
				told = append(told, k)
			}
		}
		for k := range next.Objects {
			if _, ok := prev.Objects[k]; !ok {
				told = append(told, k)
			}
		}
		next.ChangedSince, next.Changed = "c1", told
		if got := ChangedTriggers(prev, next); !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: told %v changed: %#v, compared whole: %#v", i, told, got, want)
		}
		// told of another commit: not believed
		next.ChangedSince, next.Changed = "c0", nil
		if got := ChangedTriggers(prev, next); !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: told of another commit: %#v, compared whole: %#v", i, got, want)
		}
		switch {
		case want == nil:
			seen["more than BRCs"]++
		case len(want) == 0:
			seen["nothing to plan"]++
		default:
			seen["BRCs"]++
		}
	}
	if len(seen) != 3 {
		t.Fatalf("the cases drawn cover only %v", seen)
	}
}

// BenchmarkChangedTriggers100k: what a push's plan first asks (which BRCs
// a commit changed, on 100,000 nodes), told by the snapshot's load and
// found by comparing every object.
//
//	go test -run '^$' -bench ChangedTriggers100k -benchmem ./reconciler/
func BenchmarkChangedTriggers100k(b *testing.B) {
	prev, next := changedPair(rand.New(rand.NewSource(1)), 100_000)
	k := fleetwave.Key(fleetwave.KindTrigger, "t1")
	next.Objects[k] = fleetwave.Object{Key: k, Path: string(k), Hash: "h9"}
	for _, c := range []struct {
		name  string
		since string
	}{{"told", "c1"}, {"whole", ""}} {
		b.Run(c.name, func(b *testing.B) {
			next.ChangedSince, next.Changed = c.since, []fleetwave.ObjectKey{k}
			for b.Loop() {
				if got := ChangedTriggers(prev, next); !got["t1"] {
					b.Fatalf("changed = %v", got)
				}
			}
		})
	}
}
