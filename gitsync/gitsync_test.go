package gitsync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

func TestOpenAndFetchFollowTheBranch(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"name":"a"}`})
	r := open(t, url)

	head, changed, err := r.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if changed || head != gittest.Head(t, url) {
		t.Fatalf("first fetch = %s, changed %v; want %s unchanged", head, changed, gittest.Head(t, url))
	}
	pushed := gittest.Push(t, url, map[string]string{"nodes/b.json": `{"name":"b"}`}, nil, "Add b")
	head, changed, err = r.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !changed || head != pushed {
		t.Fatalf("fetch after push = %s, changed %v; want %s changed", head, changed, pushed)
	}
	if _, changed, _ = r.Fetch(context.Background()); changed {
		t.Fatal("a fetch with nothing new reports a change")
	}
}

func TestOpenReportsBadSources(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	other := gittest.NewRemote(t, map[string]string{"b.json": "{}"})
	used := filepath.Join(t.TempDir(), "mirror")
	openAt(t, url, used)

	tests := []struct {
		name  string
		src   Source
		check func(error) bool
	}{
		{"a missing repository is a RepoNotFoundError with the URL", Source{URL: "file://" + filepath.Join(t.TempDir(), "nope.git")},
			func(err error) bool {
				var nf *RepoNotFoundError
				return errors.As(err, &nf) && strings.HasSuffix(nf.URL, "nope.git")
			}},
		{"a missing branch is a BranchNotFoundError", Source{URL: url, Branch: "release"},
			func(err error) bool {
				var bf *BranchNotFoundError
				return errors.As(err, &bf) && bf.Branch == "release"
			}},
		{"a mirror of another remote is refused", Source{URL: other, Dir: used},
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "follows") }},
		{"an invalid branch name is refused", Source{URL: url, Branch: "a..b"},
			func(err error) bool { return err != nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.src.Dir == "" {
				tc.src.Dir = filepath.Join(t.TempDir(), "mirror")
			}
			r, err := Open(context.Background(), tc.src, WithLogger(zerolog.New(zerolog.NewTestWriter(t))))
			if err == nil {
				_ = r.Close()
			}
			t.Logf("error: %v", err)
			if !tc.check(err) {
				t.Fatalf("Open error = %v", err)
			}
			if tc.src.Dir != used {
				if entries, _ := os.ReadDir(tc.src.Dir); len(entries) != 0 {
					t.Fatalf("a failed clone left %d entries in the mirror dir", len(entries))
				}
			}
		})
	}
}

func TestOpenAcceptsLocalPathsAndReopensItsMirror(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	localPath := strings.TrimPrefix(url, "file://")
	dir := filepath.Join(t.TempDir(), "mirror")
	first := openAt(t, localPath, dir)
	head := fetch(t, first)
	_ = first.Close()

	pushed := gittest.Push(t, url, map[string]string{"b.json": "{}"}, nil, "More")
	again := openAt(t, localPath, dir)
	got, changed, err := again.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != pushed || !changed || head == pushed {
		t.Fatalf("reopened mirror fetched %s (changed %v), want %s", got, changed, pushed)
	}
}

func TestFilesReadsACommitFromTheObjectStore(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{
		"nodes/a.json":        `{"name":"a"}`,
		"fleetwave.json":      `{"kind":"config"}`,
		"status/summary.yaml": "total: 1\n",
	})
	r := open(t, url)
	first := fetch(t, r)
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"name":"a2"}`, "big.txt": strings.Repeat("x", 64)}, nil, "Change a")
	second := fetch(t, r)

	// a symlink, committed the way a person would
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", url, work)
	if err := os.Symlink("../../outside", filepath.Join(work, "nodes", "evil.json")); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "--quiet", "-m", "Add a symlink")
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
	third := fetch(t, r)

	small := open(t, url, WithMaxFileSize(32))
	fetch(t, small)

	tests := []struct {
		name        string
		repo        *Repo
		commit      string
		want        map[string]string
		wantRefused []string
	}{
		{"an older commit has its own content and no status files", r, first,
			map[string]string{"nodes/a.json": `{"name":"a"}`, "fleetwave.json": `{"kind":"config"}`}, nil},
		{"a newer commit has the new content", r, second,
			map[string]string{"nodes/a.json": `{"name":"a2"}`, "fleetwave.json": `{"kind":"config"}`, "big.txt": strings.Repeat("x", 64)}, nil},
		{"a symbolic link is refused, not followed", r, third,
			map[string]string{"nodes/a.json": `{"name":"a2"}`, "fleetwave.json": `{"kind":"config"}`, "big.txt": strings.Repeat("x", 64)}, []string{"nodes/evil.json"}},
		{"a file over the size limit is refused", small, second,
			map[string]string{"nodes/a.json": `{"name":"a2"}`, "fleetwave.json": `{"kind":"config"}`}, []string{"big.txt"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, refused, err := tc.repo.Files(context.Background(), tc.commit)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != len(tc.want) {
				t.Fatalf("got %d files %v, want %d", len(files), keys(files), len(tc.want))
			}
			for p, want := range tc.want {
				if string(files[p]) != want {
					t.Fatalf("%s = %q, want %q", p, files[p], want)
				}
			}
			var paths []string
			for _, fe := range refused {
				paths = append(paths, fe.Path)
				if fe.Msg == "" {
					t.Fatalf("refusal of %s has no message", fe.Path)
				}
			}
			if !slices.Equal(paths, tc.wantRefused) {
				t.Fatalf("refused %v, want %v", refused, tc.wantRefused)
			}
		})
	}

	if _, _, err := r.Files(context.Background(), "not-a-hash"); err == nil {
		t.Fatal("Files accepted a malformed commit")
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestChangedPathsAndStatusOnly(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}", "blocks/b.json": "{}"})
	r := open(t, url)
	c0 := fetch(t, r)
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"x":1}`, "nodes/c.json": "{}"}, []string{"blocks/b.json"}, "Human change")
	c1 := fetch(t, r)
	c2, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("ok\n")}, "Status")
	if err != nil {
		t.Fatal(err)
	}
	gittest.Push(t, url, nil, []string{"status"}, "Drop status")
	c3 := fetch(t, r)
	gittest.Push(t, url, map[string]string{"status": "a file, not the status dir"}, nil, "Tricky")
	c4 := fetch(t, r)

	tests := []struct {
		name       string
		from, to   string
		paths      []string
		statusOnly bool
	}{
		{"a human commit changes object files", c0, c1, []string{"blocks/b.json", "nodes/a.json", "nodes/c.json"}, false},
		{"the hub's commit changes only status files", c1, c2, []string{"status/summary.yaml"}, true},
		{"a person's commit touching only status/ is status-only too", c2, c3, []string{"status/summary.yaml"}, true},
		{"a file named status is not under status/", c3, c4, []string{"status"}, false},
		{"from the empty tree every file is new", "", c0, []string{"blocks/b.json", "nodes/a.json"}, false},
		{"a commit compared with itself changes nothing", c1, c1, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			paths, err := r.ChangedPaths(context.Background(), tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(paths, tc.paths) {
				t.Fatalf("ChangedPaths = %v, want %v", paths, tc.paths)
			}
			only, err := r.StatusOnly(context.Background(), tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if only != tc.statusOnly {
				t.Fatalf("StatusOnly = %v, want %v", only, tc.statusOnly)
			}
		})
	}
}

func TestCommitInfoDescribesTheAuthor(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	r := open(t, url)
	head := gittest.Push(t, url, map[string]string{"b.json": "{}"}, nil, "Add b\n\nWith a body.")
	fetch(t, r)
	info, err := r.CommitInfo(context.Background(), head)
	if err != nil {
		t.Fatal(err)
	}
	if info.Hash != head || info.Author != gittest.AuthorName || info.Email != gittest.AuthorEmail || info.Subject != "Add b" || info.When.IsZero() {
		t.Fatalf("CommitInfo = %+v", info)
	}
}

func TestConcurrentCallsAreSerialized(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}", "nodes/b.json": "{}"})
	r := open(t, url)
	head := fetch(t, r)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 4 {
			case 0:
				_, _, err := r.Fetch(context.Background())
				errs <- err
			case 1:
				_, _, err := r.Files(context.Background(), head)
				errs <- err
			case 2:
				_, err := r.Generations(context.Background(), head)
				errs <- err
			case 3:
				_, err := r.ChangedPaths(context.Background(), "", head)
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestAClosedRepoRefusesWork(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	r := open(t, url)
	head := fetch(t, r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"Fetch":       func() error { _, _, err := r.Fetch(context.Background()); return err },
		"Files":       func() error { _, _, err := r.Files(context.Background(), head); return err },
		"Generations": func() error { _, err := r.Generations(context.Background(), head); return err },
		"CommitStatus": func() error {
			_, err := r.CommitStatus(context.Background(), map[string][]byte{"status/x": nil}, "m")
			return err
		},
	}
	for name, call := range calls {
		if err := call(); err == nil {
			t.Fatalf("%s after Close succeeded", name)
		}
	}
}

func TestOpenFollowsAnotherBranchOfAnExistingMirror(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"a.json": "{}"})
	bare := strings.TrimPrefix(url, "file://")
	gittest.Git(t, bare, "branch", "release", "main")
	dir := filepath.Join(t.TempDir(), "mirror")
	first := openAt(t, url, dir)
	_ = first.Close()
	r, err := Open(context.Background(), Source{URL: url, Branch: "release", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if head := fetch(t, r); head != gittest.Head(t, url) {
		t.Fatalf("release head %s, want %s", head, gittest.Head(t, url))
	}
}
