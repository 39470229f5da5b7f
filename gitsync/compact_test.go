package gitsync

import (
	"context"
	"fmt"
	"path/filepath"
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
