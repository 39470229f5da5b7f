package gitsync

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Local fetch. A remote on this machine (a file:// URL or a path) is
// fetched without git's upload-pack when it can be: its refs are read from
// its directory, and a push of a few files left its objects there loose
// (git unpacks a push of fewer than receive.unpackLimit objects, 100 by
// default), so the objects the mirror lacks are read one by one, each
// checked against its name, and stored in the mirror as one pack before
// the tracking ref moves. A fetch through the transport runs upload-pack
// and pack-objects, two processes, whatever it brings: at 100,000 nodes
// that was three quarters of a push's sync (29-36 ms of 52-59 ms idle,
// 40-210 ms on a busy hub). A fetch that brings nothing (the hub's own
// status push seen by the watcher, a poll) now reads two refs.
//
// The status branch follows the remote's when that moved to a commit the
// mirror holds: the hub's own status commit, whose push the watcher saw
// before the hub recorded it. Anything else goes through the transport as
// before: a remote URL that is not local or whose objects are partly
// elsewhere (alternates), a status branch moved to a commit the mirror
// lacks, an object the remote keeps packed (a large
// push, a repacked repository) or that is not a commit, tree or blob, more
// than localFetchMaxObjects objects or localFetchMaxBytes bytes, or any
// error reading them. Nothing is written to the mirror before every
// object is read, so a fallback starts from the mirror as it was.

// localFetchMaxObjects and localFetchMaxBytes bound what one local fetch
// reads (held in memory until stored): a larger push goes through the
// transport, which streams it.
const (
	localFetchMaxObjects = 4096
	localFetchMaxBytes   = 64 << 20
)

// errNotLoose says the local fetch cannot bring the push: the transport's does.
var errNotLoose = errors.New("not all new objects are loose in the remote")

// fetchGitDir returns the git directory of the remote (localGitDir) when
// it is on this machine and keeps its objects itself, else "".
func fetchGitDir(remote string) string {
	dir, err := localGitDir(remote)
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(filepath.Join(dir, "objects")); err != nil || !fi.IsDir() {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "objects", "info", "alternates")); err == nil {
		return "" // some objects are kept elsewhere
	}
	return dir
}

// fetchLocal updates the tracking ref from a local remote without the
// transport (see above), and with status the status branch's; the caller
// holds mu. ok false: nothing changed in the mirror, the transport's fetch
// is to run.
func (r *Repo) fetchLocal(status bool) (tip plumbing.Hash, ok bool) {
	dir := fetchGitDir(r.remote)
	if dir == "" {
		return plumbing.ZeroHash, false
	}
	tip, err := localBranch(dir, r.src.Branch)
	if err != nil || tip.IsZero() {
		return plumbing.ZeroHash, false // no such branch: the transport says so
	}
	var statusTip plumbing.Hash // the status branch's new tip, when it moved to a commit the mirror holds
	if status && r.opts.statusBranch != "" {
		theirs, err := localBranch(dir, r.opts.statusBranch)
		if err != nil {
			return plumbing.ZeroHash, false
		}
		ours, err := r.statusHead()
		switch {
		case err != nil:
			return plumbing.ZeroHash, false
		case ours == theirs:
		case !theirs.IsZero() && r.repo.Storer.HasEncodedObject(theirs) == nil:
			// the hub's own status commit, pushed and not recorded yet
			// (the watcher saw its ref move first): its objects were
			// stored whole before the push, so the ref can follow
			statusTip = theirs
		default:
			return plumbing.ZeroHash, false // the status branch moved too: fetch both
		}
	}
	var old plumbing.Hash // the tracked tip's root tree, zero when none
	if cur, err := r.repo.Reference(r.trackingRef(), true); err == nil {
		if cur.Hash() == tip {
			if !r.followStatus(statusTip) {
				return plumbing.ZeroHash, false
			}
			r.localFetches++
			return tip, true
		}
		if c, err := r.repo.CommitObject(cur.Hash()); err == nil {
			old = c.TreeHash
		}
	}
	objs, err := r.looseNew(dir, tip, old)
	if err != nil {
		r.opts.log.Debug().Err(err).Str("commit", tip.String()).Msg("local fetch: through the transport")
		return plumbing.ZeroHash, false
	}
	if len(objs) > 0 {
		n := &newObjects{objs: objs}
		if err := n.encode(); err != nil {
			return plumbing.ZeroHash, false
		}
		if err := n.store(r.repo.Storer); err != nil {
			r.opts.log.Debug().Err(err).Msg("local fetch: store: through the transport")
			return plumbing.ZeroHash, false
		}
	}
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.trackingRef(), tip)); err != nil {
		return plumbing.ZeroHash, false
	}
	if !r.followStatus(statusTip) {
		return plumbing.ZeroHash, false
	}
	r.localFetches++
	r.opts.log.Debug().Str("commit", tip.String()).Int("objects", len(objs)).Msg("fetched from the local remote")
	return tip, true
}

// localBranch returns the tip of branch in the git directory dir of a
// local remote, read from its refs alone; zero when it has no such branch.
func localBranch(dir, branch string) (plumbing.Hash, error) {
	name := plumbing.NewBranchReferenceName(branch)
	ref, err := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRU(0)).Reference(name)
	switch {
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		return plumbing.ZeroHash, nil
	case err != nil:
		return plumbing.ZeroHash, err
	case ref.Type() != plumbing.HashReference:
		return plumbing.ZeroHash, fmt.Errorf("%s is not a commit", name)
	}
	return ref.Hash(), nil
}

