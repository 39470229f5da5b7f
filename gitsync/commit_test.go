package gitsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

func TestCommitStatusWritesOnlyStatus(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}", "status/old.yaml": "old\n"})
	fake := clock.NewFake(testStart)
	r := open(t, url, WithClock(fake), WithAuthor("fleetwave hub", "hub@example.com"))
	base := fetch(t, r)

	commit, err := r.CommitStatus(context.Background(), map[string][]byte{
		"status/summary.yaml":       []byte("total: 1\n"),
		"status/nodes/a.yaml":       []byte("node: a\n"),
		"status/old.yaml":           nil,
		"status/never-existed.yaml": nil,
	}, "Update status\n\nFleetwave-Fence: 7\n")
	if err != nil {
		t.Fatal(err)
	}
	if commit == "" || gittest.Head(t, url) != commit {
		t.Fatalf("CommitStatus = %q, remote head %s", commit, gittest.Head(t, url))
	}
	paths, err := r.ChangedPaths(context.Background(), base, commit)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"status/nodes/a.yaml", "status/old.yaml", "status/summary.yaml"}; !slices.Equal(paths, want) {
		t.Fatalf("changed %v, want %v", paths, want)
	}
	if got, ok := gittest.ReadFile(t, url, "status/nodes/a.yaml"); !ok || got != "node: a\n" {
		t.Fatalf("status/nodes/a.yaml = %q, %v", got, ok)
	}
	if _, ok := gittest.ReadFile(t, url, "status/old.yaml"); ok {
		t.Fatal("a nil value did not delete status/old.yaml")
	}
	if got, ok := gittest.ReadFile(t, url, "nodes/a.json"); !ok || got != "{}" {
		t.Fatalf("an object file changed: %q, %v", got, ok)
	}
	info, err := r.CommitInfo(context.Background(), commit)
	if err != nil {
		t.Fatal(err)
	}
	if info.Author != "fleetwave hub" || info.Email != "hub@example.com" || !info.When.Equal(testStart) || info.Subject != "Update status" {
		t.Fatalf("status commit info = %+v", info)
	}
	// the git CLI accepts what go-git built
	bare := strings.TrimPrefix(url, "file://")
	gittest.Git(t, bare, "fsck", "--strict", "--no-progress")

	t.Run("unchanged files make no commit", func(t *testing.T) {
		again, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("total: 1\n")}, "Update status")
		if err != nil || again != "" {
			t.Fatalf("CommitStatus with nothing new = %q, %v", again, err)
		}
		if gittest.Head(t, url) != commit {
			t.Fatal("the remote moved although nothing changed")
		}
	})
}

func TestCommitStatusRefusesPathsOutsideStatus(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	r := open(t, url)
	head := gittest.Head(t, url)
	for _, p := range []string{
		"nodes/a.json",
		"status",
		"/status/abs.yaml",
		"status/../nodes/a.json",
		"status/./x.yaml",
		"status//x.yaml",
		"status/.git/config",
		`status\x.yaml`,
		"",
	} {
		t.Run(fmt.Sprintf("path %q is refused", p), func(t *testing.T) {
			_, err := r.CommitStatus(context.Background(), map[string][]byte{p: []byte("x")}, "Status")
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("CommitStatus(%q) error = %v, want ErrUnsafePath", p, err)
			}
		})
	}
	if gittest.Head(t, url) != head {
		t.Fatal("a refused call still pushed")
	}
}

func TestCommitStatusSurvivesAConcurrentHumanPush(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)

	// a person pushes between the hub's fetch and its push
	r.beforePush = func(attempt int) {
		if attempt == 1 {
			gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
		}
	}
	commit, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gittest.Log(t, url), []string{"Status", "Human change", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
	if gittest.Head(t, url) != commit {
		t.Fatalf("head %s, status commit %s", gittest.Head(t, url), commit)
	}
	if _, ok := gittest.ReadFile(t, url, "nodes/b.json"); !ok {
		t.Fatal("the human commit's file was lost")
	}
	human := gittest.Git(t, strings.TrimPrefix(url, "file://"), "rev-parse", "main~1")
	only, err := r.StatusOnly(context.Background(), human, commit)
	if err != nil || !only {
		t.Fatalf("StatusOnly(human, status) = %v, %v", only, err)
	}
}

