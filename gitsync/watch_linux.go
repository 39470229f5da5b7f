//go:build linux

package gitsync

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const watchMask = syscall.IN_CREATE | syscall.IN_MOVED_TO | syscall.IN_MOVED_FROM | syscall.IN_DELETE |
	syscall.IN_CLOSE_WRITE | syscall.IN_MODIFY | syscall.IN_DELETE_SELF | syscall.IN_ONLYDIR

// inotify is one inotify instance watching a git directory (top level only)
// and its refs/ tree (every directory).
type inotify struct {
	fd     int // never f.Fd(): that would switch the file to blocking mode
	f      *os.File
	gitDir string
	dirs   map[int32]string // watch descriptor -> directory
}

// watchGitDir watches gitDir with inotify (the standard library's syscall
// package: no extra dependency) until ctx is done.
func watchGitDir(ctx context.Context, gitDir string, notify func()) error {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	// a non-blocking descriptor goes through the runtime poller, so Close
	// unblocks a pending Read
	in := &inotify{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), gitDir: gitDir, dirs: map[int32]string{}}
	defer in.f.Close()
	if err := in.add(gitDir); err != nil {
		return err
	}
	if err := in.addTree(filepath.Join(gitDir, "refs")); err != nil {
		return err
	}

	hints := make(chan bool, 1) // true = overflow or a new directory scanned
	readErr := make(chan error, 1)
	go func() { readErr <- in.read(hints) }()
	stop := context.AfterFunc(ctx, func() { _ = in.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	d := debouncer{quiet: watchQuiet, maxWait: watchMaxWait}
	var fire <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			<-readErr
			return nil
		case err := <-readErr:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-hints:
			wait := d.hint(time.Now())
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C
		case <-fire:
			fire, d.pending = nil, false
			notify()
		}
	}
}

func (in *inotify) add(dir string) error {
	wd, err := syscall.InotifyAddWatch(in.fd, dir, watchMask)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("watch %s: inotify watch limit reached (fs.inotify.max_user_watches): %w", dir, err)
		}
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	in.dirs[int32(wd)] = dir
	return nil
}

// addTree watches root and every directory under it. A directory vanishing
// while walked is not an error: its refs moved to packed-refs.
func (in *inotify) addTree(root string) error {
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
		if err := in.add(p); err != nil && !errors.Is(err, syscall.ENOENT) {
			return err
		}
		return nil
	})
}

// read decodes inotify events and sends a hint for every one that may
// change a ref, until the descriptor is closed or its deadline passes.
func (in *inotify) read(hints chan<- bool) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := in.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read inotify events: %w", err)
		}
		hint := false
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+nameLen]
			off += syscall.SizeofInotifyEvent + nameLen
			name := string(nameBytes)
			for i := 0; i < len(name); i++ {
				if name[i] == 0 {
					name = name[:i]
					break
				}
			}
			if mask&syscall.IN_Q_OVERFLOW != 0 {
				hint = true
				continue
			}
			dir, ok := in.dirs[wd]
			if !ok {
				continue
			}
			if mask&syscall.IN_IGNORED != 0 {
				delete(in.dirs, wd)
				continue
			}
			if name == "" || ignoredRefName(name) {
				continue
			}
			if dir == in.gitDir && !topLevelRefName(name) {
				continue
			}
			if mask&syscall.IN_ISDIR != 0 && mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0 {
				// refs written into it before the watch exists raise no
				// event: the hint covers them, the caller re-resolves refs
				if err := in.addTree(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			hint = true
		}
		if hint {
			select {
			case hints <- true:
			default: // one pending hint is enough
			}
		}
	}
}
