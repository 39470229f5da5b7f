package gitsync

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

func TestHighWaterRestoresGenerationsAfterTheMirrorIsLost(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"v":1}`, "nodes/b.json": `{"v":1}`, "nodes/d.json": `{"v":1}`})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	c0 := fetch(t, r)
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":2}`, "nodes/b.json": `{"v":2}`}, nil, "a2 b2")
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":3}`, "nodes/b.json": `{"v":3}`}, nil, "a3 b3")
	generations(t, r, fetch(t, r))
	hw := r.HighWater()
	if want := (map[fleetwave.ObjectKey]int64{"nodes/a": 3, "nodes/b": 3, "nodes/d": 1}); !equalGens(hw, want) {
		t.Fatalf("HighWater = %v, want %v", hw, want)
	}

	t.Run("the marks survive a restart with the mirror kept", func(t *testing.T) {
		_ = r.Close()
		re := openAt(t, url, dir)
		if got := re.HighWater(); !equalGens(got, hw) {
			t.Fatalf("HighWater after reopen = %v, want %v", got, hw)
		}
	})

	// the mirror is lost, then the branch is rewritten
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	rewritten := forcePush(t, url, c0, map[string]string{"nodes/a.json": `{"v":3}`, "nodes/b.json": `{"v":9}`}, "Rewrite")

	t.Run("without seeding generations fall back to the pure history", func(t *testing.T) {
		fresh := open(t, url)
		if got := generations(t, fresh, rewritten); got["nodes/a"] != 2 {
			t.Fatalf("unseeded: %v (documented limitation: a is 2 again)", got)
		}
	})
	t.Run("seeded from the status file they never decrease", func(t *testing.T) {
		fresh := open(t, url)
		if err := fresh.SeedHighWater(hw); err != nil {
			t.Fatal(err)
		}
		got := generations(t, fresh, rewritten)
		// a and b are below their marks: continue above them; d is unchanged
		if want := (map[fleetwave.ObjectKey]int64{"nodes/a": 4, "nodes/b": 4, "nodes/d": 1}); !equalGens(got, want) {
			t.Fatalf("seeded: %v, want %v", got, want)
		}
	})
	t.Run("seeding a same-history mirror changes nothing", func(t *testing.T) {
		fresh := open(t, url)
		want := generations(t, fresh, rewritten)
		fresh2 := open(t, url)
		if err := fresh2.SeedHighWater(fresh.HighWater()); err != nil {
			t.Fatal(err)
		}
		if got := generations(t, fresh2, rewritten); !equalGens(got, want) {
			t.Fatalf("seeded with its own marks: %v, want %v", got, want)
		}
	})
}

// TestHighWaterChangesSaysWhenTheMarksChanged: HighWaterChanges returns the
// marks only when one changed since the version given, for a generation
// computed, a seed, and a reopened mirror alike.
func TestHighWaterChangesSaysWhenTheMarksChanged(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"v":1}`})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	generations(t, r, fetch(t, r))
	marks, v, _ := r.HighWaterChanges(0)
	if v == 0 || !equalGens(marks, map[fleetwave.ObjectKey]int64{"nodes/a": 1}) {
		t.Fatalf("HighWaterChanges(0) = %v, %d", marks, v)
	}
	if m, again, _ := r.HighWaterChanges(v); m != nil || again != v {
		t.Fatalf("unchanged: HighWaterChanges = %v, %d; want nil, %d", m, again, v)
	}
	// a status-only or same-content commit changes no mark
	generations(t, r, fetch(t, r))
	if m, _, _ := r.HighWaterChanges(v); m != nil {
		t.Fatalf("nothing new: HighWaterChanges = %v", m)
	}
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":2}`, "nodes/b.json": `{"v":1}`}, nil, "a2, b")
	generations(t, r, fetch(t, r))
	m, v2, _ := r.HighWaterChanges(v)
	if v2 == v || !equalGens(m, map[fleetwave.ObjectKey]int64{"nodes/a": 2, "nodes/b": 1}) {
		t.Fatalf("after a change: HighWaterChanges = %v, %d (was %d)", m, v2, v)
	}
	if err := r.SeedHighWater(map[fleetwave.ObjectKey]int64{"nodes/c": 5}); err != nil {
		t.Fatal(err)
	}
	m, v3, _ := r.HighWaterChanges(v2)
	if v3 == v2 || m["nodes/c"] != 5 {
		t.Fatalf("after a seed: HighWaterChanges = %v, %d (was %d)", m, v3, v2)
	}
	if m, _, _ := r.HighWaterChanges(v3); m != nil {
		t.Fatalf("seeding marks already held changed the version: %v", m)
	}
	_ = r.Close()
	// another Repo never answers "unchanged" to a version of this one
	re := openAt(t, url, dir)
	if m, v4, _ := re.HighWaterChanges(v3); m == nil || v4 == v3 || !equalGens(m, r.HighWater()) {
		t.Fatalf("reopened: HighWaterChanges(%d) = %v, %d", v3, m, v4)
	}
}

