package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
)

// StatusDir is the top-level directory of the repository written by the hub
// only. Files under it are never objects and never returned by Files.
const StatusDir = "status"

// DefaultMaxFileSize is the size above which Files refuses a file.
const DefaultMaxFileSize int64 = 1 << 20

const (
	remoteName         = "origin"
	defaultBranch      = "main"
	defaultPushRetries = 5
)

// Normalizer tells gitsync which files are repository objects and their
// canonical content. The hub implements it with the schema package, which
// gitsync does not import.
type Normalizer interface {
	// ObjectKey returns the key of the object the file at path holds; false
	// means the file is not an object file (ignored for generations).
	ObjectKey(path string) (fleetwave.ObjectKey, bool)
	// Normalize returns the canonical bytes of the file; on error gitsync
	// hashes the raw bytes instead.
	Normalize(path string, data []byte) ([]byte, error)
}

// Source says which repository and branch to follow and where the mirror
// lives.
type Source struct {
	URL    string // file:// URL or local path (bare or not) of the remote
	Branch string // tracked branch, default "main"
	Dir    string // the bare mirror directory (created by Open if absent)
}

// Option configures a Repo.
type Option func(*options)

type options struct {
	log         zerolog.Logger
	clock       clock.Clock
	norm        Normalizer
	authorName  string
	authorEmail string
	maxFileSize int64
	pushRetries int
	// statusBranch is the branch status commits go to; "" writes them on
	// the tracked branch.
	statusBranch string
}

// WithLogger sets the logger (default: a disabled logger).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock used for commit times and push backoff (default:
// the real clock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = clock.Or(c) } }

// WithNormalizer sets how paths map to objects and how content is
// normalized. The default treats every file outside status/ as an object
// keyed by its path without extension, with its raw bytes as content.
func WithNormalizer(n Normalizer) Option { return func(o *options) { o.norm = n } }

// WithAuthor sets the author and committer of the hub's commits, status
// commits and CommitFiles writes (default "fleetwave <fleetwave@localhost>").
func WithAuthor(name, email string) Option {
	return func(o *options) { o.authorName, o.authorEmail = name, email }
}

// WithMaxFileSize sets the size above which Files refuses a file and
// CommitFiles refuses to write one (default DefaultMaxFileSize). Values
// <= 0 keep the default.
func WithMaxFileSize(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.maxFileSize = n
		}
	}
}

// WithPushRetries sets how many times CommitStatus and CommitFiles build
// and push their commit before giving up on races with other pushers
// (default 5, minimum 1).
func WithPushRetries(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.pushRetries = n
		}
	}
}

// WithStatusBranch sends status commits to the branch name of the remote
// instead of the tracked branch, which the hub then never writes. The
// branch is created by the first status commit as an orphan holding only
// status/ (seeded from status/ at the tracked tip), and later status
// commits build on its own tip. An empty name, or the tracked branch's
// own name, keeps status on the tracked branch (the default). Open
// refuses a name that is not a valid branch name.
func WithStatusBranch(name string) Option { return func(o *options) { o.statusBranch = name } }

// RepoNotFoundError reports that the remote repository does not exist.
type RepoNotFoundError struct {
	URL string
}

func (e *RepoNotFoundError) Error() string { return "repository not found: " + e.URL }

// Is makes errors.Is(err, transport.ErrRepositoryNotFound) hold.
func (e *RepoNotFoundError) Is(target error) bool { return target == transport.ErrRepositoryNotFound }

// BranchNotFoundError reports that the remote has no tracked branch.
type BranchNotFoundError struct {
	URL, Branch string
}

func (e *BranchNotFoundError) Error() string {
	return fmt.Sprintf("branch %q not found in %s", e.Branch, e.URL)
}

// ErrPushRaces is returned by CommitStatus and CommitFiles when every
// attempt lost a race against another pusher.
var ErrPushRaces = errors.New("push lost every race with other pushers")

// ErrStaleFence is returned by CommitStatus when the commit's
// Fleetwave-Fence trailer is below the newest one already on the branch: a
// newer leader wrote status since, and an old leader (paused, partitioned)
// must not write over it.
var ErrStaleFence = errors.New("a newer leader already wrote status (stale fence)")

