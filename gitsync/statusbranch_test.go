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
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/go-git/go-git/v5/plumbing"
)

const testStatusBranch = "fleetwave-status"

// bareOf returns the directory of the bare remote at url.
func bareOf(url string) string { return strings.TrimPrefix(url, "file://") }

// branchTip returns the hash of branch at url, "" when absent.
func branchTip(t *testing.T, url, branch string) string {
	t.Helper()
	out := gittest.Git(t, "", "ls-remote", url, "refs/heads/"+branch)
	hash, _, _ := strings.Cut(out, "\t")
	return hash
}

// branchLog returns the subjects of branch's first-parent history at url,
// newest first.
func branchLog(t *testing.T, url, branch string) []string {
	t.Helper()
	out := gittest.Git(t, bareOf(url), "log", "--first-parent", "--format=%s", "refs/heads/"+branch)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// branchFiles returns every path in the tree of branch at url, sorted.
func branchFiles(t *testing.T, url, branch string) []string {
	t.Helper()
	out := gittest.Git(t, bareOf(url), "ls-tree", "-r", "--name-only", "refs/heads/"+branch)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

func readOn(t *testing.T, url, branch, p string) string {
	t.Helper()
	return gittest.Git(t, bareOf(url), "cat-file", "blob", "refs/heads/"+branch+":"+p)
}

// pushBranch commits files (path -> content; "" deletes) as a person on
// branch at url, creating the branch when absent, and returns the commit.
func pushBranch(t *testing.T, url, branch string, files map[string]string, msg string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", url, work)
	if branchTip(t, url, branch) != "" {
		gittest.Git(t, work, "checkout", "--quiet", branch)
	} else {
		gittest.Git(t, work, "checkout", "--quiet", "-b", branch)
	}
	var deletes []string
	for p, c := range files {
		if c == "" {
			deletes = append(deletes, p)
			delete(files, p)
		}
	}
	if err := writeAll(work, files); err != nil {
		t.Fatal(err)
	}
	for _, p := range deletes {
		gittest.Git(t, work, "rm", "--quiet", p)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "--quiet", "--allow-empty", "-m", msg)
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
	return gittest.Git(t, work, "rev-parse", "HEAD")
}

func TestStatusBranchKeepsTheTrackedBranchFree(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}", "status/old.yaml": "old\n"})
	main := gittest.Head(t, url)
	r := open(t, url, WithStatusBranch(testStatusBranch), WithClock(clock.NewFake(testStart)), WithAuthor("fleetwave hub", "hub@example.com"))
	ctx := context.Background()
	if got := r.StatusBranch(); got != testStatusBranch {
		t.Fatalf("StatusBranch = %q", got)
	}
	if tip, err := r.StatusTip(ctx); err != nil || tip != main {
		t.Fatalf("StatusTip before any status commit = %q, %v; want the tracked tip %s", tip, err, main)
	}

	first, err := r.CommitStatus(ctx, map[string][]byte{
		"status/summary.yaml": []byte("total: 1\n"), "status/nodes/a.yaml": []byte("node: a\n"),
	}, StatusMessage("Status: first", "", Trailer{TrailerFence, "3"}))
	if err != nil || first == "" {
		t.Fatalf("CommitStatus = %q, %v", first, err)
	}
	if gittest.Head(t, url) != main || !slices.Equal(gittest.Log(t, url), []string{"Initial commit"}) {
		t.Fatalf("the tracked branch was written: %v", gittest.Log(t, url))
	}
	if got := branchTip(t, url, testStatusBranch); got != first {
		t.Fatalf("status branch at %q, want %s", got, first)
	}
	// an orphan holding only status/, seeded from the tracked tip's status/
	if parents := gittest.Git(t, bareOf(url), "rev-list", "--parents", "-n1", first); parents != first {
		t.Fatalf("the first status commit has parents: %q", parents)
	}
	if got, want := branchFiles(t, url, testStatusBranch), []string{"status/nodes/a.yaml", "status/old.yaml", "status/summary.yaml"}; !slices.Equal(got, want) {
		t.Fatalf("status branch holds %v, want %v", got, want)
	}

	second, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("total: 2\n"), "status/old.yaml": nil},
		StatusMessage("Status: second", "", Trailer{TrailerFence, "4"}))
	if err != nil || second == "" {
		t.Fatalf("CommitStatus = %q, %v", second, err)
	}
	if got, want := branchLog(t, url, testStatusBranch), []string{"Status: second", "Status: first"}; !slices.Equal(got, want) {
		t.Fatalf("status branch log %v, want %v", got, want)
	}
	if again, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("total: 2\n")}, "Status"); err != nil || again != "" {
		t.Fatalf("CommitStatus with nothing new = %q, %v", again, err)
	}
	if gittest.Head(t, url) != main {
		t.Fatal("the tracked branch moved")
	}
	gittest.Git(t, bareOf(url), "fsck", "--strict", "--no-progress")

	head, changed, err := r.Fetch(ctx)
	if err != nil || head != main || changed {
		t.Fatalf("Fetch after status commits = %s, %v, %v; want %s unchanged", head, changed, err, main)
	}
	tip, err := r.StatusTip(ctx)
	if err != nil || tip != second {
		t.Fatalf("StatusTip = %q, %v; want %s", tip, err, second)
	}
	files, err := r.StatusFiles(ctx, tip)
	if err != nil || string(files["status/summary.yaml"]) != "total: 2\n" || len(files) != 2 {
		t.Fatalf("StatusFiles(status tip) = %v, %v", keys(files), err)
	}
	files, err = r.StatusFiles(ctx, main)
	if err != nil || !slices.Equal(keys(files), []string{"status/old.yaml"}) {
		t.Fatalf("StatusFiles(tracked tip) = %v, %v", keys(files), err)
	}
	if v, err := r.LatestTrailer(ctx, TrailerFence, 10); err != nil || v != "4" {
		t.Fatalf("LatestTrailer = %q, %v; want 4", v, err)
	}
	if only, err := r.StatusOnly(ctx, main, main); err != nil || !only {
		t.Fatalf("StatusOnly(main, main) = %v, %v", only, err)
	}

	t.Run("a person's push to the tracked branch is reported, not the status branch", func(t *testing.T) {
		human := gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
		head, changed, err := r.Fetch(ctx)
		if err != nil || head != human || !changed {
			t.Fatalf("Fetch = %s, %v, %v; want %s changed", head, changed, err, human)
		}
		if _, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("total: 3\n")}, "Status"); err != nil {
			t.Fatal(err)
		}
		if head, changed, err := r.Fetch(ctx); err != nil || head != human || changed {
			t.Fatalf("Fetch after a status commit = %s, %v, %v", head, changed, err)
		}
	})
}

