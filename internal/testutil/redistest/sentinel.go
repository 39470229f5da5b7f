package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions tune StartSentinel.
type SentinelOptions struct {
	// Password is the data servers' requirepass (and masterauth); "" = none.
	Password string
	// SentinelPassword is the Sentinels' own requirepass; "" = none.
	SentinelPassword string
	// DownAfter is how long the primary must not answer before the
	// Sentinels start a failover (default 2s).
	DownAfter time.Duration
}

// Sentinel is a Redis primary and its replica, watched by three Sentinels
// (quorum 2), each a process of its own on a loopback TCP port.
type Sentinel struct {
	// Master is the name the Sentinels monitor the primary under.
	Master string
	// Addrs are the Sentinels' addresses.
	Addrs []string
	// Servers are the data servers' addresses: the first primary, then
	// its replica, as started (a failover swaps their roles).
	Servers []string
	o       SentinelOptions
	servers map[string]*proc
}

// StartSentinel starts a primary, a replica of it and three Sentinels,
// and returns once the replica is in sync and every Sentinel knows the
// replica and the two other Sentinels (a failover can then happen).
// Everything is killed when tb ends.
func StartSentinel(tb testing.TB, o SentinelOptions) *Sentinel {
	tb.Helper()
	if o.DownAfter == 0 {
		o.DownAfter = 2 * time.Second
	}
	root := tempDir(tb)
	s := &Sentinel{Master: "fwmaster", o: o, servers: map[string]*proc{}}
	var all []*proc
	for i, role := range []string{"primary", "replica"} {
		dir := filepath.Join(root, role)
		pr := startProc(tb, dir, 1, func(ports []int) []string {
			args := serverArgs(ports[0], dir, o.Password)
			if i == 1 {
				host, p, _ := net.SplitHostPort(s.Servers[0])
				args = append(args, "--replicaof", host, p)
			}
			return args
		})
		s.Servers = append(s.Servers, pr.addr)
		s.servers[pr.addr] = pr
		all = append(all, pr)
	}
	primary := s.servers[s.Servers[0]].client(tb, o.Password)
	waitFor(tb, "replica in sync", healthyWithin, all, func(ctx context.Context) error {
		return replicaOnline(ctx, primary)
	})
	host, primaryPort, _ := net.SplitHostPort(s.Servers[0])
	for i := range 3 {
		dir := filepath.Join(root, "sentinel"+strconv.Itoa(i+1))
		path := filepath.Join(dir, "sentinel.conf")
		pr := startProc(tb, dir, 1, func(ports []int) []string {
			conf := []string{
				"port " + strconv.Itoa(ports[0]),
				"bind 127.0.0.1",
				"dir " + dir,
				"logfile " + filepath.Join(dir, "redis.log"),
				fmt.Sprintf("sentinel monitor %s %s %s 2", s.Master, host, primaryPort),
				fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.Master, o.DownAfter.Milliseconds()),
				fmt.Sprintf("sentinel failover-timeout %s 10000", s.Master),
				fmt.Sprintf("sentinel parallel-syncs %s 1", s.Master),
			}
			if o.Password != "" {
				conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", s.Master, o.Password))
			}
			if o.SentinelPassword != "" {
				// its own password, and the one it gives the other Sentinels
				conf = append(conf, "requirepass "+o.SentinelPassword, "sentinel sentinel-pass "+o.SentinelPassword)
			}
			// a Sentinel rewrites its configuration file: it must be writable
			if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
				tb.Fatal(err)
			}
			return []string{path, "--sentinel"}
		})
		s.Addrs = append(s.Addrs, pr.addr)
		all = append(all, pr)
	}
	for _, addr := range s.Addrs {
		c := s.sentinelClient(tb, addr)
		waitFor(tb, "sentinel "+addr+" ready", healthyWithin, all, func(ctx context.Context) error {
			m, err := c.Master(ctx, s.Master).Result()
			if err != nil {
				return err
			}
			if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %s sees %s flags %q, %s replicas, %s other sentinels", addr, s.Master, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			return c.CkQuorum(ctx, s.Master).Err()
		})
	}
	return s
}

// sentinelClient returns a client of one Sentinel, closed when tb ends.
func (s *Sentinel) sentinelClient(tb testing.TB, addr string) *redis.SentinelClient {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: s.o.SentinelPassword, MaxRetries: -1, DialTimeout: time.Second})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Primary returns the address the Sentinels give for the primary now: the
// answer of the first Sentinel that answers.
func (s *Sentinel) Primary(ctx context.Context) (string, error) {
	var last error
	for _, addr := range s.Addrs {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: s.o.SentinelPassword, MaxRetries: -1, DialTimeout: time.Second})
		hp, err := c.GetMasterAddrByName(ctx, s.Master).Result()
		_ = c.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel answered: %v", last)
}

// Kill kills (SIGKILL) the data server at addr and waits until it exited.
func (s *Sentinel) Kill(tb testing.TB, addr string) {
	tb.Helper()
	p, ok := s.servers[addr]
	if !ok {
		tb.Fatalf("redistest: no data server at %s", addr)
	}
	p.kill()
}

// Signal sends sig to the data server at addr (SIGSTOP pauses it, SIGCONT
// resumes it).
func (s *Sentinel) Signal(tb testing.TB, addr string, sig syscall.Signal) {
	tb.Helper()
	p, ok := s.servers[addr]
	if !ok {
		tb.Fatalf("redistest: no data server at %s", addr)
	}
	if err := p.signal(sig); err != nil {
		tb.Fatalf("redistest: signal %s: %v", addr, err)
	}
}

// WaitPrimary waits until every Sentinel names a primary other than old
// and that server says it is a primary; it returns its address.
func (s *Sentinel) WaitPrimary(tb testing.TB, old string) string {
	tb.Helper()
	var now string
	waitFor(tb, "failover from "+old, healthyWithin, nil, func(ctx context.Context) error {
		now = ""
		for _, addr := range s.Addrs {
			c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: s.o.SentinelPassword, MaxRetries: -1, DialTimeout: time.Second})
			hp, err := c.GetMasterAddrByName(ctx, s.Master).Result()
			_ = c.Close()
			if err != nil {
				return err
			}
			got := net.JoinHostPort(hp[0], hp[1])
			switch {
			case got == old:
				return fmt.Errorf("sentinel %s still names %s", addr, old)
			case now != "" && got != now:
				return fmt.Errorf("sentinels disagree: %s and %s", now, got)
			}
			now = got
		}
		p, ok := s.servers[now]
		if !ok {
			return fmt.Errorf("sentinels name %s, not a server of the test", now)
		}
		c := redis.NewClient(&redis.Options{Addr: p.addr, Password: s.o.Password, MaxRetries: -1, DialTimeout: time.Second})
		defer c.Close()
		return wantField(ctx, c, "replication", "role", "master")
	})
	return now
}

// Client returns a Sentinel-aware client of the primary, closed when tb
// ends.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.Master, SentinelAddrs: s.Addrs, SentinelPassword: s.o.SentinelPassword, Password: s.o.Password,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ServerClient returns a client of the data server at addr alone, closed
// when tb ends.
func (s *Sentinel) ServerClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	p, ok := s.servers[addr]
	if !ok {
		tb.Fatalf("redistest: no data server at %s", addr)
	}
	return p.client(tb, s.o.Password)
}
