//go:build !unix

package schema

import (
	"io"
	"os"
)

// readLimited reads the file at path unless it is larger than limit
// bytes; then it returns its size as tooBig and no data.
func readLimited(path string, limit int64) (data []byte, tooBig int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if info.Size() > limit {
		return nil, info.Size(), nil
	}
	data, err = io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(data)) > limit {
		return nil, int64(len(data)), nil // it grew while read
	}
	return data, 0, nil
}