func TestStatusBranchNeverLosesAConcurrentPush(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithStatusBranch(testStatusBranch))
	ctx := context.Background()

	t.Run("a push to the tracked branch does not race the status branch", func(t *testing.T) {
		var human string
		r.beforePush = func(attempt int) {
			if attempt == 1 {
				human = gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
			}
		}
		defer func() { r.beforePush = nil }()
		res, err := r.WriteStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
		if err != nil || res.Commit == "" || res.Attempts != 1 {
			t.Fatalf("WriteStatus = %+v, %v", res, err)
		}
		if gittest.Head(t, url) != human || !slices.Equal(gittest.Log(t, url), []string{"Human change", "Initial commit"}) {
			t.Fatalf("tracked log %v, head %s, human %s", gittest.Log(t, url), gittest.Head(t, url), human)
		}
		if got := branchTip(t, url, testStatusBranch); got != res.Commit {
			t.Fatalf("status branch at %s, want %s", got, res.Commit)
		}
		if head, changed, err := r.Fetch(ctx); err != nil || head != human || !changed {
			t.Fatalf("Fetch = %s, %v, %v; want the human commit", head, changed, err)
		}
	})

	t.Run("a push to the status branch is raced, rebuilt on and set back", func(t *testing.T) {
		var human string
		r.beforePush = func(attempt int) {
			if attempt == 1 {
				human = pushBranch(t, url, testStatusBranch, map[string]string{"status/summary.yaml": "mine\n", "status/extra.yaml": "mine\n"}, "Human status edit")
			}
		}
		defer func() { r.beforePush = nil }()
		res, err := r.WriteStatus(ctx, map[string][]byte{"status/nodes/a.yaml": []byte("node: a\n")}, "Status 2")
		if err != nil || res.Commit == "" || res.Attempts != 2 {
			t.Fatalf("WriteStatus = %+v, %v", res, err)
		}
		if parent := gittest.Git(t, bareOf(url), "rev-parse", res.Commit+"^"); parent != human {
			t.Fatalf("status commit built on %s, want the person's %s", parent, human)
		}
		if want := []string{"status/extra.yaml", "status/summary.yaml"}; !slices.Equal(res.Overwritten, want) {
			t.Fatalf("overwritten %v, want %v", res.Overwritten, want)
		}
		if got := readOn(t, url, testStatusBranch, "status/summary.yaml"); got != "x" {
			t.Fatalf("status/summary.yaml = %q, want the hub's", got)
		}
		if got, want := branchFiles(t, url, testStatusBranch), []string{"status/nodes/a.yaml", "status/summary.yaml"}; !slices.Equal(got, want) {
			t.Fatalf("status branch holds %v, want %v", got, want)
		}
		if !slices.Equal(gittest.Log(t, url), []string{"Human change", "Initial commit"}) {
			t.Fatalf("the tracked branch was written: %v", gittest.Log(t, url))
		}
	})
}

