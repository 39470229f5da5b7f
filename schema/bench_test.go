package schema

import (
	"bytes"
	"errors"
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

	"github.com/fleetwave/fleetwave"
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
// blocks (fleetgen, mixed .cue/.yaml/.json) from memory, with a fresh
// Validator each time (no cached file results).
func BenchmarkLoad10k(b *testing.B) {
	_, files := generated10k(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := newValidator(b).Load(files); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReload10kOneFileChanged validates the same repository again
// after a one-file change, with the Validator of the previous Load.
func BenchmarkReload10kOneFileChanged(b *testing.B) {
	_, files := generated10k(b)
	v := newValidator(b)
	if _, err := v.Load(files); err != nil {
		b.Fatal(err)
	}
	trees := [2]map[string][]byte{files, oneFileChanged(files)}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		if _, err := v.Load(trees[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}

// oneFileChanged returns files with the content of one node changed.
func oneFileChanged(files map[string][]byte) map[string][]byte {
	changed := maps.Clone(files)
	changed["nodes/node-000042.cue"] = bytes.Replace(changed["nodes/node-000042.cue"], []byte(`"r`), []byte(`"x`), 1)
	return changed
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
	t.Logf("files: %d (10,000 nodes, 50 BRCs, 20 blocks), GOMAXPROCS=%d", len(files), runtime.GOMAXPROCS(0))

	// Full validation: a fresh Validator each run, so nothing is cached.
	full, runs := median(5, func() {
		if _, err := newValidator(t).Load(files); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("full validation (fresh Validator, median of 5): %v = %v/file  [runs %v]",
		full.Round(time.Millisecond), full/time.Duration(len(files)), runs)

	// Incremental: the Validator of the previous Load, one node changed
	// (alternately changed and restored, so each run sees a new file).
	v := newValidator(t)
	if _, err := v.Load(files); err != nil {
		t.Fatal(err)
	}
	trees := [2]map[string][]byte{oneFileChanged(files), files}
	i := 0
	incr, runs := median(5, func() {
		snap, err := v.Load(trees[i%2])
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Nodes) != 10_000 {
			t.Fatalf("nodes = %d", len(snap.Nodes))
		}
		i++
	})
	t.Logf("incremental re-validation after a one-file change (median of 5): %v  [runs %v]", incr.Round(100*time.Microsecond), runs)
	t.Logf("peak resident memory of the test process (VmHWM): %s", vmHWM())

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
	// so the comparison on the same files uses the YAML and JSON files
	// only (plus fleetwave.cue for Load, which needs the config).
	schemaFile := filepath.Join(t.TempDir(), "schema.cue")
	if err := os.WriteFile(schemaFile, schemaSource, 0o644); err != nil {
		t.Fatal(err)
	}
	dataOnly := map[string][]byte{}
	var cmds [][]string
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
		cmds = append(cmds, append([]string{"vet", "-c", "-d", definitions[kind][0], schemaFile}, args...))
	}
	vet, runs := median(3, func() {
		for _, args := range cmds {
			if out, err := exec.Command(cue, args...).CombinedOutput(); err != nil {
				t.Fatalf("cue vet %s: %v\n%.2000s", args[3], err, out)
			}
		}
	})
	t.Logf("cue vet on the %d YAML+JSON files (one run per kind, median of 3): %v  [runs %v]", len(dataOnly), vet.Round(time.Millisecond), runs)

	same := maps.Clone(dataOnly)
	same["fleetwave.cue"] = files["fleetwave.cue"]
	// The .cue blocks and triggers are missing from this subset: Load also
	// reports the references to them, which only adds to its time.
	var crossErrs int
	ours, runs := median(5, func() {
		_, err := newValidator(t).Load(same)
		var verr *fleetwave.ValidationError
		if err != nil && !errors.As(err, &verr) {
			t.Fatal(err)
		}
		if verr != nil {
			crossErrs = len(verr.Errors)
		}
	})
	t.Logf("fleetwave Load on the same files + fleetwave.cue (fresh Validator, median of 5; %d references to the left-out .cue objects reported): %v  [runs %v]",
		crossErrs, ours.Round(time.Millisecond), runs)
	perVet := vet / time.Duration(len(dataOnly))
	perOurs := full / time.Duration(len(files))
	t.Logf("ratio cue vet / Load on the same files: %.1fx; per file, cue vet %v vs full Load %v (all %d files incl. .cue objects and cross-object checks): %.1fx",
		float64(vet)/float64(ours), perVet, perOurs, len(files), float64(perVet)/float64(perOurs))
	t.Logf("incremental re-validation vs cue vet of the YAML+JSON files: %.0fx faster", float64(vet)/float64(incr))
}

// median runs f n times and returns the median duration and every run.
func median(n int, f func()) (time.Duration, []time.Duration) {
	runs := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		f()
		runs = append(runs, time.Since(start))
	}
	sorted := slices.Clone(runs)
	slices.Sort(sorted)
	for i := range runs {
		runs[i] = runs[i].Round(time.Millisecond / 10)
	}
	return sorted[n/2], runs
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
