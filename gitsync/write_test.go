package gitsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

const (
	hubName  = "fleetwave hub"
	hubEmail = "hub@example.com"
)

// jsonValidate is a stand-in for the hub's schema check: every .json file
// must be JSON.
func jsonValidate(files map[string][]byte, refused []fleetwave.FileError) error {
	verr := &fleetwave.ValidationError{Errors: slices.Clone(refused)}
	for p, data := range files {
		if strings.HasSuffix(p, ".json") {
			if _, err := (jsonNormalizer{}).Normalize(p, data); err != nil {
				verr.Errors = append(verr.Errors, fleetwave.FileError{Path: p, Line: 1, Msg: "not JSON"})
			}
		}
	}
	if len(verr.Errors) > 0 {
		verr.Sort()
		return verr
	}
	return nil
}

// gitOut runs git with the harness environment and returns its trimmed
// output and error (usable off the test goroutine).
func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gittest.Env()
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

func TestCommitFilesLandsAuthoredByTheHubWithTheActor(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"name":"a"}`, "status/summary.yaml": "total: 1\n"})
	fake := clock.NewFake(testStart)
	r := open(t, url, WithClock(fake), WithAuthor(hubName, hubEmail))
	ctx := context.Background()
	before := fetch(t, r)

	var seen map[string][]byte
	var expected map[string][]byte
	res, err := r.CommitFiles(ctx, Write{
		Files:    map[string][]byte{"approvals/r1.json": []byte(`{"rollout":"r1"}`)},
		Message:  "Approve rollout r1\n\nRequested through the API.",
		Actor:    "alice",
		Trailers: []Trailer{{TrailerReason, "change window\nopen"}},
		Expect: func(current map[string][]byte) error {
			expected = current
			return ExpectFiles(map[string][]byte{"approvals/r1.json": nil})(current)
		},
		Validate: func(files map[string][]byte, refused []fleetwave.FileError) error {
			seen = files
			return jsonValidate(files, refused)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit == "" || res.Unchanged || res.Parent != before || res.Attempts != 1 || gittest.Head(t, url) != res.Commit {
		t.Fatalf("CommitFiles = %+v, remote head %s, before %s", res, gittest.Head(t, url), before)
	}
	if len(expected) != 0 {
		t.Fatalf("Expect saw %v for a path absent at the tip", expected)
	}
	bare := bareOf(url)
	if got := gittest.Git(t, bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s|%(trailers:key=Fleetwave-Actor,valueonly,separator=)|%(trailers:key=Fleetwave-Reason,valueonly,separator=)", "main"); got != "fleetwave hub <hub@example.com>|fleetwave hub <hub@example.com>|Approve rollout r1|alice|change window open" {
		t.Fatalf("git log = %q", got)
	}
	if got := gittest.Git(t, bare, "log", "-1", "--format=%B", "main"); !strings.Contains(got, "\n\nRequested through the API.\n\nFleetwave-Actor: alice\n") {
		t.Fatalf("message = %q", got)
	}
	info, err := r.CommitInfo(ctx, res.Commit)
	if err != nil || !info.When.Equal(testStart) || !slices.Equal(info.Trailers, []Trailer{{TrailerActor, "alice"}, {TrailerReason, "change window open"}}) {
		t.Fatalf("CommitInfo = %+v, %v", info, err)
	}
	if got, _ := gittest.ReadFile(t, url, "approvals/r1.json"); got != `{"rollout":"r1"}` {
		t.Fatalf("approvals/r1.json = %q", got)
	}
	gittest.Git(t, bare, "fsck", "--strict", "--no-progress")

	// Validate saw exactly what Files returns for the pushed commit, read
	// from the mirror without a fetch (the tracking ref moved)
	files, refused, err := r.Files(ctx, res.Commit)
	if err != nil || len(refused) != 0 || !maps.EqualFunc(files, seen, bytes.Equal) {
		t.Fatalf("Files(commit) = %v, %v, %v; Validate saw %v", files, refused, err, seen)
	}
	if tip, err := r.StatusTip(ctx); err != nil || tip != res.Commit {
		t.Fatalf("StatusTip = %s, %v; want the write", tip, err)
	}
	if head, changed, err := r.Fetch(ctx); err != nil || head != res.Commit || !changed {
		t.Fatalf("Fetch = %s, %v, %v: the hub's sync must see its own write", head, changed, err)
	}

	t.Run("an unchanged write makes no commit", func(t *testing.T) {
		res2, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"approvals/r1.json": []byte(`{"rollout":"r1"}`), "never/was.json": nil}, Message: "Again", Actor: "alice"})
		if err != nil || !res2.Unchanged || res2.Commit != "" || res2.Parent != res.Commit {
			t.Fatalf("CommitFiles = %+v, %v", res2, err)
		}
		if gittest.Head(t, url) != res.Commit {
			t.Fatal("the remote moved")
		}
	})

	t.Run("a nil value deletes the file and its emptied directory", func(t *testing.T) {
		fake.Advance(1)
		var current map[string][]byte
		res2, err := r.CommitFiles(ctx, Write{
			Files:   map[string][]byte{"approvals/r1.json": nil},
			Message: "Withdraw approval r1", Actor: "bob",
			Expect: func(c map[string][]byte) error {
				current = c
				return ExpectFiles(map[string][]byte{"approvals/r1.json": []byte(`{"rollout":"r1"}`)})(c)
			},
			Validate: jsonValidate,
		})
		if err != nil || res2.Commit == "" || res2.Parent != res.Commit {
			t.Fatalf("CommitFiles = %+v, %v", res2, err)
		}
		if string(current["approvals/r1.json"]) != `{"rollout":"r1"}` {
			t.Fatalf("Expect saw %q", current)
		}
		if got, want := branchFiles(t, url, "main"), []string{"nodes/a.json", "status/summary.yaml"}; !slices.Equal(got, want) {
			t.Fatalf("files %v, want %v", got, want)
		}
	})

	t.Run("a file is created under a new directory and replaced", func(t *testing.T) {
		for i, content := range []string{`{"labels":{"zone":"a"}}`, `{"labels":{"zone":"b"}}`} {
			res2, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/extra/x.json": []byte(content)}, Message: fmt.Sprintf("Labels %d", i), Actor: "carol", Validate: jsonValidate})
			if err != nil || res2.Commit == "" {
				t.Fatalf("CommitFiles = %+v, %v", res2, err)
			}
			if got, _ := gittest.ReadFile(t, url, "nodes/extra/x.json"); got != content {
				t.Fatalf("nodes/extra/x.json = %q", got)
			}
		}
		gittest.Git(t, bare, "fsck", "--strict", "--no-progress")
	})
}

func TestCommitFilesRefusesAnInvalidTree(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{}`})
	r := open(t, url, WithMaxFileSize(64))
	ctx := context.Background()
	head := gittest.Head(t, url)

	_, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/b.json": []byte("{not json"), "nodes/c.json": []byte("{}")}, Message: "Add b", Actor: "alice", Validate: jsonValidate})
	var inv *InvalidWriteError
	if !errors.As(err, &inv) || inv.Parent != head || !slices.Equal(inv.Errors, []fleetwave.FileError{{Path: "nodes/b.json", Line: 1, Msg: "not JSON"}}) {
		t.Fatalf("error = %#v, want an InvalidWriteError for nodes/b.json", err)
	}
	if verr := (*fleetwave.ValidationError)(nil); !errors.As(err, &verr) || len(verr.Errors) != 1 {
		t.Fatalf("errors.As(*fleetwave.ValidationError) fails on %v", err)
	}

	_, err = r.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/big.json": bytes.Repeat([]byte(" "), 65)}, Message: "Big", Actor: "alice"})
	if !errors.As(err, &inv) || len(inv.Errors) != 1 || inv.Errors[0].Path != "nodes/big.json" || !strings.Contains(inv.Errors[0].Msg, "over the limit of 64 bytes") {
		t.Fatalf("oversized file: error = %v", err)
	}

	broken := errors.New("schema unavailable")
	_, err = r.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/c.json": []byte("{}")}, Message: "Add c", Actor: "alice",
		Validate: func(map[string][]byte, []fleetwave.FileError) error { return broken }})
	if !errors.Is(err, broken) || errors.As(err, &inv) {
		t.Fatalf("a failing validator: error = %v", err)
	}
	if gittest.Head(t, url) != head {
		t.Fatal("a refused write was pushed")
	}
}