func TestStatusBranchCreatedMeanwhileIsNotOverwritten(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithStatusBranch(testStatusBranch))
	var human string
	r.beforePush = func(attempt int) {
		if attempt == 1 {
			human = pushBranch(t, url, testStatusBranch, map[string]string{"status/notes.yaml": "mine\n"}, "Person creates the branch")
		}
	}
	res, err := r.WriteStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if err != nil || res.Attempts != 2 {
		t.Fatalf("WriteStatus = %+v, %v", res, err)
	}
	if got, want := branchLog(t, url, testStatusBranch), []string{"Status", "Person creates the branch", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("status branch log %v, want %v", got, want)
	}
	if parent := gittest.Git(t, bareOf(url), "rev-parse", res.Commit+"^"); parent != human {
		t.Fatalf("status commit built on %s, want %s", parent, human)
	}
}

func TestStatusBranchGivesUpAfterTheRetryLimit(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithStatusBranch(testStatusBranch), WithPushRetries(2))
	ctx := context.Background()
	if _, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status"); err != nil {
		t.Fatal(err)
	}
	r.beforePush = func(attempt int) {
		pushBranch(t, url, testStatusBranch, map[string]string{"status/h.yaml": strings.Repeat("h", attempt)}, "Human")
	}
	_, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("y\n")}, "Status 2")
	if !errors.Is(err, ErrPushRaces) {
		t.Fatalf("error = %v, want ErrPushRaces", err)
	}
	if got, want := branchLog(t, url, testStatusBranch), []string{"Human", "Human", "Status"}; !slices.Equal(got, want) {
		t.Fatalf("status branch log %v, want %v (nothing lost, nothing forced)", got, want)
	}
}