// followStatus sets the mirror's status branch to commit (none: zero),
// which the mirror holds; false when the ref cannot be written.
func (r *Repo) followStatus(commit plumbing.Hash) bool {
	if commit.IsZero() {
		return true
	}
	return r.repo.Storer.SetReference(plumbing.NewHashReference(r.statusRef(), commit)) == nil
}

// looseNew returns the objects reachable from commit tip that the mirror
// lacks, read from the loose objects of the remote's git directory dir;
// errNotLoose (or another error) when one of them is not there. A tree is
// compared with the mirror's tree at the same path under old, the root
// tree of the tracked branch's tip (zero when none): an entry that did
// not change is in the mirror with all it holds, and is not looked up.
func (r *Repo) looseNew(dir string, tip, old plumbing.Hash) ([]plumbing.EncodedObject, error) {
	w := looseWalk{r: r, dir: dir, seen: map[plumbing.Hash]bool{}}
	commits := []plumbing.Hash{tip}
	for len(commits) > 0 {
		h := commits[len(commits)-1]
		commits = commits[:len(commits)-1]
		obj, err := w.read(h)
		if err != nil {
			return nil, err
		}
		if obj == nil {
			continue // in the mirror, with its history
		}
		if obj.Type() != plumbing.CommitObject {
			return nil, fmt.Errorf("object %s: a %s where a commit was expected", h, obj.Type())
		}
		var c object.Commit
		if err := c.Decode(obj); err != nil {
			return nil, fmt.Errorf("commit %s: %w", h, err)
		}
		if err := w.tree(c.TreeHash, old); err != nil {
			return nil, err
		}
		commits = append(commits, c.ParentHashes...)
	}
	return w.objs, nil
}

// looseWalk reads the new objects of a local fetch (looseNew).
type looseWalk struct {
	r    *Repo
	dir  string
	seen map[plumbing.Hash]bool
	objs []plumbing.EncodedObject
	size int64
}

// read returns object h from the remote's loose objects, nil when the
// mirror has it or this walk read it already.
func (w *looseWalk) read(h plumbing.Hash) (plumbing.EncodedObject, error) {
	if w.seen[h] {
		return nil, nil
	}
	w.seen[h] = true
	if w.r.repo.Storer.HasEncodedObject(h) == nil {
		return nil, nil
	}
	if len(w.objs) >= localFetchMaxObjects {
		return nil, fmt.Errorf("more than %d new objects", localFetchMaxObjects)
	}
	obj, err := readLoose(w.dir, h, localFetchMaxBytes-w.size)
	if err != nil {
		return nil, err
	}
	w.size += obj.Size()
	w.objs = append(w.objs, obj)
	return obj, nil
}

// tree reads tree h and what it holds that the mirror lacks; old is the
// mirror's tree at the same path (zero when none).
func (w *looseWalk) tree(h, old plumbing.Hash) error {
	if h == old {
		return nil
	}
	obj, err := w.read(h)
	if err != nil || obj == nil {
		return err
	}
	if obj.Type() != plumbing.TreeObject {
		return fmt.Errorf("object %s: a %s where a tree was expected", h, obj.Type())
	}
	var t object.Tree
	if err := t.Decode(obj); err != nil {
		return fmt.Errorf("tree %s: %w", h, err)
	}
	var before *object.Tree
	if !old.IsZero() {
		if before, err = w.r.tree(w.r.repo.Storer, old); err != nil {
			before = nil // compared with nothing: every entry is looked up
		}
	}
	for _, e := range t.Entries {
		if e.Mode == filemode.Submodule {
			continue // a commit of another repository: not an object here
		}
		var was plumbing.Hash
		if before != nil {
			if b, err := before.FindEntry(e.Name); err == nil && b.Mode == e.Mode {
				was = b.Hash
			}
		}
		if e.Hash == was {
			continue
		}
		if e.Mode == filemode.Dir {
			if err := w.tree(e.Hash, was); err != nil {
				return err
			}
			continue
		}
		obj, err := w.read(e.Hash)
		if err != nil {
			return err
		}
		if obj != nil && obj.Type() != plumbing.BlobObject {
			return fmt.Errorf("object %s: a %s where a blob was expected", e.Hash, obj.Type())
		}
	}
	return nil
}

// readLoose reads loose object h of the git directory dir, at most max
// bytes of content, and checks that its content hashes to its name.
func readLoose(dir string, h plumbing.Hash, max int64) (plumbing.EncodedObject, error) {
	name := h.String()
	f, err := os.Open(filepath.Join(dir, "objects", name[:2], name[2:]))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("object %s: %w", h, errNotLoose)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	or, err := objfile.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	defer or.Close()
	t, size, err := or.Header()
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	if size < 0 || size > max {
		return nil, fmt.Errorf("object %s: %d bytes, more than a local fetch reads", h, size)
	}
	obj := &plumbing.MemoryObject{}
	obj.SetType(t)
	buf := make([]byte, size)
	if _, err := io.ReadFull(or, buf); err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	if n, _ := or.Read(make([]byte, 1)); n > 0 {
		return nil, fmt.Errorf("object %s: longer than its header says", h)
	}
	if _, err := obj.Write(buf); err != nil {
		return nil, err
	}
	if got := obj.Hash(); got != h {
		return nil, fmt.Errorf("object %s: its content hashes to %s", h, got)
	}
	return obj, nil
}