func TestCommitStatusGivesUpAfterTheRetryLimit(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithPushRetries(2))
	fetch(t, r)
	pushes := 0
	r.beforePush = func(attempt int) {
		pushes++
		gittest.Push(t, url, map[string]string{fmt.Sprintf("nodes/h%d.json", attempt): "{}"}, nil, fmt.Sprintf("Human %d", attempt))
	}
	_, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if !errors.Is(err, ErrPushRaces) {
		t.Fatalf("error = %v, want ErrPushRaces", err)
	}
	if pushes != 2 {
		t.Fatalf("%d attempts, want 2", pushes)
	}
	if got, want := gittest.Log(t, url), []string{"Human 2", "Human 1", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q (nothing lost, nothing forced)", got, want)
	}
}

func TestSeedBareAndInitWorktreeMakeReposGitReads(t *testing.T) {
	isolateGit(t)
	src := t.TempDir()
	if err := writeAll(src, map[string]string{
		"fleetwave.json":       `{"kind":"config"}`,
		"nodes/a.json":         `{"name":"a"}`,
		"blocks/web/main.json": `{}`,
		".git/config":          "not copied",
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(src, "nodes", "link.json")); err != nil {
		t.Fatal(err)
	}
	author := CommitInfo{Author: "Seeder", Email: "seed@example.com", When: testStart}

	t.Run("SeedBare commits every regular file and skips .git and symlinks", func(t *testing.T) {
		bare := filepath.Join(t.TempDir(), "seed.git")
		commit, err := SeedBare(context.Background(), src, bare, "main", "Seed fleet", author)
		if err != nil {
			t.Fatal(err)
		}
		if got := gittest.Git(t, bare, "log", "--format=%H %an <%ae> %s", "main"); got != commit+" Seeder <seed@example.com> Seed fleet" {
			t.Fatalf("git log = %q", got)
		}
		if got := gittest.Git(t, bare, "symbolic-ref", "HEAD"); got != "refs/heads/main" {
			t.Fatalf("HEAD -> %s", got)
		}
		files := gittest.Git(t, bare, "ls-tree", "-r", "--name-only", "main")
		if want := "blocks/web/main.json\nfleetwave.json\nnodes/a.json"; files != want {
			t.Fatalf("ls-tree = %q, want %q", files, want)
		}
		gittest.Git(t, bare, "fsck", "--strict", "--no-progress")
		url := gittest.URL(bare)
		if got, _ := gittest.ReadFile(t, url, "nodes/a.json"); got != `{"name":"a"}` {
			t.Fatalf("nodes/a.json = %q", got)
		}
		if r := open(t, url); fetch(t, r) != commit {
			t.Fatal("gitsync does not follow the seeded repository")
		}
	})

	t.Run("InitWorktree leaves a clean worktree", func(t *testing.T) {
		dir := t.TempDir()
		if err := writeAll(dir, map[string]string{"fleetwave.json": "{}", "nodes/a.json": "{}", ".gitignore": "*.tmp\n", "scratch.tmp": "x"}); err != nil {
			t.Fatal(err)
		}
		commit, err := InitWorktree(dir, "Scaffold", CommitInfo{Author: "Init", Email: "init@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		if got := gittest.Git(t, dir, "status", "--porcelain"); got != "" {
			t.Fatalf("git status --porcelain = %q", got)
		}
		if got := gittest.Git(t, dir, "log", "--format=%H %s", "main"); got != commit+" Scaffold" {
			t.Fatalf("git log = %q", got)
		}
		if got := gittest.Git(t, dir, "ls-files"); got != ".gitignore\nfleetwave.json\nnodes/a.json" {
			t.Fatalf("ls-files = %q", got)
		}
		if _, err := InitWorktree(dir, "Again", CommitInfo{Author: "Init", Email: "init@example.com"}); err == nil {
			t.Fatal("InitWorktree re-initialized an existing repository")
		}
	})
}

// TestAStaleRefLockInTheRemoteIsNamed: a push into the remote that was cut
// (a killed process) left main's lock file: every push fails "cannot lock
// ref". That is no race that ends, and the error says which file to remove.
func TestAStaleRefLockInTheRemoteIsNamed(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithPushRetries(2))
	fetch(t, r)
	lock := filepath.Join(strings.TrimPrefix(url, "file://"), "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if !errors.Is(err, ErrPushRaces) || !strings.Contains(err.Error(), "remove refs/heads/main.lock") {
		t.Fatalf("error = %v, want one naming refs/heads/main.lock", err)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status"); err != nil {
		t.Fatalf("after the lock is gone: %v", err)
	}
}

// TestAMirrorWithADamagedRefIsClonedAgain: a hub killed while go-git
// wrote a ref of its mirror leaves the file empty (or cut). The next start
// clones the mirror again instead of failing every start with "ref file is
// empty".
func TestAMirrorWithADamagedRefIsClonedAgain(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	want := fetch(t, r)
	_ = r.Close()
	for _, damage := range []string{"", "3c8e05a"} {
		ref := filepath.Join(dir, "refs", "remotes", "origin", "main")
		if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ref, []byte(damage), 0o644); err != nil {
			t.Fatal(err)
		}
		r := openAt(t, url, dir)
		if got := fetch(t, r); got != want {
			t.Fatalf("after a damaged ref %q: head %s, want %s", damage, got, want)
		}
		_ = r.Close()
	}
}