func TestStatusBranchFenceAndRecreation(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	ctx := context.Background()

	// status on the tracked branch first, as before the option was set
	before := open(t, url)
	if _, err := before.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("old\n")},
		StatusMessage("Status", "", Trailer{TrailerFence, "4"})); err != nil {
		t.Fatal(err)
	}
	main := gittest.Head(t, url)

	r := open(t, url, WithStatusBranch(testStatusBranch))
	if v, err := r.LatestTrailer(ctx, TrailerFence, 10); err != nil || v != "4" {
		t.Fatalf("LatestTrailer without a status branch yet = %q, %v; want the tracked branch's 4", v, err)
	}
	c, err := r.CommitStatus(ctx, map[string][]byte{"status/nodes/a.yaml": []byte("a\n")},
		StatusMessage("Status", "", Trailer{TrailerFence, "9"}))
	if err != nil {
		t.Fatal(err)
	}
	if gittest.Head(t, url) != main {
		t.Fatal("the tracked branch was written")
	}
	// the tracked branch's status carries over into the new branch
	if got := readOn(t, url, testStatusBranch, "status/summary.yaml"); got != "old" {
		t.Fatalf("status/summary.yaml on the status branch = %q", got)
	}
	if v, err := r.LatestTrailer(ctx, TrailerFence, 10); err != nil || v != "9" {
		t.Fatalf("LatestTrailer = %q, %v; want the status branch's 9", v, err)
	}

	// a new mirror (the data dir was lost) reads the fence at once
	fresh := open(t, url, WithStatusBranch(testStatusBranch))
	if v, err := fresh.LatestTrailer(ctx, TrailerFence, 10); err != nil || v != "9" {
		t.Fatalf("LatestTrailer of a new mirror = %q, %v; want 9", v, err)
	}
	if tip, err := fresh.StatusTip(ctx); err != nil || tip != c {
		t.Fatalf("StatusTip of a new mirror = %q, %v; want %s", tip, err, c)
	}

	// the status branch is deleted: the tracked tip holds status again
	// until the next status commit creates the branch anew
	gittest.Git(t, bareOf(url), "branch", "-D", testStatusBranch)
	if _, _, err := fresh.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if tip, err := fresh.StatusTip(ctx); err != nil || tip != main {
		t.Fatalf("StatusTip after the branch was deleted = %q, %v; want %s", tip, err, main)
	}
	again, err := fresh.CommitStatus(ctx, map[string][]byte{"status/nodes/a.yaml": []byte("a\n")}, "Status again")
	if err != nil || again == "" || branchTip(t, url, testStatusBranch) != again {
		t.Fatalf("CommitStatus after deletion = %q, %v", again, err)
	}
}

func TestStatusBranchOption(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	_, err := Open(context.Background(), Source{URL: url, Dir: filepath.Join(t.TempDir(), "m")}, WithStatusBranch("bad..name"))
	if err == nil {
		t.Fatal("Open accepted an invalid status branch name")
	}
	// the tracked branch's own name keeps status there
	r := open(t, url, WithStatusBranch("main"))
	if r.StatusBranch() != "main" {
		t.Fatalf("StatusBranch = %q", r.StatusBranch())
	}
	c, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if err != nil || gittest.Head(t, url) != c {
		t.Fatalf("CommitStatus = %q, %v; head %s", c, err, gittest.Head(t, url))
	}
	if tip, err := r.StatusTip(context.Background()); err != nil || tip != c {
		t.Fatalf("StatusTip = %q, %v", tip, err)
	}
}