func TestCommitFilesRefusesPaths(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	ctx := context.Background()
	head := gittest.Head(t, url)
	for _, files := range []map[string][]byte{
		{"status/x.yaml": []byte("x")},
		{"status": []byte("x")},
		{"Status/x.yaml": []byte("x")},
		{"status/x.yaml": nil},
		{"../x": []byte("x")},
		{"nodes/../../x": []byte("x")},
		{"/abs": []byte("x")},
		{"/etc/passwd": nil},
		{".git/config": []byte("x")},
		{"nodes/.GIT/config": []byte("x")},
		{".gitmodules": []byte("x")},
		{"nodes/.gitattributes": []byte("x")},
		{"git~1/config": []byte("x")},
		{".g\u200cit/config": []byte("x")},
		{"nodes/a\x01.json": []byte("x")},
		{"nodes/\xff.json": []byte("x")},
		{"nodes//a.json": []byte("x")},
		{"nodes/./a.json": []byte("x")},
		{"nodes/": []byte("x")},
		{`nodes\a.json`: []byte("x")},
		{"": []byte("x")},
		{"nodes/b": []byte("x"), "nodes/b/c.json": []byte("x")},
		{"nodes/b": nil, "nodes/b/c/d.json": []byte("x")},
	} {
		t.Run(fmt.Sprintf("%q", slices.Sorted(maps.Keys(files))), func(t *testing.T) {
			_, err := r.CommitFiles(ctx, Write{Files: files, Message: "Bad", Actor: "mallory"})
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("error = %v, want ErrUnsafePath", err)
			}
		})
	}

	t.Run("bad writes", func(t *testing.T) {
		ok := map[string][]byte{"nodes/b.json": []byte("{}")}
		for name, w := range map[string]Write{
			"no files":          {Message: "x", Actor: "a"},
			"no subject":        {Files: ok, Message: " \n", Actor: "a"},
			"no actor":          {Files: ok, Message: "x", Actor: " "},
			"a second actor":    {Files: ok, Message: "x", Actor: "a", Trailers: []Trailer{{"fleetwave-actor", "b"}}},
			"a fence":           {Files: ok, Message: "x", Actor: "a", Trailers: []Trailer{{TrailerFence, "9"}}},
			"a bad trailer key": {Files: ok, Message: "x", Actor: "a", Trailers: []Trailer{{"a key", "b"}}},
		} {
			if _, err := r.CommitFiles(ctx, w); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
	})

	// what is at the tip: a directory, a file, a symbolic link
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", url, work)
	if err := os.Symlink("../outside", filepath.Join(work, "link")); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "--quiet", "-m", "A symbolic link")
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
	head = gittest.Head(t, url)
	for _, tc := range []struct {
		path string
		data []byte
		why  string
	}{
		{"nodes", []byte("x"), "is a directory"},
		{"nodes", nil, "is a directory"},
		{"nodes/a.json/x", []byte("x"), "nodes/a.json is not a directory"},
		{"link", []byte("x"), "is a symbolic link"},
		{"link", nil, "is a symbolic link"},
		{"link/x", []byte("x"), "link is not a directory"},
	} {
		t.Run(fmt.Sprintf("%s at the tip (%v)", tc.path, tc.data != nil), func(t *testing.T) {
			_, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{tc.path: tc.data}, Message: "Over", Actor: "mallory"})
			var pe *PreconditionError
			if !errors.As(err, &pe) || !errors.Is(err, ErrPreconditionFailed) || pe.Path != tc.path || pe.Parent != head || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("error = %v, want a PreconditionError: %s", err, tc.why)
			}
		})
	}
	if gittest.Head(t, url) != head {
		t.Fatal("a refused write was pushed")
	}
}

