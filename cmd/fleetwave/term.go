package main

import (
	"io"
	"os"
)

// isTerminal reports whether w is a terminal (a character device), as
// opposed to a pipe, a file or a buffer.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
