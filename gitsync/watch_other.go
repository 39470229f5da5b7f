//go:build !linux

package gitsync

import (
	"context"
	"fmt"
	"runtime"
)

// watchGitDir has no implementation here: the hub polls instead.
func watchGitDir(_ context.Context, gitDir string, _ func()) error {
	return fmt.Errorf("%w: no file notifications on %s (%s)", ErrWatchUnsupported, runtime.GOOS, gitDir)
}