func TestCommitFilesExpectRefusesWhenTheFileAppearedMeanwhile(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	ctx := context.Background()
	fetch(t, r)

	// a person pushes the same approval between the hub's check and its push
	var human string
	r.beforePush = func(attempt int) {
		if attempt == 1 {
			human = gittest.Push(t, url, map[string]string{"approvals/r1.json": `{"by":"a person"}`}, nil, "Approve r1 by hand")
		}
	}
	expects := 0
	_, err := r.CommitFiles(ctx, Write{
		Files:   map[string][]byte{"approvals/r1.json": []byte(`{"by":"the API"}`)},
		Message: "Approve r1", Actor: "alice",
		Expect: func(current map[string][]byte) error {
			expects++
			return ExpectFiles(map[string][]byte{"approvals/r1.json": nil})(current)
		},
	})
	r.beforePush = nil
	var pe *PreconditionError
	if !errors.As(err, &pe) || pe.Path != "approvals/r1.json" || pe.Parent != human || !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("error = %v, want a PreconditionError on approvals/r1.json at %s", err, human)
	}
	if expects != 2 {
		t.Fatalf("Expect called %d times, want 2 (before each push)", expects)
	}
	if gittest.Head(t, url) != human {
		t.Fatal("the remote moved past the person's commit")
	}
	if got, _ := gittest.ReadFile(t, url, "approvals/r1.json"); got != `{"by":"a person"}` {
		t.Fatalf("approvals/r1.json = %q", got)
	}

	t.Run("content that changed since it was read", func(t *testing.T) {
		_, err := r.CommitFiles(ctx, Write{
			Files:   map[string][]byte{"approvals/r1.json": []byte(`{"by":"the console"}`)},
			Message: "Edit r1", Actor: "alice",
			Expect: ExpectFiles(map[string][]byte{"approvals/r1.json": []byte(`{"by":"what the console showed"}`)}),
		})
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "changed since it was read") {
			t.Fatalf("error = %v", err)
		}
	})

	t.Run("a caller's own error is wrapped", func(t *testing.T) {
		mine := errors.New("rollout r1 is not waiting for approval")
		_, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"approvals/r2.json": []byte("{}")}, Message: "x", Actor: "alice",
			Expect: func(map[string][]byte) error { return mine }})
		if !errors.Is(err, mine) || !errors.As(err, &pe) || pe.Parent != human {
			t.Fatalf("error = %v", err)
		}
	})
}

