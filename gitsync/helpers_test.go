package gitsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// isolateGit keeps the machine's git configuration out of the test: go-git's
// file transport runs git-upload-pack and git-receive-pack.
func isolateGit(t *testing.T) {
	t.Helper()
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_AUTHOR_NAME", gittest.AuthorName)
	t.Setenv("GIT_AUTHOR_EMAIL", gittest.AuthorEmail)
	t.Setenv("GIT_COMMITTER_NAME", gittest.AuthorName)
	t.Setenv("GIT_COMMITTER_EMAIL", gittest.AuthorEmail)
}

var testStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// open opens a mirror of url in a fresh directory.
func open(t *testing.T, url string, opts ...Option) *Repo {
	t.Helper()
	return openAt(t, url, filepath.Join(t.TempDir(), "mirror"), opts...)
}

func openAt(t *testing.T, url, dir string, opts ...Option) *Repo {
	t.Helper()
	opts = append([]Option{WithLogger(zerolog.New(zerolog.NewTestWriter(t))), WithNormalizer(jsonNormalizer{})}, opts...)
	r, err := Open(context.Background(), Source{URL: url, Dir: dir}, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// fetch fetches r, and waits for the compaction it may have started.
func fetch(t *testing.T, r *Repo) string {
	t.Helper()
	head, _, err := r.Fetch(context.Background())
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	r.compacting.Wait()
	return head
}

func generations(t *testing.T, r *Repo, commit string) map[fleetwave.ObjectKey]int64 {
	t.Helper()
	g, err := r.Generations(context.Background(), commit)
	if err != nil {
		t.Fatalf("generations at %s: %v", commit, err)
	}
	return g
}

// jsonNormalizer is a stand-in for the schema package: files under a kind
// directory ending in .json are objects "<dir>/<name>", and their canonical
// form is compacted JSON.
type jsonNormalizer struct{}

func (jsonNormalizer) ObjectKey(p string) (fleetwave.ObjectKey, bool) {
	dir, file := path.Split(p)
	if dir == "" || path.Ext(file) != ".json" || strings.Count(p, "/") != 1 {
		return "", false
	}
	return fleetwave.ObjectKey(strings.TrimSuffix(dir, "/") + "/" + strings.TrimSuffix(file, ".json")), true
}

func (jsonNormalizer) Normalize(_ string, data []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return nil, errors.New("not json")
	}
	return b.Bytes(), nil
}

func equalGens(a, b map[fleetwave.ObjectKey]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func writeAll(dir string, files map[string]string) error {
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}
