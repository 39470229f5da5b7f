package schema

import (
	"bytes"
	"cmp"
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
	// one block per BRC: BRCs of fleetgen that share a block overlap,
	// which two reconciliation BRCs may not
	if err := fleetgen.Generate(dir, 10_000, 50, 50, 1); err != nil {
		tb.Fatal(err)
	}
	return dir, readTree(tb, dir)
}

// BenchmarkLoad10k validates a repository of 10,000 nodes, 50 BRCs and 50
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
	t.Logf("files: %d (10,000 nodes, 50 BRCs, 50 blocks), GOMAXPROCS=%d", len(files), runtime.GOMAXPROCS(0))

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

	// The same full validation with the fast path off: every file is
	// evaluated by CUE (what the fast path saves; see doc.go).
	cueOnly, runs := median(3, func() {
		if _, err := cueOnlyValidator(t).Load(files); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("full validation without the fast path (every file evaluated by CUE, median of 3): %v  [runs %v]; VmHWM now %s",
		cueOnly.Round(time.Millisecond), runs, vmHWM())

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
	cmds := VetArgs(schemaFile, dir, slices.Collect(maps.Keys(files)), 0)
	dataOnly := map[string][]byte{}
	for _, args := range cmds {
		for _, f := range args[5:] {
			p := strings.TrimPrefix(f, dir+"/")
			dataOnly[p] = files[p]
		}
	}
	same := maps.Clone(dataOnly)
	same["fleetwave.cue"] = files["fleetwave.cue"]
	// The .cue blocks and triggers are missing from this subset: Load also
	// reports the references to them, which only adds to its time.
	var crossErrs int
	loadSame := func(v *Validator) {
		_, err := v.Load(same)
		var verr *fleetwave.ValidationError
		if err != nil && !errors.As(err, &verr) {
			t.Fatal(err)
		}
		if verr != nil {
			crossErrs = len(verr.Errors)
		}
	}
	// The machine is shared: cue vet and Load run in turn, so that a
	// change of load affects both, and the ratio is the median of the
	// ratios of each round.
	const rounds = 5
	var vetRuns, oursRuns, cueRuns []time.Duration
	var ratios, cueRatios []float64
	for range rounds {
		vetRuns = append(vetRuns, timed(func() {
			for _, args := range cmds {
				if out, err := exec.Command(cue, args...).CombinedOutput(); err != nil {
					t.Fatalf("cue vet %s: %v\n%.2000s", args[3], err, out)
				}
			}
		}))
		oursRuns = append(oursRuns, timed(func() { loadSame(newValidator(t)) }))
		cueRuns = append(cueRuns, timed(func() { loadSame(cueOnlyValidator(t)) }))
		ratios = append(ratios, float64(vetRuns[len(vetRuns)-1])/float64(oursRuns[len(oursRuns)-1]))
		cueRatios = append(cueRatios, float64(vetRuns[len(vetRuns)-1])/float64(cueRuns[len(cueRuns)-1]))
	}
	vet, ours, oursCUE := medianOf(vetRuns), medianOf(oursRuns), medianOf(cueRuns)
	t.Logf("cue vet on the %d YAML+JSON files (one run per kind, median of %d): %v  [runs %v]", len(dataOnly), rounds, vet.Round(time.Millisecond), rounded(vetRuns))
	t.Logf("fleetwave Load on the same files + fleetwave.cue (fresh Validator, median of %d, in turn with cue vet; %d references to the left-out .cue objects reported): %v  [runs %v]",
		rounds, crossErrs, ours.Round(time.Millisecond), rounded(oursRuns))
	t.Logf("the same without the fast path (every file evaluated by CUE): %v  [runs %v]", oursCUE.Round(time.Millisecond), rounded(cueRuns))
	t.Logf("ratio cue vet / Load on the same files, median of the rounds: %.1fx  [rounds %.1f]; without the fast path: %.1fx  [rounds %.1f]",
		medianOf(ratios), ratios, medianOf(cueRatios), cueRatios)
	perVet := vet / time.Duration(len(dataOnly))
	perOurs := full / time.Duration(len(files))
	t.Logf("per file, cue vet %v vs full Load %v (all %d files incl. .cue objects and cross-object checks): %.1fx",
		perVet, perOurs, len(files), float64(perVet)/float64(perOurs))
	t.Logf("incremental re-validation vs cue vet of the YAML+JSON files: %.0fx faster", float64(vet)/float64(incr))
}

func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

func medianOf[T cmp.Ordered](xs []T) T {
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

func rounded(runs []time.Duration) []time.Duration {
	out := make([]time.Duration, len(runs))
	for i, r := range runs {
		out[i] = r.Round(time.Millisecond / 10)
	}
	return out
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