// fetchesMeanwhile fetches r while what holds on, and checks that the
// fetch returns want without waiting for it (30 s at most).
func fetchesMeanwhile(t *testing.T, r *Repo, want, what string) {
	t.Helper()
	fetched := make(chan string, 1)
	go func() {
		head, _, err := r.Fetch(context.Background())
		if err != nil {
			t.Errorf("Fetch during %s: %v", what, err)
		}
		fetched <- head
	}()
	select {
	case head := <-fetched:
		if head != want {
			t.Errorf("Fetch during %s = %s, want %s", what, head, want)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("Fetch waited for %s", what)
	}
}

// TestFetchRunsWhileAStatusCommitIsBuilt: a status commit builds its
// trees (reading the mirror's objects one lock at a time) and compresses
// its objects without holding the mirror's lock, so a sync's fetch in the
// meantime does not wait for it; the commit is then stored, pushed and
// built on as ever.
func TestFetchRunsWhileAStatusCommitIsBuilt(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)
	human := gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
	var once sync.Once
	r.beforeEdit = func() {
		once.Do(func() { fetchesMeanwhile(t, r, human, "the status commit's trees and compression") })
	}
	if _, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status 1"); err != nil {
		t.Fatal(err)
	}
	second, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("y\n")}, "Status 2")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gittest.Log(t, url), []string{"Status 2", "Status 1", "Human change", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
	// the mirror holds both commits' objects
	if data, ok, err := r.FileAt(context.Background(), second, "status/summary.yaml"); err != nil || !ok || string(data) != "y\n" {
		t.Fatalf("the status read back from the mirror: %q %v %v", data, ok, err)
	}
}

// A status commit large enough to be written as a pack of its own
// (directPackMin files) writes and syncs that pack's files without the
// mirror's lock, so a sync's fetch meanwhile does not wait for the disk;
// the pack is then put in place and read back.
func TestFetchRunsWhileAStatusPackIsWritten(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	fetch(t, r)
	human := gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
	files := map[string][]byte{}
	for i := range directPackMin {
		files[fmt.Sprintf("status/nodes/n%05d.yaml", i)] = fmt.Appendf(nil, "n: %d\n", i)
	}
	staged := false
	r.afterStage = func() {
		tmp, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "tmp_pack_*"))
		staged = len(tmp) == 1
		fetchesMeanwhile(t, r, human, "the status pack's files")
	}
	commit, err := r.CommitStatus(context.Background(), files, "Status")
	if err != nil {
		t.Fatal(err)
	}
	if !staged {
		t.Fatal("the status pack's files were not written before the mirror's lock was taken")
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "tmp_*")); len(tmp) != 0 {
		t.Fatalf("temporary pack files left: %v", tmp)
	}
	if data, ok, err := r.FileAt(context.Background(), commit, "status/nodes/n02047.yaml"); err != nil || !ok || string(data) != "n: 2047\n" {
		t.Fatalf("the status read back from the mirror: %q %v %v", data, ok, err)
	}
	if got, want := gittest.Log(t, url), []string{"Status", "Human change", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
}

