package gitsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/laps"
)

const (
	pushBackoffBase = 100 * time.Millisecond
	pushBackoffMax  = 2 * time.Second
)

// CommitStatus writes files on top of the remote tip and pushes the result
// as one commit: on the tracked branch, or on the status branch when one is
// configured (WithStatusBranch; the tracked branch is then never written).
// Every path must be a clean relative path under status/; a nil value
// deletes the file (or the whole directory at that path), any other value,
// even empty, is the file's content. message is the full commit message
// (StatusMessage formats one with trailers).
//
// The commit is built with plumbing (no worktree), authored and committed
// by the configured author at the clock's time. The push carries a lease on
// the tip it was built on; when another pusher moved the branch in between,
// CommitStatus fetches again and rebuilds on the new tip, up to the retry
// limit with exponential backoff, and returns an error wrapping ErrPushRaces
// after the last attempt. It never force-pushes, so nobody's commit is lost.
//
// When the files change nothing (the tree equals the tip's), no commit is
// made and the returned hash is "". It is WriteStatus without the report.
func (r *Repo) CommitStatus(ctx context.Context, files map[string][]byte, message string) (commit string, err error) {
	res, err := r.WriteStatus(ctx, files, message)
	return res.Commit, err
}

// StatusResult reports what WriteStatus did.
type StatusResult struct {
	// Commit is the pushed status commit, "" when nothing changed.
	Commit string
	// Attempts is how many times the commit was built and pushed.
	Attempts int
	// Overwritten lists the status/ paths someone else changed since the
	// hub's previous status commit and that this commit set back: the
	// hub is the only writer of status/. Files in the call get their new
	// content; other changed paths get the content of the hub's previous
	// commit (a file the person added is removed).
	Overwritten []string
	// Steps is how long each step of the write took, in order, summed
	// over the attempts: fetch (the mirror's lock, the fetch, the
	// branch's tip and the fence check), edit (the new trees), encode
	// (compression), store (the lock again, the objects into the
	// mirror), push and record (the mirror's ref).
	Steps []Step
}

// Step is the time one named step of a call took.
type Step = laps.Step

// checkFence refuses a message whose fence trailer is below the newest
// fence trailer on base's first-parent history (ownCommitSearch commits).
func (r *Repo) checkFence(ctx context.Context, base statusBase, message string) error {
	if base.commit == nil {
		return nil
	}
	mine := int64(-1)
	for _, t := range ParseTrailers(message) {
		if t.Key == TrailerFence {
			if v, err := strconv.ParseInt(t.Value, 10, 64); err == nil {
				mine = v
			}
		}
	}
	if mine < 0 {
		return nil // not a fenced writer
	}
	v, err := r.latestTrailer(ctx, base.commit.Hash, TrailerFence, ownCommitSearch)
	if err != nil || v == "" {
		return err
	}
	if theirs, err := strconv.ParseInt(v, 10, 64); err == nil && theirs > mine {
		return fmt.Errorf("%w: fence %d, branch has %d", ErrStaleFence, mine, theirs)
	}
	return nil
}

// ownCommitSearch bounds how far back WriteStatus looks for the hub's
// previous status commit on the first-parent history.
const ownCommitSearch = 64

