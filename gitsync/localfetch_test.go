package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/go-git/go-git/v5/plumbing"
)

// bareDir is the directory of the bare repository at url (file://).
func bareDir(url string) string { return strings.TrimPrefix(url, "file://") }

// packRemote packs every object of the bare repository at url, so that a
// fetch from it goes through upload-pack.
func packRemote(t *testing.T, url string) {
	t.Helper()
	gittest.Git(t, bareDir(url), "repack", "--quiet", "-a", "-d")
	gittest.Git(t, bareDir(url), "prune-packed")
}

// mirroredPush mirrors a remote of one file, then pushes b.json to it
// (not fetched yet); it returns the remote, the mirror and the commit.
func mirroredPush(t *testing.T) (url string, r *Repo, pushed string) {
	t.Helper()
	isolateGit(t)
	url = gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	r = open(t, url)
	return url, r, gittest.Push(t, url, map[string]string{"b.json": `{"b":1}`}, nil, "b")
}

// fsck checks the mirror's objects and their connectivity with the git CLI.
func fsck(t *testing.T, r *Repo) {
	t.Helper()
	gittest.Git(t, r.src.Dir, "fsck", "--strict", "--no-dangling")
}

// fileAt returns path at commit as the mirror reads it.
func fileAt(t *testing.T, r *Repo, commit, path string) string {
	t.Helper()
	files, _, err := r.Files(context.Background(), commit)
	if err != nil {
		t.Fatal(err)
	}
	return string(files[path])
}

func TestLocalFetchReadsTheLooseObjectsOfAPush(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"name":"a"}`, "brc/x.json": `{"v":1}`})
	r := open(t, url)
	before := r.localFetches

	// two commits in one push, a file changed in a subdirectory and one added
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", "--branch", "main", url, work)
	for i, files := range []map[string]string{{"brc/x.json": `{"v":2}`}, {"nodes/b.json": `{"name":"b"}`, "brc/x.json": `{"v":3}`}} {
		for p, c := range files {
			if err := os.WriteFile(filepath.Join(work, p), []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		gittest.Git(t, work, "add", "-A")
		gittest.Git(t, work, "commit", "--quiet", "-m", fmt.Sprintf("change %d", i))
	}
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
	pushed := gittest.Git(t, work, "rev-parse", "HEAD")

	head := fetch(t, r)
	if head != pushed {
		t.Fatalf("fetch = %s, want %s", head, pushed)
	}
	if r.localFetches != before+1 {
		t.Fatalf("local fetches %d -> %d: the push went through the transport", before, r.localFetches)
	}
	if got := fileAt(t, r, head, "brc/x.json"); got != `{"v":3}` {
		t.Errorf("brc/x.json = %q", got)
	}
	if got := fileAt(t, r, head, "nodes/b.json"); got != `{"name":"b"}` {
		t.Errorf("nodes/b.json = %q", got)
	}
	parent := gittest.Git(t, work, "rev-parse", "HEAD^")
	if got := fileAt(t, r, parent, "brc/x.json"); got != `{"v":2}` {
		t.Errorf("brc/x.json at the push's first commit = %q: the history was not fetched", got)
	}
	fsck(t, r)

	// nothing new: refs read, nothing else
	if _, changed, err := r.Fetch(context.Background()); err != nil || changed {
		t.Fatalf("fetch with nothing new: changed %v, %v", changed, err)
	}
	if r.localFetches != before+2 {
		t.Fatalf("a fetch with nothing new went through the transport")
	}

	// a force push of a rewritten history is followed
	gittest.Git(t, work, "reset", "--quiet", "--hard", "HEAD~2")
	if err := os.WriteFile(filepath.Join(work, "brc/x.json"), []byte(`{"v":9}`), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "commit", "--quiet", "-am", "rewrite")
	gittest.Git(t, work, "push", "--quiet", "--force", "origin", "HEAD:main")
	rewritten := gittest.Git(t, work, "rev-parse", "HEAD")
	if head := fetch(t, r); head != rewritten {
		t.Fatalf("fetch after a force push = %s, want %s", head, rewritten)
	}
	if got := fileAt(t, r, rewritten, "brc/x.json"); got != `{"v":9}` || r.localFetches != before+3 {
		t.Fatalf("after the force push: brc/x.json = %q, local fetches %d", got, r.localFetches-before)
	}
	fsck(t, r)
}

func TestLocalFetchLeavesPackedObjectsToTheTransport(t *testing.T) {
	url, r, pushed := mirroredPush(t)
	packRemote(t, url)
	before := r.localFetches
	if head := fetch(t, r); head != pushed {
		t.Fatalf("fetch = %s, want %s", head, pushed)
	}
	if r.localFetches != before {
		t.Fatal("a push whose objects are packed was fetched locally")
	}
	if got := fileAt(t, r, pushed, "b.json"); got != `{"b":1}` {
		t.Fatalf("b.json = %q", got)
	}
	fsck(t, r)
}

func TestLocalFetchRefusesAnObjectThatIsNotItsName(t *testing.T) {
	url, r, pushed := mirroredPush(t)
	// the new blob's file now holds another object (a valid one, named
	// otherwise): its content no longer hashes to its name
	dir := bareDir(url)
	blob := gittest.Git(t, dir, "rev-parse", pushed+":b.json")
	other := gittest.Git(t, dir, "rev-parse", pushed+":a.json")
	loose := func(h string) string { return filepath.Join(dir, "objects", h[:2], h[2:]) }
	data, err := os.ReadFile(loose(other))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose(blob), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(loose(blob), data, 0o644); err != nil {
		t.Fatal(err)
	}
	before := r.localFetches
	_, _, err = r.Fetch(context.Background())
	r.compacting.Wait()
	t.Logf("fetch through the transport: %v", err)
	if r.localFetches != before {
		t.Fatal("the local fetch took an object whose content is not its name")
	}
}

func TestLocalFetchLeavesAMovedStatusBranchToTheTransport(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	gittest.Git(t, bareDir(url), "branch", "fleetwave/status", "main")
	r := open(t, url, WithStatusBranch("fleetwave/status"))
	fetch(t, r)
	// another writer moves the status branch, and main moves too
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", "--branch", "fleetwave/status", url, work)
	if err := os.WriteFile(filepath.Join(work, "s.json"), []byte(`{"s":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "--quiet", "-m", "status")
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:fleetwave/status")
	status := gittest.Git(t, work, "rev-parse", "HEAD")
	pushed := gittest.Push(t, url, map[string]string{"b.json": "{}"}, nil, "b")

	before := r.localFetches
	if head := fetch(t, r); head != pushed {
		t.Fatalf("fetch = %s, want %s", head, pushed)
	}
	if r.localFetches != before {
		t.Fatal("a fetch whose status branch moved was made locally")
	}
	if tip, err := r.StatusTip(context.Background()); err != nil || tip != status {
		t.Fatalf("status tip = %s, %v; want %s", tip, err, status)
	}
	// both branches as the mirror has them: the next push is local again
	again := gittest.Push(t, url, map[string]string{"c.json": "{}"}, nil, "c")
	if head := fetch(t, r); head != again || r.localFetches != before+1 {
		t.Fatalf("fetch = %s (want %s), local fetches %d", head, again, r.localFetches-before)
	}
	fsck(t, r)
}

