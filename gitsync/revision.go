package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
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
	defer r.lock("StatusFiles")()
	if err := r.usable(); err != nil {
		return nil, err
	}
	c, err := r.commitObject(commit)
	if err != nil {
		return nil, err
	}
	root, err := c.Tree()
	if err != nil {
		return nil, err
	}
	e, err := root.FindEntry(StatusDir)
	if err != nil || e.Mode != filemode.Dir {
		return map[string][]byte{}, nil
	}
	out := map[string][]byte{}
	var walk func(tree plumbing.Hash, prefix string) error
	walk = func(tree plumbing.Hash, prefix string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := object.GetTree(r.repo.Storer, tree)
		if err != nil {
			return err
		}
		for _, e := range t.Entries {
			if !safeName(e.Name) {
				continue
			}
			p := prefix + e.Name
			switch {
			case e.Mode == filemode.Dir:
				if err := walk(e.Hash, p+"/"); err != nil {
					return err
				}
			case regular(e.Mode) && strings.HasSuffix(p, ".yaml"):
				data, err := readBlob(r, e.Hash, MaxStatusFileSize)
				if err != nil {
					return fmt.Errorf("read %s: %w", p, err)
				}
				out[p] = data
			}
		}
		return nil
	}
	if err := walk(e.Hash, StatusDir+"/"); err != nil {
		return nil, err
	}
	return out, nil
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