// WriteStatus is CommitStatus reporting what it did. Besides the files
// given, it sets back every path under status/ that someone else changed
// since the hub's previous status commit (the newest commit on the branch
// written to, tracked or status, authored and committed by the configured
// identity, among the last 64), logs each at warn level ("human edit under
// status/ overwritten", field "path") and lists them in Overwritten. A failed fetch or push (remote
// down) returns the error and changes nothing; calling again with the
// same files once the remote is back writes them.
func (r *Repo) WriteStatus(ctx context.Context, files map[string][]byte, message string) (StatusResult, error) {
	edits := make(map[string][]byte, len(files))
	for p, data := range files {
		if err := checkStatusPath(p); err != nil {
			return StatusResult{}, err
		}
		edits[p] = data
	}
	if len(edits) == 0 {
		return StatusResult{}, nil
	}
	if strings.TrimSpace(message) == "" {
		return StatusResult{}, errors.New("status commit message is empty")
	}
	// One status commit at a time; the mirror's lock only while the commit
	// is built and recorded, not while the remote takes it: a push of a
	// large status commit (the remote indexes every object) would hold
	// back a sync of the tracked branch for as long.
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	branchRef := plumbing.NewBranchReferenceName(r.StatusBranch())
	steps := laps.Begin(time.Now())
	for attempt := 1; ; attempt++ {
		b, err := r.buildStatus(ctx, edits, message, steps)
		if err != nil {
			return StatusResult{}, err
		}
		if b == nil {
			return StatusResult{Attempts: attempt, Steps: steps.Steps}, nil
		}
		if r.beforePush != nil {
			r.beforePush(attempt)
		}
		// the push requires the remote branch at the tip the commit was
		// built on; without a lease (a new status branch) it creates the
		// branch only if it is still absent: a branch someone created
		// meanwhile is a race like any other
		pctx, cancel := transportContext(ctx)
		err = r.pushPack(pctx, branchRef, b.lease, b.commit, b.pack)
		cancel()
		steps.Lap("push")
		if err == nil {
			res, err := r.statusPushed(branchRef, b, attempt)
			r.maybeCompact()
			steps.Lap("record")
			res.Steps = steps.Steps
			return res, err
		}
		if ctx.Err() != nil {
			return StatusResult{}, ctx.Err()
		}
		if !isPushRace(err) {
			return StatusResult{}, r.translate("push", err)
		}
		if attempt >= r.opts.pushRetries {
			if r.refLocked(branchRef, err) {
				// not a race that ends: a push into the remote was cut (a
				// killed process) and left the ref's lock file behind
				return StatusResult{}, fmt.Errorf("%w: %d attempts: the remote's %s stays locked (%v): a push into it was interrupted and left its lock file; if no push is running, remove %s.lock in the remote repository",
					ErrPushRaces, attempt, branchRef, err, branchRef)
			}
			return StatusResult{}, fmt.Errorf("%w: %d attempts, last: %v", ErrPushRaces, attempt, err)
		}
		wait := min(pushBackoffBase<<(attempt-1), pushBackoffMax)
		r.opts.log.Warn().Err(err).Int("try", attempt).Int64("backoff_ms", wait.Milliseconds()).Msg("status push raced, rebuilding on the new tip")
		select {
		case <-ctx.Done():
			return StatusResult{}, ctx.Err()
		case <-time.After(wait): // a network retry delay: real time, whatever clock stamps the commits
		}
	}
}

// statusBuild is a status commit written into the mirror, not pushed.
type statusBuild struct {
	lease       plumbing.Hash // the remote branch's tip it is built on (zero: a new branch)
	localRef    plumbing.ReferenceName
	commit      plumbing.Hash
	pack        *encodedPack
	files       int
	overwritten []string
}

// buildStatus fetches, builds the status commit of edits on the status
// branch's tip and writes it into the mirror; nil when the tree would not
// change. It holds mu while it fetches and reads the status branch's tip,
// and to put the new pack in place, not while it builds the new trees
// (each object it reads takes mu on its own), compresses them or writes
// and syncs the pack's files: at 100,000 nodes a status commit edits
// trees of tens of thousands of entries, compresses for a second of CPU
// and writes megabytes, on a loaded hub seconds in which a sync of the
// tracked branch waited (a pushed commit's fetch waited 632 ms for the
// writing of a status pack).
func (r *Repo) buildStatus(ctx context.Context, edits map[string][]byte, message string, steps *laps.Laps) (*statusBuild, error) {
	b, objs, written, err := r.buildStatusObjects(ctx, edits, message, steps)
	if err != nil || b == nil {
		return nil, err
	}
	if err := objs.encode(); err != nil {
		return nil, fmt.Errorf("store status objects: %w", err)
	}
	steps.Lap("encode")
	defer steps.Lap("store")
	s, err := r.storage("buildStatus: storage")
	if err != nil {
		return nil, err
	}
	staged, err := objs.stage(s)
	if err != nil {
		return nil, fmt.Errorf("store status objects: %w", err)
	}
	if r.afterStage != nil {
		r.afterStage()
	}
	defer r.lock("buildStatus")()
	if err := r.usable(); err != nil {
		staged.discard()
		return nil, err
	}
	if err := objs.install(r.repo.Storer, staged); err != nil {
		return nil, fmt.Errorf("store status objects: %w", err)
	}
	// in the mirror now, whether or not the push lands: the next status
	// commit, here or after a race, edits them again
	r.kept, b.pack = written, objs.pack
	return b, nil
}

