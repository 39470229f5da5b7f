package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// hubChildEnv, when set to a hub.yaml path, makes the test binary run a hub
// from it instead of the tests: a real hub process a test can stop, resume
// and kill.
const hubChildEnv = "FLEETWAVE_TEST_HUB_CHILD"

// crashAtEnv, with hubChildEnv, makes the child hub exit at that crash
// point (hub.WithCrashHook).
const crashAtEnv = "FLEETWAVE_TEST_CRASH_AT"

func TestMain(m *testing.M) {
	if path := os.Getenv(hubChildEnv); path != "" {
		os.Exit(runHubChild(path))
	}
	os.Exit(m.Run())
}

func runHubChild(path string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := hub.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub config:", err)
		return 1
	}
	opts := []hub.Option{hub.WithLogger(zerolog.New(os.Stderr).Level(zerolog.InfoLevel))}
	if at := os.Getenv(crashAtEnv); at != "" {
		// a crash test: die without any cleanup at this point, once
		opts = append(opts, hub.WithCrashHook(func(point string) {
			if point == at {
				fmt.Fprintln(os.Stderr, "crash at", point)
				os.Exit(3)
			}
		}))
	}
	h, err := hub.New(ctx, cfg, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub:", err)
		return 1
	}
	defer h.Close()
	if err := h.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hub:", err)
		return 1
	}
	return 0
}

// startHubChild runs a hub process from the hub.yaml at cfgPath (the test
// binary, see TestMain) that exits at crash point crashAt ("" never), and
// returns it with its log, shown when the test fails.
func startHubChild(t *testing.T, cfgPath, crashAt string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	log := &lockedBuffer{}
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), hubChildEnv+"="+cfgPath, crashAtEnv+"="+crashAt)
	c.Stderr = log
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killGroup(c.Process)
		_, _ = c.Process.Wait()
		if t.Failed() {
			t.Logf("hub %s (crash at %q) log:\n%s", filepath.Base(cfgPath), crashAt, log.String())
		}
	})
	return c, log
}

// childHubConfig writes dir/hub-a.yaml for a hub process "hub-a" that
// follows remote closely (poll 100 ms, status every 200 ms, lease TTL
// 1 s, steps every 50 ms) on redisURL, listening on addr, with extra
// lines, and returns its path.
func childHubConfig(t *testing.T, dir, remote, redisURL, addr, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`hub_id: hub-a
repo: {url: %q, branch: main, poll_interval: 100ms}
redis: %q
listen: %q
data_dir: %q
status: {interval: 200ms}
lease_ttl: 1s
step_interval: 50ms
%s`, remote, redisURL, addr, filepath.Join(dir, "a"), extra)
	path := filepath.Join(dir, "hub-a.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// killGroup ends a hub process started in a process group of its own with
// SIGKILL, and the git processes it ran (a push's receive-pack, which
// would go on writing into a remote the test's cleanup is removing).
func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGCONT) // in case the test left it stopped
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}

// leaseHolder reads who holds the leader lease, and its fence.
func leaseHolder(t *testing.T, srv *redistest.Server) (string, int64) {
	t.Helper()
	m, err := srv.Client(t).HGetAll(context.Background(), "fw{"+"fleetwave"+"}:lease").Result()
	if err != nil {
		t.Fatal(err)
	}
	f, _ := strconv.ParseInt(m["fence"], 10, 64)
	return m["owner"], f
}

