package gitsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/fleetwave/fleetwave"
)

// Trailer keys the hub writes on commits made for API callers (CommitFiles).
const (
	TrailerActor  = "Fleetwave-Actor"  // who asked for the write
	TrailerReason = "Fleetwave-Reason" // why, in the caller's words
)

// Write is a change of people-facing files that CommitFiles commits to the
// tracked branch on behalf of an API caller.
type Write struct {
	// Files maps clean, relative slash paths outside status/ to their new
	// content; a nil value deletes the file, any other value (even empty)
	// creates or replaces it.
	Files map[string][]byte
	// Message is the subject line, optionally followed by a blank line
	// and a body.
	Message string
	// Actor is who asked for the write; required. It is recorded as the
	// first trailer, Fleetwave-Actor.
	Actor string
	// Trailers follow the actor's (e.g. Fleetwave-Reason). Keys must be
	// valid trailer keys other than Fleetwave-Actor and Fleetwave-Fence.
	Trailers []Trailer
	// Expect, if set, is called on every attempt with the content, at the
	// freshly fetched tip, of each path in Files that is a file there (a
	// path absent at the tip has no entry). A non-nil result refuses the
	// write with a *PreconditionError wrapping it. ExpectFiles makes the
	// usual ones.
	Expect func(current map[string][]byte) error
	// Validate, if set, is called with every file of the tree the commit
	// would have, exactly as Files would return them for it (path ->
	// content outside status/, and the entries refused). An error wrapping
	// a *fleetwave.ValidationError refuses the write with an
	// *InvalidWriteError carrying its errors; any other error fails the
	// call. After a race it is called again only if the files it would see
	// changed (not for a status commit that got in between).
	Validate func(files map[string][]byte, refused []fleetwave.FileError) error
}

// WriteResult reports what CommitFiles did.
type WriteResult struct {
	// Commit is the pushed commit, "" when Unchanged.
	Commit string
	// Parent is the tip of the tracked branch the write was built on,
	// checked against and pushed over.
	Parent string
	// Unchanged reports that the tip already held the files as written:
	// no commit was made.
	Unchanged bool
	// Attempts is how many times the write was built (1 + races lost).
	Attempts int
}

// InvalidWriteError is returned by CommitFiles when Validate found the
// resulting tree invalid, or a file is over the size limit. Nothing was
// pushed. errors.As to *fleetwave.ValidationError holds as well.
type InvalidWriteError struct {
	// Parent is the tip the refused tree was built on ("" when the write
	// was refused before fetching).
	Parent string
	// Errors lists the problems, as Validate returned them.
	Errors []fleetwave.FileError
}

func (e *InvalidWriteError) Error() string {
	const shown = 3
	var b strings.Builder
	b.WriteString("write refused: the resulting tree is invalid")
	for i, fe := range e.Errors {
		if i == shown {
			fmt.Fprintf(&b, "; and %d more", len(e.Errors)-shown)
			break
		}
		b.WriteString("; " + fe.Error())
	}
	return b.String()
}

// Unwrap returns the errors as a *fleetwave.ValidationError.
func (e *InvalidWriteError) Unwrap() error { return &fleetwave.ValidationError{Errors: e.Errors} }

// ErrPreconditionFailed matches every *PreconditionError (errors.Is).
var ErrPreconditionFailed = errors.New("write precondition failed")

// PreconditionError is returned by CommitFiles when the write no longer
// fits the tip of the tracked branch: Expect refused it, or a path is not
// a regular file there (a directory, a symbolic link, a submodule, or
// under something that is not a directory). Nothing was pushed.
type PreconditionError struct {
	// Parent is the tip the write was checked against.
	Parent string
	// Path is the path concerned, when known.
	Path string
	// Err is what Expect returned, or the conflict found.
	Err error
}