// storage returns the mirror's object storage, taking mu (as op) only to
// read it: its pack directory, which stagePack writes into, does not
// change while the Repo is open.
func (r *Repo) storage(op string) (storer.EncodedObjectStorer, error) {
	defer r.lock(op)()
	if err := r.usable(); err != nil {
		return nil, err
	}
	return r.repo.Storer, nil
}

// statusStart is what buildStatusObjects reads under mu: the base of the
// status commit, the edits with the foreign ones restored, and the
// overlay its objects are written to.
type statusStart struct {
	localRef plumbing.ReferenceName
	base     statusBase
	all      map[string][]byte
	foreign  []string
	ov       *overlay
}

// startStatus is the first step of buildStatusObjects, under mu: fetch,
// find the base, check the fence on it, restore foreign edits.
func (r *Repo) startStatus(ctx context.Context, edits map[string][]byte, message string) (*statusStart, error) {
	defer r.lock("startStatus")()
	if err := r.usable(); err != nil {
		return nil, err
	}
	st := &statusStart{localRef: r.trackingRef()}
	if r.opts.statusBranch != "" {
		st.localRef = r.statusRef()
	}
	tracked, err := r.fetch(ctx, true)
	if err != nil {
		return nil, err
	}
	st.ov = newOverlay(r.repo.Storer)
	if st.base, err = r.statusBaseFor(tracked, st.ov); err != nil {
		return nil, err
	}
	// Checked on the very tip the push will require (the push is a
	// compare-and-swap on it), so no newer leader's commit can slip in.
	if err := r.checkFence(ctx, st.base, message); err != nil {
		return nil, err
	}
	if st.all, st.foreign, err = r.restoreForeignEdits(ctx, st.base.commit, edits); err != nil {
		return nil, err
	}
	return st, nil
}

// buildStatusObjects is the first step of buildStatus: the commit built
// in memory, its new objects (to encode and store), and the trees it
// wrote (kept once they are stored). Its reads take mu one by one
// (lockedObjects); the trees kept from the last status commit are read
// without it (WriteStatus calls, the only ones to use them, are
// serialized).
func (r *Repo) buildStatusObjects(ctx context.Context, edits map[string][]byte, message string, steps *laps.Laps) (*statusBuild, *newObjects, map[plumbing.Hash]*object.Tree, error) {
	st, err := r.startStatus(ctx, edits, message)
	steps.Lap("fetch")
	if err != nil {
		return nil, nil, nil, err
	}
	if r.beforeEdit != nil {
		r.beforeEdit()
	}
	ov, base := st.ov, st.base
	ov.base = lockedObjects{r: r, op: "buildStatusObjects: read object"}
	ed := &treeEditor{s: ov, read: func(h plumbing.Hash) (*object.Tree, error) {
		if t := r.kept[h]; t != nil {
			return t, nil
		}
		return object.GetTree(ov, h)
	}}
	tree, err := ed.edit(base.tree, st.all)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("build status tree: %w", err)
	}
	if tree == base.tree {
		r.opts.log.Debug().Str("branch", r.StatusBranch()).Str("commit", base.lease.String()).Msg("status unchanged: nothing to commit")
		return nil, nil, nil, nil
	}
	overwritten, err := r.overwritten(base.tree, tree, st.foreign, ov)
	if err != nil {
		return nil, nil, nil, err
	}
	sig := object.Signature{Name: r.opts.authorName, Email: r.opts.authorEmail, When: r.opts.clock.Now()}
	h, err := writeCommit(ov, tree, base.parents, sig, sig, message)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("write status commit: %w", err)
	}
	objs := ov.take()
	steps.Lap("edit")
	if objs == nil {
		return nil, nil, nil, errors.New("status commit without a new object")
	}
	return &statusBuild{lease: base.lease, localRef: st.localRef, commit: h, files: len(st.all), overwritten: overwritten}, objs, ed.written, nil
}