func TestCommitFilesRebuildsOnRaces(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithAuthor(hubName, hubEmail))
	other := open(t, url, WithAuthor(hubName, hubEmail)) // another hub replica writing status
	ctx := context.Background()
	fetch(t, r)
	fetch(t, other)

	count := func(n *int) func(map[string][]byte, []fleetwave.FileError) error {
		return func(files map[string][]byte, refused []fleetwave.FileError) error {
			*n++
			return jsonValidate(files, refused)
		}
	}

	t.Run("a person's push: re-validated with their files", func(t *testing.T) {
		var human string
		r.beforePush = func(attempt int) {
			if attempt == 1 {
				human = gittest.Push(t, url, map[string]string{"nodes/h.json": "{}"}, nil, "Human change")
			}
		}
		defer func() { r.beforePush = nil }()
		validations := 0
		res, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/w.json": []byte("{}")}, Message: "Hub write", Actor: "alice", Validate: count(&validations)})
		if err != nil || res.Attempts != 2 || res.Parent != human || validations != 2 {
			t.Fatalf("CommitFiles = %+v, %v, %d validations", res, err, validations)
		}
		if got, want := gittest.Log(t, url), []string{"Hub write", "Human change", "Initial commit"}; !slices.Equal(got, want) {
			t.Fatalf("log %q, want %q", got, want)
		}
	})

	t.Run("a person's push that makes the tree invalid", func(t *testing.T) {
		r.beforePush = func(attempt int) {
			if attempt == 1 {
				gittest.Push(t, url, map[string]string{"nodes/broken.json": "{"}, nil, "Broken by hand")
			}
		}
		defer func() { r.beforePush = nil }()
		_, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/w2.json": []byte("{}")}, Message: "Hub write 2", Actor: "alice", Validate: jsonValidate})
		var inv *InvalidWriteError
		if !errors.As(err, &inv) || inv.Errors[0].Path != "nodes/broken.json" {
			t.Fatalf("error = %v", err)
		}
		if gittest.Log(t, url)[0] != "Broken by hand" {
			t.Fatal("the write was pushed")
		}
		gittest.Push(t, url, nil, []string{"nodes/broken.json"}, "Fixed by hand")
	})

	t.Run("a status commit: rebuilt, not re-validated", func(t *testing.T) {
		var status string
		r.beforePush = func(attempt int) {
			if attempt == 1 {
				c, err := other.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
				if err != nil || c == "" {
					t.Errorf("CommitStatus = %q, %v", c, err)
				}
				status = c
			}
		}
		defer func() { r.beforePush = nil }()
		validations := 0
		res, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/w3.json": []byte("{}")}, Message: "Hub write 3", Actor: "alice", Validate: count(&validations)})
		if err != nil || res.Attempts != 2 || res.Parent != status || validations != 1 {
			t.Fatalf("CommitFiles = %+v, %v, %d validations; status %s", res, err, validations, status)
		}
	})

	t.Run("the retry limit", func(t *testing.T) {
		limited := open(t, url, WithPushRetries(2))
		limited.beforePush = func(attempt int) {
			gittest.Push(t, url, map[string]string{fmt.Sprintf("nodes/race%d.json", attempt): "{}"}, nil, fmt.Sprintf("Race %d", attempt))
		}
		_, err := limited.CommitFiles(ctx, Write{Files: map[string][]byte{"nodes/w4.json": []byte("{}")}, Message: "Hub write 4", Actor: "alice"})
		if !errors.Is(err, ErrPushRaces) {
			t.Fatalf("error = %v, want ErrPushRaces", err)
		}
		if got := gittest.Log(t, url)[:2]; !slices.Equal(got, []string{"Race 2", "Race 1"}) {
			t.Fatalf("log %q: nothing lost, nothing forced", got)
		}
	})
	gittest.Git(t, bareOf(url), "fsck", "--strict", "--no-progress")
}

