package gitsync

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

func TestGenerationsFollowNormalizedContent(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{
		"nodes/a.json":  `{"v":1}`,
		"nodes/b.json":  `{"v":1}`,
		"blocks/c.json": `{"v":1}`,
		"README.md":     "not an object",
	})
	r := open(t, url)
	c0 := fetch(t, r)

	type step struct {
		name    string
		files   map[string]string
		deletes []string
		status  bool // written by CommitStatus instead of a person
		want    map[fleetwave.ObjectKey]int64
	}
	steps := []step{
		{name: "every object starts at generation 1",
			want: map[fleetwave.ObjectKey]int64{"nodes/a": 1, "nodes/b": 1, "blocks/c": 1}},
		{name: "a content change bumps only the changed object",
			files: map[string]string{"nodes/a.json": `{"v":2}`},
			want:  map[fleetwave.ObjectKey]int64{"nodes/a": 2, "nodes/b": 1, "blocks/c": 1}},
		{name: "a whitespace-only change normalizes away",
			files: map[string]string{"nodes/a.json": "{ \"v\" : 2 }\n", "README.md": "edited"},
			want:  map[fleetwave.ObjectKey]int64{"nodes/a": 2, "nodes/b": 1, "blocks/c": 1}},
		{name: "a status-only commit bumps nothing", status: true,
			files: map[string]string{"status/summary.yaml": "x: 1\n"},
			want:  map[fleetwave.ObjectKey]int64{"nodes/a": 2, "nodes/b": 1, "blocks/c": 1}},
		{name: "a third change makes generation 3",
			files: map[string]string{"nodes/a.json": `{"v":3}`},
			want:  map[fleetwave.ObjectKey]int64{"nodes/a": 3, "nodes/b": 1, "blocks/c": 1}},
		{name: "a deleted object disappears",
			deletes: []string{"blocks/c.json"},
			want:    map[fleetwave.ObjectKey]int64{"nodes/a": 3, "nodes/b": 1}},
		{name: "a reappearing object continues from its last generation",
			files: map[string]string{"blocks/c.json": `{"v":1}`},
			want:  map[fleetwave.ObjectKey]int64{"nodes/a": 3, "nodes/b": 1, "blocks/c": 2}},
		{name: "an unparsable file is hashed raw and still counts as a change",
			files: map[string]string{"nodes/b.json": `{broken`},
			want:  map[fleetwave.ObjectKey]int64{"nodes/a": 3, "nodes/b": 2, "blocks/c": 2}},
	}
	commits := map[string]map[fleetwave.ObjectKey]int64{}
	for i, s := range steps {
		commit := c0
		if i > 0 {
			if s.status {
				files := map[string][]byte{}
				for p, c := range s.files {
					files[p] = []byte(c)
				}
				var err error
				if commit, err = r.CommitStatus(context.Background(), files, "Status"); err != nil {
					t.Fatal(err)
				}
			} else {
				gittest.Push(t, url, s.files, s.deletes, s.name)
				commit = fetch(t, r)
			}
		}
		got := generations(t, r, commit)
		if !equalGens(got, s.want) {
			t.Fatalf("%s: generations = %v, want %v", s.name, got, s.want)
		}
		commits[commit] = s.want
	}

	t.Run("a mirror cloned from scratch computes the same generations", func(t *testing.T) {
		fresh := open(t, url)
		fetch(t, fresh)
		for commit, want := range commits {
			if got := generations(t, fresh, commit); !equalGens(got, want) {
				t.Fatalf("at %s: %v, want %v", commit, got, want)
			}
		}
	})
	t.Run("asking again for an older commit returns its own generations", func(t *testing.T) {
		if got := generations(t, r, c0); !equalGens(got, steps[0].want) {
			t.Fatalf("at the first commit: %v, want %v", got, steps[0].want)
		}
		head := fetch(t, r)
		if got := generations(t, r, head); !equalGens(got, steps[len(steps)-1].want) {
			t.Fatalf("at the tip after the older query: %v", got)
		}
	})
}

// forcePush rewrites main of url to start from commit base and then hold
// files, as a person running `git reset --hard base && git commit && git
// push --force` would.
func forcePush(t *testing.T, url, base string, files map[string]string, msg string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "rewrite")
	gittest.Git(t, "", "clone", "--quiet", url, work)
	gittest.Git(t, work, "reset", "--quiet", "--hard", base)
	if err := writeAll(work, files); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "--quiet", "-m", msg)
	gittest.Git(t, work, "push", "--quiet", "--force", "origin", "HEAD:main")
	return gittest.Git(t, work, "rev-parse", "HEAD")
}

func TestGenerationsNeverDecreaseAcrossAForcePush(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{
		"nodes/a.json": `{"v":1}`,
		"nodes/b.json": `{"v":1}`,
		"nodes/d.json": `{"v":1}`,
	})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	c0 := fetch(t, r)
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":2}`, "nodes/b.json": `{"v":2}`}, nil, "a2 b2")
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":3}`, "nodes/b.json": `{"v":3}`}, nil, "a3 b3")
	before := generations(t, r, fetch(t, r))
	if want := (map[fleetwave.ObjectKey]int64{"nodes/a": 3, "nodes/b": 3, "nodes/d": 1}); !equalGens(before, want) {
		t.Fatalf("before the rewrite: %v, want %v", before, want)
	}

	// the rewrite sets a straight to its last content (pure generation 2),
	// b to a new content (pure generation 2) and adds e
	rewritten := forcePush(t, url, c0, map[string]string{"nodes/a.json": `{"v":3}`, "nodes/b.json": `{"v":9}`, "nodes/e.json": `{}`}, "Rewrite")
	head, changed, err := r.Fetch(context.Background())
	if err != nil || !changed || head != rewritten {
		t.Fatalf("fetch after force-push = %s, %v, %v; want %s", head, changed, err, rewritten)
	}
	want := map[fleetwave.ObjectKey]int64{
		"nodes/a": 3, // same content as returned at 3: kept, not lowered to 2
		"nodes/b": 4, // new content: above the 3 already returned
		"nodes/d": 1,
		"nodes/e": 1,
	}
	tests := []struct {
		name string
		repo func() *Repo
	}{
		{"the running mirror", func() *Repo { return r }},
		{"the same mirror reopened after a restart", func() *Repo {
			_ = r.Close()
			return openAt(t, url, dir)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := generations(t, tc.repo(), rewritten); !equalGens(got, want) {
				t.Fatalf("after the rewrite: %v, want %v", got, want)
			}
		})
	}

	t.Run("changes on top of the rewrite continue from there", func(t *testing.T) {
		re := openAt(t, url, dir)
		gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":4}`}, nil, "a4")
		got := generations(t, re, fetch(t, re))
		if got["nodes/a"] != 4 || got["nodes/b"] != 4 {
			t.Fatalf("after a change on the rewritten history: %v", got)
		}
	})
}