func (e *PreconditionError) Error() string {
	msg := ErrPreconditionFailed.Error()
	if e.Path != "" {
		msg += ": " + e.Path
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *PreconditionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPreconditionFailed) hold.
func (e *PreconditionError) Is(target error) bool { return target == ErrPreconditionFailed }

// ErrRemoteUnavailable is wrapped by CommitFiles errors when the remote
// could not be reached (fetch or push failed for another reason than a
// race or a refusal by the remote). Nothing changed; calling again once
// the remote is back writes the files.
var ErrRemoteUnavailable = errors.New("config repository remote unavailable")

// ExpectFiles returns an Expect function requiring each path of want to
// hold exactly want's content at the tip; a nil value requires the path to
// be absent (an empty non-nil value: an empty file). Paths must be among
// the write's Files: Expect sees no other. The *PreconditionError it
// returns names the first path (in sorted order) that differs.
func ExpectFiles(want map[string][]byte) func(current map[string][]byte) error {
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return func(current map[string][]byte) error {
		for _, p := range paths {
			w := want[p]
			got, exists := current[p]
			switch {
			case w == nil && exists:
				return &PreconditionError{Path: p, Err: errors.New("exists already")}
			case w != nil && !exists:
				return &PreconditionError{Path: p, Err: errors.New("does not exist")}
			case w != nil && !bytes.Equal(got, w):
				return &PreconditionError{Path: p, Err: errors.New("changed since it was read")}
			}
		}
		return nil
	}
}

// CommitFiles commits w.Files to the tracked branch of the remote as one
// commit, authored and committed by the configured identity (WithAuthor)
// at the clock's time, with w.Message and the trailers Fleetwave-Actor
// (w.Actor) and w.Trailers. It is the write path for people-facing files
// (approvals, node labels, rollouts): the repository stays the source of
// truth, and the tracked branch shows who asked for what.
//
// Paths must be clean relative slash paths, outside status/ (which only
// status commits write), with no element naming git's own files (.git*,
// git~1), control or invisible characters; no two may be one inside the
// other. Contents are capped by the maximum file size (WithMaxFileSize).
// Bad paths return an error wrapping ErrUnsafePath, oversized files an
// *InvalidWriteError, and neither fetches anything.
//
// Every attempt fetches the remote, applies the edits to the tracked tip
// (plumbing, no worktree), calls w.Expect with the touched paths' current
// content and w.Validate with the whole resulting tree, and pushes with a
// lease on that tip, like status commits. If anyone pushed in between (a
// person, a status commit, another hub), the push is refused and the
// write is rebuilt on the new tip, re-checked and pushed again, with
// exponential backoff, up to the retry limit (WithPushRetries; then an
// error wrapping ErrPushRaces). It never force-pushes. Nothing is pushed
// when Expect refuses (*PreconditionError), when a touched path is a
// directory, a symbolic link or a submodule at the tip, or under a file
// there (*PreconditionError), or when Validate refuses
// (*InvalidWriteError). A failed fetch or push returns an error wrapping
// ErrRemoteUnavailable and changes nothing.
//
// When the tip already holds the files as written, no commit is made:
// WriteResult.Unchanged. After a push the mirror's tracking ref points at
// the new commit (Files, Generations and StatusTip see it at once); the
// next Fetch reports it as a change.
//
// Calls are queued one at a time. Git work holds the Repo's lock as any
// other method; Expect and Validate run without it and may call other
// methods of the Repo (but not CommitFiles: it would wait for itself).
func (r *Repo) CommitFiles(ctx context.Context, w Write) (WriteResult, error) {
	pw, err := r.prepareWrite(w)
	if err != nil {
		return WriteResult{}, err
	}
	if err := r.writes.lock(ctx); err != nil {
		return WriteResult{}, err
	}
	defer r.writes.unlock()
	var validated, pushed plumbing.Hash
	for attempt := 1; ; attempt++ {
		b, err := r.buildWrite(ctx, pw, w.Validate != nil, validated)
		if err != nil {
			return WriteResult{}, err
		}
		res := WriteResult{Parent: b.tip.String(), Attempts: attempt}
		if w.Expect != nil {
			if err := w.Expect(b.current); err != nil {
				var pe *PreconditionError
				if errors.As(err, &pe) {
					if pe.Parent == "" {
						pe.Parent = res.Parent
					}
					return WriteResult{}, err
				}
				return WriteResult{}, &PreconditionError{Parent: res.Parent, Err: err}
			}
		}
		if b.unchanged {
			if !pushed.IsZero() && b.tip == pushed {
				// an earlier attempt's push got through although it
				// reported an error: that commit is this write
				res.Commit, res.Parent = pushed.String(), b.parentOfTip.String()
				return res, nil
			}
			res.Unchanged = true
			r.opts.log.Debug().Str("commit", res.Parent).Str("actor", pw.actor).Msg("files unchanged: nothing to commit")
			return res, nil
		}
		if b.validate {
			if err := w.Validate(b.files, b.refused); err != nil {
				var verr *fleetwave.ValidationError
				if errors.As(err, &verr) {
					return WriteResult{}, &InvalidWriteError{Parent: res.Parent, Errors: slices.Clone(verr.Errors)}
				}
				return WriteResult{}, fmt.Errorf("validate write: %w", err)
			}
			validated = b.key
		}
		h, raced, err := r.pushWrite(ctx, pw, b, attempt)
		if err == nil {
			r.maybeCompact()
			res.Commit = h.String()
			return res, nil
		}
		if !h.IsZero() {
			pushed = h
		}
		if !raced {
			return WriteResult{}, err
		}
		if attempt >= r.opts.pushRetries {
			return WriteResult{}, fmt.Errorf("%w: write of %d files, %d attempts, last: %v", ErrPushRaces, len(pw.paths), attempt, err)
		}
		wait := min(pushBackoffBase<<(attempt-1), pushBackoffMax)
		r.opts.log.Warn().Err(err).Int("try", attempt).Int64("backoff_ms", wait.Milliseconds()).Str("actor", pw.actor).Msg("write raced, rebuilding on the new tip")
		select {
		case <-ctx.Done():
			return WriteResult{}, ctx.Err()
		case <-time.After(wait): // a network retry delay: real time, whatever clock stamps the commits
		}
	}
}

// preparedWrite is a checked Write.
type preparedWrite struct {
	edits   map[string][]byte
	paths   []string // sorted
	message string
	actor   string
}

// prepareWrite checks w's paths, sizes and message; it reads nothing.
func (r *Repo) prepareWrite(w Write) (*preparedWrite, error) {
	if len(w.Files) == 0 {
		return nil, errors.New("write has no files")
	}
	pw := &preparedWrite{edits: make(map[string][]byte, len(w.Files))}
	var big []fleetwave.FileError
	for p, data := range w.Files {
		if err := checkWritePath(p); err != nil {
			return nil, err
		}
		if int64(len(data)) > r.opts.maxFileSize {
			big = append(big, fleetwave.FileError{Path: p, Msg: fmt.Sprintf("file is %d bytes, over the limit of %d bytes", len(data), r.opts.maxFileSize)})
		}
		pw.edits[p] = bytes.Clone(data) // nil stays nil: a deletion
		pw.paths = append(pw.paths, p)
	}
	sort.Strings(pw.paths)
	for _, p := range pw.paths {
		for dir := p; ; {
			i := strings.LastIndexByte(dir, '/')
			if i < 0 {
				break
			}
			dir = dir[:i]
			if _, ok := pw.edits[dir]; ok {
				return nil, fmt.Errorf("%w: %q is inside %q, also written", ErrUnsafePath, p, dir)
			}
		}
	}
	if len(big) > 0 {
		(&fleetwave.ValidationError{Errors: big}).Sort()
		return nil, &InvalidWriteError{Errors: big}
	}
	subject, body, _ := strings.Cut(strings.TrimLeft(w.Message, "\r\n"), "\n")
	if strings.TrimSpace(subject) == "" {
		return nil, errors.New("write message has no subject")
	}
	pw.actor = strings.Join(strings.Fields(w.Actor), " ")
	if pw.actor == "" {
		return nil, errors.New("write has no actor")
	}
	trailers := append([]Trailer{{Key: TrailerActor, Value: pw.actor}}, w.Trailers...)
	for _, t := range w.Trailers {
		switch {
		case !validTrailerKey(t.Key):
			return nil, fmt.Errorf("write trailer key %q is invalid", t.Key)
		case strings.EqualFold(t.Key, TrailerActor), strings.EqualFold(t.Key, TrailerFence):
			return nil, fmt.Errorf("write trailer %s is reserved", t.Key)
		}
	}
	pw.message = StatusMessage(subject, body, trailers...)
	return pw, nil
}

// checkWritePath accepts a path CommitFiles may write: clean, relative,
// outside status/, and no element git or a checkout could read as git's
// own (.git, .gitmodules, .gitattributes, NTFS's git~1, HFS+'s ignored
// code points) or that hides characters.
func checkWritePath(p string) error {
	if err := checkRelPath(p); err != nil {
		return err
	}
	top, _, _ := strings.Cut(p, "/")
	if strings.EqualFold(top, StatusDir) {
		return fmt.Errorf("%w: %q is under %s/, which only status commits write", ErrUnsafePath, p, StatusDir)
	}
	for _, el := range strings.Split(p, "/") {
		if why := unsafeElement(el); why != "" {
			return fmt.Errorf("%w: %q: %s", ErrUnsafePath, p, why)
		}
	}
	return nil
}

func unsafeElement(el string) string {
	if !utf8.ValidString(el) {
		return "not UTF-8"
	}
	if strings.ContainsFunc(el, func(c rune) bool { return unicode.IsControl(c) || hfsIgnorable(c) }) {
		return "control or invisible characters"
	}
	lower := strings.ToLower(el)
	if strings.HasPrefix(lower, ".git") {
		return "git's own files are not written"
	}
	if strings.TrimRight(lower, ". ") == "git~1" {
		return "an NTFS short name of .git"
	}
	return ""
}

// hfsIgnorable reports the code points HFS+ ignores in names (git's
// is_hfs_dotgit): ".g\u200cit" is ".git" there.
func hfsIgnorable(c rune) bool {
	switch {
	case c >= 0x200c && c <= 0x200f, c >= 0x202a && c <= 0x202e, c >= 0x206a && c <= 0x206f, c == 0xfeff:
		return true
	}
	return false
}

// writeBuild is one attempt's commit, built but not written.
type writeBuild struct {
	tip         plumbing.Hash // the tracked tip it is built on
	parentOfTip plumbing.Hash
	ov          *overlay
	tree        plumbing.Hash
	unchanged   bool
	current     map[string][]byte // touched paths that are files at tip
	key         plumbing.Hash     // the tree without status/
	validate    bool              // files and refused are to be validated
	files       map[string][]byte
	refused     []fleetwave.FileError
}

// buildWrite fetches and applies pw to the tracked tip; it reads the
// candidate's files when validate is set and its content differs from
// validated.
func (r *Repo) buildWrite(ctx context.Context, pw *preparedWrite, validate bool, validated plumbing.Hash) (*writeBuild, error) {
	defer r.lock("buildWrite")()
	if err := r.usable(); err != nil {
		return nil, err
	}
	tip, err := r.fetch(ctx, true)
	if err != nil {
		var bnf *BranchNotFoundError
		if ctx.Err() != nil || errors.As(err, &bnf) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrRemoteUnavailable, err)
	}
	c, err := r.repo.CommitObject(tip)
	if err != nil {
		return nil, fmt.Errorf("tip %s: %w", tip, err)
	}
	b := &writeBuild{tip: tip, current: map[string][]byte{}}
	if len(c.ParentHashes) > 0 {
		b.parentOfTip = c.ParentHashes[0]
	}
	for _, p := range pw.paths {
		e, conflict, err := lookupPath(r.repo.Storer, c.TreeHash, p)
		if err != nil {
			return nil, fmt.Errorf("read %s at %s: %w", p, tip, err)
		}
		if conflict == "" && !e.Hash.IsZero() {
			switch {
			case regular(e.Mode):
				data, err := readBlob(r, e.Hash, r.opts.maxFileSize)
				if err != nil {
					return nil, fmt.Errorf("read %s at %s: %w", p, tip, err)
				}
				b.current[p] = data
			case e.Mode == filemode.Dir:
				conflict = "is a directory"
			case e.Mode == filemode.Symlink:
				conflict = "is a symbolic link"
			case e.Mode == filemode.Submodule:
				conflict = "is a submodule"
			default:
				conflict = fmt.Sprintf("has file mode %s", e.Mode)
			}
		}
		if conflict != "" {
			return nil, &PreconditionError{Parent: tip.String(), Path: p, Err: errors.New(conflict)}
		}
	}
	b.ov = newOverlay(r.repo.Storer)
	if b.tree, err = editTree(b.ov, c.TreeHash, pw.edits); err == nil && b.tree.IsZero() {
		b.tree, err = writeTree(b.ov, nil) // every file deleted: the empty tree
	}
	if err != nil {
		return nil, fmt.Errorf("build tree: %w", err)
	}
	if b.tree == c.TreeHash {
		b.unchanged = true
		return b, nil
	}
	if !validate {
		return b, nil
	}
	if b.key, err = withoutStatus(b.ov, b.tree); err != nil {
		return nil, err
	}
	if b.key != validated {
		b.validate = true
		if b.files, b.refused, err = r.treeFiles(ctx, b.ov, b.tree); err != nil {
			return nil, fmt.Errorf("read the new tree: %w", err)
		}
	}
	return b, nil
}