// TestStatusWritesStillSetBackHumanStatusEditsAfterAWrite: the hub's
// commits of people-facing files have the hub's identity but are not
// status commits, so a person's edit of status/ made before one is still
// set back by the next status commit.
func TestStatusWritesStillSetBackHumanStatusEditsAfterAWrite(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithAuthor(hubName, hubEmail))
	ctx := context.Background()
	if _, err := r.WriteStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("by the hub\n")}, "Status"); err != nil {
		t.Fatal(err)
	}
	gittest.Push(t, url, map[string]string{"status/summary.yaml": "by a person\n"}, nil, "Human status edit")
	if _, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"approvals/r1.json": []byte("{}")}, Message: "Approve", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	res, err := r.WriteStatus(ctx, map[string][]byte{"status/nodes/a.yaml": []byte("node: a\n")}, "Status 2")
	if err != nil || !slices.Equal(res.Overwritten, []string{"status/summary.yaml"}) {
		t.Fatalf("WriteStatus = %+v, %v; want status/summary.yaml set back", res, err)
	}
	if got, _ := gittest.ReadFile(t, url, "status/summary.yaml"); got != "by the hub\n" {
		t.Fatalf("status/summary.yaml = %q", got)
	}
	if got, want := gittest.Log(t, url), []string{"Status 2", "Approve", "Human status edit", "Status", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("log %q, want %q", got, want)
	}
}

