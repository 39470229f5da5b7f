package gitsync

import (
	"context"
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/internal/clock"
)

// OpenLocal opens an existing local repository (a work tree, possibly a
// linked one, or a bare repository) for reading, without a mirror: this is
// what `fleetwave plan` reads revisions from. Generation marks are kept in a
// temporary directory that close removes; the repository is never written.
func OpenLocal(dir string, opts ...Option) (r *Repo, closeFn func(), err error) {
	o := options{
		log: zerolog.Nop(), clock: clock.Real{}, norm: pathNormalizer{},
		maxFileSize: DefaultMaxFileSize, pushRetries: defaultPushRetries,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.norm == nil {
		o.norm = pathNormalizer{}
	}
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", dir, err)
	}
	if st, ok := repo.Storer.(*filesystem.Storage); ok {
		// its objects through storage that keeps its packs open, as the
		// mirror's does: reading a revision of 100,000 files opened a
		// pack for every one of them
		if kept, err := git.Open(packsKeptOpen(st.Filesystem()), nil); err == nil {
			repo = kept
		}
	}
	tmp, err := os.MkdirTemp("", "fleetwave-plan-")
	if err != nil {
		return nil, nil, err
	}
	r = &Repo{opts: o, src: Source{URL: dir, Dir: tmp}, remote: dir, repo: repo}
	r.gens = newGenCache(filepath.Join(tmp, marksFile))
	return r, func() { _ = r.Close(); _ = os.RemoveAll(tmp) }, nil
}

// Resolve returns the full hash of the commit a revision names: a branch,
// a remote-tracking branch ("origin/main"), a tag, HEAD, a hash or a hash
// prefix, with ~N and ^N suffixes.
func (r *Repo) Resolve(rev string) (string, error) {
	defer r.lock("Resolve")()
	if err := r.usable(); err != nil {
		return "", err
	}
	h, err := r.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", fmt.Errorf("revision %q: %w", rev, err)
	}
	return h.String(), nil
}

// MergeBase returns the best common ancestor of two commits ("" when they
// share no history).
func (r *Repo) MergeBase(a, b string) (string, error) {
	defer r.lock("MergeBase")()
	if err := r.usable(); err != nil {
		return "", err
	}
	ca, err := r.commitObject(a)
	if err != nil {
		return "", err
	}
	cb, err := r.commitObject(b)
	if err != nil {
		return "", err
	}
	bases, err := ca.MergeBase(cb)
	if err != nil {
		return "", fmt.Errorf("merge base of %s and %s: %w", a[:12], b[:12], err)
	}
	if len(bases) == 0 {
		return "", nil
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i].Hash.String() < bases[j].Hash.String() })
	return bases[0].Hash.String(), nil
}

// StatusFiles returns the regular files under status/ at commit (path ->
// content): what the hub last observed, as committed. Any commit in the
// mirror works; the latest status is at StatusTip (with a status branch,
// commits of the tracked branch hold no status written by the hub).
func (r *Repo) StatusFiles(ctx context.Context, commit string) (map[string][]byte, error) {
	d, err := r.StatusChanges(ctx, "", commit, nil)
	return d.Files, err
}

// StatusDelta is what differs under status/ between two commits: the
// files added or changed, with their content at the newer commit, and the
// paths it no longer has.
type StatusDelta struct {
	Files   map[string][]byte
	Removed []string
}

