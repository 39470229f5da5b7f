//go:build unix

package schema

import (
	"io/fs"
	"slices"
	"syscall"
)

// readLimited reads the file at path unless it is larger than limit
// bytes; then it returns its size as tooBig and no data.
//
// It reads with bare system calls: opening an *os.File tries to add it to
// the network poller (fcntl to make it non-blocking, epoll_ctl, which
// refuses a regular file, fcntl to undo it), and the size check cost an
// fstat; the fcntl calls alone were 12% of the CPU of `fleetwave validate`
// on a tree of 100,000 small files.
func readLimited(path string, limit int64) (data []byte, tooBig int64, err error) {
	var fd int
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	// most object files are a few hundred bytes: read them into a buffer
	// on the stack and keep an exact copy
	var small [4096]byte
	var buf []byte
	for {
		var n int
		if buf == nil {
			want := int(min(int64(len(small)), limit+1))
			n, err = syscall.Read(fd, small[:want])
			if err == nil && n > 0 && n < want {
				// a read of a regular file on a local file system that
				// returns less than asked for stopped at its end: the
				// read that would say so is one system call per file
				// saved (100,000 in a large tree)
				return append(make([]byte, 0, n), small[:n]...), 0, nil
			}
		} else {
			if len(buf) == cap(buf) {
				buf = slices.Grow(buf, int(min(limit+1, int64(2*cap(buf))))-len(buf))
			}
			n, err = syscall.Read(fd, buf[len(buf):cap(buf)])
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, 0, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0 && buf == nil:
			return []byte{}, 0, nil
		case n == 0:
			return buf, 0, nil
		}
		if buf == nil {
			buf = append(make([]byte, 0, n), small[:n]...)
		} else {
			buf = buf[:len(buf)+n]
		}
		if int64(len(buf)) > limit {
			var st syscall.Stat_t
			if err := syscall.Fstat(fd, &st); err == nil && st.Size > limit {
				return nil, st.Size, nil
			}
			return nil, int64(len(buf)), nil // it grew while read
		}
	}
}
