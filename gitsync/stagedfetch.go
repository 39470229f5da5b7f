package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Staged fetch. A fetch through the transport held the mirror's lock for
// as long as the remote took to pack what it sends and the mirror to
// index it: at 100,000 nodes a follower catching up with minutes of
// status history (292,142 objects) held it for 94 s, and the config
// sync, the commits' readers and the status write waited behind it. A
// staged fetch takes the lock only to read the objects its negotiation
// names (one by one, lockedObjects) and, at the end, to put the pack in
// place and move the refs: go-git fetches into a storage of its own,
// whose refs are copies of the mirror's and whose pack is written into a
// directory of the mirror that no reader looks at (stageDirPrefix). The
// transport's packs are never thin, so the staged pack stands alone.
//
// A ref moves only when the mirror's is still what it was when the fetch
// began: one moved meanwhile was moved by a newer look at the remote (a
// local fetch, the hub's own status push), which the staged fetch's older
// answer must not undo.

// stageDirPrefix names the mirror's subdirectories staged fetches write
// their packs to; Open removes those a crash left.
const stageDirPrefix = "fetch-stage-"

// FetchStatus brings the status branch alone up to the remote's, without
// holding the mirror's lock while the remote packs the history and the
// mirror indexes it: a follower catches up with the status a leader
// committed while the config sync goes on. Calls run one at a time, so a
// call made while one runs returns with at least what that one brought.
// Without a status branch configured it is Fetch: status lives in the
// tracked branch.
func (r *Repo) FetchStatus(ctx context.Context) error {
	if r.opts.statusBranch == "" {
		_, _, err := r.Fetch(ctx)
		return err
	}
	r.statusFetchMu.Lock()
	defer r.statusFetchMu.Unlock()
	unlock := r.lock("FetchStatus")
	if err := r.usable(); err != nil {
		unlock()
		return err
	}
	if _, ok := r.fetchLocal(true); ok {
		// the status branch stood still, or moved to a commit the
		// mirror holds (the hub's own)
		unlock()
		return nil
	}
	unlock()
	added, err := r.fetchStaged(ctx, []config.RefSpec{r.statusRefSpec()}, []plumbing.ReferenceName{r.statusRef()})
	switch {
	case errors.Is(err, git.NoMatchingRefSpecError{}):
		return r.dropStatusRefLocked("FetchStatus")
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.translate("fetch status branch", err)
	}
	if added {
		r.maybeCompact()
	}
	return nil
}

// fetchStaged fetches specs from the remote into a staging storage and
// puts what it brought in the mirror (see above): the pack, and the refs
// named moves (the specs' destinations). added says whether a pack was
// added. The caller does not hold mu.
func (r *Repo) fetchStaged(ctx context.Context, specs []config.RefSpec, moves []plumbing.ReferenceName) (added bool, err error) {
	st, err := r.newStage(moves)
	if err != nil {
		return false, err
	}
	defer st.remove()
	fctx, cancel := transportContext(ctx)
	defer cancel()
	err = git.NewRemote(st, &config.RemoteConfig{Name: remoteName, URLs: []string{r.remote}}).
		FetchContext(fctx, &git.FetchOptions{RemoteName: remoteName, RefSpecs: specs, Tags: git.NoTags})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// the pack's index is read without mu: at 100,000 nodes a catch-up's
	// pack indexes 292,142 objects
	packs, err := st.fetched()
	if err != nil {
		return false, err
	}
	if r.afterStagedFetch != nil {
		r.afterStagedFetch()
	}
	defer r.lock("fetchStaged")()
	if err := r.usable(); err != nil {
		return false, err
	}
	return len(packs) > 0, st.install(packs)
}

// stage is the storage a staged fetch writes to: refs in memory, seeded
// with the mirror's; objects read from the mirror under its lock; the
// pack written by go-git's writer into dir, a directory of the mirror's
// own.
type stage struct {
	*memory.Storage
	r       *Repo
	objects lockedObjects
	dir     string
	packs   *filesystem.Storage
	// was holds the mirror's refs the fetch may move, as they were when
	// it began (absent: the mirror had none).
	was map[plumbing.ReferenceName]plumbing.Hash
}

var _ storer.PackfileWriter = (*stage)(nil)