// StatusChanges returns the status files (regular .yaml files under
// status/) that differ between commits from and to, read at to, and
// those to no longer has; from "" gives every status file of to. With
// keep, only the paths keep accepts. It compares trees, skipping
// identical directories by hash, and reads only the files that changed: a
// replica following the status branch reads what the status commits since
// it last looked wrote (at 100,000 nodes the whole tree is 100,000
// documents, a commit a few thousand).
func (r *Repo) StatusChanges(ctx context.Context, from, to string, keep func(path string) bool) (StatusDelta, error) {
	defer r.lock("StatusChanges")()
	out := StatusDelta{Files: map[string][]byte{}}
	changes, err := r.statusDiff(ctx, from, to)
	if err != nil {
		return out, err
	}
	for _, c := range changes {
		if keep != nil && !keep(c.path) {
			continue
		}
		if c.to.Hash.IsZero() {
			out.Removed = append(out.Removed, c.path)
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		data, err := readBlob(r, c.to.Hash, MaxStatusFileSize)
		if err != nil {
			return out, fmt.Errorf("read %s: %w", c.path, err)
		}
		out.Files[c.path] = data
	}
	return out, nil
}

// blobID is the Git object id of a blob holding data.
func blobID(data []byte) [20]byte {
	h := sha1.New()
	var head [32]byte
	h.Write(strconv.AppendInt(append(head[:0], "blob "...), int64(len(data)), 10))
	h.Write([]byte{0})
	h.Write(data)
	var id [20]byte
	h.Sum(id[:0])
	return id
}

// statusDiff returns the status files (regular .yaml files under status/,
// safe names only) that differ between commits from ("" = none) and to:
// a zero to side is a file to no longer has. The caller holds mu.
func (r *Repo) statusDiff(ctx context.Context, from, to string) ([]change, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	dirOf := func(commit string) (plumbing.Hash, error) {
		if commit == "" {
			return plumbing.ZeroHash, nil
		}
		root, err := r.treeOf(commit)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return r.subtree(root, StatusDir)
	}
	a, err := dirOf(from)
	if err != nil {
		return nil, err
	}
	b, err := dirOf(to)
	if err != nil {
		return nil, err
	}
	var changes []change
	if err := r.diffTrees(ctx, a, b, StatusDir+"/", false, &changes); err != nil {
		return nil, err
	}
	out := changes[:0]
	for _, c := range changes {
		if !strings.HasSuffix(c.path, ".yaml") || !safePath(c.path) {
			continue
		}
		if !regular(c.to.Mode) {
			c.to = object.TreeEntry{}
		}
		if !regular(c.from.Mode) {
			c.from = object.TreeEntry{}
		}
		if !c.from.Hash.IsZero() || !c.to.Hash.IsZero() {
			out = append(out, c)
		}
	}
	return out, nil
}

// StatusFile returns the status file at path in commit, read whole up to
// MaxStatusFileSize; ok is false when commit has no such regular file.
func (r *Repo) StatusFile(ctx context.Context, commit, path string) (data []byte, ok bool, err error) {
	return r.fileAt(ctx, "StatusFile", commit, path, MaxStatusFileSize)
}

// safePath reports whether every element of a slash-separated path is a
// safe name.
func safePath(p string) bool {
	for _, n := range strings.Split(p, "/") {
		if !safeName(n) {
			return false
		}
	}
	return true
}

// LatestTrailer returns the value of the newest trailer key on the first-
// parent history of the branch status commits go to, looking at most limit
// commits back ("" when none). The hub reads its highest fencing token back
// this way (status commits carry it), so a fence never goes back after
// Redis is lost. With a status branch (WithStatusBranch) its history is
// searched first, then the tracked branch's, where status commits made
// before the status branch was configured carry older values. It reads
// the mirror as left by the last Open, Fetch or WriteStatus.
func (r *Repo) LatestTrailer(ctx context.Context, key string, limit int) (string, error) {
	defer r.lock("LatestTrailer")()
	if err := r.usable(); err != nil {
		return "", err
	}
	sh, err := r.statusHead()
	if err != nil {
		return "", err
	}
	if !sh.IsZero() {
		v, err := r.latestTrailer(ctx, sh, key, limit)
		if err != nil || v != "" {
			return v, err
		}
	}
	ref, err := r.repo.Reference(r.trackingRef(), true)
	if err != nil {
		return "", fmt.Errorf("tracking ref: %w", err)
	}
	return r.latestTrailer(ctx, ref.Hash(), key, limit)
}

// latestTrailer walks at most limit first-parent commits from tip for the
// newest trailer key; the caller holds mu.
func (r *Repo) latestTrailer(ctx context.Context, tip plumbing.Hash, key string, limit int) (string, error) {
	c, err := r.repo.CommitObject(tip)
	for i := 0; err == nil && i < limit; i++ {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		for _, t := range ParseTrailers(c.Message) {
			if t.Key == key {
				return t.Value, nil
			}
		}
		if len(c.ParentHashes) == 0 {
			return "", nil
		}
		c, err = r.repo.CommitObject(c.ParentHashes[0])
	}
	if err != nil {
		return "", err
	}
	return "", nil
}
