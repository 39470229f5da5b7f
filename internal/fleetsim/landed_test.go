package fleetsim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLandedIsWhenTheRefMoved: a push is counted from when receive-pack
// wrote the branch's ref, before the client returned; a ref that is not a
// file of its own counts from the return.
func TestLandedIsWhenTheRefMoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	remote, work := filepath.Join(dir, "remote.git"), filepath.Join(dir, "work")
	for _, args := range [][]string{{"init", "-q", "--bare", "-b", "main", remote}, {"init", "-q", "-b", "main", work}} {
		if _, err := git(ctx, dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", "a"}} {
		if _, err := git(ctx, work, args...); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now().Add(-10 * time.Millisecond) // the file's clock is coarse
	if _, err := git(ctx, work, "push", "-q", remote, "main"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the client's return, well after the ref moved
	returned := time.Now()
	got := landed(remote, "main", start)
	if got.Before(start) || !got.Before(returned.Add(-40*time.Millisecond)) {
		t.Fatalf("landed %v: want the ref's write, between the push's start %v and 40 ms before %v", got, start, returned)
	}
	if _, err := git(ctx, remote, "pack-refs", "--all"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if got := landed(remote, "main", start); got.Before(before) {
		t.Fatalf("landed %v with the ref packed: want now (after %v)", got, before)
	}
}
