package gitsync

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// packTestFiles are status files of the sizes a pack entry's header and
// zlib stream have edges at (empty, one header byte, 64 KiB deflate
// blocks), one incompressible, and enough small ones to span many chunks
// and make a pack storePack writes itself.
func packTestFiles() map[string][]byte {
	rnd := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 5000)
	for i := range noise {
		noise[i] = byte(rnd.Uint32())
	}
	files := map[string][]byte{"status/noise.bin": noise}
	for _, n := range []int{0, 1, 15, 16, 17, 127, 128, 2047, 2048, 70_000} {
		files[fmt.Sprintf("status/size/%06d.yaml", n)] = bytes.Repeat([]byte("abcdefghij\n"), n/11+1)[:n]
	}
	for i := range directPackMin {
		files[statusPath(i)] = statusContent(1, i)
	}
	return files
}

func TestEncodePackIsWhatGitReads(t *testing.T) {
	isolateGit(t)
	bare := filepath.Join(t.TempDir(), "store.git")
	gittest.Git(t, "", "init", "--quiet", "--bare", bare)
	repo, err := git.PlainOpen(bare)
	if err != nil {
		t.Fatal(err)
	}
	files := packTestFiles()
	ov, commit := statusCommitIn(t, repo.Storer, files)
	objs := make([]plumbing.EncodedObject, len(ov.order))
	for i, h := range ov.order {
		objs[i] = ov.objs[h]
	}

	serial, err := encodePack(objs, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{2, 3, 16} {
		p, err := encodePack(objs, workers)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p.data, serial.data) || p.sum != serial.sum || !slices.Equal(p.hashes, serial.hashes) {
			t.Fatalf("%d workers encode another pack than one", workers)
		}
	}

	stored, err := ov.flush()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored.data, serial.data) {
		t.Fatal("flush stored another pack than encodePack makes")
	}
	// git accepts the pack and its index as written: checksums, offsets,
	// CRCs (verify-pack), and every object id is the hash of its content
	// (fsck recomputes them)
	packFile := filepath.Join(bare, "objects", "pack", "pack-"+stored.sum.String()+".pack")
	gittest.Git(t, bare, "verify-pack", packFile)
	gittest.Git(t, bare, "update-ref", "refs/heads/main", commit.String())
	gittest.Git(t, bare, "fsck", "--strict", "--no-progress", "--no-dangling")
	if got := strings.Count(gittest.Git(t, bare, "rev-list", "--objects", "--all"), "\n") + 1; got != len(objs) {
		t.Fatalf("git reaches %d objects from the commit, the pack has %d", got, len(objs))
	}
	for _, p := range []string{"status/noise.bin", "status/size/000000.yaml", "status/size/070000.yaml", statusPath(3)} {
		cmd := gittest.Git(t, bare, "rev-parse", "main:"+p)
		want := gitHashObject(t, files[p])
		if cmd != want {
			t.Fatalf("%s: blob %s in the tree, git hash-object says %s", p, cmd, want)
		}
	}
	// go-git sees the pack without reopening the repository
	for p, data := range files {
		c, err := repo.CommitObject(commit)
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.File(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		got, err := f.Contents()
		if err != nil || got != string(data) {
			t.Fatalf("%s reads back %d bytes, %v; want %d bytes", p, len(got), err, len(data))
		}
	}

	t.Run("storing the same pack again keeps the files", func(t *testing.T) {
		if err := storePack(repo.Storer, stored, objs); err != nil {
			t.Fatal(err)
		}
		gittest.Git(t, bare, "fsck", "--strict", "--no-progress", "--no-dangling")
	})

	t.Run("a pack found in place when staged and gone when installed is stored anew", func(t *testing.T) {
		staged, err := stagePack(repo.Storer, stored, objs)
		if err != nil {
			t.Fatal(err)
		}
		if staged == nil || staged.tmpIdx != "" {
			t.Fatalf("staged %+v, want the pack found in place", staged)
		}
		// a compaction merged it meanwhile (its objects now in no pack)
		for _, ext := range []string{".pack", ".idx"} {
			if err := os.Remove(strings.TrimSuffix(packFile, ".pack") + ext); err != nil {
				t.Fatal(err)
			}
		}
		if err := installPack(repo.Storer, stored, objs, staged); err != nil {
			t.Fatal(err)
		}
		gittest.Git(t, bare, "fsck", "--strict", "--no-progress", "--no-dangling")
	})
}

// statusCommitIn builds a root commit of files in an overlay of s, not
// written to s yet.
func statusCommitIn(t *testing.T, s storer.EncodedObjectStorer, files map[string][]byte) (*overlay, plumbing.Hash) {
	t.Helper()
	ov := newOverlay(s)
	tree, err := editTree(ov, plumbing.ZeroHash, files)
	if err != nil {
		t.Fatal(err)
	}
	sig := object.Signature{Name: "hub", Email: "hub@example.com", When: testStart}
	commit, err := writeCommit(ov, tree, nil, sig, sig, "Status\n")
	if err != nil {
		t.Fatal(err)
	}
	return ov, commit
}

func gitHashObject(t *testing.T, data []byte) string {
	t.Helper()
	return gitIn(t, t.TempDir(), string(data), nil, "hash-object", "-t", "blob", "--stdin")
}

