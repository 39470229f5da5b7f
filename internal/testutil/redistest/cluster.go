package redistest

import (
	"bytes"
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
)

// ClusterOptions tune StartCluster.
type ClusterOptions struct {
	// Password is every node's requirepass (and masterauth); "" = none.
	Password string
	// NodeTimeout is cluster-node-timeout: how long a primary must not
	// answer before its replica takes over (default 2s).
	NodeTimeout time.Duration
}

// Cluster is a Redis Cluster of six processes on loopback TCP ports:
// three primaries, each with one replica.
type Cluster struct {
	// Addrs are the nodes' addresses.
	Addrs []string
	o     ClusterOptions
	nodes map[string]*proc
}

// StartCluster starts six cluster-enabled redis-servers, joins them with
// redis-cli --cluster create (--cluster-replicas 1) and returns once every
// node sees the cluster ok, with three primaries holding all the slots and
// three replicas in sync. Everything is killed when tb ends.
func StartCluster(tb testing.TB, o ClusterOptions) *Cluster {
	tb.Helper()
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 2 * time.Second
	}
	cli, err := cliBinary()
	if err != nil {
		tb.Fatal(err)
	}
	root := tempDir(tb)
	c := &Cluster{o: o, nodes: map[string]*proc{}}
	var all []*proc
	for i := range 6 {
		dir := filepath.Join(root, "node"+strconv.Itoa(i+1))
		// the bus port is given, not port+10000, which may be taken or
		// past 65535
		p := startProc(tb, dir, 2, func(ports []int) []string {
			return append(serverArgs(ports[0], dir, o.Password),
				"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(ports[1]),
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10))
		})
		c.Addrs = append(c.Addrs, p.addr)
		c.nodes[p.addr] = p
		all = append(all, p)
	}
	for _, p := range all {
		cl := p.client(tb, o.Password)
		waitFor(tb, "node "+p.addr+" up", healthyWithin, all, func(ctx context.Context) error { return cl.Ping(ctx).Err() })
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cmd := exec.Command(cli, args...)
	if o.Password != "" {
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+o.Password) // not on the command line
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out.String())
	}
	for _, addr := range c.Addrs {
		cl := c.nodes[addr].client(tb, o.Password)
		waitFor(tb, "node "+addr+" sees the cluster healthy", healthyWithin, all, func(ctx context.Context) error {
			return c.healthy(ctx, cl)
		})
	}
	return c
}

// healthy checks what one node sees: cluster_state ok, three primaries
// holding slots, three replicas, no node failing; and its link to its
// primary up (a replica) or its replica online (a primary).
func (c *Cluster) healthy(ctx context.Context, cl *redis.Client) error {
	if err := wantField(ctx, cl, "cluster", "cluster_state", "ok"); err != nil {
		return err
	}
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	primaries, replicas := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := f[2]
		switch {
		case strings.Contains(flags, "fail") || strings.Contains(flags, "handshake") || strings.Contains(flags, "noaddr"):
			return fmt.Errorf("%s sees %s %s", cl.Options().Addr, f[1], flags)
		case strings.Contains(flags, "master") && len(f) > 8:
			primaries++
		case strings.Contains(flags, "slave"):
			replicas++
		}
	}
	if primaries != 3 || replicas != 3 {
		return fmt.Errorf("%s sees %d primaries with slots and %d replicas", cl.Options().Addr, primaries, replicas)
	}
	m, err := info(ctx, cl, "replication")
	if err != nil {
		return err
	}
	if m["role"] == "slave" {
		if m["master_link_status"] != "up" {
			return fmt.Errorf("%s: link to its primary %s", cl.Options().Addr, m["master_link_status"])
		}
		return nil
	}
	return replicaOnline(ctx, cl)
}

// PrimaryOf returns the address of the primary holding key's hash slot, as
// the first node that answers sees it (CLUSTER KEYSLOT, CLUSTER SLOTS).
func (c *Cluster) PrimaryOf(ctx context.Context, key string) (string, error) {
	var last error
	for _, addr := range c.Addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr, Password: c.o.Password, MaxRetries: -1, DialTimeout: time.Second})
		got, err := primaryOf(ctx, cl, key)
		_ = cl.Close()
		if err == nil {
			return got, nil
		}
		last = err
	}
	return "", fmt.Errorf("no node answered: %v", last)
}