// ErrUnsafePath is returned for a caller path that is absolute, contains
// "..", or is otherwise not a clean relative slash path.
var ErrUnsafePath = errors.New("unsafe path")

// Repo is a bare mirror of the tracked branch of a config repository. All
// methods are safe for concurrent use: they are serialized by one mutex,
// because go-git repositories are not goroutine-safe even for reads.
type Repo struct {
	opts   options
	src    Source
	remote string // the URL as stored in the mirror's configuration

	mu sync.Mutex // taken through lock
	// holder names the operation holding mu (lock), for the log of a
	// long wait.
	holder   atomic.Pointer[string]
	repo     *git.Repository
	lastHead plumbing.Hash
	gens     *genCache
	// blobs are the contents of the blobs of the tree Files read last, by
	// object id (treeFiles).
	blobs map[plumbing.Hash][]byte
	// lastFiles is what FilesChanged read last, the base of the next.
	lastFiles *fileState
	// trees are decoded trees of the mirror by hash, treeEntries their
	// number of entries (Repo.tree).
	trees       map[plumbing.Hash]*object.Tree
	treeEntries int
	// localFetches counts the fetches fetchLocal made, those that brought
	// nothing included (tests read it)
	localFetches int
	// kept are the large trees the last status commit wrote, decoded
	// (treeEditor): the next one edits them.
	kept map[plumbing.Hash]*object.Tree

	// statusFetchMu serializes FetchStatus calls (held across the fetch;
	// mu only at its start and end, fetchStaged).
	statusFetchMu sync.Mutex
	// afterStagedFetch, if set, runs when a staged fetch has written its
	// pack and is about to take mu to put it in place (tests use it to
	// hold the fetch there).
	afterStagedFetch func()

	// statusMu serializes WriteStatus calls (held across a whole status
	// commit, its push included; mu only around the mirror's work).
	statusMu sync.Mutex

	// writes queues CommitFiles calls (held across a whole write, its
	// callbacks and backoff included; mu only around git work), so the
	// hub's own writes never race one another.
	writes writeQueue

	// beforePush, if set, runs between building a status commit (or a
	// CommitFiles write) and pushing it (tests use it to inject a
	// competing push).
	beforePush func(attempt int)
	// beforeEdit, if set, runs when a status commit has read its base and
	// is about to build its trees and compress them, without mu (tests
	// use it to fetch meanwhile).
	beforeEdit func()
	// afterStage, if set, runs when a status commit has written its pack's
	// files and is about to take mu to put them in place (tests use it to
	// fetch meanwhile).
	afterStage func()
	// compactMu is held by the compaction running (compact), which takes
	// mu only to find its packs and to put the merged one in place.
	compactMu sync.Mutex
	// compacting counts the compactions maybeCompact started in the
	// background (Close waits for them).
	compacting sync.WaitGroup
	// duringCompaction, if set, runs when a compaction has chosen its
	// packs, before it merges them without mu (tests use it to fetch
	// meanwhile).
	duringCompaction func()
	// afterAdvertise, if set, runs between the remote's advertisement of
	// its refs and the push's update of one (tests use it to make the
	// remote's own compare-and-swap refuse the update).
	afterAdvertise func()
}

