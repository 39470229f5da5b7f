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
	ctx := context.Background()
	r, edits := statusBenchRepo(b, nodes)
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
	var took []time.Duration
	stepTook := map[string][]time.Duration{}
	b.ResetTimer()
	for run := 1; run <= b.N; run++ {
		b.StopTimer()
		files := edits(run)
		b.StartTimer()
		start := time.Now()
		res, err := r.WriteStatus(ctx, files, fmt.Sprintf("status: run %d", run))
		took = append(took, time.Since(start))
		if err != nil || res.Commit == "" {
			b.Fatalf("WriteStatus = %+v, %v", res, err)
		}
		for _, s := range res.Steps {
			stepTook[s.Name] = append(stepTook[s.Name], s.Took)
		}
	}
	b.StopTimer()
	for name, ts := range stepTook { // where a commit's time goes
		b.ReportMetric(float64(median(ts).Microseconds())/1000, name+"-p50-ms")
	}
	// the mirror merges its packs every compactAt commits, in one of them
	b.ReportMetric(float64(median(took).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(slices.Max(took).Microseconds())/1000, "max-ms")
}

// statusBenchRepo is the mirror benchWriteStatus writes to, its status
// branch seeded with a document per node and the parts of one rollout,
// and the edits of its run-th status commit: the summary, a tenth of the
// parts and 2% of the node documents.
func statusBenchRepo(b *testing.B, nodes int) (*Repo, func(run int) map[string][]byte) {
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
	b.Cleanup(func() { _ = r.Close() })
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
	changed := nodes / 50
	edits := func(run int) map[string][]byte {
		files := map[string][]byte{"status/summary.yaml": fmt.Appendf(nil, "run: %d\n", run)}
		for k := range changed {
			i := (run*changed + k) % nodes
			files[fmt.Sprintf("status/nodes/node-%06d.yaml", i)] = benchStatusNode(i, run)
		}
		for k := range max(parts/10, 1) {
			p := (run + k) % parts
			files[fmt.Sprintf("status/rollouts/web-g1.part-%03d.yaml", p)] = benchStatusPart(p, run)
		}
		return files
	}
	return r, edits
}

// BenchmarkFetchBesideStatus measures what a sync of the tracked branch
// waits for while the hub writes status: Fetch, every 20 ms, alone and
// then while status commits of benchWriteStatus are written one after the
// other (the mirror's lock is shared), after one status commit to warm up.
// It reports the medians and the 90th percentile and longest beside
// status commits:
//
//	go test -run '^$' -bench 'FetchBesideStatus/100k' -benchtime 20x ./gitsync/
func BenchmarkFetchBesideStatus(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			ctx := context.Background()
			r, edits := statusBenchRepo(b, n)
			fetches := func(stop <-chan struct{}, limit int) []time.Duration {
				var took []time.Duration
				for len(took) < limit {
					select {
					case <-stop:
						return took
					case <-time.After(20 * time.Millisecond):
					}
					start := time.Now()
					if _, _, err := r.Fetch(ctx); err != nil {
						b.Error(err)
						return took
					}
					took = append(took, time.Since(start))
				}
				return took
			}
			alone := fetches(nil, 20)
			// the first commit after the seed reads the whole status tree
			// (once per hub start): a warm-up, not measured
			if _, err := r.WriteStatus(ctx, edits(b.N+1), "status: warm-up"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			stop := make(chan struct{})
			done := make(chan []time.Duration)
			go func() { done <- fetches(stop, 1<<30) }()
			for run := 1; run <= b.N; run++ {
				if _, err := r.WriteStatus(ctx, edits(run), fmt.Sprintf("status: run %d", run)); err != nil {
					b.Fatal(err)
				}
			}
			close(stop)
			beside := <-done
			b.StopTimer()
			slices.Sort(beside)
			b.ReportMetric(float64(median(alone).Microseconds())/1000, "alone-p50-ms")
			b.ReportMetric(float64(median(beside).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(beside[len(beside)*9/10].Microseconds())/1000, "p90-ms")
			b.ReportMetric(float64(slices.Max(beside).Microseconds())/1000, "max-ms")
		})
	}
}
