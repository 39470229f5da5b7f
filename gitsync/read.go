package gitsync

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/fleetwave/fleetwave"
)

// commitObject resolves a full hex hash to a commit of the mirror; the
// caller holds mu.
func (r *Repo) commitObject(commit string) (*object.Commit, error) {
	if len(commit) != 40 || !plumbing.IsHash(commit) {
		return nil, fmt.Errorf("commit %q: not a full hex hash", commit)
	}
	c, err := r.repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", commit, err)
	}
	return c, nil
}

// treeOf returns the root tree hash of commit, the zero hash for "".
func (r *Repo) treeOf(commit string) (plumbing.Hash, error) {
	if commit == "" {
		return plumbing.ZeroHash, nil
	}
	c, err := r.commitObject(commit)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return c.TreeHash, nil
}

// Files returns every regular file at commit outside status/ (path ->
// content), read from the object store. Symbolic links, submodules, files
// over the size limit and entries with unsafe names are not returned: each
// is reported as a FileError so the caller can reject the commit with a
// clear message. The error is non-nil only when the commit cannot be read.
//
// Contents are shared with the Repo's blob cache and with the maps later
// calls return: callers must not modify them. Only the blobs that the
// previous call did not return are read from the object store, so a
// commit that changes one file of thousands costs one blob read (and a
// walk of the trees, which is cheap next to reading blobs).
func (r *Repo) Files(ctx context.Context, commit string) (map[string][]byte, []fleetwave.FileError, error) {
	fs, err := r.FilesChanged(ctx, commit)
	return fs.Files, fs.Refused, err
}

// FileSet is what FilesChanged read of a commit.
type FileSet struct {
	Files   map[string][]byte // as Files returns them
	Refused []fleetwave.FileError
	// Changed lists, sorted, the paths whose file or refusal differs from
	// the FileSet of commit Base, the one the mirror read before; Base is
	// "" when this one was read whole (the first read, or one that left
	// the diff: a change under status/ or of an unsafe name).
	Base    string
	Changed []string
}

// FilesChanged is Files, and what changed since the commit it read last.
// A commit read after another is read as that one's files plus the
// paths the two trees' diff lists (identical subtrees skipped by hash):
// at 100,000 files a copy of the last map, not a walk of every tree
// entry. The result is the one a whole walk gives
// (TestIncrementalSyncEqualsFullLoad).
func (r *Repo) FilesChanged(ctx context.Context, commit string) (FileSet, error) {
	defer r.lock("FilesChanged")()
	if err := r.usable(); err != nil {
		return FileSet{}, err
	}
	c, err := r.commitObject(commit)
	if err != nil {
		return FileSet{}, err
	}
	if last := r.lastFiles; last != nil {
		next, changed, ok, err := r.filesAfter(ctx, last, c.TreeHash)
		if err != nil {
			return FileSet{}, err
		}
		if ok {
			next.commit = commit
			r.lastFiles = next
			return FileSet{Files: maps.Clone(next.files), Refused: next.refusedList(), Base: last.commit, Changed: changed}, nil
		}
	}
	files, refused, err := r.treeFiles(ctx, r.repo.Storer, c.TreeHash)
	if err != nil {
		return FileSet{}, err
	}
	r.lastFiles = &fileState{commit: commit, tree: c.TreeHash, files: maps.Clone(files), refused: refused}
	return FileSet{Files: files, Refused: refused}, nil
}

// fileState is what FilesChanged read last, kept for the next one.
type fileState struct {
	commit  string
	tree    plumbing.Hash
	files   map[string][]byte // the Repo's own: callers get copies
	refused []fleetwave.FileError
}

func (s *fileState) refusedList() []fleetwave.FileError {
	if len(s.refused) == 0 {
		return nil // as a walk that refused nothing
	}
	return slices.Clone(s.refused)
}

