package gitsync_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/fleetgen"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/schema"
)

// BenchmarkSyncOneFile measures what the hub does for one new commit that
// changes one node file, on top of a mirror that synced the previous one:
// Fetch, StatusOnly, Files, Load and Generations, each reported as a
// metric (ms/op of the stage) besides the total. The push itself is not
// timed. Run it without -race:
//
//	go test -run '^$' -bench 'SyncOneFile/10k' -count 6 ./gitsync/
//	go test -run '^$' -bench 'SyncOneFile/100k' -benchtime 10x ./gitsync/
//
// -cpuprofile includes making the repository and the first, full sync;
// FLEETWAVE_SYNC_CPUPROFILE=FILE profiles the timed steps only.
func BenchmarkSyncOneFile(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) { benchSync(b, n, nodeFile) })
	}
}

// BenchmarkSyncOneBRC is BenchmarkSyncOneFile where each commit changes a
// BRC, as a push that starts a rollout does: the nodes/ tree stays as it was.
func BenchmarkSyncOneBRC(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) { benchSync(b, n, brcFile) })
	}
}

// BenchmarkSyncNewBRC is BenchmarkSyncOneFile where each commit adds a
// BRC (a one-node rollout of a block no other BRC installs), as a push
// that starts a new rollout does.
//
//	go test -run '^$' -bench 'SyncNewBRC/100k' -benchtime 10x ./gitsync/
func BenchmarkSyncNewBRC(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) { benchSync(b, n, newBRC) })
	}
}

// newBRC is a pick of benchSync: it adds blocks/bench-added.cue to the
// tree and returns the BRC path each commit adds (%d: the commit's
// number, which is also the one node it names).
func newBRC(work string) string {
	block := "kind: \"block\"\nname: \"bench-added\"\nactions: {\n\tinstall: command: \"true\"\n\tupgrade: command: \"true\"\n}\n"
	if err := os.WriteFile(filepath.Join(work, "blocks", "bench-added.cue"), []byte(block), 0o644); err != nil {
		panic(err)
	}
	return "brc/bench-added-%d.cue"
}

// hubNormalizer is the hub's adapter of schema to gitsync.Normalizer.
type hubNormalizer struct{}

func (hubNormalizer) ObjectKey(p string) (fleetwave.ObjectKey, bool) {
	return schema.ObjectKeyForPath(p)
}

func (hubNormalizer) Normalize(p string, data []byte) ([]byte, error) {
	return schema.Normalize(p, data)
}

// syncer is the hub's sync of one commit, stage by stage.
type syncer struct {
	repo *gitsync.Repo
	seq  *schema.Sequence // as the hub loads the commits it follows
	last string
	// stage times of the last step
	fetch, files, load, gens time.Duration
}

func (s *syncer) step(ctx context.Context) (*fleetwave.Snapshot, error) {
	t0 := time.Now()
	head, _, err := s.repo.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	if s.last != "" {
		only, err := s.repo.StatusOnly(ctx, s.last, head)
		if err != nil {
			return nil, err
		}
		if only {
			return nil, fmt.Errorf("commit %s: status only", head)
		}
	}
	t1 := time.Now()
	fs, err := s.repo.FilesChanged(ctx, head)
	if err != nil {
		return nil, err
	}
	if len(fs.Refused) > 0 {
		return nil, fmt.Errorf("refused files: %v", fs.Refused)
	}
	t2 := time.Now()
	snap, err := s.seq.LoadChanged(fs.Files, head, fs.Base, fs.Changed)
	if err != nil {
		return nil, err
	}
	t3 := time.Now()
	gens, err := s.repo.Generations(ctx, head)
	if err != nil {
		return nil, err
	}
	t4 := time.Now()
	snap.Commit, snap.Generations = head, gens
	s.last = head
	s.fetch, s.files, s.load, s.gens = t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3)
	return snap, nil
}