// TestStatusFilesReadLargeDocumentsWhole: a status document larger than the
// config files' limit (status/generation_marks.yaml at 100,000 nodes is 2.2
// MB) is read back whole, where it was cut at 1 MiB and failed to parse as
// YAML, so a hub starting on a fresh mirror could not restore the highest
// generation of each object. A blob above the limit given is refused, never
// cut.
func TestStatusFilesReadLargeDocumentsWhole(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithStatusBranch(testStatusBranch), WithClock(clock.NewFake(testStart)), WithAuthor("fleetwave hub", "hub@example.com"))
	ctx := context.Background()
	var marks strings.Builder
	marks.WriteString("format: 1\ngeneration_marks:\n")
	for i := range 100_000 {
		fmt.Fprintf(&marks, "  node/node-%06d: 1\n", i)
	}
	if marks.Len() <= int(DefaultMaxFileSize) {
		t.Fatalf("the document is %d bytes, not above the config files' limit", marks.Len())
	}
	tip, err := r.CommitStatus(ctx, map[string][]byte{"status/generation_marks.yaml": []byte(marks.String())}, "Status")
	if err != nil {
		t.Fatal(err)
	}
	files, err := r.StatusFiles(ctx, tip)
	if err != nil {
		t.Fatal(err)
	}
	if got := files["status/generation_marks.yaml"]; string(got) != marks.String() {
		t.Fatalf("read back %d of %d bytes", len(got), marks.Len())
	}
	c, err := r.repo.CommitObject(plumbing.NewHash(tip))
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.File("status/generation_marks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := readBlob(r, f.Hash, 1<<20); err == nil || data != nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("readBlob above its limit = %d bytes, %v; want an error and nothing", len(data), err)
	}
}

// TestStatusChangesReadsWhatAStatusCommitChanged: between two status
// commits StatusChanges gives the files the second added or changed, with
// their content, and the ones it removed; nothing else is read. From ""
// it gives every status file, as StatusFiles does; StatusFile reads one
// file whole, above the config files' limit.
func TestStatusChangesReadsWhatAStatusCommitChanged(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithStatusBranch(testStatusBranch), WithClock(clock.NewFake(testStart)), WithAuthor("fleetwave hub", "hub@example.com"))
	ctx := context.Background()
	first := map[string][]byte{
		"status/summary.yaml":      []byte("format: 1\n"),
		"status/nodes/n1.yaml":     []byte("node: n1\n"),
		"status/nodes/n2.yaml":     []byte("node: n2\n"),
		"status/rollouts/r1.yaml":  []byte("rollout: r1\n"),
		"status/rollouts/r1/a.txt": []byte("not a document\n"),
	}
	for i := range 500 {
		first[fmt.Sprintf("status/nodes/m%03d.yaml", i)] = []byte("unchanged\n")
	}
	c1, err := r.CommitStatus(ctx, first, "Status 1")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", int(DefaultMaxFileSize)+10)
	c2, err := r.CommitStatus(ctx, map[string][]byte{
		"status/nodes/n1.yaml":            []byte("node: n1\nchanged: true\n"),
		"status/nodes/n2.yaml":            nil,
		"status/nodes/n3.yaml":            []byte("node: n3\n"),
		"status/rollouts/r1/items-1.yaml": []byte(big),
	}, "Status 2")
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.StatusChanges(ctx, c1, c2, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"status/nodes/n1.yaml":            "node: n1\nchanged: true\n",
		"status/nodes/n3.yaml":            "node: n3\n",
		"status/rollouts/r1/items-1.yaml": big,
	}
	if len(d.Files) != len(want) {
		t.Errorf("changed files %v, want %d", slices.Sorted(maps.Keys(d.Files)), len(want))
	}
	for p, content := range want {
		if string(d.Files[p]) != content {
			t.Errorf("%s read as %d bytes, want %d", p, len(d.Files[p]), len(content))
		}
	}
	if !slices.Equal(d.Removed, []string{"status/nodes/n2.yaml"}) {
		t.Errorf("removed %v, want status/nodes/n2.yaml", d.Removed)
	}
	if d, err := r.StatusChanges(ctx, c2, c2, nil); err != nil || len(d.Files) != 0 || len(d.Removed) != 0 {
		t.Errorf("a commit against itself: %d files, %v removed, %v", len(d.Files), d.Removed, err)
	}
	nodes, err := r.StatusChanges(ctx, c1, c2, func(p string) bool { return strings.HasPrefix(p, "status/nodes/") })
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Files) != 2 || nodes.Files["status/rollouts/r1/items-1.yaml"] != nil || len(nodes.Removed) != 1 {
		t.Errorf("kept the nodes' documents: %v, removed %v; want n1 and n3, n2 removed", slices.Sorted(maps.Keys(nodes.Files)), nodes.Removed)
	}
	all, err := r.StatusChanges(ctx, "", c2, nil)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := r.StatusFiles(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Files) != 505 || len(all.Removed) != 0 || len(whole) != 505 {
		t.Errorf("from the empty tree: %d files, %d removed; StatusFiles %d; want 505 documents and nothing removed", len(all.Files), len(all.Removed), len(whole))
	}
	if _, ok := all.Files["status/rollouts/r1/a.txt"]; ok {
		t.Error("a file that is no YAML document was read")
	}
	data, ok, err := r.StatusFile(ctx, c2, "status/rollouts/r1/items-1.yaml")
	if err != nil || !ok || string(data) != big {
		t.Errorf("StatusFile of %d bytes: %d bytes, %v, %v", len(big), len(data), ok, err)
	}
	if data, ok, err := r.StatusFile(ctx, c2, "status/nodes/n2.yaml"); err != nil || ok || data != nil {
		t.Errorf("StatusFile of a removed file: %q, %v, %v", data, ok, err)
	}
	if _, ok, err := r.StatusFile(ctx, c2, "status/missing/n.yaml"); err != nil || ok {
		t.Errorf("StatusFile under a missing directory: %v, %v", ok, err)
	}
}

