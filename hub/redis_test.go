package hub

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

func TestManagedRedisIsRestartedWhenItDies(t *testing.T) {
	ctx := context.Background()
	m, err := startManaged(ctx, t.TempDir(), zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: m.socket})
	defer c.Close()
	if err := waitPing(ctx, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// AOF is on in the data dir.
	if _, err := os.Stat(filepath.Join(m.dir, "appendonlydir")); err != nil {
		t.Fatalf("no AOF directory: %v", err)
	}
	old := m.Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for m.Pid() == old || c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server was not restarted (pid still %d)", old)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// managedClient is a client of m as openRedis makes it: every new
// connection checked against the server m started.
func managedClient(t *testing.T, m *managedRedis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: m.socket, Dialer: m.dial, OnConnect: m.checkConn})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// shortDataDir is a data dir whose socket path fits in a unix socket address.
func shortDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fwm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func testLogger(t *testing.T) zerolog.Logger { return zerolog.New(zerolog.NewTestWriter(t)) }

// TestManagedClientReachesOnlyItsServer: the pool's connections reach the
// server the hub started and verified; after the child is restarted they
// reach the new one (the data kept by the AOF), and a connection to a
// server of another run_id is refused.
func TestManagedClientReachesOnlyItsServer(t *testing.T) {
	ctx := context.Background()
	m, err := startManaged(ctx, shortDataDir(t), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop()
	c := managedClient(t, m)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(m.dir, pidFileName))
	if err != nil || !strings.HasPrefix(string(b), strconv.Itoa(m.Pid())+"\n") {
		t.Fatalf("pid file %q (%v), want pid %d first", b, err, m.Pid())
	}
	first := m.runID

	old := m.Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pid := m.Pid(); pid != 0 && pid != old {
			if v, err := c.Get(ctx, "k").Result(); err == nil {
				if v != "v" {
					t.Fatalf("k = %q after the restart, want v (AOF)", v)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer from the restarted redis-server through the checked client")
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.mu.Lock()
	second := m.runID
	m.mu.Unlock()
	if second == "" || second == first {
		t.Fatalf("expected run_id %q after the restart, before %q", second, first)
	}

	// Another server on the socket (as the hub sees it: another run_id).
	m.mu.Lock()
	m.runID = "a-server-this-hub-did-not-start"
	m.mu.Unlock()
	err = managedClient(t, m).Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "not the server this hub started") {
		t.Fatalf("ping through a new connection to an unverified server: %v", err)
	}
	m.mu.Lock()
	m.runID = second
	m.mu.Unlock()
}

// startOrphan starts a redis-server on dataDir's managed socket and AOF
// directory, as a hub that died without stopping it left it, and returns
// it once it answers.
func startOrphan(t *testing.T, dataDir string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	dir := filepath.Join(dataDir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found in PATH: %v", err)
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--dir", dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer c.Close()
	if err := waitPing(context.Background(), c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return cmd, exited
}

// TestStaleServerIsStoppedKeepingItsData: a redis-server left running on
// the data dir (its hub died) is verified, stopped so that it flushes its
// AOF, and replaced; the data survive and one server runs.
func TestStaleServerIsStoppedKeepingItsData(t *testing.T) {
	ctx := context.Background()
	dataDir := shortDataDir(t)
	orphan, exited := startOrphan(t, dataDir)
	oc := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(dataDir, "redis", "redis.sock")})
	defer oc.Close()
	if err := oc.Set(ctx, "kept", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}

	m, err := startManaged(ctx, dataDir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the stale redis-server (pid %d) still runs", orphan.Process.Pid)
	}
	if s := orphan.ProcessState; s == nil || !s.Exited() || s.ExitCode() != 0 {
		t.Fatalf("the stale redis-server ended with %v, want a clean shutdown", s)
	}
	if pids := processesIn(m.dir); len(pids) != 1 || pids[0] != m.Pid() {
		t.Fatalf("processes in %s: %v, want only the new server %d", m.dir, pids, m.Pid())
	}
	if v, err := managedClient(t, m).Get(ctx, "kept").Result(); err != nil || v != "yes" {
		t.Fatalf("kept = %q (%v) after the replacement, want yes", v, err)
	}
}

// TestUnverifiedPidIsNeverSignalled: a pid file naming a process that is
// not a redis-server of this data dir (the pid was reused) is ignored.
func TestUnverifiedPidIsNeverSignalled(t *testing.T) {
	ctx := context.Background()
	dataDir := shortDataDir(t)
	other := exec.Command("sleep", "300")
	other.Dir = dataDir
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = other.Wait(); close(exited) }()
	defer func() { _ = other.Process.Kill(); <-exited }()
	if err := os.MkdirAll(filepath.Join(dataDir, "redis"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "redis", pidFileName), fmt.Appendf(nil, "%d\nold-run\n", other.Process.Pid), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := startManaged(ctx, dataDir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	m.stop()
	select {
	case <-exited:
		t.Fatalf("the process named by a stale pid file was signalled: %v", other.ProcessState)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestDataDirTakesOneHub: a second managed Redis on a data dir in use is
// refused, naming the holder; the dir is free again once the first stops.
func TestDataDirTakesOneHub(t *testing.T) {
	ctx := context.Background()
	dataDir := shortDataDir(t)
	m, err := startManaged(ctx, dataDir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("data dir %s is in use by another fleetwave hub (pid %d); one hub per data dir", dataDir, os.Getpid())
	if _, err := startManaged(ctx, dataDir, testLogger(t)); err == nil || err.Error() != want {
		t.Fatalf("second start: %v, want %q", err, want)
	}
	if _, err := openRedis(ctx, "embedded", dataDir, testLogger(t)); err == nil || err.Error() != want {
		t.Fatalf("embedded on the same data dir: %v, want %q", err, want)
	}
	m.stop()
	m2, err := startManaged(ctx, dataDir, testLogger(t))
	if err != nil {
		t.Fatalf("start after the first stopped: %v", err)
	}
	m2.stop()
}

// TestLongDataDirSocketIsStable: a data dir too deep for a socket path gets
// a short socket directory named after it, the same at every start, so a
// later hub finds the socket of a server left behind.
func TestLongDataDirSocketIsStable(t *testing.T) {
	ctx := context.Background()
	dataDir := filepath.Join(shortDataDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
	m, err := startManaged(ctx, dataDir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	sock := m.socket
	if len(sock) > 100 || m.socketDir == "" {
		t.Fatalf("socket %s", sock)
	}
	m.stop()
	if _, err := os.Stat(m.socketDir); !os.IsNotExist(err) {
		t.Fatalf("socket dir left after stop: %v", err)
	}
	m2, err := startManaged(ctx, dataDir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.stop()
	if m2.socket != sock {
		t.Fatalf("socket %s, then %s", sock, m2.socket)
	}
}

func TestLoadConfigRejectsUnknownFieldsAndAppliesDefaults(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hub.yaml")
	if err := os.WriteFile(p, []byte("repo:\n  url: file:///x.git\ndata_dir: /tmp/x\nredis: embedded\nlisten_addr: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "listen_addr") {
		t.Fatalf("err = %v, want the unknown field named", err)
	}
	if err := os.WriteFile(p, []byte("repo:\n  url: file:///x.git\ndata_dir: /tmp/x\nagents:\n  tokens:\n    n1: nothex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "agents.tokens.n1") {
		t.Fatalf("err = %v, want the bad token hash named", err)
	}
	if err := os.WriteFile(p, []byte("repo:\n  url: file:///x.git\ndata_dir: /tmp/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis != "managed" || c.Repo.Branch != "main" || c.Listen != "127.0.0.1:8080" || c.LeaseTTL.D() != 15*time.Second ||
		c.Agents.MaxPollWait.D() != 30*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
	for wait, ok := range map[string]bool{"2m": true, "10m": true, "500ms": false, "11m": false} {
		if err := os.WriteFile(p, []byte("repo:\n  url: file:///x.git\ndata_dir: /tmp/x\nagents:\n  max_poll_wait: "+wait+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(p)
		switch {
		case ok && (err != nil || c.Agents.MaxPollWait.D().String() != map[string]string{"2m": "2m0s", "10m": "10m0s"}[wait]):
			t.Fatalf("max_poll_wait %s: %v, %v", wait, c.Agents.MaxPollWait, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "agents.max_poll_wait")):
			t.Fatalf("max_poll_wait %s: err = %v, want it refused by name", wait, err)
		}
	}
}

// TestLoadConfigRedisSentinelAndCluster: hub.yaml's redis: takes a string
// or a mapping with sentinel or cluster, strictly, with errors naming the
// field and never a password.
func TestLoadConfigRedisSentinelAndCluster(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cret-never-shown"
	pw := filepath.Join(dir, "redis.pass")
	spw := filepath.Join(dir, "sentinel pass") // a space: escaped in the URL form
	empty := filepath.Join(dir, "empty.pass")
	for path, content := range map[string]string{pw: secret + "\n", spw: "other-" + secret, empty: "\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing.pass")
	head := "repo:\n  url: file:///x.git\ndata_dir: /tmp/x\n"
	tests := []struct {
		name  string
		redis string // hub.yaml after "redis:"
		want  string // Config.Redis, or ...
		err   string // ... a part of the error
	}{
		{name: "a string mode stays", redis: " embedded\n", want: "embedded"},
		{name: "a URL stays", redis: " redis://10.0.0.1:6379/2\n", want: "redis://10.0.0.1:6379/2"},
		{name: "no redis is managed", redis: " \n", want: "managed"},
		{
			name:  "sentinel",
			redis: "\n  sentinel:\n    master: mymaster\n    addrs: [10.0.0.1:26379, 10.0.0.2:26379, 10.0.0.3:26379]\n    password_file: " + pw + "\n    sentinel_password_file: " + spw + "\n    db: 2\n",
			want:  "redis-sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster?db=2&password_file=" + strings.ReplaceAll(pw, "/", "%2F") + "&sentinel_password_file=" + strings.ReplaceAll(strings.ReplaceAll(spw, "/", "%2F"), " ", "+"),
		},
		{name: "sentinel, flow style, no password", redis: " {sentinel: {master: m, addrs: ['[::1]:26379']}}\n", want: "redis-sentinel://[::1]:26379/m"},
		{name: "cluster", redis: "\n  cluster:\n    addrs: [r1:6379, r2:6379]\n    password_file: " + pw + "\n", want: "redis-cluster://r1:6379,r2:6379?password_file=" + strings.ReplaceAll(pw, "/", "%2F")},
		{name: "both", redis: "\n  sentinel: {master: m, addrs: [h:1]}\n  cluster: {addrs: [h:2]}\n", err: "sentinel and cluster both given"},
		{name: "neither", redis: " {}\n", err: "a mapping needs sentinel or cluster"},
		{name: "an unknown field of redis", redis: "\n  sentinels: {master: m, addrs: [h:1]}\n", err: `redis: unknown field "sentinels"`},
		{name: "an unknown field of sentinel", redis: "\n  sentinel: {master: m, addrs: [h:1], mastr: x}\n", err: `redis.sentinel: unknown field "mastr"`},
		{name: "a db for a cluster", redis: "\n  cluster: {addrs: [h:1], db: 1}\n", err: `redis.cluster: unknown field "db"`},
		{name: "a field twice", redis: "\n  cluster: {addrs: [h:1], addrs: [h:2]}\n", err: "addrs"},
		{name: "sentinel not a mapping", redis: "\n  sentinel: mymaster\n", err: "redis.sentinel: want a mapping"},
		{name: "a list", redis: " [a, b]\n", err: "redis: want managed, embedded, a URL"},
		{name: "a bad db", redis: "\n  sentinel: {master: m, addrs: [h:1], db: first}\n", err: "redis.sentinel"},
		{name: "no master", redis: "\n  sentinel: {addrs: [h:1]}\n", err: "redis.sentinel.master"},
		{name: "empty sentinel addrs", redis: "\n  sentinel: {master: m, addrs: []}\n", err: "redis.sentinel.addrs: at least one host:port is required"},
		{name: "no cluster addrs", redis: "\n  cluster: {password_file: " + pw + "}\n", err: "redis.cluster.addrs: at least one host:port is required"},
		{name: "an address without a port", redis: "\n  cluster: {addrs: [r1:6379, r2]}\n", err: `redis.cluster.addrs[1] "r2": want host:port`},
		{name: "an unreadable password file", redis: "\n  sentinel: {master: m, addrs: [h:1], password_file: " + missing + "}\n", err: "redis.sentinel.password_file: open " + missing},
		{name: "an unreadable sentinel password file", redis: "\n  sentinel: {master: m, addrs: [h:1], sentinel_password_file: " + missing + "}\n", err: "redis.sentinel.sentinel_password_file"},
		{name: "an empty password file", redis: "\n  cluster: {addrs: [h:1], password_file: " + empty + "}\n", err: "redis.cluster.password_file: " + empty + " is empty"},
		{name: "an unknown mode", redis: " clustered\n", err: `redis "clustered": want managed, embedded`},
		{name: "credentials in the URL form", redis: " redis-sentinel://:" + secret + "@h:1/m\n", err: "no credentials in the URL"},
		{name: "an unknown URL parameter", redis: " redis-cluster://h:1?password=" + secret + "\n", err: `unknown parameter "password"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "hub.yaml")
			if err := os.WriteFile(p, []byte(head+"redis:"+tt.redis), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(p)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q in it", err, tt.err)
				}
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Redis != tt.want {
				t.Fatalf("redis = %q, want %q", c.Redis, tt.want)
			}
		})
	}
}

// TestConfigRedisURLFormsRoundTrip: the URL forms read back as what wrote them,
// and give go-redis the passwords from their files.
func TestConfigRedisURLFormsRoundTrip(t *testing.T) {
	s := RedisSentinel{Master: "my master", Addrs: []string{"a:1", "[::1]:2"}, PasswordFile: "/p?x", SentinelPasswordFile: "/s&y", DB: 3}
	got, err := ParseRedisSentinel(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(s) {
		t.Fatalf("%q read back as %+v", s.URL(), got)
	}
	c := RedisCluster{Addrs: []string{"a:1", "b:2"}, PasswordFile: "/p#1"}
	gotc, err := ParseRedisCluster(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(gotc) != fmt.Sprint(c) {
		t.Fatalf("%q read back as %+v", c.URL(), gotc)
	}
	if _, err := ParseRedisCluster("redis-cluster://a:1/0"); err == nil {
		t.Fatal("a cluster URL with a path was accepted")
	}
}

// TestConfigStrictDecodingKeepsLineNumbers: decoding through Config's mirror
// type still names unknown fields and the lines of bad values.
func TestConfigStrictDecodingKeepsLineNumbers(t *testing.T) {
	for doc, want := range map[string]string{
		"repo:\n  url: file:///x.git\n  brnch: main\ndata_dir: /tmp/x\nredis:\n  cluster: {addrs: [h:1]}\n":   "line 3: field brnch not found",
		"repo:\n  url: file:///x.git\ndata_dir: /tmp/x\nredis:\n  cluster: {addrs: [h:1]}\nlease_ttl: soon\n": "line 6: time: invalid duration",
	} {
		p := filepath.Join(t.TempDir(), "hub.yaml")
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
	}
}