// Open opens the mirror in src.Dir, cloning it (bare, single branch, no tags)
// when the directory is absent or empty. An existing mirror must have been
// cloned from the same URL. It returns a *RepoNotFoundError when the remote
// does not exist and a *BranchNotFoundError when the branch is missing.
func Open(ctx context.Context, src Source, opts ...Option) (*Repo, error) {
	o := options{
		log:         zerolog.Nop(),
		clock:       clock.Real{},
		norm:        pathNormalizer{},
		authorName:  "fleetwave",
		authorEmail: "fleetwave@localhost",
		maxFileSize: DefaultMaxFileSize,
		pushRetries: defaultPushRetries,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.norm == nil {
		o.norm = pathNormalizer{}
	}
	if src.Branch == "" {
		src.Branch = defaultBranch
	}
	if err := plumbing.NewBranchReferenceName(src.Branch).Validate(); err != nil {
		return nil, fmt.Errorf("branch %q: %w", src.Branch, err)
	}
	if o.statusBranch == src.Branch {
		o.statusBranch = ""
	}
	if o.statusBranch != "" {
		if err := plumbing.NewBranchReferenceName(o.statusBranch).Validate(); err != nil {
			return nil, fmt.Errorf("status branch %q: %w", o.statusBranch, err)
		}
	}
	if src.URL == "" {
		return nil, errors.New("source url is empty")
	}
	if src.Dir == "" {
		return nil, errors.New("mirror dir is empty")
	}
	remote, err := normalizeURL(src.URL)
	if err != nil {
		return nil, err
	}
	r := &Repo{opts: o, src: src, remote: remote}
	log := o.log.With().Str("component", "gitsync").Logger()
	r.opts.log = log

	empty, err := dirEmpty(src.Dir)
	if err != nil {
		return nil, fmt.Errorf("mirror dir: %w", err)
	}
	if empty {
		if err := r.clone(ctx); err != nil {
			return nil, err
		}
		log.Info().Str("url", remote).Str("branch", src.Branch).Msg("mirror cloned")
	} else {
		removeStages(src.Dir)
		if err := r.openExisting(); err != nil {
			return nil, err
		}
		if err := checkRefs(r.repo); err != nil {
			// A process killed while it wrote a ref leaves it empty or cut
			// (go-git writes refs in place). The mirror is a cache of the
			// remote: clone it again rather than fail every start.
			log.Warn().Err(err).Str("dir", src.Dir).Msg("mirror refs damaged (a crash while writing?); cloning again")
			_ = r.Close()
			clearDir(src.Dir)
			if err := r.clone(ctx); err != nil {
				return nil, err
			}
			log.Info().Str("url", remote).Str("branch", src.Branch).Msg("mirror cloned")
		}
	}
	head, err := r.repo.Reference(r.trackingRef(), true)
	switch {
	case err == nil:
		r.lastHead = head.Hash()
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		// a mirror made for another branch: fetch the tracked one now
		if r.lastHead, err = r.fetch(ctx, true); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("mirror %s: tracking ref: %w", src.Dir, err)
	}
	if r.opts.statusBranch != "" {
		// the clone holds the tracked branch only: learn the status tip
		// now, so LatestTrailer and StatusTip read it before any Fetch
		if err := r.fetchStatus(ctx); err != nil {
			return nil, err
		}
	}
	r.gens = newGenCache(filepath.Join(src.Dir, marksFile))
	if err := r.gens.loadMarks(); err != nil {
		log.Warn().Err(err).Msg("generation marks unreadable, starting without")
	}
	return r, nil
}

func (r *Repo) clone(ctx context.Context) error {
	_, statErr := os.Stat(r.src.Dir)
	created := errors.Is(statErr, os.ErrNotExist)
	cctx, cancel := transportContext(ctx)
	defer cancel()
	repo, err := git.CloneContext(cctx, mirrorStorage(r.src.Dir), nil, &git.CloneOptions{
		URL:           r.remote,
		RemoteName:    remoteName,
		ReferenceName: plumbing.NewBranchReferenceName(r.src.Branch),
		SingleBranch:  true,
		Tags:          git.NoTags,
	})
	if err != nil {
		// leave no half-made mirror behind: the next Open would take it for a good one
		if created {
			_ = os.RemoveAll(r.src.Dir)
		} else {
			clearDir(r.src.Dir)
		}
		return r.translate("clone", err)
	}
	r.setRepo(repo)
	return nil
}

// mirrorStorage is the object storage of the bare mirror in dir.
func mirrorStorage(dir string) *filesystem.Storage {
	return packsKeptOpen(osfs.New(dir))
}

// packsKeptOpen is the object storage of the git directory fs that keeps
// up to 64 pack files open: by default go-git opens the pack again for
// every object it reads, and a first sync of 100,000 files spent a
// quarter of its time in those system calls. Every use of it holds
// Repo.mu, as this cache needs.
func packsKeptOpen(fs billy.Filesystem) *filesystem.Storage {
	return filesystem.NewStorageWithOptions(fs, cache.NewObjectLRUDefault(), filesystem.Options{MaxOpenDescriptors: 64})
}

// setRepo makes repo the mirror, closing the pack files the previous one
// kept open. The caller holds mu or owns r.
func (r *Repo) setRepo(repo *git.Repository) {
	if r.repo != nil && r.repo != repo {
		if s, ok := r.repo.Storer.(*filesystem.Storage); ok {
			_ = s.Close()
		}
	}
	r.repo = repo
}

// checkRefs reads every ref of repo: an error means one is unreadable.
func checkRefs(repo *git.Repository) error {
	iter, err := repo.Storer.IterReferences()
	if err != nil {
		return err
	}
	defer iter.Close()
	return iter.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() == plumbing.HashReference && ref.Hash().IsZero() {
			return fmt.Errorf("ref %s: zero hash", ref.Name())
		}
		return nil
	})
}

