package gitsync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// TestSortEntriesIsGitOrder checks sortEntries against go-git's sorter
// (git's order: a directory sorts as if its name ended in "/"), and the
// tree writeTree writes against go-git's encoding of the sorted entries,
// on trees shaped as editTree builds them: a base in order, then new
// entries, with names that start one another ("a", "a.b", "a-b", "a0") as
// files and as directories.
func TestSortEntriesIsGitOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "a.b", "a-b", "a0", "a/", "ab", "b", "node-1", "node-10", "node-1.yaml", "z", "\x7f", "é"}
	entry := func() object.TreeEntry {
		name := names[rng.IntN(len(names))]
		if name == "a/" {
			name = "a"
		}
		name += fmt.Sprint(rng.IntN(3))[:rng.IntN(2)]
		mode := filemode.Regular
		if rng.IntN(3) == 0 {
			mode = filemode.Dir
		}
		return object.TreeEntry{Name: name, Mode: mode, Hash: plumbing.NewHash(fmt.Sprintf("%040x", rng.Uint64()))}
	}
	unique := func(es []object.TreeEntry) []object.TreeEntry {
		seen := map[string]bool{}
		var out []object.TreeEntry
		for _, e := range es {
			if !seen[e.Name] {
				seen[e.Name] = true
				out = append(out, e)
			}
		}
		return out
	}
	for round := range 2000 {
		var es []object.TreeEntry
		for range rng.IntN(40) {
			es = append(es, entry())
		}
		es = unique(es)
		// a base in order, then the rest as they came
		head := rng.IntN(len(es) + 1)
		sort.Sort(object.TreeEntrySorter(es[:head]))
		got, want := slices.Clone(es), slices.Clone(es)
		sortEntries(got)
		sort.Stable(object.TreeEntrySorter(want))
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: sortEntries(%v)\n got %v\nwant %v", round, es, got, want)
		}
		// and writeTree encodes what go-git encodes
		mine, err := writeTree(memory.NewStorage(), slices.Clone(es))
		if err != nil {
			t.Fatalf("round %d: writeTree: %v", round, err)
		}
		obj := &plumbing.MemoryObject{}
		if err := (&object.Tree{Entries: want}).Encode(obj); err != nil {
			t.Fatal(err)
		}
		if mine != obj.Hash() {
			t.Fatalf("round %d: writeTree wrote %s, go-git encodes %s", round, mine, obj.Hash())
		}
	}
}

// TestStatusCommitsKeepEditingTheirLargeTrees checks that status commits
// which edit a directory of thousands of documents, kept decoded between
// commits, write the trees git writes: after each commit the remote's
// git fsck is clean and the files read back are the ones written.
func TestStatusCommitsKeepEditingTheirLargeTrees(t *testing.T) {
	isolateGit(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("fleet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), "remote.git")
	if _, err := SeedBare(context.Background(), src, bare, "main", "Seed", CommitInfo{Author: "Seeder", Email: "seed@example.com", When: testStart}); err != nil {
		t.Fatal(err)
	}
	r := open(t, gittest.URL(bare), WithStatusBranch("fleetwave/status"))
	fetch(t, r)
	want := map[string]string{}
	for run := range 4 {
		files := map[string][]byte{}
		for i := range keptTreeMin + 500 {
			if run == 0 || i%7 == run {
				p := fmt.Sprintf("status/nodes/node-%05d.yaml", i)
				data := fmt.Sprintf("node: %d\nrun: %d\n", i, run)
				files[p], want[p] = []byte(data), data
			}
		}
		if run == 2 {
			files["status/nodes/a-first.yaml"], want["status/nodes/a-first.yaml"] = []byte("first\n"), "first\n"
			files["status/nodes/sub/x.yaml"], want["status/nodes/sub/x.yaml"] = []byte("sub\n"), "sub\n"
		}
		if run == 3 {
			files["status/nodes/node-00003.yaml"] = nil
			delete(want, "status/nodes/node-00003.yaml")
		}
		res, err := r.WriteStatus(context.Background(), files, fmt.Sprintf("status: run %d", run))
		if err != nil || res.Commit == "" {
			t.Fatalf("run %d: WriteStatus = %+v, %v", run, res, err)
		}
		if run > 0 && len(r.kept) == 0 {
			t.Fatalf("run %d: no large tree kept for the next commit", run)
		}
		gittest.Git(t, bare, "fsck", "--strict", "--no-dangling")
	}
	// what git lists is what was written: every path with its blob
	var listed []string
	for _, line := range strings.Split(gittest.Git(t, bare, "ls-tree", "-r", "refs/heads/fleetwave/status", "status/nodes"), "\n") {
		listed = append(listed, line)
	}
	var expect []string
	for p, data := range want {
		expect = append(expect, fmt.Sprintf("100644 blob %s\t%s", plumbing.ComputeHash(plumbing.BlobObject, []byte(data)), p))
	}
	slices.Sort(expect)
	slices.Sort(listed)
	if !slices.Equal(listed, expect) {
		t.Fatalf("status/nodes on the remote: %d entries, want %d; first listed %q, first wanted %q", len(listed), len(expect), listed[0], expect[0])
	}
}
