package credstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func TestGetOrCreateIsStableAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, key(1))
	if err != nil {
		t.Fatal(err)
	}
	v1, err := s.GetOrCreate("workspace/ws-a", "db_password", 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(v1) != 32 {
		t.Fatalf("len = %d", len(v1))
	}
	if v2, _ := s.GetOrCreate("workspace/ws-a", "db_password", 40); v2 != v1 {
		t.Fatal("second call returned a different value")
	}
	if other, _ := s.GetOrCreate("workspace/ws-b", "db_password", 32); other == v1 {
		t.Fatal("scopes share a value")
	}
	s2, err := Open(dir, key(1))
	if err != nil {
		t.Fatal(err)
	}
	if v3, _ := s2.GetOrCreate("workspace/ws-a", "db_password", 32); v3 != v1 {
		t.Fatal("value changed after reopening")
	}
	raw, _ := os.ReadFile(filepath.Join(dir, FileName))
	if bytes.Contains(raw, []byte(v1)) || bytes.Contains(raw, []byte("db_password")) {
		t.Fatal("store file holds plain text")
	}
	if fi, _ := os.Stat(filepath.Join(dir, FileName)); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v", fi.Mode())
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != FileName && e.Name() != FileName+".lock" {
			t.Fatalf("leftover file %s (a temporary file must not survive)", e.Name())
		}
	}
}

func TestWrongKeyAndBadInput(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir, key(1))
	v, _ := s.GetOrCreate("s", "n", 16)
	if _, err := Open(dir, key(2)); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("wrong key: err = %v", err)
	}
	if _, err := Open(dir, []byte("short")); !errors.Is(err, ErrBadKey) {
		t.Fatalf("short key: err = %v", err)
	}
	_ = os.WriteFile(filepath.Join(dir, FileName), []byte("garbage-garbage-garbage-garbage"), 0o600)
	if _, err := Open(dir, key(1)); !errors.Is(err, ErrDecrypt) || strings.Contains(err.Error(), v) {
		t.Fatalf("tampered: err = %v", err)
	}
	for _, n := range []int{0, 7, 257} {
		if _, err := s.GetOrCreate("s", "other", n); err == nil {
			t.Fatalf("length %d accepted", n)
		}
	}
}

func TestConcurrentCallersGetOneValue(t *testing.T) {
	s, _ := Open(t.TempDir(), key(3))
	var wg sync.WaitGroup
	vals := make([]string, 16)
	for i := range vals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals[i], _ = s.GetOrCreate("s", "shared", 24)
		}()
	}
	wg.Wait()
	for _, v := range vals {
		if v != vals[0] || v == "" {
			t.Fatalf("values differ: %q", vals)
		}
	}
}

// TestTwoStoresOnOneDirectoryAgree: two stores opened on the same directory
// (as two hub processes would; the lock is per open file, as across
// processes) asking for the same new credentials at once get the same values.
func TestTwoStoresOnOneDirectoryAgree(t *testing.T) {
	dir := t.TempDir()
	k := key(7)
	a, err := Open(dir, k)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, k)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	got := make([][2]string, n)
	var wg sync.WaitGroup
	for i := range n {
		for j, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := s.GetOrCreate("ws", fmt.Sprintf("db-%d", i), 24)
				if err != nil {
					t.Error(err)
				}
				got[i][j] = v
			}()
		}
	}
	wg.Wait()
	for i, pair := range got {
		if pair[0] == "" || pair[0] != pair[1] {
			t.Fatalf("credential %d differs between the two stores", i)
		}
	}
	c, err := Open(dir, k)
	if err != nil {
		t.Fatal(err)
	}
	for i, pair := range got {
		if v, _ := c.GetOrCreate("ws", fmt.Sprintf("db-%d", i), 24); v != pair[0] {
			t.Fatalf("credential %d changed after reopening", i)
		}
	}
}
