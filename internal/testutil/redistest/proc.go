package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave/internal/freeport"
)

// healthyWithin bounds how long a topology may take to become healthy, and
// a failover to complete: generous, for loaded machines.
const healthyWithin = 60 * time.Second

// proc is one process of a topology (a redis-server or a Sentinel) on a
// loopback TCP port, killed when the test that started it ends.
type proc struct {
	addr   string
	dir    string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// tempDir is a fresh short directory, removed when tb ends (after the
// processes working in it were killed: cleanups run last-in first-out).
func tempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "r")
	if err != nil {
		tb.Fatalf("redistest: temp dir: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// takePort hands out the ports of startProc (a test takes one somebody
// listens on).
var takePort = freeport.Take

// startProc execs redis-server in dir on nports fresh loopback ports: args
// builds its command line from them (the first is the one clients use) and
// may write files into dir; the server logs to dir/redis.log. It returns
// once the server runs. Someone else may bind a port between its choice
// and the server's own bind (another test binary, a connection's local
// port): the server then exits at once, and is started again on other
// ports in an emptied dir. The process is killed when tb ends; when tb
// failed, the end of its log is reported.
func startProc(tb testing.TB, dir string, nports int, args func(ports []int) []string) *proc {
	tb.Helper()
	bin, err := binary()
	if err != nil {
		tb.Fatal(err)
	}
	for try := 1; ; try++ {
		ports := make([]int, nports)
		for i := range ports {
			if ports[i], err = takePort(); err != nil {
				tb.Fatalf("redistest: %v", err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			tb.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			tb.Fatal(err)
		}
		p := &proc{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), dir: dir, log: filepath.Join(dir, "redis.log"), exited: make(chan struct{})}
		p.cmd = exec.Command(bin, args(ports)...)
		p.cmd.Dir = dir
		// the servers die with the test binary, even when it crashes
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := p.cmd.Start(); err != nil {
			tb.Fatalf("redistest: start %s: %v", bin, err)
		}
		go func() {
			_ = p.cmd.Wait()
			close(p.exited)
		}()
		tb.Cleanup(func() {
			p.kill()
			if tb.Failed() {
				tb.Logf("redistest: end of the log of %s:\n%s", p.addr, p.logTail(15))
			}
		})
		if p.running(tb) {
			return p
		}
		tail := p.logTail(20)
		if !freeport.Taken(tail) || try == freeport.StartTries {
			tb.Fatalf("redistest: %s on %v exited before it ran:\n%s", bin, ports, tail)
		}
		tb.Logf("redistest: a port of %v was taken before the server bound it; trying others", ports)
	}
}

// running waits until the process has bound its ports (its log says it
// runs, or after a while it answers PING) and returns true, or until it
// exits and returns false.
func (p *proc) running(tb testing.TB) bool {
	tb.Helper()
	start := time.Now()
	for {
		select {
		case <-p.exited:
			return false
		default:
		}
		if b, _ := os.ReadFile(p.log); bytes.Contains(b, []byte("Running mode=")) {
			return true
		}
		// a server whose log words it otherwise: a failed bind ends it
		// long before this
		if time.Since(start) > 2*time.Second && answers(p.addr) {
			return true
		}
		if time.Since(start) > healthyWithin {
			tb.Fatalf("redistest: %s does not run within %v:\n%s", p.addr, healthyWithin, p.logTail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// answers reports whether a server at addr replies to PING (an error reply,
// such as one asking for a password, counts).
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-"))
}

// kill sends SIGKILL and waits until the process was reaped.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// logTail returns the last n lines of the process's log.
func (p *proc) logTail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// client returns a client of the process alone (no retries), closed when
// tb ends.
func (p *proc) client(tb testing.TB, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr, Password: password, MaxRetries: -1, DialTimeout: time.Second})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor polls check until it returns nil, failing tb with what it last
// returned when within passed or a process of procs exited.
func waitFor(tb testing.TB, what string, within time.Duration, procs []*proc, check func(ctx context.Context) error) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		for _, p := range procs {
			select {
			case <-p.exited:
				tb.Fatalf("redistest: %s: %s exited: %v\n%s", what, p.addr, err, p.logTail(20))
			default:
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: not within %v: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// info returns the fields of an INFO section of c; section "cluster" is
// CLUSTER INFO (INFO's own cluster section says only whether it is on).
func info(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	var s string
	var err error
	if section == "cluster" {
		s, err = c.ClusterInfo(ctx).Result()
	} else {
		s, err = c.Info(ctx, section).Result()
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// wantField checks one field of an INFO section.
func wantField(ctx context.Context, c *redis.Client, section, field, want string) error {
	m, err := info(ctx, c, section)
	if err != nil {
		return err
	}
	if m[field] != want {
		return fmt.Errorf("%s %s: %s is %q, want %q", c.Options().Addr, section, field, m[field], want)
	}
	return nil
}

// replicaOnline checks, on a primary, that its one replica is online: the
// primary streams writes to it (after a full sync, only once the replica
// acknowledged it; until then writes wait in the primary, and a failover
// would lose them).
func replicaOnline(ctx context.Context, c *redis.Client) error {
	m, err := info(ctx, c, "replication")
	if err != nil {
		return err
	}
	if m["role"] != "master" || m["connected_slaves"] != "1" || !strings.Contains(m["slave0"], "state=online") {
		return fmt.Errorf("%s: role %s, %s replicas, replica %q; want a primary with one replica online", c.Options().Addr, m["role"], m["connected_slaves"], m["slave0"])
	}
	return nil
}

// serverArgs are the arguments every data server of a topology gets:
// loopback only, no persistence, the password on both sides of
// replication.
func serverArgs(port int, dir, password string) []string {
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--repl-diskless-sync-delay", "0", // a replica syncs at once, not after 5 s
		"--loglevel", "notice", "--logfile", filepath.Join(dir, "redis.log"),
	}
	if password != "" {
		args = append(args, "--requirepass", password, "--masterauth", password)
	}
	return args
}

// cliBinary finds redis-cli: $REDIS_CLI_BIN, else PATH, else /usr/bin.
func cliBinary() (string, error) {
	if p := os.Getenv("REDIS_CLI_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("redis-cli"); err == nil {
		return p, nil
	}
	const debianPath = "/usr/bin/redis-cli"
	if _, err := os.Stat(debianPath); err == nil {
		return debianPath, nil
	}
	return "", errors.New("redis-cli not found: install it with `apt-get install redis-tools` or set REDIS_CLI_BIN")
}
