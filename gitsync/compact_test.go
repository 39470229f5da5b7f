package gitsync

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// TestMirrorPacksAreCompacted runs a hub's life in fast forward: pushes
// fetched and status commits written, each adding a pack to the mirror.
// The mirror never holds compactAt packs after an operation, every file
// and status stays readable by go-git, and git itself finds the mirror
// whole (fsck --full).
func TestMirrorPacksAreCompacted(t *testing.T) {
	url, dir, r := mirrorOf(t, map[string]string{"nodes/a.json": `{"n": 0}`})
	ctx := context.Background()
	packDir := filepath.Join(dir, "objects", "pack")
	count := func() int {
		t.Helper()
		packs, err := listPacks(packDir)
		if err != nil {
			t.Fatal(err)
		}
		return len(packs)
	}
	most, compacted := 0, false
	for i := 1; i <= 2*compactAt; i++ {
		before := count()
		if i%3 == 0 {
			gittest.Push(t, url, map[string]string{"nodes/a.json": fmt.Sprintf(`{"n": %d}`, i)}, nil, fmt.Sprintf("change %d", i))
			fetch(t, r)
		} else {
			files := map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "round: %d\n", i)}
			if _, err := r.CommitStatus(ctx, files, fmt.Sprintf("Status %d", i)); err != nil {
				t.Fatal(err)
			}
			r.compacting.Wait()
		}
		after := count()
		most = max(most, after)
		if after < before {
			compacted = true
		}
	}
	if !compacted || most >= compactAt {
		t.Fatalf("packs: at most %d after an operation, compacted %v (compactAt %d)", most, compacted, compactAt)
	}
	head := fetch(t, r)
	files, problems, err := r.Files(ctx, head)
	if err != nil || len(problems) != 0 {
		t.Fatalf("files at %s: %v %v", head, problems, err)
	}
	if got, want := string(files["nodes/a.json"]), fmt.Sprintf(`{"n": %d}`, 2*compactAt/3*3); got != want {
		t.Fatalf("nodes/a.json = %q, want %q", got, want)
	}
	tip, err := r.StatusTip(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status, err := r.StatusFiles(ctx, tip)
	if err != nil || string(status["status/summary.yaml"]) != fmt.Sprintf("round: %d\n", 2*compactAt) {
		t.Fatalf("status after compaction: %q (%v)", status["status/summary.yaml"], err)
	}
	gittest.Git(t, dir, "fsck", "--full", "--strict")
	if n := gittest.Git(t, dir, "rev-list", "--all", "--objects"); strings.Count(n, "\n") < 2*compactAt {
		t.Fatalf("git lists only %d objects", strings.Count(n, "\n"))
	}
}

// TestCompactionRewritesEachObjectFewTimes plays 10,000 operations that
// each add a pack of one unit, compacting as compact does (the largest pack
// stays, geometricCut chooses among the others): the mirror never holds
// compactAt packs after an operation, and the units rewritten in all stay
// within a small multiple of those written (each one a logarithmic number
// of times). Merging every pack but the largest, as compaction did before,
// rewrote the growing second-largest pack at every compaction.
func TestCompactionRewritesEachObjectFewTimes(t *testing.T) {
	play := func(cut func([]packFile) int) (rewritten int64, most int) {
		var packs []packFile
		for range 10_000 {
			packs = append(packs, packFile{size: 1})
			if len(packs) < compactAt {
				most = max(most, len(packs))
				continue
			}
			sort.Slice(packs, func(i, j int) bool { return packs[i].size < packs[j].size })
			k := cut(packs[:len(packs)-1])
			if k >= 2 {
				merged := packFile{}
				for _, p := range packs[:k] {
					merged.size += p.size
				}
				rewritten += merged.size
				packs = append([]packFile{merged}, packs[k:]...)
			}
			most = max(most, len(packs))
		}
		return rewritten, most
	}
	rewritten, most := play(geometricCut)
	if most >= compactAt {
		t.Fatalf("%d packs after an operation (compactAt %d)", most, compactAt)
	}
	if rewritten > 20*10_000 {
		t.Fatalf("%d units rewritten for 10,000 written: more than 20 times each", rewritten)
	}
	all, _ := play(func(p []packFile) int { return len(p) })
	if all < 10*rewritten {
		t.Fatalf("merging all but the largest rewrote %d units, the geometric cut %d: want the cut to save 10x or more", all, rewritten)
	}
	t.Logf("units rewritten for 10,000 written: geometric %d, all but the largest %d", rewritten, all)
}

