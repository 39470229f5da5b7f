package hub_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/examples"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestAgentSelfUpgradeInWavesAndRollback: three agents run as processes of
// a fleetwave binary built as 1.0.0, each from its own copy (as on three
// machines), under a supervisor that restarts them when they exit (as
// systemd's Restart=always would). The hub serves the builds of its
// agent_artifacts directory: 1.1.0, and a broken 1.2.0 that passes the
// upgrade's trial run but dies at start. The system BRC, with the
// fleetwave-agent block as `fleetwave init` seeds it (the built-in
// upgrade), first installs the block at 1.0.0; then 1.1.0 is pushed: every
// agent downloads it, re-executes itself in place (same pid, no restart)
// and reports 1.1.0, two at a time (max_concurrent 2: waves of 2 and 1);
// the binary's path holds 1.1.0, the previous build kept as .prev. Then
// 1.2.0 is pushed, one at a time: the first agent hands over to the
// broken build, which exits; the supervisor starts the binary's path again,
// still 1.1.0, which fails the item (agent_upgrade_failed) and reports
// 1.1.0; the failure threshold (1) halts the rollout and no other agent is
// touched.
func TestAgentSelfUpgradeInWavesAndRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fleetwave binary twice")
	}
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	start := time.Now()
	builds := t.TempDir()
	var v100, v110 string
	var buildErrs [2]error
	var wg sync.WaitGroup
	wg.Go(func() { v100, buildErrs[0] = upgBuild(builds, "1.0.0") })
	wg.Go(func() { v110, buildErrs[1] = upgBuild(builds, "1.1.0") })
	wg.Wait()
	for _, err := range buildErrs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("built 1.0.0 and 1.1.0 in %v", time.Since(start).Round(time.Millisecond))

	// the hub's builds: 1.1.0 and a broken 1.2.0, with their SHA256SUMS
	artifacts := t.TempDir()
	upgCopy(t, v110, filepath.Join(artifacts, hub.ArtifactName("1.1.0", runtime.GOOS, runtime.GOARCH)))
	broken := "#!/bin/sh\n# fleetwave 1.2.0, a broken build: it passes the trial run, then dies at start\n" +
		"if [ -n \"$" + agent.ProbeEnv + "\" ]; then echo 1.2.0 > \"$" + agent.ProbeEnv + "\"; exit 0; fi\n" +
		"echo 'fleetwave 1.2.0: fatal: cannot start' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(artifacts, hub.ArtifactName("1.2.0", runtime.GOOS, runtime.GOARCH)), []byte(broken), 0o755); err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	for _, v := range []string{"1.1.0", "1.2.0"} {
		name := hub.ArtifactName(v, runtime.GOOS, runtime.GOARCH)
		fmt.Fprintf(&sums, "%s  %s\n", upgSum(t, filepath.Join(artifacts, name)), name)
	}
	if err := os.WriteFile(filepath.Join(artifacts, hub.ArtifactSums), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	upgCheckConfig(t, artifacts)
	t.Logf("artifacts ready at %v", time.Since(start).Round(time.Millisecond))

	nodes := []string{"n1", "n2", "n3"}
	block, err := fs.ReadFile(examples.FS, "fleet/blocks/fleetwave-agent.cue")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(block), agent.BuiltinUpgrade) {
		t.Fatalf("the seeded fleetwave-agent block does not use the built-in upgrade:\n%s", block)
	}
	files := map[string]string{
		"fleetwave.cue":              "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/fleetwave-agent.cue": string(block),
	}
	for _, n := range nodes {
		files["nodes/"+n+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\n", n)
	}
	remote := gittest.NewRemote(t, files)
	srv := redistest.Start(t)
	f := startFleetCfg(t, remote, "unix://"+srv.Addr, nil, nil, func(c *hub.Config) {
		c.Agents.Tokens = tokensFor(nodes)
		c.AgentArtifacts.Dir = artifacts
	})
	hubURL := "http://" + f.hub.Addr()
	upgCheckEndpoint(t, hubURL, filepath.Join(artifacts, hub.ArtifactName("1.1.0", runtime.GOOS, runtime.GOARCH)))
	t.Logf("hub up, endpoint checked at %v", time.Since(start).Round(time.Millisecond))

	// the agents, each from its own copy of 1.0.0
	agentsDir := t.TempDir()
	procs := map[string]*upgAgent{}
	for _, n := range nodes {
		dir := filepath.Join(agentsDir, n)
		if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "bin", "fleetwave")
		upgCopy(t, v100, bin)
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte("token-"+n+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[n] = startUpgAgent(t, n, bin, filepath.Join(dir, "agent.log"),
			"agent", "--hub", hubURL, "--node", n, "--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, "state"))
	}
	ctx := context.Background()
	// reportsVersion: the hub's last report of n shows the agent at
	// version, and the agent block's instance too (when installed)
	reportsVersion := func(n, version string) bool {
		v, err := f.hub.Node(ctx, n)
		if err != nil || v.AgentVersion != version {
			return false
		}
		obs, err := f.hub.Engine().Observations(ctx)
		in := obs.Instance(fleetwave.InstanceKey{Node: n, Block: fleetwave.AgentBlock})
		return err == nil && in != nil && in.Version == version
	}
	upgWait(t, procs, "every agent registered at 1.0.0", func() bool {
		for _, n := range nodes {
			if v, err := f.hub.Node(ctx, n); err != nil || v.AgentVersion != "1.0.0" {
				return false
			}
		}
		return true
	})

	brc := func(version string, maxConcurrent int) string {
		return fmt.Sprintf(`kind: "trigger"
name: "fleetwave-agent"
block_name: "fleetwave-agent"
trigger_type: "reconciliation"
action_name: "upgrade"
desired_state: "installed"
target_version: %q
managed_by: "fleetwave-system"
nodes: ["n1", "n2", "n3"]
max_concurrent: %d
failure_threshold: 1
bypass_maintenance_window: true
block_config_template: """
	node: {{ node.id }}
	agent_version: {{ brc.target_version }}
	"""
`, version, maxConcurrent)
	}
	rollout := func(id string, done func(fleetwave.Rollout, []fleetwave.Item) bool) (fleetwave.Rollout, []fleetwave.Item) {
		t.Helper()
		var r fleetwave.Rollout
		var items []fleetwave.Item
		upgWait(t, procs, "rollout "+id, func() bool {
			var err error
			r, items, err = f.hub.Engine().Rollout(ctx, id)
			return err == nil && done(r, items)
		})
		sort.Slice(items, func(i, j int) bool { return items[i].Node < items[j].Node })
		return r, items
	}
	completed := func(r fleetwave.Rollout, _ []fleetwave.Item) bool {
		return r.Status == fleetwave.RolloutCompleted && r.Counters.Done == 3
	}

	// 1.0.0: the block is installed; the agents run it already
	gittest.Push(t, remote, map[string]string{"brc/fleetwave-agent.cue": brc("1.0.0", 2)}, nil, "system BRC at 1.0.0")
	t.Logf("agents registered at %v", time.Since(start).Round(time.Millisecond))
	rollout("fleetwave-agent-g1", completed)
	t.Logf("1.0.0 installed at %v", time.Since(start).Round(time.Millisecond))
	phase := time.Now()

	// 1.1.0: every agent upgrades itself in place, two at a time
	gittest.Push(t, remote, map[string]string{"brc/fleetwave-agent.cue": brc("1.1.0", 2)}, nil, "agents 1.1.0")
	_, items := rollout("fleetwave-agent-g2", completed)
	waves := map[int]int{}
	for _, it := range items {
		waves[it.Wave]++
		if it.Action != "upgrade" || it.TargetVersion != "1.1.0" || it.Attempts != 1 {
			t.Errorf("item %+v: want one attempt of upgrade to 1.1.0", it)
		}
	}
	if len(waves) != 2 || waves[1] != 2 || waves[2] != 1 {
		t.Errorf("waves %v, want 2 items in wave 1 and 1 in wave 2 (max_concurrent 2)", waves)
	}
	for _, it := range items {
		inFlight := 0
		for _, o := range items {
			if !o.DispatchedAt.After(it.DispatchedAt) && o.CompletedAt.After(it.DispatchedAt) {
				inFlight++
			}
		}
		if inFlight > 2 {
			t.Errorf("%d items in flight when %s was dispatched, want at most 2", inFlight, it.Node)
		}
	}
	upgWait(t, procs, "every agent reports 1.1.0", func() bool {
		for _, n := range nodes {
			if !reportsVersion(n, "1.1.0") {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		p := procs[n]
		if s := p.startCount(); s != 1 {
			t.Errorf("%s was started %d times, want once: the upgrade re-executes in place", n, s)
		}
		if v := upgVersion(t, p.bin); v != "1.1.0" {
			t.Errorf("%s: the binary's path holds %s, want 1.1.0", n, v)
		}
		if v := upgVersion(t, p.bin+".prev"); v != "1.0.0" {
			t.Errorf("%s: .prev holds %s, want 1.0.0", n, v)
		}
		if _, err := os.Stat(p.bin + ".new"); err == nil {
			t.Errorf("%s: the new build was left as .new", n)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(p.bin)), "state", "upgrade.json")); err == nil {
			t.Errorf("%s: upgrade marker left behind", n)
		}
	}
	t.Logf("1.1.0 rolled out in %v", time.Since(phase).Round(time.Millisecond))
	phase = time.Now()

	// 1.2.0, one at a time: the first agent's new build dies; it is rolled
	// back and the rollout halts
	gittest.Push(t, remote, map[string]string{"brc/fleetwave-agent.cue": brc("1.2.0", 1)}, nil, "agents 1.2.0")
	r, items := rollout("fleetwave-agent-g3", func(r fleetwave.Rollout, _ []fleetwave.Item) bool {
		return r.Status == fleetwave.RolloutBlocked
	})
	if r.Reason != fleetwave.ReasonFailureThreshold || r.Counters.Failed != 1 || r.Counters.Done != 0 {
		t.Errorf("rollout g3 = %+v, want blocked by the failure threshold with one failed item", r)
	}
	var failed *fleetwave.Item
	for i, it := range items {
		if it.Attempts > 0 {
			if failed != nil {
				t.Errorf("%s and %s were both dispatched, want only the first", failed.Node, it.Node)
			}
			failed = &items[i]
		}
	}
	if failed == nil || failed.Status != fleetwave.ItemBlocked || failed.Reason != fleetwave.ReasonAgentUpgradeFailed || !strings.HasPrefix(failed.Output, fleetwave.ReasonAgentUpgradeFailed+": fleetwave 1.2.0 did not start") {
		t.Fatalf("the dispatched item = %+v, want it blocked with %s", failed, fleetwave.ReasonAgentUpgradeFailed)
	}
	t.Logf("failed item %s: reason %s, output %q", failed.Node, failed.Reason, failed.Output)
	upgWait(t, procs, failed.Node+" reports 1.1.0 again", func() bool { return reportsVersion(failed.Node, "1.1.0") })
	for _, n := range nodes {
		p := procs[n]
		want := 1
		if n == failed.Node {
			want = 2 // the broken build exited; the supervisor started the binary's path again
		}
		if s := p.startCount(); s != want {
			t.Errorf("%s was started %d times, want %d", n, s, want)
		}
		if v := upgVersion(t, p.bin); v != "1.1.0" {
			t.Errorf("%s: the binary's path holds %s, want 1.1.0", n, v)
		}
		if _, err := os.Stat(p.bin + ".new"); err == nil {
			t.Errorf("%s: the broken build was left as .new", n)
		}
		if !reportsVersion(n, "1.1.0") {
			t.Errorf("%s does not report 1.1.0", n)
		}
	}
	if log, _ := os.ReadFile(procs[failed.Node].logPath); !strings.Contains(string(log), "fleetwave 1.2.0: fatal: cannot start") {
		t.Errorf("%s's log does not show the broken build's start:\n%s", failed.Node, log)
	}
	t.Logf("1.2.0 halted after one failure in %v; whole test %v", time.Since(phase).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// upgBuild builds ./cmd/fleetwave with fleetwave.Version set to version
// (never race-built, whatever GOFLAGS say).
func upgBuild(dir, version string) (string, error) {
	out := filepath.Join(dir, "fleetwave-"+version)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "build", "-o", out, "-ldflags", "-X github.com/fleetwave/fleetwave.Version="+version, "./cmd/fleetwave")
	cmd.Dir = ".."
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", version, err, b)
	}
	b, err := exec.Command(out, "version").Output()
	if got := strings.TrimSpace(string(b)); err != nil || got != "fleetwave "+version {
		return "", fmt.Errorf("the build of %s says %q (%v)", version, got, err)
	}
	return out, nil
}

// upgVersion runs `bin version`.
func upgVersion(t *testing.T, bin string) string {
	t.Helper()
	b, err := exec.Command(bin, "version").Output()
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(b)), "fleetwave ")
}

