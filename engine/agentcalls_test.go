package engine

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// gatedConn holds back every write carrying sha (one script's calls)
// until gate closes, while its connection is out of the pool: a Redis
// slow to answer those calls, as a busy hub is to read the answers.
type gatedConn struct {
	net.Conn
	sha  []byte
	gate <-chan struct{}
	held *heldCount
}

type heldCount struct {
	mu       sync.Mutex
	now, max int
}

func (c *gatedConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.sha) {
		c.held.mu.Lock()
		c.held.now++
		c.held.max = max(c.held.max, c.held.now)
		c.held.mu.Unlock()
		<-c.gate
		c.held.mu.Lock()
		c.held.now--
		c.held.mu.Unlock()
	}
	return c.Conn.Write(b)
}

// TestAgentCallsLeaveConnectionsToTheLeader fills a real redis-server's
// pool of 4 connections with agents' reports that Redis is slow to take
// (each held on its connection until the test lets it go): with
// WithAgentCalls(3) no more than 3 of them hold a connection at once,
// and the leader's own call (the engine's version, as a Step or a status
// read makes) is answered while they wait. Without the bound, the fourth
// report takes the last connection and the leader's call waits for the
// reports (it fails on its timeout). Every report lands once let go, and
// the nine that waited for a slot are counted.
func TestAgentCallsLeaveConnectionsToTheLeader(t *testing.T) {
	srv := redistest.Start(t)
	gate := make(chan struct{})
	held := &heldCount{}
	sha := []byte(redis.NewScript(scriptSource("report")).Hash())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4, PoolTimeout: time.Minute, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &gatedConn{Conn: c, sha: sha, gate: gate, held: held}, nil
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHarness(t, rdb, WithAgentCalls(3))

	const reports = 12
	errs := make(chan error, reports)
	for i := range reports {
		go func() {
			errs <- h.e.Report(h.ctx, fleetwave.Report{Node: fmt.Sprintf("n%d", i), AgentVersion: "1.0.0", SentAt: t0})
		}()
	}
	holding := func() int {
		held.mu.Lock()
		defer held.mu.Unlock()
		return held.now
	}
	deadline := time.Now().Add(30 * time.Second)
	for holding() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d reports hold a connection after 30s, want 3", holding())
		}
		time.Sleep(time.Millisecond)
	}
	// the leader's call, while three reports hold their connections and
	// nine wait for a slot
	vctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	if _, err := h.e.Version(vctx); err != nil {
		t.Fatalf("leader's call while agents' reports hold connections: %v", err)
	}
	close(gate)
	for range reports {
		if err := <-errs; err != nil {
			t.Fatalf("report: %v", err)
		}
	}
	held.mu.Lock()
	most := held.max
	held.mu.Unlock()
	if most != 3 {
		t.Fatalf("at most %d reports held a connection at once, want 3 (WithAgentCalls)", most)
	}
	if n, d := h.e.AgentCallWaits(); n != reports-3 || d <= 0 {
		t.Fatalf("%d agents' calls waited for a slot (%v summed), want the %d beyond the first 3", n, d, reports-3)
	}
	obs, err := h.e.ObservationsShared(h.ctx)
	if err != nil || len(obs) != reports {
		t.Fatalf("%d observations (%v), want the %d reports", len(obs), err, reports)
	}
}
