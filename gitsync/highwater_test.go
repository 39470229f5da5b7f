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