func (r *Repo) openExisting() error {
	repo, err := git.Open(mirrorStorage(r.src.Dir), nil)
	if err != nil {
		return fmt.Errorf("open mirror %s: %w", r.src.Dir, err)
	}
	rem, err := repo.Remote(remoteName)
	if err != nil {
		return fmt.Errorf("open mirror %s: %w", r.src.Dir, err)
	}
	urls := rem.Config().URLs
	if len(urls) == 0 || urls[0] != r.remote {
		return fmt.Errorf("mirror %s follows %q, not %q: remove the directory to re-clone", r.src.Dir, strings.Join(urls, ","), r.remote)
	}
	r.setRepo(repo)
	return nil
}

// translate turns go-git errors into the package's errors.
func (r *Repo) translate(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("%s: %w", op, &RepoNotFoundError{URL: r.remote})
	case errors.Is(err, plumbing.ErrReferenceNotFound), errors.Is(err, transport.ErrEmptyRemoteRepository):
		return fmt.Errorf("%s: %w", op, &BranchNotFoundError{URL: r.remote, Branch: r.src.Branch})
	}
	var nm git.NoMatchingRefSpecError
	if errors.As(err, &nm) {
		return fmt.Errorf("%s: %w", op, &BranchNotFoundError{URL: r.remote, Branch: r.src.Branch})
	}
	return fmt.Errorf("%s %s: %w", op, r.remote, err)
}

func (r *Repo) trackingRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName(remoteName, r.src.Branch)
}

func (r *Repo) refSpec() config.RefSpec {
	return config.RefSpec("+" + plumbing.NewBranchReferenceName(r.src.Branch).String() + ":" + r.trackingRef().String())
}

// fetch updates the tracking ref from the remote, and with status the
// status branch's when one is configured (removing it when the remote has
// none), in one round trip once the status branch exists; the caller holds
// mu. It returns the tracked branch's tip.
func (r *Repo) fetch(ctx context.Context, status bool) (plumbing.Hash, error) {
	if tip, ok := r.fetchLocal(status); ok {
		return tip, nil
	}
	err := r.transportFetch(ctx, status, func(specs []config.RefSpec, _ []plumbing.ReferenceName) error {
		return r.fetchSpecs(ctx, specs)
	}, r.dropStatusRef)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	ref, err := r.repo.Reference(r.trackingRef(), true)
	if err != nil {
		return plumbing.ZeroHash, r.translate("fetch", err)
	}
	return ref.Hash(), nil
}