// filesAfter reads the files of tree from last, the state of another tree:
// ok is false when the diff cannot give what a walk gives (a change under
// status/, which the diff may descend into where the walk skips it, or
// any path with an unsafe or quoted element, which the walk reports by
// its quoted name).
func (r *Repo) filesAfter(ctx context.Context, last *fileState, tree plumbing.Hash) (*fileState, []string, bool, error) {
	var changes []change
	if err := r.diffTrees(ctx, last.tree, tree, "", true, &changes); err != nil {
		if ctx.Err() != nil {
			return nil, nil, false, err
		}
		return nil, nil, false, nil // the last tree is unreadable now: walk
	}
	changed := make([]string, 0, len(changes))
	gone := make(map[string]bool, len(changes))
	for _, ch := range changes {
		if strings.HasPrefix(ch.path, StatusDir+"/") || strings.Contains(ch.path, `"`) {
			return nil, nil, false, nil
		}
		for _, n := range strings.Split(ch.path, "/") {
			if !safeName(n) {
				return nil, nil, false, nil
			}
		}
		changed = append(changed, ch.path)
		gone[ch.path] = true
	}
	next := &fileState{tree: tree, files: last.files, refused: last.refused}
	if len(changes) == 0 {
		return next, changed, true, nil
	}
	next.files = maps.Clone(last.files)
	next.refused = slices.DeleteFunc(slices.Clone(last.refused), func(fe fleetwave.FileError) bool { return gone[fe.Path] })
	for _, ch := range changes {
		delete(next.files, ch.path)
		if ch.to.Hash.IsZero() {
			continue // gone, or a directory now: its files are changes of their own
		}
		data, fe, err := r.fileEntry(r.repo.Storer, ch.path, ch.to, r.blobs)
		if err != nil {
			return nil, nil, false, err
		}
		if fe != nil {
			next.refused = append(next.refused, *fe)
			continue
		}
		next.files[ch.path] = data
		if r.blobs != nil && len(r.blobs) < 2*len(next.files)+1024 { // bounded as a tree's blobs are
			r.blobs[ch.to.Hash] = data
		}
	}
	sort.Slice(next.refused, func(i, j int) bool { return next.refused[i].Path < next.refused[j].Path })
	sort.Strings(changed)
	return next, changed, true, nil
}

// fileEntry reads the file of entry e at path p from s: its content, or
// why it is refused. Blobs found in cache are not read again.
func (r *Repo) fileEntry(s storer.EncodedObjectStorer, p string, e object.TreeEntry, cache map[plumbing.Hash][]byte) ([]byte, *fleetwave.FileError, error) {
	if fe, ok := refuse(p, e); !ok {
		return nil, &fe, nil
	}
	if data, ok := cache[e.Hash]; ok {
		return data, nil, nil
	}
	// One look-up of the object gives its size and its content: asking
	// for its size first (EncodedObjectSize) looked for a loose object
	// before the pack, a path resolved component by component and not
	// found, then found it in the pack a second time. Reading a tree of
	// 100,000 files spent most of its time there.
	obj, err := s.EncodedObject(plumbing.BlobObject, e.Hash)
	if err != nil {
		return nil, &fleetwave.FileError{Path: p, Msg: fmt.Sprintf("unreadable blob: %v", err)}, nil
	}
	if size := obj.Size(); size > r.opts.maxFileSize {
		return nil, &fleetwave.FileError{Path: p, Msg: fmt.Sprintf("file is %d bytes, over the limit of %d bytes", size, r.opts.maxFileSize)}, nil
	}
	data, err := readObject(obj, r.opts.maxFileSize)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	return data, nil, nil
}

// treeFiles is Files for a root tree read from s (the mirror, or an
// overlay holding a commit not written yet); the caller holds mu.
//
// r.blobs holds the blobs of the tree read last, by object id. An object
// id is the hash of the content, so a cached blob is the right content in
// any tree and any storer, and it was within the size limit (a Repo's
// limit never changes) when it was cached: neither its size nor its
// content is read again. The cache is then replaced by this tree's blobs,
// which bounds it by one tree.
func (r *Repo) treeFiles(ctx context.Context, s storer.EncodedObjectStorer, tree plumbing.Hash) (map[string][]byte, []fleetwave.FileError, error) {
	prev := r.blobs
	blobs := make(map[plumbing.Hash][]byte, len(prev))
	files := make(map[string][]byte, len(prev))
	var refused []fleetwave.FileError
	err := r.walkFiles(ctx, s, tree, "", func(p string, e object.TreeEntry) error {
		data, ok := prev[e.Hash]
		if !ok || !regular(e.Mode) {
			var fe *fleetwave.FileError
			var err error
			if data, fe, err = r.fileEntry(s, p, e, blobs); err != nil {
				return err
			}
			if fe != nil {
				refused = append(refused, *fe)
				return nil
			}
		}
		blobs[e.Hash] = data
		files[p] = data
		return nil
	}, func(p, msg string) { refused = append(refused, fleetwave.FileError{Path: p, Msg: msg}) })
	if err != nil {
		return nil, nil, err
	}
	r.blobs = blobs
	sort.Slice(refused, func(i, j int) bool { return refused[i].Path < refused[j].Path })
	return files, refused, nil
}

// cachedBlob returns the content of blob h when the last Files read it.
func (r *Repo) cachedBlob(h plumbing.Hash) ([]byte, bool) {
	data, ok := r.blobs[h]
	return data, ok
}

