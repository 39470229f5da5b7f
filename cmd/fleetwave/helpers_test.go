package main

import (
	"io/fs"
	"os"
	"testing"
)

func osDirFS(dir string) fs.FS { return os.DirFS(dir) }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