// statusPushed records a pushed status commit in the mirror. A Fetch
// while the push ran may have moved the local ref already: to the commit
// itself, or past it (someone's commit on top); only a ref still at the
// commit's base is set to it, so none goes back. It holds mu.
func (r *Repo) statusPushed(branch plumbing.ReferenceName, b *statusBuild, attempt int) (StatusResult, error) {
	defer r.lock("statusPushed")()
	res := StatusResult{Commit: b.commit.String(), Attempts: attempt, Overwritten: b.overwritten}
	if err := r.usable(); err != nil {
		return res, nil // closed meanwhile: the commit is on the remote all the same
	}
	cur, err := r.repo.Reference(b.localRef, true)
	switch {
	case errors.Is(err, plumbing.ErrReferenceNotFound) && b.lease.IsZero(), err == nil && cur.Hash() == b.lease:
		if err := r.repo.Storer.SetReference(plumbing.NewHashReference(b.localRef, b.commit)); err != nil {
			return StatusResult{}, fmt.Errorf("update tracking ref: %w", err)
		}
	case err != nil && !errors.Is(err, plumbing.ErrReferenceNotFound):
		return StatusResult{}, fmt.Errorf("read tracking ref: %w", err)
	}
	for _, p := range b.overwritten {
		r.opts.log.Warn().Str("path", p).Str("commit", b.commit.String()).Msg("human edit under status/ overwritten")
	}
	ev := r.opts.log.Info().Str("branch", branch.Short()).Str("commit", b.commit.String())
	if !b.lease.IsZero() {
		ev = ev.Str("parent", b.lease.String())
	}
	ev.Int("files", b.files).Int("try", attempt).Msg("status pushed")
	return res, nil
}

// restoreForeignEdits finds the paths under status/ that differ between
// the hub's previous status commit and tip, and returns edits extended to
// set them back to the previous commit's content, plus those paths. A nil
// tip (a status branch not created yet) has nothing to restore. The caller
// holds mu.
func (r *Repo) restoreForeignEdits(ctx context.Context, tip *object.Commit, edits map[string][]byte) (map[string][]byte, []string, error) {
	if tip == nil {
		return edits, nil, nil
	}
	own := r.lastOwnCommit(tip)
	if own == nil || own.Hash == tip.Hash {
		return edits, nil, nil
	}
	ownStatus, err := r.statusTree(own.TreeHash)
	if err != nil {
		return nil, nil, err
	}
	tipStatus, err := r.statusTree(tip.TreeHash)
	if err != nil {
		return nil, nil, err
	}
	if ownStatus == tipStatus {
		return edits, nil, nil
	}
	var changes []change
	if err := r.diffTrees(ctx, ownStatus, tipStatus, StatusDir+"/", false, &changes); err != nil {
		return nil, nil, err
	}
	all := edits
	paths := make([]string, 0, len(changes))
	for _, ch := range changes {
		paths = append(paths, ch.path)
		if _, given := edits[ch.path]; given || checkStatusPath(ch.path) != nil {
			continue
		}
		if len(all) == len(edits) {
			all = make(map[string][]byte, len(edits)+len(changes))
			for p, d := range edits {
				all[p] = d
			}
		}
		if ch.from.Hash.IsZero() || !regular(ch.from.Mode) {
			all[ch.path] = nil
			continue
		}
		data, err := readBlob(r, ch.from.Hash, MaxStatusFileSize)
		if err != nil {
			return nil, nil, fmt.Errorf("previous status %s: %w", ch.path, err)
		}
		all[ch.path] = data
	}
	return all, paths, nil
}

// lastOwnCommit returns the newest first-parent ancestor of tip (tip
// included) made by the configured identity that changed status/, nil if
// none is near. The hub's commits of people-facing files (CommitFiles)
// never change status/ and are passed over: status/ at one of them may
// hold someone else's edit.
func (r *Repo) lastOwnCommit(tip *object.Commit) *object.Commit {
	c := tip
	for range ownCommitSearch {
		if c.Committer.Email == r.opts.authorEmail && c.Committer.Name == r.opts.authorName &&
			c.Author.Email == r.opts.authorEmail && r.changesStatus(c) {
			return c
		}
		if len(c.ParentHashes) == 0 {
			return nil
		}
		p, err := r.repo.CommitObject(c.ParentHashes[0])
		if err != nil {
			return nil
		}
		c = p
	}
	return nil
}

// statusTree returns the hash of the status/ directory of root, zero when
// absent.
func (r *Repo) statusTree(root plumbing.Hash) (plumbing.Hash, error) {
	es, err := r.entries(root)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if e, ok := es[StatusDir]; ok && e.Mode == filemode.Dir {
		return e.Hash, nil
	}
	return plumbing.ZeroHash, nil
}