// TestReplicasFailOverWithoutRunningAnythingTwice: two hub replicas share
// one Redis and one repository. The leader (a separate process) is frozen
// with SIGSTOP in the middle of a rollout: the other replica takes the
// lease with a higher fence once it expires, and a push made meanwhile
// becomes a rollout under it. When the old leader wakes up it changes
// nothing: it finds its lease gone and steps down; no status commit with
// its fence lands after the new leader's. Every node ran each action
// exactly once.
func TestReplicasFailOverWithoutRunningAnythingTwice(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	const n = 8
	files := map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/web.cue": `kind: "block"
name: "web"
actions: {
	install: command: "echo run >> \"$FLEETWAVE_STATE_DIR/runs\"; sleep 0.4"
	upgrade: command: "echo upgrade >> \"$FLEETWAVE_STATE_DIR/runs\""
}
`,
		"brc/web.cue": "kind: \"trigger\"\nname: \"web\"\nblock_name: \"web\"\ntarget_version: \"1\"\nmax_concurrent: 2\n",
	}
	var nodes []string
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		nodes = append(nodes, id)
		files["nodes/"+id+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\n", id)
	}
	remote := gittest.NewRemote(t, files)
	srv := redistest.Start(t)
	redisURL := "unix://" + srv.Addr

	// Replica A: a hub process, leader first.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "hub-a.yaml")
	cfg := fmt.Sprintf(`hub_id: hub-a
repo: {url: %q, branch: main, poll_interval: 100ms}
redis: %q
listen: 127.0.0.1:0
data_dir: %q
status: {interval: 200ms}
lease_ttl: 1s
step_interval: 50ms
reconcile_interval: 200ms
`, remote, redisURL, filepath.Join(dir, "a"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a, logA := startHubChild(t, cfgPath, "")
	start := time.Now()
	waitUntil(t, "hub-a holds the lease", func() bool { owner, _ := leaseHolder(t, srv); return owner == "hub-a" })
	t.Logf("hub-a leads after %v", time.Since(start).Round(10*time.Millisecond))
	_, fenceA := leaseHolder(t, srv)

	// Replica B serves the agents; A dispatches until it freezes.
	f := startFleetCfg(t, remote, redisURL, nodes, nil, func(c *hub.Config) {
		c.HubID, c.LeaseTTL = "hub-b", hub.Duration(time.Second)
	})
	eng := f.hub.Engine()
	waitUntil(t, "two items done under hub-a", func() bool {
		r, _, err := eng.Rollout(context.Background(), "web-g1")
		return err == nil && r.Counters.Done >= 2
	})
	t.Logf("two done after %v", time.Since(start).Round(10*time.Millisecond))
	if owner, _ := leaseHolder(t, srv); owner != "hub-a" {
		t.Fatalf("lease moved to %s before hub-a froze", owner)
	}
	// A follower syncs too: its API answers from the snapshot of the
	// branch's head, which it holds when it takes the lease.
	head := strings.TrimSpace(gittest.Git(t, "", "--git-dir", strings.TrimPrefix(remote, "file://"), "rev-parse", "main"))
	waitUntil(t, "hub-b, a follower, applies the head", func() bool { return f.hub.SyncState().Applied == head })
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	waitUntil(t, "hub-b takes the lease", func() bool { owner, _ := leaseHolder(t, srv); return owner == "hub-b" })
	_, fenceB := leaseHolder(t, srv)
	if fenceB <= fenceA {
		t.Fatalf("hub-b fence %d is not above hub-a's %d", fenceB, fenceA)
	}
	t.Logf("failover after %v (lease ttl 1s)", time.Since(frozen).Round(10*time.Millisecond))

	// web-g1 finishes under hub-b (results start the next waves; hub-b's
	// steps do the rest).
	// nodes that report late join web-g1 (one rollout per generation): it
	// may complete, then reopen, until every node's item is done
	var r fleetwave.Rollout
	var items []fleetwave.Item
	waitUntil(t, "web-g1 completed with every node", func() bool {
		var err error
		r, items, err = eng.Rollout(context.Background(), "web-g1")
		return err == nil && r.Status == fleetwave.RolloutCompleted && r.Counters.Done == n
	})
	if r.Counters.Total != n {
		t.Fatalf("web-g1 counters %+v, want %d items, all done", r.Counters, n)
	}
	rs, err := eng.Rollouts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rs {
		if x.Source.Object == "trigger/web" && x.Source.Generation == 1 && x.ID != "web-g1" {
			t.Fatalf("generation 1 has a second rollout %s", x.ID)
		}
	}
	// Only a leader plans: a push during the freeze becomes a rollout
	// under hub-b.
	gittest.Push(t, remote, map[string]string{"brc/web.cue": strings.Replace(files["brc/web.cue"], `"1"`, `"2"`, 1)}, nil, "web 2")
	r2, items2 := f.waitRollout(t, "web-g2", fleetwave.RolloutCompleted)
	t.Logf("web-g2 completed %v after the freeze", time.Since(frozen).Round(10*time.Millisecond))
	if r2.Counters.Done != n {
		t.Fatalf("web-g2 counters %+v, want %d done", r2.Counters, n)
	}
	for _, it := range items2 {
		if it.Action != "upgrade" || it.Attempts != 1 {
			t.Fatalf("web-g2 item %s: %s after %d attempts", it.ID, it.Action, it.Attempts)
		}
	}

	// The old leader wakes up: it finds its lease gone and changes nothing.
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "hub-a notices it lost the lease", func() bool { return strings.Contains(logA.String(), "leader lease lost") })
	if owner, fence := leaseHolder(t, srv); owner != "hub-b" || fence != fenceB {
		t.Fatalf("lease %s@%d after hub-a woke up, want hub-b@%d", owner, fence, fenceB)
	}
	if strings.Contains(logA.String(), "web-g2") {
		t.Fatalf("hub-a acted on web-g2:\n%s", logA.String())
	}
	for _, it := range items {
		if it.Attempts != 1 {
			t.Errorf("item %s on %s had %d attempts, want 1", it.ID, it.Node, it.Attempts)
		}
	}
	for _, node := range nodes {
		b, _ := os.ReadFile(filepath.Join(f.stateDir(node), "blocks", "web", "runs"))
		if string(b) != "run\nupgrade\n" {
			t.Errorf("%s ran %q, want the install then the upgrade, each once", node, b)
		}
	}
	// Status commits after the failover carry hub-b's fence; none of
	// hub-a's lands after one of hub-b's.
	waitFile(t, remote, "status/summary.yaml", func(s string) bool { return strings.Contains(s, fmt.Sprintf("done: %d", 2*n)) })
	seenB := false
	for _, fence := range statusFences(t, remote) { // oldest first
		switch {
		case fence == fenceB:
			seenB = true
		case seenB && fence < fenceB:
			t.Fatalf("a status commit with the stale fence %d landed after hub-b's %d", fence, fenceB)
		}
	}
	if !seenB {
		t.Fatalf("no status commit by hub-b (fence %d)", fenceB)
	}
	// hub-b read the status records whole once (catching up when hub-a
	// missed its renewal, or as it took the lease), then only what the
	// status commits since changed.
	froms := statusFollowed(t, f.logs, "hub-b")
	if whole := len(froms) - len(slices.DeleteFunc(slices.Clone(froms), func(s string) bool { return s == "" })); whole != 1 {
		t.Errorf("hub-b read the whole status %d times (%q), want once", whole, froms)
	}
}

// statusFollowed returns, in order, the status commit each "status
// followed" line of hub hubID started from ("" = the whole status read).
func statusFollowed(t *testing.T, logs *lockedBuffer, hubID string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, `"hub":"`+hubID+`"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == "status followed" {
			from, _ := m["from"].(string)
			out = append(out, from)
		}
	}
	return out
}

// statusFences lists the Fleetwave-Fence trailer of every status commit
// on the status branch, oldest first.
func statusFences(t *testing.T, remote string) []int64 {
	t.Helper()
	out := gittest.Git(t, "", "--git-dir", strings.TrimPrefix(remote, "file://"), "log", "--first-parent", "--reverse", "--format=%(trailers:key=Fleetwave-Fence,valueonly)", hub.DefaultStatusBranch)
	var fences []int64
	for _, line := range strings.Split(out, "\n") {
		if v, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64); err == nil {
			fences = append(fences, v)
		}
	}
	return fences
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
