package gitsync

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// The figures of issue 6, printed by
//
//	FLEETWAVE_BENCH=1 go test -race=false -run TestBench -v ./gitsync/
//
// (run without -race for meaningful numbers). Skipped otherwise.
const (
	benchObjects = 10_000 // object files outside status/
	benchStatus  = 10_000 // status files rewritten by every commit
	benchRuns    = 3
	benchPushes  = 20
)

func benchGate(t *testing.T) {
	if os.Getenv("FLEETWAVE_BENCH") != "1" {
		t.Skip("set FLEETWAVE_BENCH=1 to run the benchmark")
	}
	isolateGit(t)
}

func statusPath(i int) string { return fmt.Sprintf("status/nodes/n%03d/node-%05d.yaml", i/100, i) }

func statusContent(run, i int) []byte {
	return fmt.Appendf(nil, "node: node-%05d\nrun: %d\nobserved_generation: %d\nstale: false\n", i, run, run*7+i)
}

// benchRemote makes a bare remote with benchObjects object files and
// benchStatus status files and returns its directory.
func benchRemote(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	for i := range benchObjects {
		p := filepath.Join(src, "nodes", fmt.Sprintf("d%03d", i/100), fmt.Sprintf("node-%05d.json", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, fmt.Appendf(nil, `{"name":"node-%05d","org":"o%d"}`, i, i%7), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range benchStatus {
		p := filepath.Join(src, filepath.FromSlash(statusPath(i)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, statusContent(0, i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bare := filepath.Join(t.TempDir(), "remote.git")
	if _, err := SeedBare(context.Background(), src, bare, "main", "Seed", CommitInfo{Author: "Seeder", Email: "seed@example.com", When: testStart}); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, bare, "gc", "--quiet")
	return bare
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func gitIn(t *testing.T, dir, stdin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(gittest.Env(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func TestBenchCommitStatusVersusGit(t *testing.T) {
	benchGate(t)
	goRemote, gitRemote := benchRemote(t), benchRemote(t)
	r := open(t, gittest.URL(goRemote))
	fetch(t, r)

	// the git CLI's side: a bare mirror and the status files on disk
	// (written before the clock starts: git needs them as files)
	mirror := filepath.Join(t.TempDir(), "mirror.git")
	gittest.Git(t, "", "clone", "--quiet", "--bare", gittest.URL(gitRemote), mirror)
	index := filepath.Join(t.TempDir(), "index")

	var goTimes, gitTimes []time.Duration
	for run := 1; run <= benchRuns; run++ {
		files := make(map[string][]byte, benchStatus)
		for i := range benchStatus {
			files[statusPath(i)] = statusContent(run, i)
		}
		start := time.Now()
		commit, err := r.CommitStatus(context.Background(), files, fmt.Sprintf("Status run %d", run))
		goTimes = append(goTimes, time.Since(start))
		if err != nil || commit == "" {
			t.Fatalf("CommitStatus = %q, %v", commit, err)
		}

		dir := t.TempDir()
		var list strings.Builder
		var paths []string
		for i := range benchStatus {
			p := statusPath(i)
			full := filepath.Join(dir, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, files[p], 0o644); err != nil {
				t.Fatal(err)
			}
			list.WriteString(full + "\n")
			paths = append(paths, p)
		}
		start = time.Now()
		gitIn(t, mirror, "", nil, "fetch", "--quiet", "origin", "+refs/heads/main:refs/heads/main")
		tip := gitIn(t, mirror, "", nil, "rev-parse", "refs/heads/main")
		hashes := strings.Split(gitIn(t, mirror, list.String(), nil, "hash-object", "-w", "--stdin-paths"), "\n")
		var info strings.Builder
		for i, h := range hashes {
			fmt.Fprintf(&info, "100644 %s\t%s\n", h, paths[i])
		}
		env := []string{"GIT_INDEX_FILE=" + index}
		gitIn(t, mirror, "", env, "read-tree", tip)
		gitIn(t, mirror, info.String(), env, "update-index", "--index-info")
		tree := gitIn(t, mirror, "", env, "write-tree")
		c := gitIn(t, mirror, "", nil, "commit-tree", tree, "-p", tip, "-m", fmt.Sprintf("Status run %d", run))
		gitIn(t, mirror, "", nil, "push", "--quiet", "origin", c+":refs/heads/main")
		gitTimes = append(gitTimes, time.Since(start))
		if got := gitIn(t, goRemote, "", nil, "rev-parse", "main^{tree}"); got != tree {
			t.Fatalf("run %d: go-git tree %s, git tree %s: not the same work", run, got, tree)
		}
	}
	g, c := median(goTimes), median(gitTimes)
	t.Logf("CommitStatus of %d changed status files, repo of %d files: median %s over %d runs %v", benchStatus, benchObjects+benchStatus, g.Round(time.Millisecond), benchRuns, goTimes)
	t.Logf("git CLI (fetch, hash-object -w --stdin-paths, read-tree, update-index --index-info, write-tree, commit-tree, push): median %s %v", c.Round(time.Millisecond), gitTimes)
	t.Logf("ratio CommitStatus / git = %.2f (target <= 1.5, and < 2s)", float64(g)/float64(c))
}

func TestBenchWatchLatency(t *testing.T) {
	benchGate(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)
	kicks := startWatch(t, r)
	work := filepath.Join(t.TempDir(), "w")
	gittest.Git(t, "", "clone", "--quiet", url, work)
	var lat []time.Duration
	for i := range benchPushes {
		if err := os.WriteFile(filepath.Join(work, "nodes", "a.json"), fmt.Appendf(nil, `{"i":%d}`, i), 0o644); err != nil {
			t.Fatal(err)
		}
		gittest.Git(t, work, "commit", "--quiet", "-am", fmt.Sprintf("change %d", i))
		want := gittest.Git(t, work, "rev-parse", "HEAD")
		start := time.Now()
		gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
		for {
			waitKick(t, kicks)
			if head := fetch(t, r); head == want {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("push -> watch notify -> Fetch sees the commit, %d pushes: p50 %s, p90 %s, max %s (includes the git push itself)",
		benchPushes, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}