// A sync of the tracked branch does not wait while the remote takes a
// status commit: at 100,000 nodes the remote indexes tens of thousands of
// objects for one, seconds in which a push of the config went unseen.
func TestFetchRunsWhileAStatusCommitIsPushed(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)
	human := gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")

	advertised, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.afterAdvertise = func() {
		once.Do(func() {
			close(advertised)
			select {
			case <-release:
			case <-time.After(time.Minute): // the test failed already; let the push end
			}
		})
	}
	type result struct {
		commit string
		err    error
	}
	pushed := make(chan result, 1)
	go func() {
		c, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
		pushed <- result{c, err}
	}()
	<-advertised
	fetchesMeanwhile(t, r, human, "the status commit's push")
	close(release)
	res := <-pushed
	if res.err != nil {
		t.Fatal(res.err)
	}
	if got, want := gittest.Log(t, url), []string{"Status", "Human change", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
	if head := fetch(t, r); head != res.commit {
		t.Fatalf("after the push the mirror follows %s, want the status commit %s", head, res.commit)
	}
}

// A status commit's push is recorded in the mirror only over the tip it
// was built on: a Fetch while it ran may have moved the ref to it or past
// it already, and the ref never goes back.
func TestStatusPushedNeverMovesTheTrackingRefBack(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	base := plumbing.NewHash(fetch(t, r))
	human := plumbing.NewHash(gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change"))
	branch := plumbing.NewBranchReferenceName("main")
	tracked := func() plumbing.Hash {
		t.Helper()
		ref, err := r.repo.Reference(r.trackingRef(), true)
		if err != nil {
			t.Fatal(err)
		}
		return ref.Hash()
	}

	// the ref still at the base: set to the pushed commit
	if _, err := r.statusPushed(branch, &statusBuild{lease: base, localRef: r.trackingRef(), commit: human}, 1); err != nil {
		t.Fatal(err)
	}
	if got := tracked(); got != human {
		t.Fatalf("ref at the base: now %s, want the pushed commit %s", got, human)
	}
	// the ref past the base already: left where it is
	other := plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")
	if _, err := r.statusPushed(branch, &statusBuild{lease: base, localRef: r.trackingRef(), commit: other}, 1); err != nil {
		t.Fatal(err)
	}
	if got := tracked(); got != human {
		t.Fatalf("ref moved past the base: now %s, want it left at %s", got, human)
	}
}

// TestEditTreeStoresNoBlobItHolds: edits that give files the bytes they
// already have keep their entries and store nothing; only the changed
// file's blob and the trees along its path are new. A new leader's first
// status write renders every node's document, nearly all unchanged.
func TestEditTreeStoresNoBlobItHolds(t *testing.T) {
	base := memory.NewStorage()
	docs := map[string][]byte{}
	for i := range 1000 {
		docs[fmt.Sprintf("status/nodes/n%04d.yaml", i)] = fmt.Appendf(nil, "node: n%04d\n", i)
	}
	docs["status/summary.yaml"] = []byte("format: 1\n")
	root, err := editTree(base, plumbing.ZeroHash, docs)
	if err != nil {
		t.Fatal(err)
	}
	edits := maps.Clone(docs)
	edits["status/nodes/n0007.yaml"] = []byte("node: n0007\nchanged: true\n")
	o := newOverlay(base)
	got, err := editTree(o, root, edits)
	if err != nil {
		t.Fatal(err)
	}
	types := map[plumbing.ObjectType]int{}
	for _, h := range o.order {
		types[o.objs[h].Type()]++
	}
	if types[plumbing.BlobObject] != 1 || types[plumbing.TreeObject] != 3 || len(o.order) != 4 {
		t.Errorf("stored %v, want the changed blob and the three trees along its path", types)
	}
	want, err := editTree(memory.NewStorage(), plumbing.ZeroHash, edits)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("edited tree %s, the same files written afresh %s", got, want)
	}
	if same, err := editTree(newOverlay(base), root, docs); err != nil || same != root {
		t.Errorf("the same bytes everywhere: tree %s (%v), want %s", same, err, root)
	}
}