// overwritten returns the foreign-edited paths whose entry in the new tree
// differs from the tip's.
func (r *Repo) overwritten(tipTree, newTree plumbing.Hash, foreign []string, s storer.EncodedObjectStorer) ([]string, error) {
	var out []string
	for _, p := range foreign {
		a, err := entryAt(s, tipTree, p)
		if err != nil {
			return nil, err
		}
		b, err := entryAt(s, newTree, p)
		if err != nil {
			return nil, err
		}
		if a != b {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// entryAt returns the hash of the file at p in tree, zero when absent.
func entryAt(s storer.EncodedObjectStorer, tree plumbing.Hash, p string) (plumbing.Hash, error) {
	for {
		if tree.IsZero() {
			return plumbing.ZeroHash, nil
		}
		t, err := object.GetTree(s, tree)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		name, rest, sub := strings.Cut(p, "/")
		var found *object.TreeEntry
		for i := range t.Entries {
			if t.Entries[i].Name == name {
				found = &t.Entries[i]
				break
			}
		}
		switch {
		case found == nil:
			return plumbing.ZeroHash, nil
		case !sub:
			if found.Mode == filemode.Dir {
				return plumbing.ZeroHash, nil
			}
			return found.Hash, nil
		case found.Mode != filemode.Dir:
			return plumbing.ZeroHash, nil
		}
		tree, p = found.Hash, rest
	}
}

// refLocked reports whether a push failed on the remote ref's lock file
// rather than on a race: git's receive-pack says "cannot lock ref"; for a
// file:// remote the lock file itself is looked for.
func (r *Repo) refLocked(ref plumbing.ReferenceName, err error) bool {
	if strings.Contains(err.Error(), "cannot lock ref") {
		return true
	}
	dir, ok := strings.CutPrefix(r.remote, "file://")
	if !ok {
		return false
	}
	_, serr := os.Stat(filepath.Join(dir, filepath.FromSlash(ref.String())+".lock"))
	return serr == nil
}

// isPushRace reports whether a push failed because the remote branch moved:
// seen in the advertisement (errRemoteMoved), or refused by the remote's
// own compare-and-swap, which reports plain strings, not sentinels.
func isPushRace(err error) bool {
	if errors.Is(err, errRemoteMoved) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "non-fast-forward") ||
		strings.Contains(s, "required to be") ||
		strings.Contains(s, "failed to update ref") ||
		strings.Contains(s, "fetch first") ||
		strings.Contains(s, "cannot lock ref")
}

// checkStatusPath accepts a clean relative slash path under status/.
func checkStatusPath(p string) error {
	if err := checkRelPath(p); err != nil {
		return err
	}
	if !strings.HasPrefix(p, StatusDir+"/") {
		return fmt.Errorf("%w: %q is not under %s/", ErrUnsafePath, p, StatusDir)
	}
	return nil
}

// checkRelPath accepts a clean relative slash path whose elements cannot
// leave the repository.
func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || filepath.IsAbs(p) {
		return fmt.Errorf("%w: %q is empty or absolute", ErrUnsafePath, p)
	}
	for _, el := range strings.Split(p, "/") {
		if !safeName(el) {
			return fmt.Errorf("%w: %q", ErrUnsafePath, p)
		}
	}
	return nil
}

func writeBlob(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(data)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// writeTree writes a tree of entries, which it sorts. It encodes the tree
// itself: go-git's Tree.Encode formats each entry with fmt and checks the
// order with a comparison that builds a string per directory, 40 ms for a
// directory of 100,000 files.
func writeTree(s storer.EncodedObjectStorer, entries []object.TreeEntry) (plumbing.Hash, error) {
	sortEntries(entries)
	size := 0
	for _, e := range entries {
		size += len(e.Name) + 8 + hash.Size
	}
	buf := make([]byte, 0, size)
	for i, e := range entries {
		if e.Name == "" || strings.ContainsAny(e.Name, "/\x00") {
			return plumbing.ZeroHash, fmt.Errorf("malformed tree entry name %q", e.Name)
		}
		if i > 0 && entries[i-1].Name == e.Name {
			return plumbing.ZeroHash, fmt.Errorf("tree entry %q twice", e.Name)
		}
		buf = strconv.AppendUint(buf, uint64(e.Mode), 8)
		buf = append(buf, ' ')
		buf = append(buf, e.Name...)
		buf = append(buf, 0)
		buf = append(buf, e.Hash[:]...)
	}
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.TreeObject)
	obj.SetSize(int64(len(buf)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(buf); err != nil {
		_ = w.Close()
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// sortEntries puts es in git's tree order. An edited tree is its base's
// entries, in order, followed by the new ones: the leading run already in
// order is kept, the rest sorted and merged into it, which costs a pass
// over a directory of 100,000 files rather than a sort of it.
func sortEntries(es []object.TreeEntry) {
	i := 1
	for i < len(es) && compareEntries(es[i-1], es[i]) < 0 {
		i++
	}
	if i >= len(es) {
		return
	}
	tail := slices.Clone(es[i:])
	slices.SortFunc(tail, compareEntries)
	// merged from the back: es[:i] and tail fill es exactly
	a, b := i-1, len(tail)-1
	for k := len(es) - 1; b >= 0; k-- {
		if a >= 0 && compareEntries(es[a], tail[b]) > 0 {
			es[k], a = es[a], a-1
		} else {
			es[k], b = tail[b], b-1
		}
	}
}

// compareEntries orders tree entries as git does: by name, a directory's
// as if it ended in "/".
func compareEntries(a, b object.TreeEntry) int {
	n := min(len(a.Name), len(b.Name))
	if c := strings.Compare(a.Name[:n], b.Name[:n]); c != 0 {
		return c
	}
	// one name starts the other (names hold no "/"): the byte after the
	// shorter decides
	return cmp.Compare(entryByte(a, n), entryByte(b, n))
}

// entryByte is the byte at i of e's sort name, -1 past its end.
func entryByte(e object.TreeEntry, i int) int {
	switch {
	case i < len(e.Name):
		return int(e.Name[i])
	case i == len(e.Name) && e.Mode == filemode.Dir:
		return '/'
	}
	return -1
}

// editTree returns the hash of tree base with edits applied (path ->
// content, nil = delete). Only trees along edited paths are rewritten;
// untouched subtrees are reused by hash. A zero base is the empty tree; a
// tree left empty yields the zero hash (git has no empty subtrees).
func editTree(s storer.EncodedObjectStorer, base plumbing.Hash, edits map[string][]byte) (plumbing.Hash, error) {
	return (&treeEditor{s: s}).edit(base, edits)
}

// keptTreeMin is the number of entries from which a tree a status commit
// wrote is kept decoded for the next one (Repo.kept): a directory of
// 100,000 node documents is a 4 MB tree that every status commit edits,
// and reading it back from the pack (inflating and decoding it) cost a
// sixth of a status commit's CPU.
const keptTreeMin = 1024

// treeEditor applies edits to trees in s. read, if set, reads a base tree
// (else s does); written collects the trees of at least keptTreeMin
// entries it wrote.
type treeEditor struct {
	s       storer.EncodedObjectStorer
	read    func(plumbing.Hash) (*object.Tree, error)
	written map[plumbing.Hash]*object.Tree
}

func (ed *treeEditor) edit(base plumbing.Hash, edits map[string][]byte) (plumbing.Hash, error) {
	s := ed.s
	var entries []object.TreeEntry
	if !base.IsZero() {
		read := ed.read
		if read == nil {
			read = func(h plumbing.Hash) (*object.Tree, error) { return object.GetTree(s, h) }
		}
		t, err := read(base)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries = t.Entries
	}
	direct, deleted, sub := map[string][]byte{}, map[string]bool{}, map[string]map[string][]byte{}
	for p, data := range edits {
		if dir, rest, ok := strings.Cut(p, "/"); ok {
			if sub[dir] == nil {
				sub[dir] = map[string][]byte{}
			}
			sub[dir][rest] = data
		} else if data == nil {
			deleted[p] = true
		} else {
			direct[p] = data
		}
	}
	out := make([]object.TreeEntry, 0, len(entries)+len(direct)+len(sub))
	for _, e := range entries {
		if deleted[e.Name] {
			continue
		}
		if data, ok := direct[e.Name]; ok {
			if e.Mode == filemode.Regular && e.Hash == plumbing.Hash(blobID(data)) {
				// the same bytes: the entry stays, and no object is
				// stored or pushed again (a new leader's first status
				// write renders every node's document, most unchanged)
				out = append(out, e)
				delete(direct, e.Name)
			}
			continue // else replaced below
		}
		if se, ok := sub[e.Name]; ok {
			var childBase plumbing.Hash
			if e.Mode == filemode.Dir {
				childBase = e.Hash
			}
			h, err := ed.edit(childBase, se)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			delete(sub, e.Name)
			if !h.IsZero() {
				out = append(out, object.TreeEntry{Name: e.Name, Mode: filemode.Dir, Hash: h})
			}
			continue
		}
		out = append(out, e)
	}
	for name, data := range direct {
		h, err := writeBlob(s, data)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		out = append(out, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	for name, se := range sub {
		h, err := ed.edit(plumbing.ZeroHash, se)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if !h.IsZero() {
			out = append(out, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
		}
	}
	if len(out) == 0 {
		return plumbing.ZeroHash, nil
	}
	h, err := writeTree(s, out)
	if err == nil && len(out) >= keptTreeMin {
		if ed.written == nil {
			ed.written = map[plumbing.Hash]*object.Tree{}
		}
		ed.written[h] = &object.Tree{Hash: h, Entries: out}
	}
	return h, err
}

func writeCommit(s storer.EncodedObjectStorer, tree plumbing.Hash, parents []plumbing.Hash, author, committer object.Signature, msg string) (plumbing.Hash, error) {
	if tree.IsZero() {
		h, err := writeTree(s, nil) // the empty tree
		if err != nil {
			return plumbing.ZeroHash, err
		}
		tree = h
	}
	c := &object.Commit{Author: author, Committer: committer, Message: msg, TreeHash: tree, ParentHashes: parents}
	obj := s.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

func signature(a CommitInfo) (object.Signature, error) {
	if a.Author == "" || a.Email == "" {
		return object.Signature{}, errors.New("author name and email are required")
	}
	when := a.When
	if when.IsZero() {
		when = clock.Real{}.Now()
	}
	return object.Signature{Name: a.Author, Email: a.Email, When: when}, nil
}

// SeedBare creates a bare repository at bareDir (absent or empty) whose
// branch (default "main") holds one commit with every regular file under
// srcDir, skipping .git directories and symbolic links. The commit is built
// with plumbing, authored and committed by author (author.When, or now when
// zero), and HEAD points at the branch. It returns the commit hash.
func SeedBare(ctx context.Context, srcDir, bareDir, branch, message string, author CommitInfo) (commit string, err error) {
	if branch == "" {
		branch = defaultBranch
	}
	ref := plumbing.NewBranchReferenceName(branch)
	if err := ref.Validate(); err != nil {
		return "", fmt.Errorf("branch %q: %w", branch, err)
	}
	sig, err := signature(author)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{}
	err = filepath.WalkDir(srcDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != srcDir {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(srcDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if err := checkRelPath(rel); err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = data
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read %s: %w", srcDir, err)
	}
	repo, err := git.PlainInitWithOptions(bareDir, &git.PlainInitOptions{Bare: true, InitOptions: git.InitOptions{DefaultBranch: ref}})
	if err != nil {
		return "", fmt.Errorf("init %s: %w", bareDir, err)
	}
	ov := newOverlay(repo.Storer)
	tree, err := editTree(ov, plumbing.ZeroHash, files)
	if err != nil {
		return "", fmt.Errorf("build tree: %w", err)
	}
	h, err := writeCommit(ov, tree, nil, sig, sig, message)
	if err != nil {
		return "", fmt.Errorf("write commit: %w", err)
	}
	if _, err := ov.flush(); err != nil {
		return "", fmt.Errorf("store objects: %w", err)
	}
	if err := repo.Storer.SetReference(plumbing.NewHashReference(ref, h)); err != nil {
		return "", fmt.Errorf("set %s: %w", ref, err)
	}
	return h.String(), nil
}

// InitWorktree does what `git init -b main && git add -A && git commit -m
// message` does in dir: it creates a repository with a worktree, stages
// every file (honouring .gitignore) and commits them as author (author.When,
// or now when zero). The index matches the commit afterwards, so `git status`
// is clean. dir must not already be a repository.
func InitWorktree(dir, message string, author CommitInfo) (commit string, err error) {
	sig, err := signature(author)
	if err != nil {
		return "", err
	}
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName(defaultBranch)}})
	if err != nil {
		return "", fmt.Errorf("init %s: %w", dir, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", fmt.Errorf("worktree %s: %w", dir, err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return "", fmt.Errorf("add files in %s: %w", dir, err)
	}
	h, err := wt.Commit(message, &git.CommitOptions{Author: &sig, Committer: &sig, AllowEmptyCommits: true})
	if err != nil {
		return "", fmt.Errorf("commit in %s: %w", dir, err)
	}
	return h.String(), nil
}