// refuse checks a non-directory entry's mode: ok is false (with the
// reason) for anything but a regular file (fileEntry checks its size).
func refuse(p string, e object.TreeEntry) (fleetwave.FileError, bool) {
	switch e.Mode {
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
		return fleetwave.FileError{}, true
	case filemode.Symlink:
		return fleetwave.FileError{Path: p, Msg: "symbolic links are not allowed in the config repository"}, false
	case filemode.Submodule:
		return fleetwave.FileError{Path: p, Msg: "submodules are not allowed in the config repository"}, false
	}
	return fleetwave.FileError{Path: p, Msg: fmt.Sprintf("unsupported file mode %s", e.Mode)}, false
}

// readBlob reads the blob h from the mirror whole; a blob above limit
// bytes is an error.
func readBlob(r *Repo, h plumbing.Hash, limit int64) ([]byte, error) {
	obj, err := r.repo.Storer.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, err
	}
	// refused whole, never cut: a document read in part parses as
	// another one, or fails far from its cause
	if size := obj.Size(); size > limit {
		return nil, fmt.Errorf("%d bytes, over the limit of %d bytes", size, limit)
	}
	return readObject(obj, limit)
}

// MaxStatusFileSize bounds a status file read back from Git. Status files
// are the hub's own documents and grow with the fleet far beyond the
// limit on the config files people write (DefaultMaxFileSize):
// status/generation_marks.yaml holds a line per object, 2.2 MB at 100,000
// nodes.
const MaxStatusFileSize int64 = 64 << 20

// readObject reads the content of obj, at most limit+1 bytes.
func readObject(obj plumbing.EncodedObject, limit int64) ([]byte, error) {
	rd, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(io.LimitReader(rd, limit+1))
}

// walkFiles calls fn for every non-directory entry under tree outside
// status/, and bad for entries whose name could leave the repository.
func (r *Repo) walkFiles(ctx context.Context, s storer.EncodedObjectStorer, tree plumbing.Hash, prefix string, fn func(string, object.TreeEntry) error, bad func(p, msg string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := r.tree(s, tree)
	if err != nil {
		return err
	}
	for _, e := range t.Entries {
		p := prefix + e.Name
		if !safeName(e.Name) {
			bad(prefix+fmt.Sprintf("%q", e.Name), "unsafe file name")
			continue
		}
		if prefix == "" && e.Name == StatusDir && e.Mode == filemode.Dir {
			continue
		}
		if e.Mode == filemode.Dir {
			if err := r.walkFiles(ctx, s, e.Hash, p+"/", fn, bad); err != nil {
				return err
			}
			continue
		}
		if err := fn(p, e); err != nil {
			return err
		}
	}
	return nil
}

// safeName reports whether a tree entry name is one path element that
// cannot address anything outside its directory.
func safeName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\\\x00") && !strings.EqualFold(n, ".git")
}

// change is one path that differs between two trees. A zero Hash on a side
// means the path is absent there.
type change struct {
	path     string
	from, to object.TreeEntry
}

