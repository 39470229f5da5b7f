package schema

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

var update = flag.Bool("update", false, "rewrite the expected.txt goldens of testdata/broken")

// TestBrokenCorpus loads every repository of testdata/broken/<case>/ with
// LoadDir and compares the error lines with <case>/expected.txt. Run
// `go test ./schema -run TestBrokenCorpus -update` to rewrite the goldens
// after a deliberate change of messages, then review the diff.
//
// A case may hold a setup.txt whose lines prepare what cannot be committed;
// the tree is then copied to a temporary directory first:
//
//	symlink <path> <target>   a symbolic link; a target "outside/<name>"
//	                          points into a directory outside the tree
//	bigfile <path> <bytes>    a node file padded with a comment to <bytes>
func TestBrokenCorpus(t *testing.T) {
	cases, err := os.ReadDir(filepath.Join("testdata", "broken"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 40 {
		t.Errorf("corpus has %d cases, expected at least 40", len(cases))
	}
	v := newValidator(t)
	for _, c := range cases {
		if !c.IsDir() {
			continue
		}
		t.Run(c.Name(), func(t *testing.T) {
			dir := filepath.Join("testdata", "broken", c.Name())
			root := prepareCase(t, dir)
			start := time.Now()
			snap, err := v.LoadDir(root)
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("LoadDir took %v, expected a bounded time", d)
			}
			if snap != nil || err == nil {
				t.Fatalf("LoadDir accepted a broken repository")
			}
			var verr *fleetwave.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %v (%T) is not a *fleetwave.ValidationError", err, err)
			}
			var got strings.Builder
			for _, fe := range verr.Errors {
				got.WriteString(fe.Error() + "\n")
			}
			golden := filepath.Join(dir, "expected.txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got.String() != string(want) {
				t.Errorf("errors:\n%s\nwant (%s):\n%s", got.String(), golden, want)
			}
		})
	}
}

// prepareCase returns the directory to load: dir itself, or a temporary
// copy with the entries of dir/setup.txt created.
func prepareCase(t *testing.T, dir string) string {
	t.Helper()
	setup, err := os.ReadFile(filepath.Join(dir, "setup.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return dir
	}
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "repo")
	if err := os.CopyFS(root, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, line := range strings.Split(strings.TrimSpace(string(setup)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("setup.txt: bad line %q", line)
		}
		target := filepath.Join(root, filepath.FromSlash(f[1]))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		switch f[0] {
		case "symlink":
			to := f[2]
			if rest, ok := strings.CutPrefix(to, "outside/"); ok {
				to = filepath.Join(outside, rest)
				if err := os.MkdirAll(to, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(to, "x.cue"), []byte("kind: \"node\"\nname: \"x\"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(to, target); err != nil {
				t.Fatal(err)
			}
		case "bigfile":
			n, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatal(err)
			}
			stem := strings.TrimSuffix(filepath.Base(target), filepath.Ext(target))
			head := fmt.Sprintf("kind: node\nname: %s\n#", stem)
			if err := os.WriteFile(target, []byte(head+strings.Repeat("x", n-len(head)-1)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("setup.txt: unknown directive %q", f[0])
		}
	}
	return root
}