// newStage makes the staging storage of a fetch that may move the refs
// named moves, holding mu to copy the mirror's refs.
func (r *Repo) newStage(moves []plumbing.ReferenceName) (*stage, error) {
	dir, err := os.MkdirTemp(r.src.Dir, stageDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("stage a fetch: %w", err)
	}
	st := &stage{Storage: memory.NewStorage(), r: r, objects: lockedObjects{r: r, op: "fetchStaged"}, dir: dir,
		packs: filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRU(0)),
		was:   map[plumbing.ReferenceName]plumbing.Hash{}}
	unlock := r.lock("fetchStaged")
	defer unlock()
	if err := r.usable(); err != nil {
		st.remove()
		return nil, err
	}
	// the haves the negotiation offers: the mirror's two branches
	for _, name := range []plumbing.ReferenceName{r.trackingRef(), r.statusRef()} {
		ref, err := r.repo.Reference(name, true)
		if err != nil {
			continue
		}
		if err := st.Storage.SetReference(plumbing.NewHashReference(name, ref.Hash())); err != nil {
			st.remove()
			return nil, err
		}
	}
	for _, name := range moves {
		st.was[name] = plumbing.ZeroHash
		if ref, err := r.repo.Reference(name, true); err == nil {
			st.was[name] = ref.Hash()
		}
	}
	return st, nil
}

func (s *stage) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

func (s *stage) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errors.New("a staged fetch writes whole packs")
}

func (s *stage) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	return s.objects.EncodedObject(t, h)
}

func (s *stage) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("a staged fetch iterates no objects")
}

func (s *stage) HasEncodedObject(h plumbing.Hash) error { return s.objects.HasEncodedObject(h) }

func (s *stage) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	return s.objects.EncodedObjectSize(h)
}

func (s *stage) AddAlternate(string) error {
	return errors.New("a staged fetch adds no alternates")
}

// PackfileWriter writes the fetched pack and its index into the staging
// directory.
func (s *stage) PackfileWriter() (io.WriteCloser, error) {
	if err := os.MkdirAll(filepath.Join(s.dir, "objects", "pack"), 0o755); err != nil {
		return nil, err
	}
	return s.packs.PackfileWriter()
}

// fetchedPack is a pack a staged fetch wrote: its files' path without
// the extension, and its index.
type fetchedPack struct {
	base string
	p    *encodedPack
}

// fetched reads the index of each pack the fetch wrote (none when it
// brought no object).
func (s *stage) fetched() ([]fetchedPack, error) {
	idxs, err := filepath.Glob(filepath.Join(s.dir, "objects", "pack", "pack-*.idx"))
	if err != nil {
		return nil, err
	}
	var packs []fetchedPack
	for _, name := range idxs {
		p, err := readPackIndex(name)
		if err != nil {
			return nil, fmt.Errorf("staged pack index: %w", err)
		}
		if len(p.hashes) > 0 {
			packs = append(packs, fetchedPack{base: strings.TrimSuffix(name, ".idx"), p: p})
		}
	}
	return packs, nil
}

// install puts the staged packs in the mirror's pack directory, registers
// them, and moves each ref the fetch moved whose mirror ref is still what
// it was; the caller holds mu.
func (s *stage) install(packs []fetchedPack) error {
	fs, dir, ok := packDir(s.r.repo.Storer)
	if !ok && len(packs) > 0 {
		return errors.New("the mirror keeps no pack directory")
	}
	for _, fp := range packs {
		staged := &stagedPack{dir: dir, base: filepath.Join(dir, "pack-"+fp.p.sum.String()), tmpIdx: fp.base + ".idx", tmpPack: fp.base + ".pack"}
		if regularFile(staged.base+".pack") && regularFile(staged.base+".idx") {
			staged.tmpIdx, staged.tmpPack = "", "" // there already
		}
		if err := installStaged(fs, fp.p, staged); err != nil {
			return err
		}
	}
	for name, was := range s.was {
		ref, err := s.Storage.Reference(name)
		if err != nil || ref.Hash() == was {
			continue // not fetched (a spec without match), or unmoved
		}
		cur := plumbing.ZeroHash
		if c, err := s.r.repo.Reference(name, true); err == nil {
			cur = c.Hash()
		}
		if cur != was {
			continue // moved meanwhile, by a newer look at the remote
		}
		if err := s.r.repo.Storer.SetReference(plumbing.NewHashReference(name, ref.Hash())); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// remove deletes the staging directory and what is left in it.
func (s *stage) remove() { _ = os.RemoveAll(s.dir) }

// removeStages deletes the staging directories of fetches a crash
// interrupted.
func removeStages(dir string) {
	stale, _ := filepath.Glob(filepath.Join(dir, stageDirPrefix+"*"))
	for _, d := range stale {
		_ = os.RemoveAll(d)
	}
}