func TestCommitFilesWithAStatusBranch(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithStatusBranch(testStatusBranch))
	ctx := context.Background()
	st, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{"approvals/r1.json": []byte("{}")}, Message: "Approve", Actor: "alice"})
	if err != nil || gittest.Head(t, url) != res.Commit {
		t.Fatalf("CommitFiles = %+v, %v", res, err)
	}
	if branchTip(t, url, testStatusBranch) != st {
		t.Fatal("the status branch was written")
	}
	if tip, err := r.StatusTip(ctx); err != nil || tip != st {
		t.Fatalf("StatusTip = %s, %v", tip, err)
	}
}

func TestCommitFilesWhileTheRemoteIsDown(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	ctx := context.Background()
	fetch(t, r)
	bare := bareOf(url)
	before := gittest.Head(t, url)
	w := Write{Files: map[string][]byte{"approvals/r1.json": []byte("{}")}, Message: "Approve", Actor: "alice", Validate: jsonValidate}

	if err := os.Rename(bare, bare+".away"); err != nil {
		t.Fatal(err)
	}
	_, err := r.CommitFiles(ctx, w)
	if !errors.Is(err, ErrRemoteUnavailable) {
		t.Fatalf("error = %v, want ErrRemoteUnavailable", err)
	}
	t.Logf("remote away: %v", err)
	if err := os.Rename(bare+".away", bare); err != nil {
		t.Fatal(err)
	}
	if gittest.Head(t, url) != before {
		t.Fatal("the remote changed while it was away")
	}
	res, err := r.CommitFiles(ctx, w)
	if err != nil || res.Commit == "" || res.Parent != before || gittest.Head(t, url) != res.Commit {
		t.Fatalf("CommitFiles after the remote came back = %+v, %v", res, err)
	}
	gittest.Git(t, bare, "fsck", "--strict", "--no-progress")
}