// TestRemoteStatusTipNeitherFetchesNorWaitsForTheMirror: the remote's
// status tip is read from its refs while the mirror's lock is held (a hub
// fetching a long status history holds it for minutes), and nothing is
// fetched: the mirror's status branch stays where it was. Both ways: the
// remote's own refs (a remote on this machine) and the transport's ref
// advertisement (any other).
func TestRemoteStatusTipNeitherFetchesNorWaitsForTheMirror(t *testing.T) {
	isolateGit(t)
	for _, local := range []bool{true, false} {
		t.Run(fmt.Sprintf("local %v", local), func(t *testing.T) {
			url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
			if !local {
				// objects kept partly elsewhere: not read as a local remote
				alt := filepath.Join(bareOf(url), "objects", "info", "alternates")
				if err := os.WriteFile(alt, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if fetchGitDir(url) != "" {
					t.Fatal("the remote is still read as a local one")
				}
			}
			ctx := context.Background()
			opts := []Option{WithStatusBranch(testStatusBranch), WithAuthor("fleetwave hub", "hub@example.com")}
			r, writer := open(t, url, opts...), open(t, url, opts...)
			if tip, err := r.RemoteStatusTip(ctx); err != nil || tip != "" {
				t.Fatalf("RemoteStatusTip with no status branch = %q, %v; want none", tip, err)
			}
			fetch(t, r)
			before, err := r.StatusTip(ctx)
			if err != nil {
				t.Fatal(err)
			}
			first, err := writer.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("total: 1\n")}, StatusMessage("Status: first", ""))
			if err != nil || first == "" {
				t.Fatalf("CommitStatus = %q, %v", first, err)
			}
			unlock := r.lock("test: hold")
			got, errc := make(chan string, 1), make(chan error, 1)
			go func() {
				tip, err := r.RemoteStatusTip(ctx)
				got <- tip
				errc <- err
			}()
			select {
			case tip := <-got:
				if err := <-errc; err != nil || tip != first {
					t.Fatalf("RemoteStatusTip = %q, %v; want %s", tip, err, first)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("RemoteStatusTip waited for the mirror's lock")
			}
			unlock()
			if after, err := r.StatusTip(ctx); err != nil || after != before {
				t.Fatalf("the mirror's status tip moved to %q (%v), from %s: something was fetched", after, err, before)
			}
		})
	}
}
