package gitsync

import (
	"context"
	"errors"
	"fmt"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// StatusBranch returns the branch status commits are pushed to: the status
// branch when one is configured (WithStatusBranch), else the tracked branch.
func (r *Repo) StatusBranch() string {
	if r.opts.statusBranch != "" {
		return r.opts.statusBranch
	}
	return r.src.Branch
}

// statusRef is the mirror's remote-tracking ref of the status branch; only
// meaningful when one is configured.
func (r *Repo) statusRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName(remoteName, r.opts.statusBranch)
}

func (r *Repo) statusRefSpec() config.RefSpec {
	return config.RefSpec("+" + plumbing.NewBranchReferenceName(r.opts.statusBranch).String() + ":" + r.statusRef().String())
}

// fetchStatus updates the status branch's ref alone (removing it when the
// remote has no such branch); the caller holds mu.
func (r *Repo) fetchStatus(ctx context.Context) error {
	err := r.fetchSpecs(ctx, []config.RefSpec{r.statusRefSpec()})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, git.NoMatchingRefSpecError{}):
		return r.dropStatusRef()
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return r.translate("fetch status branch", err)
}

// dropStatusRef forgets the status branch (absent on the remote).
func (r *Repo) dropStatusRef() error {
	err := r.repo.Storer.RemoveReference(r.statusRef())
	if err != nil && !errors.Is(err, plumbing.ErrReferenceNotFound) {
		return fmt.Errorf("remove status ref: %w", err)
	}
	return nil
}

// dropStatusRefLocked is dropStatusRef for a caller that does not hold
// mu (a staged fetch), taking it as op.
func (r *Repo) dropStatusRefLocked(op string) error {
	defer r.lock(op)()
	if err := r.usable(); err != nil {
		return err
	}
	return r.dropStatusRef()
}

// statusHead returns the mirror's tip of the status branch, zero when no
// status branch is configured or the remote has none yet; the caller holds
// mu.
func (r *Repo) statusHead() (plumbing.Hash, error) {
	if r.opts.statusBranch == "" {
		return plumbing.ZeroHash, nil
	}
	ref, err := r.repo.Reference(r.statusRef(), true)
	switch {
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		return plumbing.ZeroHash, nil
	case err != nil:
		return plumbing.ZeroHash, fmt.Errorf("status ref: %w", err)
	}
	return ref.Hash(), nil
}

// StatusTip returns the commit holding the latest status: the tip of the
// status branch when one is configured and exists, else the tip of the
// tracked branch (where status lives by default, and where the first
// commit of a new status branch takes status/ from). Pass it to
// StatusFiles to read the status back. It reads the mirror as left by the
// last Open, Fetch or WriteStatus, without going to the remote.
func (r *Repo) StatusTip(ctx context.Context) (string, error) {
	defer r.lock("StatusTip")()
	if err := r.usable(); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	h, err := r.statusHead()
	if err != nil {
		return "", err
	}
	if h.IsZero() {
		ref, err := r.repo.Reference(r.trackingRef(), true)
		if err != nil {
			return "", fmt.Errorf("tracking ref: %w", err)
		}
		h = ref.Hash()
	}
	return h.String(), nil
}

// statusBase is what a status commit is built on.
type statusBase struct {
	commit  *object.Commit // the tip written on top of; nil for a new status branch
	tree    plumbing.Hash  // the tree the edits apply to
	parents []plumbing.Hash
	lease   plumbing.Hash // the remote tip the push requires; zero creates the branch
}

// statusBaseFor returns the base of the next status commit, given the
// freshly fetched tracked tip: that tip by default; the status branch's
// tip when it exists; else, for the first commit of a new status branch,
// a parentless commit whose tree holds only the tracked tip's status/
// directory. Objects it builds go to s. The caller holds mu.
func (r *Repo) statusBaseFor(tracked plumbing.Hash, s storer.EncodedObjectStorer) (statusBase, error) {
	tip := tracked
	if r.opts.statusBranch != "" {
		h, err := r.statusHead()
		if err != nil {
			return statusBase{}, err
		}
		if h.IsZero() {
			return r.newStatusBranchBase(tracked, s)
		}
		tip = h
	}
	c, err := r.repo.CommitObject(tip)
	if err != nil {
		return statusBase{}, fmt.Errorf("tip %s: %w", tip, err)
	}
	return statusBase{commit: c, tree: c.TreeHash, parents: []plumbing.Hash{tip}, lease: tip}, nil
}

func (r *Repo) newStatusBranchBase(tracked plumbing.Hash, s storer.EncodedObjectStorer) (statusBase, error) {
	c, err := r.repo.CommitObject(tracked)
	if err != nil {
		return statusBase{}, fmt.Errorf("tip %s: %w", tracked, err)
	}
	st, err := r.statusTree(c.TreeHash)
	if err != nil {
		return statusBase{}, err
	}
	var tree plumbing.Hash
	if !st.IsZero() {
		tree, err = writeTree(s, []object.TreeEntry{{Name: StatusDir, Mode: filemode.Dir, Hash: st}})
		if err != nil {
			return statusBase{}, fmt.Errorf("build status tree: %w", err)
		}
	}
	return statusBase{tree: tree}, nil
}

// RemoteStatusTip returns the commit the remote's status branch points to
// ("" when it has none), read from the remote's refs alone: nothing is
// fetched and the mirror's lock is not taken, so it answers while a fetch
// of a long status history holds that lock.
func (r *Repo) RemoteStatusTip(ctx context.Context) (string, error) {
	name := plumbing.NewBranchReferenceName(r.StatusBranch())
	if dir := fetchGitDir(r.remote); dir != "" {
		tip, err := localBranch(dir, r.StatusBranch())
		switch {
		case err != nil:
			return "", fmt.Errorf("read the remote's status branch: %w", err)
		case tip.IsZero():
			return "", nil
		}
		return tip.String(), nil
	}
	lctx, cancel := transportContext(ctx)
	defer cancel()
	refs, err := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: remoteName, URLs: []string{r.remote}}).
		ListContext(lctx, &git.ListOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", r.translate("list the remote's refs", err)
	}
	for _, ref := range refs {
		if ref.Name() == name && ref.Type() == plumbing.HashReference {
			return ref.Hash().String(), nil
		}
	}
	return "", nil
}
