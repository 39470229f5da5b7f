package gitsync_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/fleetgen"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/schema"
)

// TestIncrementalSyncEqualsFullLoad follows a random sequence of commits
// (files added, changed, reformatted, deleted, renamed, made invalid,
// duplicated, replaced by a symbolic link, repaired) with one long-lived
// mirror and a Sequence of one Validator, as the hub loads the commits it
// follows, whose caches make each sync incremental, and
// checks every commit against a fresh mirror and a fresh Validator: the
// same files, refused files, snapshot or validation errors, and
// generations.
func TestIncrementalSyncEqualsFullLoad(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	ctx := context.Background()
	work := filepath.Join(t.TempDir(), "work")
	if err := fleetgen.Generate(work, 12, 3, 2, 7); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), "remote.git")
	gittest.Git(t, work, "init", "--quiet", "--initial-branch=main")
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "--quiet", "-m", "fleet")
	gittest.Git(t, "", "clone", "--quiet", "--bare", work, bare)
	gittest.Git(t, work, "remote", "add", "origin", bare)
	url := gittest.URL(bare)

	openRepo := func(dir string) *gitsync.Repo {
		r, err := gitsync.Open(ctx, gitsync.Source{URL: url, Dir: dir}, gitsync.WithNormalizer(hubNormalizer{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	newValidator := func() *schema.Validator {
		v, err := schema.New()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	inc, incSeq := openRepo(filepath.Join(t.TempDir(), "mirror")), newValidator().Sequence()
	// The full side opens its mirror again for every commit, as a hub that
	// restarts does: nothing cached in memory (cloning anew each time would
	// only add time).
	fullDir := filepath.Join(t.TempDir(), "full")

	m := &fleetModel{t: t, dir: work, rng: rand.New(rand.NewPCG(11, 3))}
	m.scan()
	const commits = 24
	valid, invalid, diffed, tellings := 0, 0, 0, 0
	var lastValid, lastLoaded *fleetwave.Snapshot
	for i := range commits {
		what := m.mutate()
		gittest.Git(t, work, "add", "-A")
		gittest.Git(t, work, "commit", "--quiet", "--allow-empty", "-m", fmt.Sprintf("commit %d: %s", i, what))
		gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")

		head, _, err := inc.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		full := openRepo(fullDir)
		if fh, _, err := full.Fetch(ctx); err != nil || fh != head {
			t.Fatalf("fetch of the full mirror: %s, %v; want %s", fh, err, head)
		}
		got := syncOnce(t, inc, incSeq, head)
		want := syncOnce(t, full, nil, head)
		if !reflect.DeepEqual(got.files, want.files) {
			t.Fatalf("commit %d (%s): incremental Files differ from a fresh mirror's: %d files, want %d", i, what, len(got.files), len(want.files))
		}
		if !reflect.DeepEqual(got.refused, want.refused) {
			t.Fatalf("commit %d (%s): refused %v, want %v", i, what, got.refused, want.refused)
		}
		if !reflect.DeepEqual(got.verr, want.verr) {
			t.Fatalf("commit %d (%s): validation errors\n%v\nwant\n%v", i, what, got.verr, want.verr)
		}
		told := 0
		if got.snap != nil && got.snap.ChangedSince != "" {
			// what the incremental side says changed since the last tree it
			// loaded: every other object is that tree's
			if lastLoaded == nil || got.snap.ChangedSince != lastLoaded.Commit {
				t.Fatalf("commit %d (%s): said to be loaded from %s, not the last tree loaded", i, what, got.snap.ChangedSince)
			}
			said := map[fleetwave.ObjectKey]bool{}
			for _, k := range got.snap.Changed {
				said[k] = true
			}
			for _, objs := range []map[fleetwave.ObjectKey]fleetwave.Object{lastLoaded.Objects, got.snap.Objects} {
				for k := range objs {
					if o, ok := got.snap.Objects[k]; !said[k] && (!ok || o != lastLoaded.Objects[k]) {
						t.Fatalf("commit %d (%s): %s changed, and the snapshot says only %v did", i, what, k, got.snap.Changed)
					}
				}
			}
			cp := *got.snap
			cp.ChangedSince, cp.Changed = "", nil // a full load does not tell
			got.snap, told = &cp, 1
		}
		if !reflect.DeepEqual(got.snap, want.snap) {
			t.Fatalf("commit %d (%s): the incremental snapshot differs from a full load", i, what)
		}
		tellings += told
		if got.loaded != nil {
			lastLoaded = got.loaded
		}
		if got.base != "" {
			diffed++
		}
		if err := full.Close(); err != nil {
			t.Fatal(err)
		}
		if got.snap != nil {
			// independently of how both sides replay history: an object
			// whose normalized content (Object.Hash, from schema) changed
			// since the last valid commit has a higher generation, and
			// none goes down
			if lastValid != nil {
				for k, o := range got.snap.Objects {
					before, ok := lastValid.Objects[k]
					if !ok {
						continue
					}
					g0, g1 := lastValid.Generations[k], got.snap.Generations[k]
					if g1 < g0 || (o.Hash != before.Hash && g1 == g0) {
						t.Fatalf("commit %d (%s): %s went from generation %d to %d, content changed: %t", i, what, k, g0, g1, o.Hash != before.Hash)
					}
				}
			}
			lastValid = got.snap
			valid++
		} else {
			invalid++
		}
	}
	// the sequence must have exercised both outcomes
	t.Logf("%d valid and %d invalid commits, %d read from the one before, %d said what changed", valid, invalid, diffed, tellings)
	if diffed < commits/2 || tellings == 0 {
		t.Fatalf("%d of %d commits read from the one before, %d said what changed: the test no longer covers it", diffed, commits, tellings)
	}
	if valid < 4 || invalid < 4 {
		t.Fatalf("%d valid and %d invalid commits: the random sequence should give at least 4 of each", valid, invalid)
	}
}

type syncResult struct {
	base    string // the commit the files were read from, "" when read whole
	files   map[string][]byte
	refused []fleetwave.FileError
	snap    *fleetwave.Snapshot
	verr    *fleetwave.ValidationError
	// loaded is the loader's snapshot, also of a commit refused for its
	// files (the Sequence's last valid tree is then that one)
	loaded *fleetwave.Snapshot
}

// syncOnce does what the hub does for commit: FilesChanged, a Sequence's
// LoadChanged (a fresh Validator's Load when seq is nil), and for a valid
// commit Generations.
func syncOnce(t *testing.T, r *gitsync.Repo, seq *schema.Sequence, commit string) syncResult {
	t.Helper()
	ctx := context.Background()
	fs, err := r.FilesChanged(ctx, commit)
	if err != nil {
		t.Fatal(err)
	}
	res := syncResult{files: fs.Files, refused: fs.Refused, base: fs.Base}
	var snap *fleetwave.Snapshot
	if seq != nil {
		snap, err = seq.LoadChanged(fs.Files, commit, fs.Base, fs.Changed)
	} else {
		v, verr := schema.New()
		if verr != nil {
			t.Fatal(verr)
		}
		snap, err = v.Load(fs.Files)
	}
	if err != nil && !errors.As(err, &res.verr) {
		t.Fatal(err)
	}
	if snap != nil {
		snap.Commit, res.loaded = commit, snap
	}
	if res.verr != nil || len(fs.Refused) > 0 {
		return res
	}
	gens, err := r.Generations(ctx, commit)
	if err != nil {
		t.Fatal(err)
	}
	snap.Commit, snap.Generations = commit, gens
	res.snap = snap
	return res
}

// fleetModel changes the node files of a working tree at random.
type fleetModel struct {
	t      *testing.T
	dir    string
	rng    *rand.Rand
	nodes  map[string]string // node name -> file extension
	broken []string          // paths made invalid, repaired by the next valid change
	next   int
}

func (m *fleetModel) scan() {
	m.nodes = map[string]string{}
	ents, err := os.ReadDir(filepath.Join(m.dir, "nodes"))
	if err != nil {
		m.t.Fatal(err)
	}
	for _, e := range ents {
		ext := filepath.Ext(e.Name())
		m.nodes[e.Name()[:len(e.Name())-len(ext)]] = ext
	}
}

func (m *fleetModel) path(name, ext string) string {
	return filepath.Join(m.dir, "nodes", name+ext)
}

func (m *fleetModel) write(p string, data string) {
	m.t.Helper()
	_ = os.Remove(p) // a symbolic link is replaced, not followed
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		m.t.Fatal(err)
	}
}

func nodeContent(name, ext, value string) string {
	fields := map[string]any{"kind": "node", "name": name, "organization": "org-000", "workspace": "ws-0000",
		"labels": map[string]any{"v": value}}
	b, _ := json.MarshalIndent(fields, "", "  ")
	switch ext {
	case ".cue":
		return string(b[1:len(b)-1]) + "\n"
	case ".yaml":
		return fmt.Sprintf("kind: node\nname: %q\norganization: org-000\nworkspace: ws-0000\nlabels:\n  v: %q\n", name, value)
	}
	return string(b) + "\n"
}

func (m *fleetModel) names() []string {
	out := make([]string, 0, len(m.nodes))
	for n := range m.nodes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (m *fleetModel) pick() string {
	n := m.names()
	return n[m.rng.IntN(len(n))]
}

var exts = []string{".cue", ".yaml", ".json"}

// mutate changes the tree and says how. About one commit in three breaks
// it; the others repair what was broken and make one to three valid
// changes.
func (m *fleetModel) mutate() string {
	if m.rng.IntN(3) == 0 {
		name := m.pick()
		ext := m.nodes[name]
		p := m.path(name, ext)
		switch m.rng.IntN(4) {
		case 0:
			m.write(p, "kind: node\nname: [\n")
			m.broken = append(m.broken, name)
			return "unparsable " + name
		case 1:
			other := exts[(slices.Index(exts, ext)+1)%3]
			m.write(m.path(name, other), nodeContent(name, other, "dup"))
			m.broken = append(m.broken, name)
			return "duplicate " + name
		case 2:
			_ = os.Remove(p)
			if err := os.Symlink("../fleetwave.cue", p); err != nil {
				m.t.Fatal(err)
			}
			m.broken = append(m.broken, name)
			return "symbolic link " + name
		default:
			// a rename without changing the name inside
			m.next++
			to := fmt.Sprintf("moved-%d", m.next)
			if err := os.Rename(p, m.path(to, ext)); err != nil {
				m.t.Fatal(err)
			}
			delete(m.nodes, name)
			m.nodes[to] = ext
			m.broken = append(m.broken, to)
			return "renamed " + name + " keeping its name"
		}
	}
	for _, name := range m.broken {
		for _, e := range exts {
			_ = os.Remove(m.path(name, e))
		}
		if ext, ok := m.nodes[name]; ok {
			m.write(m.path(name, ext), nodeContent(name, ext, "fixed"))
		}
	}
	m.broken = nil
	what := ""
	for range 1 + m.rng.IntN(3) {
		name := m.pick()
		ext := m.nodes[name]
		switch m.rng.IntN(7) {
		case 5:
			// a file under status/: never read
			m.write(filepath.Join(m.dir, "status", "note.txt"), fmt.Sprintf("status %d\n", m.rng.IntN(1000)))
			what += " status note"
		case 6:
			// a file that holds no object becomes a folder, or back
			misc := filepath.Join(m.dir, "misc")
			if st, err := os.Stat(misc); err == nil && st.IsDir() {
				_ = os.RemoveAll(misc)
				m.write(misc, "a file now\n")
			} else {
				_ = os.Remove(misc)
				m.write(filepath.Join(misc, "notes.txt"), fmt.Sprintf("notes %d\n", m.rng.IntN(1000)))
			}
			what += " misc"
		case 0:
			m.write(m.path(name, ext), nodeContent(name, ext, fmt.Sprintf("c%d", m.rng.IntN(4))))
			what += " change " + name
		case 1:
			m.next++
			n, e := fmt.Sprintf("added-%d", m.next), exts[m.rng.IntN(3)]
			m.nodes[n] = e
			m.write(m.path(n, e), nodeContent(n, e, "new"))
			what += " add " + n
		case 2:
			if len(m.nodes) > 5 {
				_ = os.Remove(m.path(name, ext))
				delete(m.nodes, name)
				what += " delete " + name
			}
		case 3:
			// a rename that keeps the object (another format, same data)
			to := exts[(slices.Index(exts, ext)+1+m.rng.IntN(2))%3]
			_ = os.Remove(m.path(name, ext))
			m.nodes[name] = to
			m.write(m.path(name, to), nodeContent(name, to, "moved"))
			what += " reformat " + name + to
		default:
			// whitespace only: the same object, the same generation
			p := m.path(name, ext)
			data, err := os.ReadFile(p)
			if err != nil {
				m.t.Fatal(err)
			}
			m.write(p, string(data)+"\n")
			what += " whitespace " + name
		}
	}
	return what
}