// diffTrees appends to out every file path that differs between trees a and
// b (zero hash = empty tree), reading only tree objects; identical subtrees
// are skipped by hash. With skipStatus the top-level status/ directory is
// left out (a top-level file named "status" is not). Paths come in name
// order within each directory, a directory's files before an entry of the
// same name.
func (r *Repo) diffTrees(ctx context.Context, a, b plumbing.Hash, prefix string, skipStatus bool, out *[]change) error {
	if a == b {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ea, err := r.sortedEntries(a)
	if err != nil {
		return err
	}
	eb, err := r.sortedEntries(b)
	if err != nil {
		return err
	}
	// a merge of the two sorted lists (a tree holds each name once)
	for i, j := 0, 0; i < len(ea) || j < len(eb); {
		var x, y object.TreeEntry
		inA, inB := false, false
		switch {
		case j == len(eb) || (i < len(ea) && ea[i].Name < eb[j].Name):
			x, inA = ea[i], true
			i++
		case i == len(ea) || eb[j].Name < ea[i].Name:
			y, inB = eb[j], true
			j++
		default:
			x, y, inA, inB = ea[i], eb[j], true, true
			i++
			j++
		}
		n := x.Name
		if !inA {
			n = y.Name
		}
		if skipStatus && prefix == "" && n == StatusDir && (!inA || x.Mode == filemode.Dir) && (!inB || y.Mode == filemode.Dir) {
			continue
		}
		if inA && inB && x.Hash == y.Hash && x.Mode == y.Mode {
			continue
		}
		p := prefix + n
		aDir, bDir := inA && x.Mode == filemode.Dir, inB && y.Mode == filemode.Dir
		var sub [2]plumbing.Hash
		if aDir {
			sub[0] = x.Hash
		}
		if bDir {
			sub[1] = y.Hash
		}
		if aDir || bDir {
			if err := r.diffTrees(ctx, sub[0], sub[1], p+"/", false, out); err != nil {
				return err
			}
		}
		c := change{path: p}
		if inA && !aDir {
			c.from = x
		}
		if inB && !bDir {
			c.to = y
		}
		if !c.from.Hash.IsZero() || !c.to.Hash.IsZero() {
			*out = append(*out, c)
		}
	}
	return nil
}

// sortedEntries returns the entries of tree sorted by name (nil for the
// zero hash). Git sorts a directory as if its name ended in "/", which
// differs from name order only for names holding characters below "/";
// such a tree's entries are sorted into a copy. The result must not be
// modified.
func (r *Repo) sortedEntries(tree plumbing.Hash) ([]object.TreeEntry, error) {
	if tree.IsZero() {
		return nil, nil
	}
	t, err := r.tree(r.repo.Storer, tree)
	if err != nil {
		return nil, err
	}
	byName := func(a, b object.TreeEntry) int { return strings.Compare(a.Name, b.Name) }
	if slices.IsSortedFunc(t.Entries, byName) {
		return t.Entries, nil
	}
	es := slices.Clone(t.Entries)
	slices.SortFunc(es, byName)
	return es, nil
}

// maxCachedTreeEntries bounds the decoded trees kept by Repo.tree, counted
// in entries: a few versions of a directory of 100,000 files.
const maxCachedTreeEntries = 1 << 19

// tree returns the decoded tree h of s. Trees of the mirror are cached by
// hash (a hash names one content): a sync reads the trees of a new commit
// several times (StatusOnly, Files, Generations), and a directory of many
// thousand files costs milliseconds to inflate and decode each time. Trees
// of another storer (an overlay holding a commit not written yet) are not
// cached. The caller holds mu and must not modify the tree.
func (r *Repo) tree(s storer.EncodedObjectStorer, h plumbing.Hash) (*object.Tree, error) {
	mirror := s == r.repo.Storer
	if mirror {
		if t, ok := r.trees[h]; ok {
			return t, nil
		}
	}
	t, err := object.GetTree(s, h)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	if mirror {
		if r.trees == nil || r.treeEntries+len(t.Entries) > maxCachedTreeEntries {
			r.trees, r.treeEntries = map[plumbing.Hash]*object.Tree{}, 0
		}
		r.trees[h] = t
		r.treeEntries += len(t.Entries)
	}
	return t, nil
}

func (r *Repo) entries(tree plumbing.Hash) (map[string]object.TreeEntry, error) {
	if tree.IsZero() {
		return nil, nil
	}
	t, err := r.tree(r.repo.Storer, tree)
	if err != nil {
		return nil, err
	}
	m := make(map[string]object.TreeEntry, len(t.Entries))
	for _, e := range t.Entries {
		m[e.Name] = e
	}
	return m, nil
}

// ChangedPaths lists, sorted, the file paths that differ between commits
// from and to (from "" = the empty tree). It compares trees only and never
// reads file contents.
func (r *Repo) ChangedPaths(ctx context.Context, from, to string) ([]string, error) {
	defer r.lock("ChangedPaths")()
	if err := r.usable(); err != nil {
		return nil, err
	}
	changes, err := r.changes(ctx, from, to, false)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(changes))
	for i, c := range changes {
		paths[i] = c.path
	}
	sort.Strings(paths)
	return paths, nil
}

func (r *Repo) changes(ctx context.Context, from, to string, skipStatus bool) ([]change, error) {
	a, err := r.treeOf(from)
	if err != nil {
		return nil, err
	}
	b, err := r.treeOf(to)
	if err != nil {
		return nil, err
	}
	var out []change
	if err := r.diffTrees(ctx, a, b, "", skipStatus, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// StatusOnly reports whether every path that differs between commits from
// and to lies under status/ (true as well when nothing differs). It compares
// trees only; when status/ is the only difference just the top-level trees
// are read.
func (r *Repo) StatusOnly(ctx context.Context, from, to string) (bool, error) {
	defer r.lock("StatusOnly")()
	if err := r.usable(); err != nil {
		return false, err
	}
	changes, err := r.changes(ctx, from, to, true)
	if err != nil {
		return false, err
	}
	return len(changes) == 0, nil
}
