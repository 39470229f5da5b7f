package hub_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// hubProcess is a hub running in a child process (TestMain's hub child).
type hubProcess struct {
	cmd    *exec.Cmd
	log    *lockedBuffer
	exited chan struct{}
}

// startHubProcess starts a hub process from the hub.yaml at cfgPath; it is
// killed when the test ends.
func startHubProcess(t *testing.T, cfgPath string) *hubProcess {
	t.Helper()
	p := &hubProcess{log: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), hubChildEnv+"="+cfgPath)
	p.cmd.Stderr = p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		killGroup(p.cmd.Process)
		<-p.exited
		if t.Failed() {
			t.Logf("hub pid %d log:\n%s", p.cmd.Process.Pid, p.log.String())
		}
	})
	return p
}

// kill ends the hub with SIGKILL: nothing of its own shutdown runs.
func (p *hubProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// addr is the API address the hub logged when it started ("" before).
func (p *hubProcess) addr() string {
	sc := bufio.NewScanner(strings.NewReader(p.log.String()))
	for sc.Scan() {
		var line struct{ Message, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "hub started" {
			return line.Addr
		}
	}
	return ""
}

// ready tells whether the hub's /readyz answers 200.
func (p *hubProcess) ready() bool {
	addr := p.addr()
	if addr == "" {
		return false
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// lease is the leader lease as stored in Redis.
type lease struct {
	owner, instance       string
	fence                 int64
	acquiredAt, expiresAt int64
}

func readLease(t *testing.T, c *redis.Client) lease {
	t.Helper()
	m, err := c.HGetAll(context.Background(), "fw{fleetwave}:lease").Result()
	if err != nil {
		return lease{} // the server may be restarting: the caller polls
	}
	n := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
	return lease{owner: m["owner"], instance: m["instance"], fence: n("fence"), acquiredAt: n("acquired_at"), expiresAt: n("expires_at")}
}

// redisServersOn lists the live redis-server processes serving socket: the
// title redis-server gives itself names its socket ("unixsocket:<path>").
// A zombie has an empty command line and is not counted.
func redisServersOn(socket string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		title := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		prog, rest, _ := strings.Cut(title, " ")
		if filepath.Base(prog) == "redis-server" && strings.Contains(" "+rest+" ", " unixsocket:"+socket+" ") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// lifecycleHub writes a hub.yaml for a hub "hub-a" following a new config
// repository, with Redis in mode redisMode, and returns its path.
func lifecycleHub(t *testing.T, dataDir, redisMode string) string {
	t.Helper()
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	remote := gittest.NewRemote(t, map[string]string{"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n"})
	return hubConfig(t, remote, dataDir, redisMode)
}

// hubConfig writes a hub.yaml for a hub "hub-a" and returns its path.
func hubConfig(t *testing.T, remote, dataDir, redisMode string) string {
	t.Helper()
	// a lease TTL far above how long a restart takes: a restarted hub that
	// waited for its previous process's lease to expire would be seen
	cfg := fmt.Sprintf(`hub_id: hub-a
repo: {url: %q, branch: main, poll_interval: 200ms}
redis: %q
listen: 127.0.0.1:0
data_dir: %q
lease_ttl: 30s
`, remote, redisMode, dataDir)
	path := filepath.Join(t.TempDir(), "hub.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// managedDataDir is a data dir short enough for the managed socket to be
// in it, and that socket's path.
func managedDataDir(t *testing.T) (string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fwh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir, filepath.Join(dir, "redis", "redis.sock")
}

// TestKilledHubLeavesOneRedisServer: a hub with managed Redis is killed
// with SIGKILL and restarted at once on the same data dir. Exactly one
// redis-server serves the data dir's socket after the restart (the old
// one is gone, whether its parent-death signal or the new hub stopped it),
// the hub is ready and leads with a higher fence, and the data written
// before the kill are there. A hub killed for good leaves no redis-server
// behind.
func TestKilledHubLeavesOneRedisServer(t *testing.T) {
	dataDir, socket := managedDataDir(t)
	cfg := lifecycleHub(t, dataDir, "managed")
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: socket, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()

	h1 := startHubProcess(t, cfg)
	waitUntil(t, "the first hub is ready and leads", func() bool { return h1.ready() && readLease(t, c).fence > 0 })
	before := readLease(t, c)
	servers := redisServersOn(socket)
	if len(servers) != 1 {
		t.Fatalf("redis-servers on %s: %v, want one", socket, servers)
	}
	if err := c.Set(ctx, "written-before-the-kill", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}

	h1.kill(t)
	h2 := startHubProcess(t, cfg)
	waitUntil(t, "the restarted hub is ready and leads with a higher fence", func() bool {
		l := readLease(t, c)
		return h2.ready() && l.owner == "hub-a" && l.fence > before.fence
	})
	if got := redisServersOn(socket); len(got) != 1 || got[0] == servers[0] {
		t.Fatalf("redis-servers on %s after the restart: %v, want one other than %d", socket, got, servers[0])
	}
	if v, err := c.Get(ctx, "written-before-the-kill").Result(); err != nil || v != "kept" {
		t.Fatalf("data written before the kill: %q (%v)", v, err)
	}

	h2.kill(t)
	deadline := time.Now().Add(15 * time.Second)
	for len(redisServersOn(socket)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %v still runs after its hub was killed", redisServersOn(socket))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecondHubOnOneDataDirRefusesToStart: a second hub given a data dir
// in use exits, saying which hub holds it; the first keeps its server and
// its lease.
func TestSecondHubOnOneDataDirRefusesToStart(t *testing.T) {
	dataDir, socket := managedDataDir(t)
	cfg := lifecycleHub(t, dataDir, "managed")
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: socket, MaxRetries: -1})
	defer c.Close()

	h1 := startHubProcess(t, cfg)
	waitUntil(t, "the first hub leads", func() bool { return readLease(t, c).fence > 0 })
	before, servers := readLease(t, c), redisServersOn(socket)

	h2 := startHubProcess(t, cfg)
	select {
	case <-h2.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the second hub on the same data dir is still running")
	}
	if h2.cmd.ProcessState.Success() {
		t.Fatal("the second hub exited with status 0")
	}
	want := fmt.Sprintf("data dir %s is in use by another fleetwave hub (pid %d); one hub per data dir", dataDir, h1.cmd.Process.Pid)
	if !strings.Contains(h2.log.String(), want) {
		t.Fatalf("second hub's output:\n%s\nwant %q", h2.log.String(), want)
	}
	if got := redisServersOn(socket); len(got) != 1 || got[0] != servers[0] {
		t.Fatalf("redis-servers on %s: %v, want only the first hub's %v", socket, got, servers)
	}
	if l := readLease(t, c); l.instance != before.instance || l.fence != before.fence {
		t.Fatalf("lease %+v, want the first hub's %+v", l, before)
	}
}

// TestFenceRisesAcrossRestartsOfOneHubID: a hub with a fixed hub_id is
// killed with SIGKILL and restarted three times on one Redis. Each process
// takes the lease at once (before the previous one's expired) with a
// strictly higher fence. A process of the same hub_id that was only paused
// (its data dir still locked: the new one runs elsewhere, as after a move
// to another machine) finds, when it wakes up, that it lost the lease, and
// takes nothing back.
func TestFenceRisesAcrossRestartsOfOneHubID(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	srv := redistest.Start(t)
	c := srv.Client(t)
	remote := gittest.NewRemote(t, map[string]string{"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n"})
	cfg := hubConfig(t, remote, t.TempDir(), "unix://"+srv.Addr)

	var prev lease
	var h *hubProcess
	for i := range 4 {
		if h != nil {
			h.kill(t)
		}
		h = startHubProcess(t, cfg)
		waitUntil(t, fmt.Sprintf("start %d leads", i), func() bool {
			l := readLease(t, c)
			return l.fence > 0 && l.instance != prev.instance
		})
		l := readLease(t, c)
		if l.owner != "hub-a" || l.fence <= prev.fence {
			t.Fatalf("start %d: lease %+v, want hub-a with a fence above %d", i, l, prev.fence)
		}
		if prev.fence > 0 && l.acquiredAt >= prev.expiresAt {
			t.Fatalf("start %d waited for the previous lease to expire: acquired at %d, it expired at %d", i, l.acquiredAt, prev.expiresAt)
		}
		t.Logf("start %d: fence %d", i, l.fence)
		prev = l
	}

	// The leader is paused, not killed, and a new process of its hub_id
	// starts: the paused one is fenced out.
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	startHubProcess(t, hubConfig(t, remote, t.TempDir(), "unix://"+srv.Addr))
	waitUntil(t, "the new process leads", func() bool { return readLease(t, c).instance != prev.instance })
	taken := readLease(t, c)
	if taken.owner != "hub-a" || taken.fence <= prev.fence {
		t.Fatalf("lease %+v after the takeover, want hub-a above fence %d", taken, prev.fence)
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the paused process notices it lost the lease", func() bool { return strings.Contains(h.log.String(), "leader lease lost") })
	if l := readLease(t, c); l.instance != taken.instance || l.fence != taken.fence {
		t.Fatalf("lease %+v after the paused process woke up, want %+v", l, taken)
	}
}