// transportFetch fetches the tracked branch, and with status the status
// branch when one is configured, through do (given the refspecs and the
// refs they move), in one round trip; when the remote lacks one of the
// two, it fetches the tracked branch alone and drop removes the status
// ref.
func (r *Repo) transportFetch(ctx context.Context, status bool, do func([]config.RefSpec, []plumbing.ReferenceName) error, drop func() error) error {
	specs, moves := []config.RefSpec{r.refSpec()}, []plumbing.ReferenceName{r.trackingRef()}
	if status && r.opts.statusBranch != "" {
		specs, moves = append(specs, r.statusRefSpec()), append(moves, r.statusRef())
	}
	err := do(specs, moves)
	if len(specs) > 1 && errors.Is(err, git.NoMatchingRefSpecError{}) {
		// one of the branches is missing: the status branch before the
		// first status commit, or the tracked one (reported below)
		if err = do(specs[:1], moves[:1]); err == nil {
			err = drop()
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.translate("fetch", err)
	}
	return nil
}

// fetchSpecs fetches specs from the remote; already up to date is nil.
func (r *Repo) fetchSpecs(ctx context.Context, specs []config.RefSpec) error {
	fctx, cancel := transportContext(ctx)
	defer cancel()
	err := r.repo.FetchContext(fctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   specs,
		Tags:       git.NoTags,
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return err
}

// Fetch updates the mirror from the remote and returns the tracked branch's
// tip; changed reports whether that tip moved since the previous Fetch (or
// Open). Force-pushes are accepted. With WithStatusBranch the status branch
// is fetched too (StatusTip and LatestTrailer read it), but it never counts
// as a change: head and changed are about the tracked branch only.
func (r *Repo) Fetch(ctx context.Context) (head string, changed bool, err error) {
	return r.fetchCompact(ctx, true)
}

// FetchBranch is Fetch without the status branch, which stays as the last
// Fetch left it: a replica that does not write status fetches the tracked
// branch at every poll and the status branch at its own pace (each status
// commit of a large fleet is thousands of documents).
func (r *Repo) FetchBranch(ctx context.Context) (head string, changed bool, err error) {
	return r.fetchCompact(ctx, false)
}

// fetchCompact is Fetch, with the status branch or not, and the
// compaction a fetch that added a pack starts.
func (r *Repo) fetchCompact(ctx context.Context, status bool) (head string, changed bool, err error) {
	head, changed, added, err := r.fetchTracked(ctx, status)
	if err == nil && added {
		// only a fetch that added a pack starts a compaction: one that
		// brought nothing (most of a hub's polls, and those that only see
		// the hub's own status commit) leaves it to the operation that
		// added the pack
		r.maybeCompact()
	}
	return head, changed, err
}

// fetchTracked is Fetch but for the compaction; added says whether the
// fetch added a pack to the mirror. A local fetch runs under mu; a fetch
// through the transport is staged (fetchStaged), holding mu only to
// begin and to put what it brought in place.
func (r *Repo) fetchTracked(ctx context.Context, status bool) (head string, changed, added bool, err error) {
	unlock := r.lock("fetchTracked")
	if err := r.usable(); err != nil {
		unlock()
		return "", false, false, err
	}
	before := r.packCount()
	if tip, ok := r.fetchLocal(status); ok {
		changed = r.moved(tip)
		added = r.packCount() > before
		unlock()
		return tip.String(), changed, added, nil
	}
	unlock()
	err = r.transportFetch(ctx, status, func(specs []config.RefSpec, moves []plumbing.ReferenceName) error {
		a, err := r.fetchStaged(ctx, specs, moves)
		added = added || a
		return err
	}, func() error { return r.dropStatusRefLocked("fetchTracked") })
	if err != nil {
		return "", false, added, err
	}
	defer r.lock("fetchTracked")()
	if err := r.usable(); err != nil {
		return "", false, added, err
	}
	ref, err := r.repo.Reference(r.trackingRef(), true)
	if err != nil {
		return "", false, added, r.translate("fetch", err)
	}
	return ref.Hash().String(), r.moved(ref.Hash()), added, nil
}

// moved records h as the tracked branch's tip and says whether it moved
// since the last fetch; the caller holds mu.
func (r *Repo) moved(h plumbing.Hash) bool {
	changed := h != r.lastHead
	if changed {
		r.opts.log.Debug().Str("commit", h.String()).Str("previous", r.lastHead.String()).Msg("branch moved")
	}
	r.lastHead = h
	return changed
}

// slowLock is the wait for the mirror's lock, or the hold of it, from
// which lock logs a warning.
const slowLock = 250 * time.Millisecond

// lock takes mu for op (the operation, as logs name it) and returns its
// release. A wait or a hold of slowLock or more is logged at warn, with
// the operation that held the lock when the wait began: every sync,
// status commit and read of the mirror waits behind the one that holds
// it, and a hub logging at warn should say which held a pushed commit
// back.
func (r *Repo) lock(op string) (unlock func()) {
	start := time.Now()
	holder := r.holder.Load()
	r.mu.Lock()
	got := time.Now()
	if wait := got.Sub(start); wait >= slowLock {
		ev := r.opts.log.Warn().Str("op", op).Int64("waited_ms", wait.Milliseconds())
		if holder != nil {
			ev = ev.Str("held_by", *holder)
		}
		ev.Msg("waited for the mirror's lock")
	}
	r.holder.Store(&op)
	return func() {
		if held := time.Since(got); held >= slowLock {
			r.opts.log.Warn().Str("op", op).Int64("held_ms", held.Milliseconds()).Msg("held the mirror's lock")
		}
		r.holder.Store(nil)
		r.mu.Unlock()
	}
}

// Close releases the mirror. The Repo must not be used afterwards.
func (r *Repo) Close() error {
	r.compacting.Wait() // a compaction running puts its pack in place, or drops it
	defer r.lock("Close")()
	r.setRepo(nil)
	return nil
}

// CommitInfo describes one commit for actor records.
type CommitInfo struct {
	Hash    string
	Author  string // author name
	Email   string // author email
	Subject string // first line of the message
	When    time.Time
	// Trailers are the message's trailers (ParseTrailers); CommitInfo
	// fills them, SeedBare and InitWorktree ignore them.
	Trailers []Trailer
}

// CommitInfo returns the author, committer time and subject of commit.
func (r *Repo) CommitInfo(ctx context.Context, commit string) (CommitInfo, error) {
	defer r.lock("CommitInfo")()
	if err := r.usable(); err != nil {
		return CommitInfo{}, err
	}
	c, err := r.commitObject(commit)
	if err != nil {
		return CommitInfo{}, err
	}
	subject, _, _ := strings.Cut(strings.TrimLeft(c.Message, "\n"), "\n")
	return CommitInfo{
		Hash:     c.Hash.String(),
		Author:   c.Author.Name,
		Email:    c.Author.Email,
		Subject:  strings.TrimSpace(subject),
		When:     c.Committer.When,
		Trailers: ParseTrailers(c.Message),
	}, nil
}

var errClosed = errors.New("repo is closed")

func (r *Repo) usable() error {
	if r.repo == nil {
		return errClosed
	}
	return nil
}

// normalizeURL returns the URL stored in the mirror: file:// URLs and other
// URLs as given, local paths made absolute.
func normalizeURL(u string) (string, error) {
	if strings.Contains(u, "://") {
		return u, nil
	}
	abs, err := filepath.Abs(u)
	if err != nil {
		return "", fmt.Errorf("source path %s: %w", u, err)
	}
	return abs, nil
}

func dirEmpty(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}

func clearDir(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// pathNormalizer is the default Normalizer: every file is an object keyed by
// its path without extension, with its raw content.
type pathNormalizer struct{}

func (pathNormalizer) ObjectKey(p string) (fleetwave.ObjectKey, bool) {
	if p == "" {
		return "", false
	}
	return fleetwave.ObjectKey(strings.TrimSuffix(p, path.Ext(p))), true
}

func (pathNormalizer) Normalize(_ string, data []byte) ([]byte, error) { return data, nil }

// transportTimeout bounds one clone, fetch or push.
const transportTimeout = 2 * time.Minute

// transportContext detaches a git transport call from the caller's
// cancellation and bounds it by transportTimeout instead. Cancelling a
// go-git file:// transport kills git-upload-pack/receive-pack and then waits
// for its output pipes, which a surviving child process can hold open
// forever; a local fetch or push finishes in milliseconds, so letting it end
// is both safe and prompt.
func transportContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), transportTimeout)
}
