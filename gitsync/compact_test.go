package gitsync

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// TestMirrorPacksAreCompacted runs a hub's life in fast forward: pushes
// fetched and status commits written, each adding a pack to the mirror.
// The mirror never holds compactAt packs after an operation, every file
// and status stays readable by go-git, and git itself finds the mirror
// whole (fsck --full).
func TestMirrorPacksAreCompacted(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"n": 0}`})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	fetch(t, r)
	ctx := context.Background()
	packDir := filepath.Join(dir, "objects", "pack")
	count := func() int {
		t.Helper()
		packs, err := listPacks(packDir)
		if err != nil {
			t.Fatal(err)
		}
		return len(packs)
	}
	most, compacted := 0, false
	for i := 1; i <= 2*compactAt; i++ {
		before := count()
		if i%3 == 0 {
			gittest.Push(t, url, map[string]string{"nodes/a.json": fmt.Sprintf(`{"n": %d}`, i)}, nil, fmt.Sprintf("change %d", i))
			fetch(t, r)
		} else {
			files := map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "round: %d\n", i)}
			if _, err := r.CommitStatus(ctx, files, fmt.Sprintf("Status %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		after := count()
		most = max(most, after)
		if after < before {
			compacted = true
		}
	}
	if !compacted || most >= compactAt {
		t.Fatalf("packs: at most %d after an operation, compacted %v (compactAt %d)", most, compacted, compactAt)
	}
	head := fetch(t, r)
	files, problems, err := r.Files(ctx, head)
	if err != nil || len(problems) != 0 {
		t.Fatalf("files at %s: %v %v", head, problems, err)
	}
	if got, want := string(files["nodes/a.json"]), fmt.Sprintf(`{"n": %d}`, 2*compactAt/3*3); got != want {
		t.Fatalf("nodes/a.json = %q, want %q", got, want)
	}
	tip, err := r.StatusTip(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status, err := r.StatusFiles(ctx, tip)
	if err != nil || string(status["status/summary.yaml"]) != fmt.Sprintf("round: %d\n", 2*compactAt) {
		t.Fatalf("status after compaction: %q (%v)", status["status/summary.yaml"], err)
	}
	gittest.Git(t, dir, "fsck", "--full", "--strict")
	if n := gittest.Git(t, dir, "rev-list", "--all", "--objects"); strings.Count(n, "\n") < 2*compactAt {
		t.Fatalf("git lists only %d objects", strings.Count(n, "\n"))
	}
}

// TestCompactionRewritesEachObjectFewTimes plays 10,000 operations that
// each add a pack of one unit, compacting as compact does (the largest pack
// stays, geometricCut chooses among the others): the mirror never holds
// compactAt packs after an operation, and the units rewritten in all stay
// within a small multiple of those written (each one a logarithmic number
// of times). Merging every pack but the largest, as compaction did before,
// rewrote the growing second-largest pack at every compaction.
func TestCompactionRewritesEachObjectFewTimes(t *testing.T) {
	play := func(cut func([]packFile) int) (rewritten int64, most int) {
		var packs []packFile
		for range 10_000 {
			packs = append(packs, packFile{size: 1})
			if len(packs) < compactAt {
				most = max(most, len(packs))
				continue
			}
			sort.Slice(packs, func(i, j int) bool { return packs[i].size < packs[j].size })
			k := cut(packs[:len(packs)-1])
			if k >= 2 {
				merged := packFile{}
				for _, p := range packs[:k] {
					merged.size += p.size
				}
				rewritten += merged.size
				packs = append([]packFile{merged}, packs[k:]...)
			}
			most = max(most, len(packs))
		}
		return rewritten, most
	}
	rewritten, most := play(geometricCut)
	if most >= compactAt {
		t.Fatalf("%d packs after an operation (compactAt %d)", most, compactAt)
	}
	if rewritten > 20*10_000 {
		t.Fatalf("%d units rewritten for 10,000 written: more than 20 times each", rewritten)
	}
	all, _ := play(func(p []packFile) int { return len(p) })
	if all < 10*rewritten {
		t.Fatalf("merging all but the largest rewrote %d units, the geometric cut %d: want the cut to save 10x or more", all, rewritten)
	}
	t.Logf("units rewritten for 10,000 written: geometric %d, all but the largest %d", rewritten, all)
}
