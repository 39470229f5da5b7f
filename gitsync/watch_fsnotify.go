package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// gitDirWatch is one fsnotify watcher on a git directory (top level only)
// and its refs/ tree (every directory).
type gitDirWatch struct {
	w      *fsnotify.Watcher
	gitDir string
}

// watchGitDir watches gitDir until ctx is done.
func watchGitDir(ctx context.Context, gitDir string, notify func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			// not a system error: this platform has no file notifications
			return fmt.Errorf("%w: %s: %v", ErrWatchUnsupported, gitDir, err)
		}
		return fmt.Errorf("watch %s: %w", gitDir, err)
	}
	defer w.Close()
	gw := &gitDirWatch{w: w, gitDir: gitDir}
	if err := gw.add(gitDir); err != nil {
		return err
	}
	if err := gw.addTree(filepath.Join(gitDir, "refs")); err != nil {
		return err
	}

	d := debouncer{quiet: watchQuiet, maxWait: watchMaxWait}
	var fire <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	call := func() {
		fire = nil
		d.fire(time.Now())
		notify()
	}
	hint := func() {
		wait := d.hint(time.Now())
		if wait == 0 {
			if timer != nil {
				timer.Stop()
			}
			call()
			return
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		fire = timer.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			relevant, err := gw.handle(ev)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if relevant {
				hint()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// events were lost: the refs may have changed
				hint()
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s: %w", gitDir, err)
		case <-fire:
			call()
		}
	}
}

func (gw *gitDirWatch) add(dir string) error {
	if err := gw.w.Add(dir); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("watch %s: inotify watch limit reached (fs.inotify.max_user_watches): %w", dir, err)
		}
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	return nil
}

// addTree watches root and every directory under it. A directory vanishing
// while walked is not an error: its refs moved to packed-refs.
func (gw *gitDirWatch) addTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if err := gw.add(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

// handle reports whether ev may change a ref, watching a directory created
// in refs/ (and the directories under it).
func (gw *gitDirWatch) handle(ev fsnotify.Event) (bool, error) {
	if ev.Name == gw.gitDir {
		return false, nil
	}
	dir, name := filepath.Split(ev.Name)
	dir = filepath.Clean(dir)
	if name == "" || ignoredRefName(name) {
		return false, nil
	}
	if dir == gw.gitDir && !topLevelRefName(name) {
		return false, nil
	}
	if ev.Has(fsnotify.Create) {
		// a new directory (or one renamed into place): refs written into
		// it before its watch exists raise no event; the hint covers them,
		// the caller re-resolves refs
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if err := gw.addTree(ev.Name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return true, err
			}
		}
	}
	return true, nil
}
