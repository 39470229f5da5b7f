package gitsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// CommitChange is one first-parent commit and the paths it changed (added,
// modified or deleted) under the prefixes asked for.
type CommitChange struct {
	Commit string
	Paths  []string
}

// maxHistoryWalk bounds the first-parent commits ChangesSince looks at.
const maxHistoryWalk = 100_000

// ChangesSince returns the first-parent commits after from up to and
// including to, oldest first, that changed a path under one of prefixes
// (e.g. "approvals/"), each with those paths, sorted. from "" walks from
// the root; when from is not a first-parent ancestor of to (history was
// rewritten), the walk starts at the root too, so a caller that keys what
// it does by commit and path sees every change of the current history.
// Trees are compared, not file contents.
func (r *Repo) ChangesSince(ctx context.Context, from, to string, prefixes ...string) ([]CommitChange, error) {
	defer r.lock("ChangesSince")()
	if err := r.usable(); err != nil {
		return nil, err
	}
	tip, err := r.commitObject(to)
	if err != nil {
		return nil, err
	}
	// the first-parent chain from to back to from (or the root)
	var chain []*object.Commit
	found := from == ""
	for c := tip; c != nil; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if c.Hash.String() == from {
			found = true
			break
		}
		chain = append(chain, c)
		if len(chain) > maxHistoryWalk {
			return nil, fmt.Errorf("history walk from %s: more than %d commits", to, maxHistoryWalk)
		}
		if c.NumParents() == 0 {
			break
		}
		p, err := c.Parent(0)
		if err != nil {
			return nil, fmt.Errorf("parent of %s: %w", c.Hash, err)
		}
		c = p
	}
	if !found {
		r.opts.log.Info().Str("from", from).Str("to", to).Msg("history rewritten: changes read from the root")
	}
	slices.Reverse(chain)
	var out []CommitChange
	for _, c := range chain {
		parent := plumbing.ZeroHash
		if c.NumParents() > 0 {
			p, err := c.Parent(0)
			if err != nil {
				return nil, fmt.Errorf("parent of %s: %w", c.Hash, err)
			}
			parent = p.TreeHash
		}
		var changed []change
		for _, prefix := range prefixes {
			dir := strings.TrimSuffix(prefix, "/")
			a, err := r.subtree(parent, dir)
			if err != nil {
				return nil, err
			}
			b, err := r.subtree(c.TreeHash, dir)
			if err != nil {
				return nil, err
			}
			if err := r.diffTrees(ctx, a, b, dir+"/", false, &changed); err != nil {
				return nil, err
			}
		}
		if len(changed) == 0 {
			continue
		}
		cc := CommitChange{Commit: c.Hash.String()}
		for _, ch := range changed {
			cc.Paths = append(cc.Paths, ch.path)
		}
		slices.Sort(cc.Paths)
		out = append(out, cc)
	}
	return out, nil
}

// subtree returns the hash of directory dir (one level, no slash) in tree
// root; the zero hash when root is zero or has no such directory.
func (r *Repo) subtree(root plumbing.Hash, dir string) (plumbing.Hash, error) {
	if root.IsZero() {
		return plumbing.ZeroHash, nil
	}
	t, err := r.repo.TreeObject(root)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("tree %s: %w", root, err)
	}
	for _, e := range t.Entries {
		if e.Name == dir && e.Mode == filemode.Dir {
			return e.Hash, nil
		}
	}
	return plumbing.ZeroHash, nil
}

// FileAt returns the content of path at commit; ok is false when the path
// does not exist there (or is not a regular file). Files over the size
// limit are an error.
func (r *Repo) FileAt(ctx context.Context, commit, path string) (data []byte, ok bool, err error) {
	return r.fileAt(ctx, "FileAt", commit, path, r.opts.maxFileSize)
}

// fileAt is FileAt for operation op, with files above limit bytes an
// error.
func (r *Repo) fileAt(ctx context.Context, op, commit, path string, limit int64) (data []byte, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	defer r.lock(op)()
	if err := r.usable(); err != nil {
		return nil, false, err
	}
	c, err := r.commitObject(commit)
	if err != nil {
		return nil, false, err
	}
	root, err := c.Tree()
	if err != nil {
		return nil, false, err
	}
	e, err := root.FindEntry(path)
	switch {
	case errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("%s at %s: %w", path, commit, err)
	case !regular(e.Mode):
		return nil, false, nil
	}
	if data, err = readBlob(r, e.Hash, limit); err != nil {
		return nil, false, fmt.Errorf("%s at %s: %w", path, commit, err)
	}
	return data, true, nil
}
