package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// statusCommits makes n status commits of files documents each through
// writer and returns the last.
func statusCommits(t *testing.T, writer *Repo, n, files int, tag string) string {
	t.Helper()
	var last string
	for i := range n {
		edits := map[string][]byte{}
		for j := range files {
			edits[fmt.Sprintf("status/nodes/n%04d.yaml", j)] = fmt.Appendf(nil, "node: n%04d\nseen: %s-%d\n", j, tag, i)
		}
		c, err := writer.CommitStatus(context.Background(), edits, StatusMessage(fmt.Sprintf("Status: %s %d", tag, i), ""))
		if err != nil || c == "" {
			t.Fatalf("CommitStatus = %q, %v", c, err)
		}
		last = c
	}
	return last
}

// stageDirs lists the staging directories left in r's mirror.
func stageDirs(t *testing.T, r *Repo) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(r.src.Dir, stageDirPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

func TestFetchStatusLeavesTheMirrorFreeWhileItFetches(t *testing.T) {
	isolateGit(t)
	ctx := context.Background()
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	opts := []Option{WithStatusBranch(testStatusBranch), WithAuthor("fleetwave hub", "hub@example.com")}
	r, writer := open(t, url, opts...), open(t, url, opts...)
	if err := r.FetchStatus(ctx); err != nil {
		t.Fatalf("FetchStatus with no status branch on the remote: %v", err)
	}
	before := statusCommits(t, writer, 1, 10, "zero")
	fetch(t, r)
	if tip, err := r.StatusTip(ctx); err != nil || tip != before {
		t.Fatalf("status tip after Fetch = %s, %v; want %s", tip, err, before)
	}
	first := statusCommits(t, writer, 3, 300, "first")
	packRemote(t, url) // nothing loose: the transport brings it

	reached, release := make(chan struct{}), make(chan struct{})
	r.afterStagedFetch = func() {
		close(reached)
		<-release
	}
	done := make(chan error, 1)
	go func() { done <- r.FetchStatus(ctx) }()
	select {
	case <-reached:
	case err := <-done:
		t.Fatalf("FetchStatus returned (%v) without staging a fetch", err)
	case <-time.After(time.Minute):
		t.Fatal("the staged fetch never wrote its pack")
	}
	r.afterStagedFetch = nil
	if len(stageDirs(t, r)) != 1 {
		t.Fatalf("staging directories while the fetch is held: %v; want one", stageDirs(t, r))
	}

	// the fetch is held with its pack written: the mirror's lock is free,
	// its status branch not moved yet
	pushed := gittest.Push(t, url, map[string]string{"nodes/b.json": `{"b":1}`}, nil, "b")
	type fetched struct {
		head string
		err  error
	}
	got := make(chan fetched, 1)
	go func() {
		head, _, err := r.FetchBranch(ctx)
		got <- fetched{head, err}
	}()
	select {
	case f := <-got:
		if f.err != nil || f.head != pushed {
			t.Fatalf("FetchBranch during the staged fetch = %s, %v; want %s", f.head, f.err, pushed)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("FetchBranch waited for the staged fetch: the mirror's lock is held")
	}
	if tip, err := r.StatusTip(ctx); err != nil || tip != before {
		t.Fatalf("status tip before the staged fetch is put in place = %s, %v; want %s", tip, err, before)
	}

	close(release)
	if err := <-done; err != nil {
		t.Fatalf("FetchStatus: %v", err)
	}
	if tip, err := r.StatusTip(ctx); err != nil || tip != first {
		t.Fatalf("status tip after FetchStatus = %s, %v; want %s", tip, err, first)
	}
	files, err := r.StatusFiles(ctx, first)
	if err != nil || string(files["status/nodes/n0299.yaml"]) != "node: n0299\nseen: first-2\n" {
		t.Fatalf("status file read after FetchStatus = %q, %v", files["status/nodes/n0299.yaml"], err)
	}
	if head, _, err := r.FetchBranch(ctx); err != nil || head != pushed {
		t.Fatalf("tracked branch after FetchStatus = %s, %v; want %s (the fetch moved only the status branch)", head, err, pushed)
	}
	if left := stageDirs(t, r); len(left) != 0 {
		t.Fatalf("staging directories left: %v", left)
	}
	fsck(t, r)

	// a status branch moved meanwhile by a newer look at the remote stays
	// where that put it: the staged fetch's older answer does not undo it
	statusCommits(t, writer, 1, 50, "second")
	packRemote(t, url)
	reached, release = make(chan struct{}), make(chan struct{})
	r.afterStagedFetch = func() {
		close(reached)
		<-release
	}
	go func() { done <- r.FetchStatus(ctx) }()
	<-reached
	r.afterStagedFetch = nil
	third := statusCommits(t, writer, 1, 50, "third")
	fetch(t, r) // the tracked branch and the status branch, under the lock
	if tip, err := r.StatusTip(ctx); err != nil || tip != third {
		t.Fatalf("status tip after Fetch = %s, %v; want %s", tip, err, third)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("FetchStatus: %v", err)
	}
	if tip, err := r.StatusTip(ctx); err != nil || tip != third {
		t.Fatalf("status tip after the held FetchStatus = %s, %v; want %s, where the newer fetch put it", tip, err, third)
	}
	fsck(t, r)

	// a staging directory a crash left is removed when the mirror opens
	stale := filepath.Join(r.src.Dir, stageDirPrefix+"crashed")
	if err := os.MkdirAll(filepath.Join(stale, "objects", "pack"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := r.src.Dir
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, Source{URL: url, Dir: dir}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if left := stageDirs(t, again); len(left) != 0 {
		t.Fatalf("staging directories left after Open: %v", left)
	}
	if tip, err := again.StatusTip(ctx); err != nil || tip != third {
		t.Fatalf("status tip after reopening = %s, %v; want %s", tip, err, third)
	}
}
