package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// BenchmarkWriteStatus measures one status commit as the hub makes it
// during a fleet-wide rollout: on a status branch holding one document per
// node (status/nodes/, n of them) and a rollout split in parts of 1,000
// items, it rewrites the summary, a tenth of the parts and 2% of the
// node documents. Run it without -race:
//
//	go test -run '^$' -bench 'WriteStatus/100k' -benchtime 40x ./gitsync/
//
// It reports the median and the longest commit besides the mean: every
// compactAt commits one of them also merges the mirror's packs.
//
// FLEETWAVE_STATUS_CPUPROFILE=FILE profiles the timed commits only.
func BenchmarkWriteStatus(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) { benchWriteStatus(b, n) })
	}
}

func benchStatusNode(i, run int) []byte {
	return fmt.Appendf(nil, "node: node-%06d\nreported: true\ninstances:\n  - block: web\n    version: \"1.%d\"\n    generation: %d\n    state: running\n", i, run, run)
}

func benchStatusPart(p, run int) []byte {
	var b []byte
	for i := range 1000 {
		b = fmt.Appendf(b, "- id: web-%06d\n  node: node-%06d\n  status: %s\n", p*1000+i, p*1000+i, []string{"pending", "completed"}[min(run, 1)])
	}
	return b
}

func benchWriteStatus(b *testing.B, nodes int) {
	for k, v := range map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"} {
		b.Setenv(k, v)
	}
	ctx := context.Background()
	src := b.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("fleet\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	bare := filepath.Join(b.TempDir(), "remote.git")
	if _, err := SeedBare(ctx, src, bare, "main", "Seed", CommitInfo{Author: "Seeder", Email: "seed@example.com", When: testStart}); err != nil {
		b.Fatal(err)
	}
	r, err := Open(ctx, Source{URL: gittest.URL(bare), Dir: filepath.Join(b.TempDir(), "mirror")}, WithStatusBranch("fleetwave/status"))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.Fetch(ctx); err != nil {
		b.Fatal(err)
	}
	parts := nodes / 1000
	files := make(map[string][]byte, nodes+parts+1)
	for i := range nodes {
		files[fmt.Sprintf("status/nodes/node-%06d.yaml", i)] = benchStatusNode(i, 0)
	}
	for p := range parts {
		files[fmt.Sprintf("status/rollouts/web-g1.part-%03d.yaml", p)] = benchStatusPart(p, 0)
	}
	files["status/summary.yaml"] = []byte("run: 0\n")
	if _, err := r.WriteStatus(ctx, files, "status: seed"); err != nil {
		b.Fatal(err)
	}
	if out := os.Getenv("FLEETWAVE_STATUS_CPUPROFILE"); out != "" {
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	changed := nodes / 50
	var took []time.Duration
	b.ResetTimer()
	for run := 1; run <= b.N; run++ {
		b.StopTimer()
		files := map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "run: %d\n", run)}
		for k := range changed {
			i := (run*changed + k) % nodes
			files[fmt.Sprintf("status/nodes/node-%06d.yaml", i)] = benchStatusNode(i, run)
		}
		for k := range max(parts/10, 1) {
			p := (run + k) % parts
			files[fmt.Sprintf("status/rollouts/web-g1.part-%03d.yaml", p)] = benchStatusPart(p, run)
		}
		b.StartTimer()
		start := time.Now()
		res, err := r.WriteStatus(ctx, files, fmt.Sprintf("status: run %d", run))
		took = append(took, time.Since(start))
		if err != nil || res.Commit == "" {
			b.Fatalf("WriteStatus = %+v, %v", res, err)
		}
	}
	b.StopTimer()
	// the mirror merges its packs every compactAt commits, in one of them
	b.ReportMetric(float64(median(took).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(slices.Max(took).Microseconds())/1000, "max-ms")
}