func TestCommitStatusRetriesWhenTheRemoteRefusesTheUpdate(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)

	// a person pushes after the remote advertised its tip to the hub: only
	// the remote's own compare-and-swap can refuse the hub's update
	calls := 0
	r.afterAdvertise = func() {
		if calls++; calls == 1 {
			gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
		}
	}
	res, err := r.WriteStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if err != nil || res.Attempts != 2 {
		t.Fatalf("WriteStatus = %+v, %v; want success on the second attempt", res, err)
	}
	if got, want := gittest.Log(t, url), []string{"Status", "Human change", "Initial commit"}; !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q (nothing lost, nothing forced)", got, want)
	}
	if gittest.Head(t, url) != res.Commit {
		t.Fatalf("head %s, status commit %s", gittest.Head(t, url), res.Commit)
	}
	gittest.Git(t, bareOf(url), "fsck", "--strict", "--no-progress")
}

func TestStatusBranchCreatedAfterTheAdvertisementIsNotOverwritten(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url, WithStatusBranch(testStatusBranch))
	var human string
	r.afterAdvertise = func() {
		if human == "" {
			human = pushBranch(t, url, testStatusBranch, map[string]string{"status/notes.yaml": "mine\n"}, "Person creates the branch")
		}
	}
	res, err := r.WriteStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, "Status")
	if err != nil || res.Attempts != 2 {
		t.Fatalf("WriteStatus = %+v, %v", res, err)
	}
	if parent := gittest.Git(t, bareOf(url), "rev-parse", res.Commit+"^"); parent != human {
		t.Fatalf("status commit built on %s, want %s", parent, human)
	}
}

// TestMirrorPackIsComplete checks the mirror after status commits: git
// finds every object the hub wrote, and a fresh go-git handle reads them.
func TestMirrorPackIsComplete(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	var last string
	for run := range 4 {
		// big commits are written as pack files, small ones through
		// go-git's pack writer: both must leave go-git's index right
		n := 300
		if run%2 == 0 {
			n = directPackMin + 10
		}
		files := map[string][]byte{}
		for i := range n {
			files[statusPath(i)] = statusContent(run, i)
		}
		c, err := r.CommitStatus(context.Background(), files, fmt.Sprintf("Status %d", run))
		if err != nil {
			t.Fatal(err)
		}
		last = c
	}
	gittest.Git(t, dir, "fsck", "--strict", "--no-progress", "--no-dangling")
	other, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := other.CommitObject(plumbing.NewHash(last))
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.File(statusPath(299))
	if err != nil {
		t.Fatal(err)
	}
	rd, err := f.Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if got, _ := io.ReadAll(rd); !bytes.Equal(got, statusContent(3, 299)) {
		t.Fatalf("mirror reads %q", got)
	}
}

func TestFlushIntoOtherStorages(t *testing.T) {
	isolateGit(t)
	bare := filepath.Join(t.TempDir(), "store.git")
	gittest.Git(t, "", "init", "--quiet", "--bare", bare)
	repo, err := git.PlainOpen(bare)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]storer.EncodedObjectStorer{
		// a storage that takes packs but is not go-git's filesystem one
		"pack writer":      packWriterStorage{repo.Storer},
		"object by object": memory.NewStorage(),
	} {
		t.Run(name, func(t *testing.T) {
			files := packTestFiles()
			ov := newOverlay(s)
			tree, err := editTree(ov, plumbing.ZeroHash, files)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ov.flush(); err != nil {
				t.Fatal(err)
			}
			for p, data := range files {
				h, err := entryAt(s, tree, p)
				if err != nil || h.IsZero() {
					t.Fatalf("%s: %s, %v", p, h, err)
				}
				b, err := object.GetBlob(s, h)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				rd, err := b.Reader()
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(rd)
				_ = rd.Close()
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s reads back %d bytes, %v; want %d", p, len(got), err, len(data))
				}
			}
		})
	}
}

// packWriterStorage hides the filesystem storage's type, leaving its pack
// writer.
type packWriterStorage struct {
	storer.EncodedObjectStorer
}

func (s packWriterStorage) PackfileWriter() (io.WriteCloser, error) {
	return s.EncodedObjectStorer.(storer.PackfileWriter).PackfileWriter()
}

// TestStorePackRegistersItsIndex: a pack storePack writes beside the
// others is read at once through a storage that loaded its pack indexes
// before, without reloading them (registerPack), and through a new
// storage on the same directory from the index file. Both are opened as
// the mirror is (mirrorStorage).
func TestStorePackRegistersItsIndex(t *testing.T) {
	isolateGit(t)
	bare := bareOf(gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"}))
	gittest.Git(t, bare, "repack", "-a", "-d", "-q") // its objects in a pack
	open := func() *git.Repository {
		r, err := git.Open(mirrorStorage(bare), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	repo := open()
	if _, _, ok := packDir(repo.Storer); !ok {
		t.Fatal("the mirror's storage is not one storePack writes packs into")
	}
	head, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	// read a packed object: go-git loads the indexes of the packs there are
	if _, err := repo.CommitObject(head.Hash()); err != nil {
		t.Fatal(err)
	}
	files := packTestFiles()
	ov, commit := statusCommitIn(t, repo.Storer, files)
	if _, err := ov.flush(); err != nil {
		t.Fatal(err)
	}
	packs, err := filepath.Glob(filepath.Join(bare, "objects", "pack", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range packs {
		if strings.HasPrefix(filepath.Base(p), "tmp_") {
			t.Fatalf("%s left in the pack directory", filepath.Base(p))
		}
	}
	for i, r := range []*git.Repository{repo, open()} {
		c, err := r.CommitObject(commit)
		if err != nil {
			t.Fatalf("storage %d: commit of the new pack: %v", i, err)
		}
		for p, data := range files {
			f, err := c.File(p)
			if err != nil {
				t.Fatalf("storage %d: %s: %v", i, p, err)
			}
			got, err := f.Contents()
			if err != nil || got != string(data) {
				t.Fatalf("storage %d: %s reads back %d bytes, %v; want %d bytes", i, p, len(got), err, len(data))
			}
		}
	}
}