func benchSync(b *testing.B, nodes int, pick func(work string) string) {
	for k, v := range map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"} {
		b.Setenv(k, v)
	}
	ctx := context.Background()
	work := filepath.Join(b.TempDir(), "work")
	if err := fleetgen.Generate(work, nodes, 50, 50, 1); err != nil {
		b.Fatal(err)
	}
	pickedPath := pick(work) // before the first commit: a pick may add files
	bare := filepath.Join(b.TempDir(), "remote.git")
	gittest.Git(b, work, "init", "--quiet", "--initial-branch=main")
	gittest.Git(b, work, "add", "-A")
	gittest.Git(b, work, "commit", "--quiet", "-m", "fleet")
	gittest.Git(b, "", "clone", "--quiet", "--bare", work, bare)
	gittest.Git(b, bare, "gc", "--quiet")
	gittest.Git(b, work, "remote", "add", "origin", bare)

	repo, err := gitsync.Open(ctx, gitsync.Source{URL: gittest.URL(bare), Dir: filepath.Join(b.TempDir(), "mirror")},
		gitsync.WithNormalizer(hubNormalizer{}))
	if err != nil {
		b.Fatal(err)
	}
	defer repo.Close()
	v, err := schema.New()
	if err != nil {
		b.Fatal(err)
	}
	s := &syncer{repo: repo, seq: v.Sequence()}
	if _, err := s.step(ctx); err != nil {
		b.Fatal(err)
	}

	node := filepath.Join(work, pickedPath)
	adding := strings.Contains(pickedPath, "%d") // each commit adds a file
	var orig []byte
	if !adding {
		if orig, err = os.ReadFile(node); err != nil {
			b.Fatal(err)
		}
	}
	if out := os.Getenv("FLEETWAVE_SYNC_CPUPROFILE"); out != "" {
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	var fetch, files, load, gens, cpu time.Duration
	i := 0
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		i++
		// the same node changes every time: a new content each commit
		path, data := node, append(bytes.Clone(orig), fmt.Appendf(nil, "\n// edit %d\n", i)...)
		if adding {
			path = fmt.Sprintf(node, i)
			data = fmt.Appendf(nil, "kind: \"trigger\"\nname: \"bench-added-%d\"\nblock_name: \"bench-added\"\ntarget_version: \"1\"\nnodes: [%q]\n",
				i, fmt.Sprintf("node-%06d", i))
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
		gitRun(b, work, "add", "-A")
		gitRun(b, work, "commit", "--quiet", "-am", fmt.Sprintf("edit %d", i))
		gitRun(b, work, "push", "--quiet", "origin", "HEAD:main")
		b.StartTimer()
		cpu0 := cpuTime()
		snap, err := s.step(ctx)
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - cpu0
		b.StopTimer()
		if len(snap.Nodes) != nodes {
			b.Fatalf("snapshot has %d nodes, want %d", len(snap.Nodes), nodes)
		}
		fetch, files, load, gens = fetch+s.fetch, files+s.files, load+s.load, gens+s.gens
		b.StartTimer()
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(ms(fetch), "fetch-ms/op")
	b.ReportMetric(ms(files), "files-ms/op")
	b.ReportMetric(ms(load), "load-ms/op")
	b.ReportMetric(ms(gens), "gens-ms/op")
	// the CPU time of this process (all its threads, GC included; not the
	// remote's git-upload-pack): steadier than wall time on a busy machine
	b.ReportMetric(ms(cpu), "cpu-ms/op")
}

// nodeFile returns the path of a .cue node file of the generated tree (a
// comment can be appended to it).
func nodeFile(work string) string {
	for i := 42; ; i++ {
		p := fmt.Sprintf("nodes/node-%06d.cue", i)
		if _, err := os.Stat(filepath.Join(work, p)); err == nil {
			return p
		}
	}
}

// brcFile returns the path of a .cue BRC file of the generated tree.
func brcFile(work string) string {
	for i := 0; ; i++ {
		p := fmt.Sprintf("brc/brc-%03d.cue", i)
		if _, err := os.Stat(filepath.Join(work, p)); err == nil {
			return p
		}
	}
}

// cpuTime returns the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func gitRun(b *testing.B, dir string, args ...string) {
	b.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gittest.Env()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