func primaryOf(ctx context.Context, cl *redis.Client, key string) (string, error) {
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d of %q: no primary", slot, key)
}

// Kill kills (SIGKILL) the node at addr and waits until it exited.
func (c *Cluster) Kill(tb testing.TB, addr string) {
	tb.Helper()
	p, ok := c.nodes[addr]
	if !ok {
		tb.Fatalf("redistest: no cluster node at %s", addr)
	}
	p.kill()
}

// WaitPrimary waits until every live node gives key's slot to a primary
// other than old, that node says it is a primary, and every live node sees
// the cluster ok; it returns the new primary's address.
func (c *Cluster) WaitPrimary(tb testing.TB, key, old string) string {
	tb.Helper()
	var now string
	waitFor(tb, "failover of "+key+" from "+old, healthyWithin, nil, func(ctx context.Context) error {
		now = ""
		for _, addr := range c.Addrs {
			if addr == old {
				continue
			}
			cl := redis.NewClient(&redis.Options{Addr: addr, Password: c.o.Password, MaxRetries: -1, DialTimeout: time.Second})
			got, err := primaryOf(ctx, cl, key)
			if err == nil {
				err = wantField(ctx, cl, "cluster", "cluster_state", "ok")
			}
			_ = cl.Close()
			switch {
			case err != nil:
				return err
			case got == old:
				return fmt.Errorf("%s still gives the slot of %s to %s", addr, key, old)
			case now != "" && got != now:
				return fmt.Errorf("nodes disagree: %s and %s", now, got)
			}
			now = got
		}
		cl := redis.NewClient(&redis.Options{Addr: now, Password: c.o.Password, MaxRetries: -1, DialTimeout: time.Second})
		defer cl.Close()
		return wantField(ctx, cl, "replication", "role", "master")
	})
	return now
}

// Client returns a cluster client, closed when tb ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Password: c.o.Password})
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NodeClient returns a client of the node at addr alone, closed when tb
// ends.
func (c *Cluster) NodeClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	p, ok := c.nodes[addr]
	if !ok {
		tb.Fatalf("redistest: no cluster node at %s", addr)
	}
	return p.client(tb, c.o.Password)
}

// Signal sends sig to the node at addr (SIGSTOP pauses it, SIGCONT
// resumes it).
func (c *Cluster) Signal(tb testing.TB, addr string, sig syscall.Signal) {
	tb.Helper()
	p, ok := c.nodes[addr]
	if !ok {
		tb.Fatalf("redistest: no cluster node at %s", addr)
	}
	if err := p.signal(sig); err != nil {
		tb.Fatalf("redistest: signal %s: %v", addr, err)
	}
}

// ReplicasOf returns the addresses of the replicas of the primary at addr,
// as the first other node that answers sees them (CLUSTER NODES).
func (c *Cluster) ReplicasOf(ctx context.Context, addr string) ([]string, error) {
	var last error
	for _, a := range c.Addrs {
		if a == addr {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: a, Password: c.o.Password, MaxRetries: -1, DialTimeout: time.Second})
		nodes, err := cl.ClusterNodes(ctx).Result()
		_ = cl.Close()
		if err != nil {
			last = err
			continue
		}
		// <id> <ip:port@bus> <flags> <primary id> ...
		var primaryID string
		lines := strings.Split(strings.TrimSpace(nodes), "\n")
		for _, line := range lines {
			if f := strings.Fields(line); len(f) > 3 && strings.SplitN(f[1], "@", 2)[0] == addr {
				primaryID = f[0]
			}
		}
		if primaryID == "" {
			return nil, fmt.Errorf("%s does not know a node at %s", a, addr)
		}
		var out []string
		for _, line := range lines {
			if f := strings.Fields(line); len(f) > 3 && f[3] == primaryID {
				out = append(out, strings.SplitN(f[1], "@", 2)[0])
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no node answered: %v", last)
}