// bigFile is a JSON document of many lines, version v changing one line:
// git stores its versions as deltas of one another.
func bigFile(v int) string {
	var b strings.Builder
	b.WriteString("{\"v\": [\n")
	for i := range 400 {
		if i == 200 {
			fmt.Fprintf(&b, "  %d,\n", v)
			continue
		}
		fmt.Fprintf(&b, "  \"line %04d of a document long enough for git to store its versions as deltas\",\n", i)
	}
	b.WriteString("  0]}\n")
	return b.String()
}

// deltaPacks returns the mirror's packs holding at least one delta.
func deltaPacks(t *testing.T, packDir string) map[string]bool {
	t.Helper()
	packs, err := listPacks(packDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range packs {
		src, err := readRawPack(p.base)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range src.entries {
			if plumbing.ObjectType(src.data[e.Offset] >> 4 & 7).IsDelta() {
				out[p.base] = true
			}
		}
	}
	return out
}

// TestCompactionResolvesFetchedDeltas merges, besides the status commits'
// packs of whole objects (copied as they are), a fetched pack in which git
// stored versions of a file as deltas: after the compaction every version
// reads back, from go-git and from git (fsck --full), and the deltas'
// pack is gone.
func TestCompactionResolvesFetchedDeltas(t *testing.T) {
	isolateGit(t)
	// the clone's pack must stay the largest (compaction leaves it alone)
	noise := make([]byte, 64<<10)
	_, _ = rand.NewChaCha8([32]byte{3, 4}).Read(noise)
	url, dir, r := mirrorOf(t, map[string]string{"nodes/big.json": bigFile(0), "README.md": hex.EncodeToString(noise)})
	ctx := context.Background()
	// three commits fetched at once: one pack, with deltas between them
	var commits []string
	for v := 1; v <= 3; v++ {
		commits = append(commits, gittest.Push(t, url, map[string]string{"nodes/big.json": bigFile(v)}, nil, fmt.Sprintf("v%d", v)))
	}
	// packed in the remote, so that the fetch goes through upload-pack
	// (the local fetch reads loose objects, whole) and brings git's deltas
	packRemote(t, url)
	fetch(t, r)
	packDir := filepath.Join(dir, "objects", "pack")
	withDeltas := deltaPacks(t, packDir)
	if len(withDeltas) == 0 {
		t.Fatal("no fetched pack holds a delta: the test does not test what it says")
	}
	for i := 1; i <= compactAt; i++ {
		files := map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "round: %d\n", i)}
		if _, err := r.CommitStatus(ctx, files, fmt.Sprintf("Status %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	r.compacting.Wait()
	for p := range withDeltas {
		if regularFile(p + ".pack") {
			t.Fatalf("%s (with deltas) was not merged", filepath.Base(p))
		}
	}
	// the deltas were resolved, not copied: an offset delta copied could
	// point at another object once entries around it are left out
	if still := deltaPacks(t, packDir); len(still) > 0 {
		t.Fatalf("packs with deltas after the compaction: %v", still)
	}
	for v, c := range commits {
		files, problems, err := r.Files(ctx, c)
		if err != nil || len(problems) != 0 {
			t.Fatalf("files at %s: %v %v", c, problems, err)
		}
		if got := string(files["nodes/big.json"]); got != bigFile(v+1) {
			t.Fatalf("nodes/big.json at v%d: %d bytes, want %d", v+1, len(got), len(bigFile(v+1)))
		}
	}
	gittest.Git(t, dir, "fsck", "--full", "--strict")
}

// TestFetchRunsWhileTheMirrorIsCompacted: a compaction merges its packs
// without the mirror's lock, so a sync's fetch meanwhile does not wait for
// it (seconds at 100,000 nodes); the merged pack then replaces them and
// every commit stays readable.
func TestFetchRunsWhileTheMirrorIsCompacted(t *testing.T) {
	url, dir, r := mirrorOf(t, map[string]string{"nodes/a.json": `{"n": 0}`})
	ctx := context.Background()
	var commits []string
	status := func(i int) { commits = append(commits, statusRound(t, r, i)) }
	for i := 1; i < compactAt-1; i++ {
		status(i)
	}
	human := gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
	ran := false
	r.duringCompaction = func() {
		ran = true
		fetched := make(chan string, 1)
		go func() {
			head, _, err := r.Fetch(ctx)
			if err != nil {
				t.Errorf("Fetch during the compaction: %v", err)
			}
			fetched <- head
		}()
		select {
		case head := <-fetched:
			// the status commit being compacted was built on the human one
			if base, err := r.MergeBase(head, human); err != nil || base != human {
				t.Errorf("Fetch during the compaction = %s, not on top of the human commit %s (%v)", head, human, err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Fetch waited for the compaction")
		}
	}
	status(compactAt - 1) // the pack that makes compactAt: compacted
	if !ran {
		t.Fatal("no compaction ran")
	}
	packs, err := listPacks(filepath.Join(dir, "objects", "pack"))
	if err != nil || len(packs) >= compactAt {
		t.Fatalf("%d packs after the compaction (%v)", len(packs), err)
	}
	for i, c := range commits {
		data, ok, err := r.FileAt(ctx, c, "status/summary.yaml")
		if want := fmt.Sprintf("round: %d\n", i+1); err != nil || !ok || string(data) != want {
			t.Fatalf("status %d after the compaction: %q %v %v, want %q", i+1, data, ok, err, want)
		}
	}
	files, _, err := r.Files(ctx, human)
	if err != nil || string(files["nodes/b.json"]) != "{}" {
		t.Fatalf("the human commit after the compaction: %v %v", files, err)
	}
}

// TestFetchDoesNotWaitForTheCompactionItStarts: the fetch that brings the
// mirror to compactAt packs starts a compaction and returns the pushed
// commit while it runs (a sync that waited for it made the commit wait
// about a second for its snapshot at 100,000 nodes); the commit is
// readable meanwhile, and the compaction then merges the packs.
func TestFetchDoesNotWaitForTheCompactionItStarts(t *testing.T) {
	url, dir, r := mirrorOf(t, map[string]string{"nodes/a.json": `{"n": 0}`})
	ctx := context.Background()
	for i := 1; i < compactAt-1; i++ {
		statusRound(t, r, i)
	}
	human := gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Human change")
	started, release := make(chan struct{}), make(chan struct{})
	r.duringCompaction = func() {
		close(started)
		<-release
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	type fetched struct {
		head string
		err  error
	}
	done := make(chan fetched, 1)
	go func() {
		head, _, err := r.Fetch(ctx)
		done <- fetched{head, err}
	}()
	var f fetched
	select {
	case f = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Fetch waited for the compaction it started")
	}
	if f.err != nil || f.head != human {
		t.Fatalf("Fetch = %s, %v; want the human commit %s", f.head, f.err, human)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch that made compactAt packs started no compaction")
	}
	files, _, err := r.Files(ctx, f.head)
	if err != nil || string(files["nodes/b.json"]) != "{}" {
		t.Fatalf("the human commit while the compaction runs: %v %v", files, err)
	}
	close(release)
	released = true
	r.compacting.Wait()
	packs, err := listPacks(filepath.Join(dir, "objects", "pack"))
	if err != nil || len(packs) >= compactAt {
		t.Fatalf("%d packs after the compaction (%v)", len(packs), err)
	}
	if files, _, err = r.Files(ctx, human); err != nil || string(files["nodes/b.json"]) != "{}" {
		t.Fatalf("the human commit after the compaction: %v %v", files, err)
	}
}

// TestCompactionRefusesACorruptEntry flips one byte inside a status pack's
// object: the compaction fails on its CRC-32 and removes no pack (the
// damaged object stays as it was, for git fsck to find).
func TestCompactionRefusesACorruptEntry(t *testing.T) {
	_, dir, r := mirrorOf(t, map[string]string{"nodes/a.json": `{"n": 0}`})
	status := func(i int) { statusRound(t, r, i) }
	for i := 1; i < compactAt-1; i++ {
		status(i)
	}
	packDir := filepath.Join(dir, "objects", "pack")
	packs, err := listPacks(packDir)
	if err != nil || len(packs) != compactAt-1 {
		t.Fatalf("%d packs (%v), want %d", len(packs), err, compactAt-1)
	}
	sort.Slice(packs, func(i, j int) bool { return packs[i].size < packs[j].size })
	victim := packs[0].base + ".pack"
	data, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	data[packHeaderLen+3] ^= 0xff // inside the first entry's compressed bytes
	if err := os.Chmod(victim, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// the status commit that makes compactAt packs tries to compact them
	// (and logs why it could not), then a compaction is asked for directly
	status(compactAt)
	if packs, err = listPacks(packDir); err != nil || len(packs) != compactAt {
		t.Fatalf("%d packs after the last status commit (%v), want %d", len(packs), err, compactAt)
	}
	n, err := r.compact()
	if err == nil || !strings.Contains(err.Error(), "CRC-32") {
		t.Fatalf("compact = %d, %v; want a CRC-32 error", n, err)
	}
	after, err := listPacks(packDir)
	if err != nil || len(after) != len(packs) {
		t.Fatalf("%d packs after the refused compaction (%v), want all %d kept", len(after), err, len(packs))
	}
}

// mirrorOf is a mirror, fetched, of a new remote holding files: the
// remote's URL, the mirror's directory and its Repo.
func mirrorOf(t *testing.T, files map[string]string) (string, string, *Repo) {
	t.Helper()
	isolateGit(t)
	url := gittest.NewRemote(t, files)
	dir := filepath.Join(t.TempDir(), "mirror")
	r := openAt(t, url, dir)
	fetch(t, r)
	return url, dir, r
}

// statusRound commits status/summary.yaml as "round: i", waits for the
// compaction it may have started and returns the commit.
func statusRound(t *testing.T, r *Repo, i int) string {
	t.Helper()
	files := map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "round: %d\n", i)}
	c, err := r.CommitStatus(context.Background(), files, fmt.Sprintf("Status %d", i))
	if err != nil {
		t.Fatal(err)
	}
	r.compacting.Wait()
	return c
}

// TestCompactionLeavesTheIndexesLoaded: a compaction makes the storage
// read every pack's index again, and reads it itself, under the lock it
// holds, rather than leaving it to the next sync or status write (seconds
// on a busy hub at 100,000 nodes). The storage's index map (go-git's, read
// by reflection) is loaded when the compaction ends, with one entry per
// pack, and the mirror reads as before.
func TestCompactionLeavesTheIndexesLoaded(t *testing.T) {
	url, dir, r := mirrorOf(t, map[string]string{"nodes/a.json": `{"n": 0}`})
	ctx := context.Background()
	r.compactMu.Lock() // no compaction in the background: this test runs it
	for i := range compactAt + 1 {
		if i%4 == 0 {
			gittest.Push(t, url, map[string]string{"nodes/a.json": fmt.Sprintf(`{"n": %d}`, i)}, nil, fmt.Sprintf("change %d", i))
			if _, _, err := r.Fetch(ctx); err != nil {
				t.Fatal(err)
			}
		} else if _, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "round: %d\n", i)}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	r.compactMu.Unlock()
	before, err := listPacks(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	fs, _, _ := packDir(r.repo.Storer)
	r.mu.Unlock()
	n, err := r.compact()
	if err != nil || n < 2 {
		t.Fatalf("compact merged %d packs of %d (%v)", n, len(before), err)
	}
	after, err := listPacks(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	index := reflect.ValueOf(&fs.ObjectStorage).Elem().FieldByName("index")
	if !index.IsValid() {
		t.Fatal("go-git's ObjectStorage has no index field any more: this test reads it")
	}
	if index.IsNil() || index.Len() != len(after) {
		t.Fatalf("after the compaction the storage holds %d pack indexes (nil: %v), the mirror %d packs", index.Len(), index.IsNil(), len(after))
	}
	head := fetch(t, r)
	files, problems, err := r.Files(ctx, head)
	if err != nil || len(problems) != 0 || string(files["nodes/a.json"]) != fmt.Sprintf(`{"n": %d}`, compactAt/4*4) {
		t.Fatalf("files at %s after the compaction: %q %v %v", head, files["nodes/a.json"], problems, err)
	}
}
