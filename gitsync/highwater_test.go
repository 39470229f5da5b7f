package gitsync

import (
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

// TestHighWaterSinceSaysWhenTheMarksChanged: HighWaterSince returns the
// marks only when one changed since the version given, for a generation
// computed, a seed, and a reopened mirror alike.
func TestHighWaterSinceSaysWhenTheMarksChanged(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"v":1}`})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	generations(t, r, fetch(t, r))
	marks, v := r.HighWaterSince(0)
	if v == 0 || !equalGens(marks, map[fleetwave.ObjectKey]int64{"nodes/a": 1}) {
		t.Fatalf("HighWaterSince(0) = %v, %d", marks, v)
	}
	if m, again := r.HighWaterSince(v); m != nil || again != v {
		t.Fatalf("unchanged: HighWaterSince = %v, %d; want nil, %d", m, again, v)
	}
	// a status-only or same-content commit changes no mark
	generations(t, r, fetch(t, r))
	if m, _ := r.HighWaterSince(v); m != nil {
		t.Fatalf("nothing new: HighWaterSince = %v", m)
	}
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":2}`, "nodes/b.json": `{"v":1}`}, nil, "a2, b")
	generations(t, r, fetch(t, r))
	m, v2 := r.HighWaterSince(v)
	if v2 == v || !equalGens(m, map[fleetwave.ObjectKey]int64{"nodes/a": 2, "nodes/b": 1}) {
		t.Fatalf("after a change: HighWaterSince = %v, %d (was %d)", m, v2, v)
	}
	if err := r.SeedHighWater(map[fleetwave.ObjectKey]int64{"nodes/c": 5}); err != nil {
		t.Fatal(err)
	}
	m, v3 := r.HighWaterSince(v2)
	if v3 == v2 || m["nodes/c"] != 5 {
		t.Fatalf("after a seed: HighWaterSince = %v, %d (was %d)", m, v3, v2)
	}
	if m, _ := r.HighWaterSince(v3); m != nil {
		t.Fatalf("seeding marks already held changed the version: %v", m)
	}
	_ = r.Close()
	// another Repo never answers "unchanged" to a version of this one
	re := openAt(t, url, dir)
	if m, v4 := re.HighWaterSince(v3); m == nil || v4 == v3 || !equalGens(m, r.HighWater()) {
		t.Fatalf("reopened: HighWaterSince(%d) = %v, %d", v3, m, v4)
	}
}