// The hub's own status push, seen by the watcher before the hub recorded
// it, is followed locally: the mirror holds the commit (stored before the
// push), so its status ref moves without the transport, and a push to
// main fetched with it is local too.
func TestLocalFetchFollowsTheHubsOwnStatusPush(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	r := open(t, url, WithStatusBranch("fleetwave/status"))
	fetch(t, r)
	first, err := r.CommitStatus(context.Background(), map[string][]byte{"status/s.yaml": []byte("s: 1\n")}, "Status 1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.CommitStatus(context.Background(), map[string][]byte{"status/s.yaml": []byte("s: 2\n")}, "Status 2")
	if err != nil {
		t.Fatal(err)
	}
	// as if the second push had not been recorded yet
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.statusRef(), plumbing.NewHash(first))); err != nil {
		t.Fatal(err)
	}
	pushed := gittest.Push(t, url, map[string]string{"b.json": "{}"}, nil, "b")
	before := r.localFetches
	if head := fetch(t, r); head != pushed {
		t.Fatalf("fetch = %s, want %s", head, pushed)
	}
	if r.localFetches != before+1 {
		t.Fatal("the fetch after the hub's own status push went through the transport")
	}
	if tip, err := r.StatusTip(context.Background()); err != nil || tip != second {
		t.Fatalf("status tip = %s, %v; want %s", tip, err, second)
	}
	// and with main unchanged
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.statusRef(), plumbing.NewHash(first))); err != nil {
		t.Fatal(err)
	}
	if head := fetch(t, r); head != pushed || r.localFetches != before+2 {
		t.Fatalf("fetch = %s (want %s), local fetches %d", head, pushed, r.localFetches-before)
	}
	if tip, err := r.StatusTip(context.Background()); err != nil || tip != second {
		t.Fatalf("status tip = %s, %v; want %s", tip, err, second)
	}
	fsck(t, r)
}