// pushWrite writes b's commit into the mirror and pushes it with a lease
// on b.tip. raced reports a lost race (the error says which); commit is
// set when the push was attempted.
func (r *Repo) pushWrite(ctx context.Context, pw *preparedWrite, b *writeBuild, attempt int) (commit plumbing.Hash, raced bool, err error) {
	defer r.lock("pushWrite")()
	if err := r.usable(); err != nil {
		return plumbing.ZeroHash, false, err
	}
	// a status commit or a Fetch while Expect and Validate ran: the remote
	// moved, no need to ask it
	if ref, err := r.repo.Reference(r.trackingRef(), true); err == nil && ref.Hash() != b.tip {
		return plumbing.ZeroHash, true, fmt.Errorf("%w: the branch moved to %s, write built on %s", errRemoteMoved, ref.Hash(), b.tip)
	}
	sig := object.Signature{Name: r.opts.authorName, Email: r.opts.authorEmail, When: r.opts.clock.Now()}
	h, err := writeCommit(b.ov, b.tree, []plumbing.Hash{b.tip}, sig, sig, pw.message)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("write commit: %w", err)
	}
	pack, err := b.ov.flush()
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("store objects: %w", err)
	}
	if r.beforePush != nil {
		r.beforePush(attempt)
	}
	branch := plumbing.NewBranchReferenceName(r.src.Branch)
	pctx, cancel := transportContext(ctx)
	err = r.pushPack(pctx, branch, b.tip, h, pack)
	cancel()
	switch {
	case err == nil:
	case isPushRace(err):
		return h, true, err
	case ctx.Err() != nil:
		return h, false, ctx.Err()
	case strings.HasPrefix(err.Error(), "command error on"), strings.HasPrefix(err.Error(), "unpack error"):
		return h, false, fmt.Errorf("push %s: refused by the remote: %w", branch.Short(), err)
	default:
		return h, false, fmt.Errorf("%w: %w", ErrRemoteUnavailable, r.translate("push", err))
	}
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.trackingRef(), h)); err != nil {
		return h, false, fmt.Errorf("update tracking ref: %w", err)
	}
	r.opts.log.Info().Str("branch", branch.Short()).Str("commit", h.String()).Str("parent", b.tip.String()).
		Str("actor", pw.actor).Int("files", len(pw.paths)).Int("try", attempt).Msg("files pushed")
	return h, false, nil
}

