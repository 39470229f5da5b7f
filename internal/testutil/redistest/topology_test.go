package redistest

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/freeport"
)

// eventually retries op until it succeeds (clients see errors while a
// failover runs).
func eventually(t *testing.T, what string, op func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(healthyWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSentinelFailsOverToTheReplica(t *testing.T) {
	s := StartSentinel(t, SentinelOptions{Password: "data-secret", SentinelPassword: "sentinel-secret"})
	ctx := context.Background()
	primary, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if primary != s.Servers[0] {
		t.Fatalf("primary %s, want the first server %s", primary, s.Servers[0])
	}
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// the write reached the replica: WAIT counts it
	if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	start := time.Now()
	s.Kill(t, primary)
	now := s.WaitPrimary(t, primary)
	t.Logf("%s promoted %v after the kill", now, time.Since(start).Round(time.Millisecond))
	if now != s.Servers[1] {
		t.Fatalf("new primary %s, want the replica %s", now, s.Servers[1])
	}
	eventually(t, "read through the failover client", func(ctx context.Context) error {
		v, err := c.Get(ctx, "k").Result()
		if err == nil && v != "v" {
			t.Fatalf("k = %q after the failover", v)
		}
		return err
	})
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestClusterFailsOverTheSlotOfAKey(t *testing.T) {
	c := StartCluster(t, ClusterOptions{Password: "cluster-secret"})
	ctx := context.Background()
	const key = "fw{fleetwave}:epoch"
	cl := c.Client(t)
	primary, err := c.PrimaryOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// the write and WAIT on one connection: WAIT counts the replicas that
	// have the writes of its own connection
	conn := c.NodeClient(t, primary).Conn()
	defer conn.Close()
	if err := conn.Set(ctx, key, "7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on %s = %d, %v", primary, n, err)
	}
	replicas, err := c.ReplicasOf(ctx, primary)
	if err != nil || len(replicas) != 1 {
		t.Fatalf("replicas of %s: %v, %v; want one", primary, replicas, err)
	}
	start := time.Now()
	c.Kill(t, primary)
	now := c.WaitPrimary(t, key, primary)
	t.Logf("%s promoted %v after the kill", now, time.Since(start).Round(time.Millisecond))
	if now != replicas[0] {
		t.Fatalf("new primary %s, want the replica %s", now, replicas[0])
	}
	eventually(t, "read through the cluster client", func(ctx context.Context) error {
		v, err := cl.Get(ctx, key).Result()
		if err == nil && v != "7" {
			t.Fatalf("%s = %q after the failover", key, v)
		}
		return err
	})
}

// TestStartProcOnATakenPort: a server whose port somebody bound after it
// was chosen is started again on another, and runs.
func TestStartProcOnATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	takePort = func() (int, error) {
		calls++
		if calls == 1 {
			return busy, nil
		}
		return freeport.Take()
	}
	t.Cleanup(func() { takePort = freeport.Take })
	dir := filepath.Join(tempDir(t), "server")
	p := startProc(t, dir, 1, func(ports []int) []string { return serverArgs(ports[0], dir, "") })
	if p.addr == taken.Addr().String() {
		t.Fatalf("the server claims the taken port %s", p.addr)
	}
	if calls != 2 {
		t.Fatalf("%d ports taken, want 2 (the busy one, then another)", calls)
	}
	c := p.client(t, "")
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the server started again does not answer: %v", err)
	}
}