// TestHighWaterChangesAreTheMarksSetSince: a caller that applies
// HighWaterChanges to its copy holds HighWater after each commit, and is
// handed only the marks a commit set, not all of them; a version from
// before the log, or from another Repo, gets them whole.
func TestHighWaterChangesAreTheMarksSetSince(t *testing.T) {
	isolateGit(t)
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("nodes/n%02d.json", i)] = `{"v":0}`
	}
	url := gittest.NewRemote(t, files)
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	generations(t, r, fetch(t, r))
	mine, v, whole := r.HighWaterChanges(0)
	if !whole || len(mine) != 20 {
		t.Fatalf("HighWaterChanges(0) = %d marks, whole %v; want all 20", len(mine), whole)
	}
	for round := 1; round <= 6; round++ {
		edit := map[string]string{}
		for k := range round % 3 { // 0, 1 or 2 objects changed
			edit[fmt.Sprintf("nodes/n%02d.json", (round*7+k)%20)] = fmt.Sprintf(`{"v":%d}`, round)
		}
		if len(edit) == 0 {
			edit["README.md"] = fmt.Sprintf("round %d\n", round) // no object: no mark
		}
		gittest.Push(t, url, edit, nil, fmt.Sprintf("round %d", round))
		generations(t, r, fetch(t, r))
		changed, v2, whole := r.HighWaterChanges(v)
		if whole || len(changed) != round%3 || (len(changed) == 0) != (v2 == v) {
			t.Fatalf("round %d: HighWaterChanges(%d) = %v, %d, whole %v; want the %d marks set", round, v, changed, v2, whole, round%3)
		}
		maps.Copy(mine, changed)
		if !equalGens(mine, r.HighWater()) {
			t.Fatalf("round %d: the copy kept from changes %v, HighWater %v", round, mine, r.HighWater())
		}
		v = v2
	}
	_ = r.Close()
	re := openAt(t, url, dir)
	if m, v3, whole := re.HighWaterChanges(v); !whole || v3 == v || !equalGens(m, mine) {
		t.Fatalf("reopened: HighWaterChanges(%d) = %v, %d, whole %v", v, m, v3, whole)
	}
}

// TestHighWaterChangesLogIsBounded: once more marks were set than a
// whole copy holds (and than maxMarkChanges), the log starts again, and a
// version from before it gets the marks whole.
func TestHighWaterChangesLogIsBounded(t *testing.T) {
	r := &Repo{gens: newGenCache("")}
	r.gens.setMark("nodes/a", mark{Gen: 1})
	_, v, _ := r.HighWaterChanges(0)
	for i := range maxMarkChanges + 1 {
		r.gens.setMark("nodes/a", mark{Gen: int64(i + 2)})
		if i == 0 {
			if m, _, whole := r.HighWaterChanges(v); whole || m["nodes/a"] != 2 {
				t.Fatalf("one change later: %v, whole %v", m, whole)
			}
		}
	}
	if len(r.gens.changes) > maxMarkChanges {
		t.Fatalf("the log holds %d changes, more than %d", len(r.gens.changes), maxMarkChanges)
	}
	m, _, whole := r.HighWaterChanges(v)
	if !whole || m["nodes/a"] != maxMarkChanges+2 {
		t.Fatalf("a version from before the log: %v, whole %v", m, whole)
	}
}