// lookupPath returns the entry at p under root (zero when absent), or why
// p cannot be written: an element before the last is not a directory.
func lookupPath(s storer.EncodedObjectStorer, root plumbing.Hash, p string) (object.TreeEntry, string, error) {
	tree, done := root, ""
	for {
		if tree.IsZero() {
			return object.TreeEntry{}, "", nil
		}
		t, err := object.GetTree(s, tree)
		if err != nil {
			return object.TreeEntry{}, "", err
		}
		name, rest, more := strings.Cut(p, "/")
		i := slices.IndexFunc(t.Entries, func(e object.TreeEntry) bool { return e.Name == name })
		switch {
		case i < 0:
			return object.TreeEntry{}, "", nil
		case !more:
			return t.Entries[i], "", nil
		case t.Entries[i].Mode != filemode.Dir:
			return object.TreeEntry{}, fmt.Sprintf("%s%s is not a directory", done, name), nil
		}
		tree, p, done = t.Entries[i].Hash, rest, done+name+"/"
	}
}

// withoutStatus returns the hash root would have without its status/
// directory (computed, not stored): equal for two trees whose files
// outside status/ are the same.
func withoutStatus(s storer.EncodedObjectStorer, root plumbing.Hash) (plumbing.Hash, error) {
	t, err := object.GetTree(s, root)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	entries := slices.DeleteFunc(slices.Clone(t.Entries), func(e object.TreeEntry) bool {
		return e.Name == StatusDir && e.Mode == filemode.Dir
	})
	obj := &plumbing.MemoryObject{}
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return obj.Hash(), nil
}

// changesStatus reports whether c's status/ directory differs from its
// first parent's (for a root commit: whether it has one). Unreadable
// trees count as a change.
func (r *Repo) changesStatus(c *object.Commit) bool {
	st, err := r.statusTree(c.TreeHash)
	if err != nil {
		return true
	}
	if len(c.ParentHashes) == 0 {
		return !st.IsZero()
	}
	p, err := r.repo.CommitObject(c.ParentHashes[0])
	if err != nil {
		return true
	}
	pst, err := r.statusTree(p.TreeHash)
	return err != nil || pst != st
}

// writeQueue is a mutex whose lock gives up when the context ends; the
// zero value is unlocked.
type writeQueue struct {
	once sync.Once
	ch   chan struct{}
}

func (q *writeQueue) lock(ctx context.Context) error {
	q.once.Do(func() { q.ch = make(chan struct{}, 1) })
	select {
	case q.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *writeQueue) unlock() { <-q.ch }