func upgCopy(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func upgSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// upgCheckConfig: hub.yaml's agent_artifacts.
func upgCheckConfig(t *testing.T, dir string) {
	t.Helper()
	write := func(artifacts string) string {
		p := filepath.Join(t.TempDir(), "hub.yaml")
		body := "repo: {url: file:///srv/git/fleet.git}\ndata_dir: /var/lib/fleetwave-hub\nagent_artifacts:\n  dir: " + artifacts + "\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := hub.LoadConfig(write(dir))
	if err != nil || cfg.AgentArtifacts.Dir != dir {
		t.Fatalf("hub.yaml with agent_artifacts: %+v, %v", cfg.AgentArtifacts, err)
	}
	if _, err := hub.LoadConfig(write(filepath.Join(dir, "missing"))); err == nil || !strings.Contains(err.Error(), "agent_artifacts.dir") {
		t.Fatalf("a missing agent_artifacts.dir: %v", err)
	}
}

// upgCheckEndpoint: the artifacts endpoint answers only a node's own
// token, serves the build with its sha256, and knows what it does not hold.
func upgCheckEndpoint(t *testing.T, hubURL, build string) {
	t.Helper()
	call := func(method, node, token, rest string) (*http.Response, []byte) {
		req, err := http.NewRequest(method, hubURL+"/api/v1/agent/nodes/"+node+"/artifacts/"+rest, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	platform := "?os=" + runtime.GOOS + "&arch=" + runtime.GOARCH
	for _, c := range []struct {
		node, token, rest string
		status            int
		code              string
	}{
		{"n1", "", "1.1.0" + platform, http.StatusUnauthorized, "unauthorized"},
		{"n2", "token-n1", "1.1.0" + platform, http.StatusForbidden, "forbidden"},
		{"n1", "token-n1", "9.9.9" + platform, http.StatusNotFound, "unknown_artifact"},
		{"n1", "token-n1", "1.1.0?os=" + runtime.GOOS + "&arch=mips99", http.StatusNotFound, "unknown_artifact"},
		{"n1", "token-n1", "1.1.0?os=" + runtime.GOOS, http.StatusBadRequest, "invalid_query"},
		{"n1", "token-n1", "..%2Fhub.yaml" + platform, http.StatusBadRequest, "invalid_query"},
	} {
		resp, b := call(http.MethodGet, c.node, c.token, c.rest)
		if resp.StatusCode != c.status || !strings.Contains(string(b), `"code":"`+c.code+`"`) {
			t.Fatalf("GET %s/artifacts/%s as %q: %d %s, want %d %s", c.node, c.rest, c.token, resp.StatusCode, b, c.status, c.code)
		}
	}
	resp, b := call(http.MethodGet, "n1", "token-n1", "1.1.0"+platform)
	sum := sha256.Sum256(b)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Fleetwave-Sha256") != upgSum(t, build) || hex.EncodeToString(sum[:]) != upgSum(t, build) ||
		resp.Header.Get("Content-Type") != "application/octet-stream" || resp.Header.Get("X-Fleetwave-Version") != "1.1.0" {
		t.Fatalf("GET the 1.1.0 build: %d, headers %v, %d bytes", resp.StatusCode, resp.Header, len(b))
	}
}

// upgAgent runs an agent process and starts it again whenever it exits,
// until the test ends.
type upgAgent struct {
	node, bin, logPath string
	args               []string

	mu      sync.Mutex
	starts  int
	cmd     *exec.Cmd // the running process, nil between runs
	stopped bool
	done    chan struct{}
}

func startUpgAgent(t *testing.T, node, bin, logPath string, args ...string) *upgAgent {
	t.Helper()
	p := &upgAgent{node: node, bin: bin, logPath: logPath, args: args, done: make(chan struct{})}
	if err := p.startOne(); err != nil {
		t.Fatal(err)
	}
	go p.supervise()
	t.Cleanup(p.stop)
	return p
}

func (p *upgAgent) startOne() error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== start %d of %s\n", p.starts+1, p.bin)
	var cmd *exec.Cmd
	// A binary copied moments ago can be busy: a process another test of
	// this package forked meanwhile holds its write descriptor until it
	// executes its own program (ETXTBSY). The agent retries the same way.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		cmd = exec.Command(p.bin, p.args...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err := cmd.Start()
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ETXTBSY) || time.Now().After(deadline) {
			return err
		}
	}
	p.mu.Lock()
	p.cmd = cmd
	p.starts++
	p.mu.Unlock()
	return nil
}

// supervise waits for the process and restarts it after a short pause.
func (p *upgAgent) supervise() {
	defer close(p.done)
	for {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		_ = cmd.Wait()
		p.mu.Lock()
		p.cmd = nil
		stopped := p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		time.Sleep(300 * time.Millisecond)
		p.mu.Lock()
		stopped = p.stopped
		p.mu.Unlock()
		if stopped || p.startOne() != nil {
			return
		}
	}
}

func (p *upgAgent) startCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// kill kills the running process's group (SIGKILL), as a power cut
// would; the supervisor starts it again. An action the agent runs is in a
// group of its own and lives on.
func (p *upgAgent) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// stop ends the supervisor and kills the process group (the agent and
// whatever it started) of the running process.
func (p *upgAgent) stop() {
	p.mu.Lock()
	p.stopped = true
	if p.cmd != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
		return
	case <-time.After(10 * time.Second):
	}
	p.mu.Lock()
	if p.cmd != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	p.mu.Unlock()
	<-p.done
}

// upgWait waits until cond holds, showing the agents' logs when it never
// does.
func upgWait(t *testing.T, procs map[string]*upgAgent, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, p := range procs {
				log, _ := os.ReadFile(p.logPath)
				lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
				t.Logf("%s (started %d times), last lines:\n%s", p.node, p.startCount(), strings.Join(lines[max(0, len(lines)-25):], "\n"))
			}
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