// TestCommitFilesRacingPeopleAndStatusLosesNothing runs a person pushing
// with the git CLI (rebasing when refused), hub writes from several
// goroutines and status commits, all at once on main. Every commit of
// every writer must be on main's first-parent history afterwards, history
// must be linear, and every update the remote recorded (its reflog) must
// be a fast-forward.
func TestCommitFilesRacingPeopleAndStatusLosesNothing(t *testing.T) {
	isolateGit(t)
	const (
		humans      = 8
		writers     = 4
		perWriter   = 2
		statusCount = 6
	)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	bare := bareOf(url)
	gittest.Git(t, bare, "config", "core.logAllRefUpdates", "always")
	var races raceCounter
	logTo := func(name string) Option {
		return WithLogger(zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), &races)).With().Str("repo", name).Logger())
	}
	// two hub replicas (their own mirrors) serve API writes; one of them
	// also writes status
	r := open(t, url, WithAuthor(hubName, hubEmail), WithPushRetries(60), logTo("r"))
	r2 := open(t, url, WithAuthor(hubName, hubEmail), WithPushRetries(60), logTo("r2"))
	ctx := context.Background()
	fetch(t, r)
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", url, work)

	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var humanCommits, hubCommits, statusCommits []string
	var wg sync.WaitGroup
	wg.Go(func() { // the person
		for i := range humans {
			if err := os.WriteFile(filepath.Join(work, fmt.Sprintf("human-%d.json", i)), []byte("{}"), 0o644); err != nil {
				fail(err)
				return
			}
			if _, err := gitOut(work, "add", "-A"); err != nil {
				fail(err)
				return
			}
			if _, err := gitOut(work, "commit", "--quiet", "-m", fmt.Sprintf("Human %d", i)); err != nil {
				fail(err)
				return
			}
			pushed := false
			for try := 0; try < 200 && !pushed; try++ {
				if _, err := gitOut(work, "push", "--quiet", "origin", "HEAD:main"); err == nil {
					pushed = true
					break
				}
				if _, err := gitOut(work, "pull", "--quiet", "--rebase", "origin", "main"); err != nil {
					fail(err)
					return
				}
			}
			if !pushed {
				fail(fmt.Errorf("human %d: push kept failing", i))
				return
			}
			h, err := gitOut(work, "rev-parse", "HEAD")
			if err != nil {
				fail(err)
				return
			}
			mu.Lock()
			humanCommits = append(humanCommits, h)
			mu.Unlock()
		}
	})
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				p := fmt.Sprintf("approvals/w%d-%d.json", w, i)
				repo := r
				if w%2 == 1 {
					repo = r2
				}
				res, err := repo.CommitFiles(ctx, Write{
					Files:   map[string][]byte{p: fmt.Appendf(nil, `{"writer":%d,"n":%d}`, w, i)},
					Message: fmt.Sprintf("Hub write %d-%d", w, i), Actor: fmt.Sprintf("user-%d", w),
					Expect:   ExpectFiles(map[string][]byte{p: nil}),
					Validate: jsonValidate,
				})
				if err != nil || res.Commit == "" {
					fail(fmt.Errorf("write %s: %+v, %w", p, res, err))
					continue
				}
				mu.Lock()
				hubCommits = append(hubCommits, res.Commit)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() { // the status writer
		for i := range statusCount {
			res, err := r.WriteStatus(ctx, map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "round: %d\n", i)}, fmt.Sprintf("Status %d", i))
			if err != nil || res.Commit == "" {
				fail(fmt.Errorf("status %d: %+v, %w", i, res, err))
				continue
			}
			mu.Lock()
			statusCommits = append(statusCommits, res.Commit)
			mu.Unlock()
		}
	})
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}

	firstParent := strings.Split(gittest.Git(t, bare, "rev-list", "--first-parent", "main"), "\n")
	all := strings.Split(gittest.Git(t, bare, "rev-list", "main"), "\n")
	if !slices.Equal(firstParent, all) {
		t.Fatalf("history is not linear: %d commits, %d on the first-parent chain", len(all), len(firstParent))
	}
	for name, commits := range map[string][]string{"human": humanCommits, "hub write": hubCommits, "status": statusCommits} {
		for _, c := range commits {
			if !slices.Contains(firstParent, c) {
				t.Errorf("%s commit %s is not on main", name, c)
			}
		}
	}
	if want := 1 + humans + writers*perWriter + statusCount; len(all) != want {
		t.Errorf("main has %d commits, want %d", len(all), want)
	}
	for i := range humans {
		if _, ok := gittest.ReadFile(t, url, fmt.Sprintf("human-%d.json", i)); !ok {
			t.Errorf("human-%d.json is missing", i)
		}
	}
	for w := range writers {
		for i := range perWriter {
			if _, ok := gittest.ReadFile(t, url, fmt.Sprintf("approvals/w%d-%d.json", w, i)); !ok {
				t.Errorf("approvals/w%d-%d.json is missing", w, i)
			}
		}
	}
	if got, _ := gittest.ReadFile(t, url, "status/summary.yaml"); got != fmt.Sprintf("round: %d\n", statusCount-1) {
		t.Errorf("status/summary.yaml = %q", got)
	}
	for _, c := range hubCommits {
		if got := gittest.Git(t, bare, "log", "-1", "--format=%an <%ae> %cn <%ce>", c); got != "fleetwave hub <hub@example.com> fleetwave hub <hub@example.com>" {
			t.Errorf("hub write %s made by %s", c, got)
		}
	}

	// every update of main the remote made was a fast-forward of the one before
	log, err := os.ReadFile(filepath.Join(bare, "logs", "refs", "heads", "main"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	prev := ""
	for _, line := range lines {
		f := strings.Fields(line)
		oldTip, newTip := f[0], f[1]
		if prev != "" && oldTip != prev {
			t.Fatalf("reflog: update from %s, but main was at %s", oldTip, prev)
		}
		if _, err := gitOut(bare, "merge-base", "--is-ancestor", oldTip, newTip); err != nil {
			t.Fatalf("reflog: %s -> %s is not a fast-forward (forced)", oldTip, newTip)
		}
		prev = newTip
	}
	if len(lines) != len(all)-1 || prev != all[0] {
		t.Errorf("reflog has %d updates ending at %s; main has %d commits after the first, tip %s", len(lines), prev, len(all)-1, all[0])
	}
	gittest.Git(t, bare, "fsck", "--strict", "--no-progress")
	t.Logf("%d commits: %d human, %d hub writes, %d status; %d ref updates, all fast-forwards; %d hub pushes raced and were rebuilt", len(all)-1, len(humanCommits), len(hubCommits), len(statusCommits), len(lines), races.n.Load())
}

// raceCounter counts the log lines of lost push races.
type raceCounter struct{ n atomic.Int64 }

func (c *raceCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("raced, rebuilding")) {
		c.n.Add(1)
	}
	return len(p), nil
}

