package gitsync

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrWatchUnsupported is returned by Watch when the remote cannot be
// watched: it is not a local repository (https, ssh) or the platform has no
// file notifications. The hub then relies on polling and webhooks.
var ErrWatchUnsupported = errors.New("remote cannot be watched")

// Debounce bounds of Watch: the first event after watchQuiet without any
// calls notify at once; the events that follow it call notify once more,
// once the remote's refs have been quiet for watchQuiet, and at the latest
// watchMaxWait after the first of them.
const (
	watchQuiet   = 50 * time.Millisecond
	watchMaxWait = 500 * time.Millisecond
)

// Watch calls notify shortly after the tracked remote's refs may have
// changed, until ctx is done (then it returns nil). It works when the source
// URL is a local path or a file:// URL: it watches the remote's git
// directory (HEAD and packed-refs) and its refs/ tree, adding directories
// created later, ignoring lock files and objects. The first event after a
// quiet spell notifies at once (a push moves its ref with one rename, and
// its sync should not wait), the events of the burst that may follow are
// debounced into one more call (50 ms of quiet, at most 500 ms after the
// first of them), and an event is only a hint: the caller fetches and compares heads (Fetch reports
// changed). A kernel queue overflow also calls notify.
//
// Watch returns an error wrapping ErrWatchUnsupported at once for remote
// URLs and on platforms without file notifications (fsnotify: inotify,
// kqueue, ReadDirectoryChangesW, FEN), and another error when the watch
// cannot be set up (missing directory, watch limits). Keep a slow poll as a
// safety net anyway: notifications are not delivered on network
// filesystems. notify runs on Watch's goroutine and must not block for
// long; it does not need to be safe for concurrent use.
func (r *Repo) Watch(ctx context.Context, notify func()) error {
	gitDir, err := localGitDir(r.remote)
	if err != nil {
		return err
	}
	return watchGitDir(ctx, gitDir, notify)
}

// localGitDir returns the git directory of a local remote: the directory
// holding HEAD and refs/ (a bare repository, the .git directory of a work
// tree, or the common directory of a linked work tree).
func localGitDir(remote string) (string, error) {
	p := remote
	if strings.Contains(remote, "://") {
		u, err := url.Parse(remote)
		if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") {
			return "", fmt.Errorf("%w: %s is not a local repository", ErrWatchUnsupported, remote)
		}
		p = u.Path
	} else if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %s is not a local repository", ErrWatchUnsupported, remote)
	}
	dotGit := filepath.Join(p, ".git")
	if fi, err := os.Stat(dotGit); err == nil {
		if fi.IsDir() {
			p = dotGit
		} else if b, err := os.ReadFile(dotGit); err == nil {
			// a linked work tree: ".git" holds "gitdir: <dir>", whose
			// commondir file names the directory the refs live in
			target, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
			if !ok {
				return "", fmt.Errorf("%s: not a gitdir file", dotGit)
			}
			target = strings.TrimSpace(target)
			if !filepath.IsAbs(target) {
				target = filepath.Join(p, target)
			}
			p = target
		}
	}
	if b, err := os.ReadFile(filepath.Join(p, "commondir")); err == nil {
		common := strings.TrimSpace(string(b))
		if !filepath.IsAbs(common) {
			common = filepath.Join(p, common)
		}
		p = common
	}
	if fi, err := os.Stat(filepath.Join(p, "refs")); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("watch %s: no refs directory: not a git directory", p)
	}
	return filepath.Clean(p), nil
}

// ignoredRefName reports whether a file name in the git directory or refs/
// says nothing about refs: lock and temporary files (the rename that ends a
// ref update is reported under the final name).
func ignoredRefName(name string) bool {
	return strings.HasSuffix(name, ".lock") || strings.HasSuffix(name, ".new") || strings.HasSuffix(name, ".tmp")
}

// topLevelRefName reports whether a name directly in the git directory can
// change what a ref resolves to.
func topLevelRefName(name string) bool {
	return name == "HEAD" || name == "packed-refs" || name == "refs"
}

// debouncer turns a burst of hints into at most two calls: the first
// hint after quiet without a call fires at once, the hints that follow
// fire once more, after quiet without hints and at the latest maxWait
// after the first of them.
type debouncer struct {
	quiet, maxWait time.Duration
	first          time.Time // the first hint waiting to fire
	pending        bool      // hints wait to fire
	fired          time.Time // the last call
}

// hint records a hint at now and returns how long to wait before firing:
// 0 fires at once.
func (d *debouncer) hint(now time.Time) time.Duration {
	if !d.pending {
		if now.Sub(d.fired) >= d.quiet {
			return 0
		}
		d.pending, d.first = true, now
	}
	return max(0, min(d.quiet, d.maxWait-now.Sub(d.first)))
}

// fire records a call at now: the hints before it are served.
func (d *debouncer) fire(now time.Time) {
	d.pending, d.fired = false, now
}
