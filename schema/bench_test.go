package schema

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/fleetgen"
)

// readTree reads every object file of dir into the map Load takes.
func readTree(tb testing.TB, dir string) map[string][]byte {
	tb.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if _, ok := ObjectKeyForPath(rel); ok {
			b, err := os.ReadFile(p)
			files[rel] = b
			return err
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return files
}

func generated10k(tb testing.TB) (string, map[string][]byte) {
	tb.Helper()
	dir := tb.TempDir()
	if err := fleetgen.Generate(dir, 10_000, 50, 20, 1); err != nil {
		tb.Fatal(err)
	}
	return dir, readTree(tb, dir)
}

// BenchmarkLoad10k validates a repository of 10,000 nodes, 50 BRCs and 20
// blocks (fleetgen, mixed .cue/.yaml/.json) from memory.
func BenchmarkLoad10k(b *testing.B) {
	_, files := generated10k(b)
	v := newValidator(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := v.Load(files); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBenchReport prints the figures of the schema benchmark; it runs only
// with FLEETWAVE_BENCH=1 (and is meant to run without -race):
//
//	FLEETWAVE_BENCH=1 CUE_BIN=$(command -v cue) go test ./schema -run TestBenchReport -v
func TestBenchReport(t *testing.T) {
	if os.Getenv("FLEETWAVE_BENCH") != "1" {
		t.Skip("set FLEETWAVE_BENCH=1 to print the schema benchmark figures")
	}
	dir, files := generated10k(t)
	v := newValidator(t)
	var runs []time.Duration
	for range 5 {
		start := time.Now()
		if _, err := v.Load(files); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, time.Since(start))
	}
	slices.Sort(runs)
	full := runs[2]
	t.Logf("files: %d (10,000 nodes, 50 BRCs, 20 blocks), GOMAXPROCS=%d", len(files), runtime.GOMAXPROCS(0))
	t.Logf("full validation (Load, median of 5): %v  [runs %v]", full.Round(time.Millisecond), runs)

	// A one-file change, validated the only way Load offers today: the
	// whole tree again.
	changed := maps.Clone(files)
	changed["nodes/node-000042.cue"] = bytes.Replace(changed["nodes/node-000042.cue"], []byte(`"r`), []byte(`"x`), 1)
	start := time.Now()
	if _, err := v.Load(changed); err != nil {
		t.Fatal(err)
	}
	t.Logf("one-file change, full re-validation: %v", time.Since(start).Round(time.Millisecond))
	t.Logf("peak resident memory (VmHWM): %s", vmHWM())

	cue := os.Getenv("CUE_BIN")
	if cue == "" {
		cue, _ = exec.LookPath("cue")
	}
	if cue == "" {
		t.Logf("cue vet: skipped, no cue binary (set CUE_BIN or put cue in PATH: GOBIN=$(mktemp -d) go install cuelang.org/go/cmd/cue@v0.17.1)")
		return
	}
	// cue vet checks YAML and JSON data files against one definition per
	// run; .cue object files have no package and cannot be vetted as data,
	// so both sides are timed on the YAML and JSON files only.
	schemaFile := filepath.Join(t.TempDir(), "schema.cue")
	if err := os.WriteFile(schemaFile, schemaSource, 0o644); err != nil {
		t.Fatal(err)
	}
	dataOnly := map[string][]byte{}
	var vet time.Duration
	for folder, kind := range folders {
		var args []string
		for p, b := range files {
			if strings.HasPrefix(p, folder+"/") && !strings.HasSuffix(p, ".cue") {
				args = append(args, filepath.Join(dir, filepath.FromSlash(p)))
				dataOnly[p] = b
			}
		}
		if len(args) == 0 {
			continue
		}
		slices.Sort(args)
		cmd := exec.Command(cue, append([]string{"vet", "-c", "-d", definitions[kind][0], schemaFile}, args...)...)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cue vet %s: %v\n%.2000s", folder, err, out)
		}
		vet += time.Since(start)
	}
	perVet := vet / time.Duration(len(dataOnly))
	perOurs := full / time.Duration(len(files))
	t.Logf("cue vet on the %d YAML+JSON files (one run per kind): %v = %v/file; fleetwave Load on all %d files (incl. .cue objects and cross-object checks): %v = %v/file; per file cue vet / Load = %.1fx",
		len(dataOnly), vet.Round(time.Millisecond), perVet, len(files), full.Round(time.Millisecond), perOurs, float64(perVet)/float64(perOurs))
}

func vmHWM() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return fmt.Sprintf("unknown (heap now %d MiB)", ms.HeapAlloc>>20)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
		}
	}
	return "unknown"
}