// TestBenchCommitFilesVersusGit times one API write (one file) on the
// benchmark repository (benchObjects + benchStatus files): CommitFiles
// without and with whole-tree validation, against a person's `git add &&
// git commit && git push` in a clone of an identical remote. Run with
//
//	FLEETWAVE_BENCH=1 go test -race=false -run TestBenchCommitFiles -v ./gitsync/
func TestBenchCommitFilesVersusGit(t *testing.T) {
	benchGate(t)
	const runs = 10
	goRemote, gitRemote := benchRemote(t), benchRemote(t)
	r := open(t, gittest.URL(goRemote), WithAuthor(hubName, hubEmail))
	fetch(t, r)
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", gittest.URL(gitRemote), work)
	ctx := context.Background()

	var plain, validated, cli, files []time.Duration
	nfiles := 0
	for run := range runs {
		content := fmt.Appendf(nil, `{"rollout":"r%d"}`, run)
		start := time.Now()
		res, err := r.CommitFiles(ctx, Write{Files: map[string][]byte{fmt.Sprintf("approvals/a%d.json", run): content}, Message: fmt.Sprintf("Approve %d", run), Actor: "alice"})
		plain = append(plain, time.Since(start))
		if err != nil || res.Commit == "" {
			t.Fatalf("CommitFiles = %+v, %v", res, err)
		}
		start = time.Now()
		res, err = r.CommitFiles(ctx, Write{
			Files:   map[string][]byte{fmt.Sprintf("approvals/b%d.json", run): content},
			Message: fmt.Sprintf("Approve %d", run), Actor: "alice",
			Expect: ExpectFiles(map[string][]byte{fmt.Sprintf("approvals/b%d.json", run): nil}),
			Validate: func(files map[string][]byte, _ []fleetwave.FileError) error {
				nfiles = len(files)
				return nil
			},
		})
		validated = append(validated, time.Since(start))
		if err != nil || res.Commit == "" {
			t.Fatalf("CommitFiles = %+v, %v", res, err)
		}
		start = time.Now()
		if _, _, err := r.Files(ctx, res.Commit); err != nil {
			t.Fatal(err)
		}
		files = append(files, time.Since(start))

		start = time.Now()
		if err := os.MkdirAll(filepath.Join(work, "approvals"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "approvals", fmt.Sprintf("a%d.json", run)), content, 0o644); err != nil {
			t.Fatal(err)
		}
		gittest.Git(t, work, "add", "-A")
		gittest.Git(t, work, "commit", "--quiet", "-m", fmt.Sprintf("Approve %d", run))
		gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
		cli = append(cli, time.Since(start))
	}
	t.Logf("repo of %d files; one-file write, median over %d runs:", benchObjects+benchStatus, runs)
	t.Logf("  CommitFiles (fetch, build, push):                    %s %v", median(plain).Round(time.Millisecond), plain)
	t.Logf("  CommitFiles + Expect + Validate (reads %d files):  %s %v", nfiles, median(validated).Round(time.Millisecond), validated)
	t.Logf("  git add -A && git commit && git push (worktree):     %s %v", median(cli).Round(time.Millisecond), cli)
	t.Logf("  for scale, Files at the new commit (the hub's loadAt read): %s %v", median(files).Round(time.Millisecond), files)
}
