package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// The passwords of the sentinel and cluster modes: hub.yaml names the
// files holding them; no hub log may show them.
const (
	dataPassword     = "chaos-data-pw-5e0b7d"
	sentinelPassword = "chaos-sentinel-pw-c41a9f"
)

// topology reports whether the fleet runs on Redis Sentinel or Cluster.
func (c *cluster) topology() bool { return c.sentinel != nil || c.rcluster != nil }

// startTopology starts the Sentinel deployment (a primary, a replica, three
// Sentinels) or the 6-process Cluster the hubs share, and writes the
// password files hub.yaml names. The processes are killed when the test
// ends.
func (c *cluster) startTopology() {
	t := c.t
	c.dataPassFile = filepath.Join(c.dir, "secrets", "redis.pass")
	c.sentinelPassFile = filepath.Join(c.dir, "secrets", "sentinel.pass")
	if err := os.MkdirAll(filepath.Dir(c.dataPassFile), 0o700); err != nil {
		t.Fatal(err)
	}
	for p, pw := range map[string]string{c.dataPassFile: dataPassword, c.sentinelPassFile: sentinelPassword} {
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	switch c.o.redis {
	case "sentinel":
		c.sentinel = redistest.StartSentinel(t, redistest.SentinelOptions{Password: dataPassword, SentinelPassword: sentinelPassword})
		c.logf("sentinel up in %v: master %s on %s, sentinels %v", time.Since(start).Round(time.Millisecond), c.sentinel.Master, c.sentinel.Servers[0], c.sentinel.Addrs)
	case "cluster":
		c.rcluster = redistest.StartCluster(t, redistest.ClusterOptions{Password: dataPassword})
		c.logf("cluster up in %v: nodes %v", time.Since(start).Round(time.Millisecond), c.rcluster.Addrs)
	default:
		t.Fatalf("redis mode %q has no topology", c.o.redis)
	}
}

// engineRedis returns a client of the Redis holding the engine's keys, for
// the suite's own reads (the lease's fence); the caller closes it. On
// Sentinel and Cluster it follows failovers as the hubs' clients do.
func (c *cluster) engineRedis() redis.UniversalClient {
	switch {
	case c.sentinel != nil:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: c.sentinel.Master, SentinelAddrs: c.sentinel.Addrs, SentinelPassword: sentinelPassword,
			Password: dataPassword, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 1,
		})
	case c.rcluster != nil:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.rcluster.Addrs, Password: dataPassword, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 1,
		})
	}
	return redisClient(c.redisSocket())
}

// enginePrimary names the data server holding the engine's keys now: the
// primary the Sentinels give, or the Cluster primary of the lease's slot
// (every key of the engine has the same hash tag).
func (c *cluster) enginePrimary(ctx context.Context) (string, error) {
	switch {
	case c.sentinel != nil:
		return c.sentinel.Primary(ctx)
	case c.rcluster != nil:
		return c.rcluster.PrimaryOf(ctx, keyPrefix+"lease")
	}
	return "", fmt.Errorf("redis %s: no primary to name (sentinel and cluster modes only)", c.o.redis)
}

// primaryKill SIGKILLs the primary holding the engine's keys and waits
// until its replica was promoted (the Sentinels, or the Cluster, name
// another primary and that server says it is one). The killed server is
// not restarted: the rest of the run has no replica, so the engine's
// campaigns need none (WAIT is asked only of connected replicas).
// restored is the promotion.
func (c *cluster) primaryKill(f *faultRec) error {
	if !c.topology() {
		return fmt.Errorf("%s: only with redis sentinel or cluster, not %s", f.kind, c.o.redis)
	}
	// mid-rollout: while commands run (waiting a while for some)
	busy := c.busyNodes()
	for wait := time.Now().Add(15 * time.Second); len(busy) == 0 && time.Now().Before(wait); busy = c.busyNodes() {
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	old, err := c.enginePrimary(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: %w", f.kind, err)
	}
	f.target, f.fenceBefore = "redis primary "+old, c.leaseFence()
	var paused []string
	if f.kind == faultPrimaryKillLossy {
		if paused, err = c.replicasOf(old); err != nil {
			return fmt.Errorf("%s: %w", f.kind, err)
		}
		for _, r := range paused {
			c.signalServer(r, syscall.SIGSTOP)
		}
		// the primary acknowledges writes no replica receives
		time.Sleep(time.Second)
	}
	f.at = time.Now()
	if c.sentinel != nil {
		c.sentinel.Kill(c.t, old)
	} else {
		c.rcluster.Kill(c.t, old)
	}
	for _, r := range paused {
		c.signalServer(r, syscall.SIGCONT)
	}
	// Not redistest's WaitPrimary: it fails the test from this goroutine.
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		now, err := c.enginePrimary(ctx)
		if err == nil && now == old {
			err = fmt.Errorf("still named %s", old)
		}
		if err == nil {
			err = isPrimary(ctx, now)
		}
		cancel()
		if err == nil {
			f.restored = time.Now()
			f.promoted = f.restored.Sub(f.at)
			f.note = fmt.Sprintf("(%d node(s) mid-action; %s promoted after %v; the killed server stays down)", len(busy), now, f.promoted.Round(time.Millisecond))
			if len(paused) > 0 {
				f.note += fmt.Sprintf(" (replica %v paused 1s before the kill)", paused)
			}
			return nil
		}
		last = err
	}
	return fmt.Errorf("%s: no replica promoted within 60s of killing %s: %v", f.kind, old, last)
}

// replicasOf names the replicas of the data server at primary.
func (c *cluster) replicasOf(primary string) ([]string, error) {
	if c.sentinel != nil {
		var out []string
		for _, s := range c.sentinel.Servers {
			if s != primary {
				out = append(out, s)
			}
		}
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.rcluster.ReplicasOf(ctx, primary)
}

// signalServer sends sig to the data server at addr.
func (c *cluster) signalServer(addr string, sig syscall.Signal) {
	if c.sentinel != nil {
		c.sentinel.Signal(c.t, addr, sig)
		return
	}
	c.rcluster.Signal(c.t, addr, sig)
}

// isPrimary checks that the data server at addr says it is a primary.
func isPrimary(ctx context.Context, addr string) error {
	rc := redis.NewClient(&redis.Options{Addr: addr, Password: dataPassword, MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1})
	defer rc.Close()
	s, err := rc.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(s, "role:master") {
		return fmt.Errorf("%s is not a primary yet", addr)
	}
	return nil
}

// watchLeader measures a leader failover after the leader at fence was
// killed: the time until a live hub says it leads under a higher fence
// (lease TTL expiry and a campaign, or a takeover by the restarted process
// of the same hub id). It runs until it saw one or within passed.
func (c *cluster) watchLeader(f *faultRec, within time.Duration) {
	deadline := f.at.Add(within)
	last := "no hub said it leads"
	for time.Now().Before(deadline) {
		if h := c.leader(); h != nil {
			fence := c.leaseFence()
			if fence > f.fenceBefore {
				f.leaderBack, f.leaderTo = time.Since(f.at), "hub-"+h.key
				return
			}
			last = fmt.Sprintf("hub-%s says it leads, the lease's fence is %d (%d at the kill)", h.key, fence, f.fenceBefore)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.note += fmt.Sprintf("(no leader under a higher fence within %v: %s)", within, last)
}

// sampleAmbiguous polls the items of the unfinished rollouts (sentinel and
// cluster modes) and records those seen ambiguous: attempts whose results
// may have been lost in a failover wait for their nodes' reports instead
// of running again.
func (c *cluster) sampleAmbiguous() {
	var s fleetwave.Summary
	if err := c.apiGet("/api/v1/summary", &s); err != nil {
		return
	}
	for _, r := range s.Rollouts {
		if r.Status.Finished() {
			continue
		}
		var ra rolloutAnswer
		if err := c.apiGet("/api/v1/rollouts/"+r.ID, &ra); err != nil {
			continue
		}
		for _, it := range ra.Items {
			if it.Status == fleetwave.ItemAmbiguous {
				c.mu.Lock()
				c.ambiguous[it.ID] = true
				c.mu.Unlock()
			}
		}
	}
}

// ambiguousItems are the items seen ambiguous during the run, and those
// that ended on it (a one-shot whose lost attempt is blocked rather than
// run again), sorted.
func (c *cluster) ambiguousItems(rollouts []rolloutAnswer) []string {
	c.mu.Lock()
	seen := map[string]bool{}
	for id := range c.ambiguous {
		seen[id] = true
	}
	c.mu.Unlock()
	for _, ra := range rollouts {
		for _, it := range ra.Items {
			if strings.Contains(it.Reason, "ambiguous") {
				seen[it.ID] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// checkSecrets fails v when a hub's log shows a Redis password (sentinel
// and cluster modes), and when a hub's /readyz does.
func (c *cluster) checkSecrets(v *invariant) {
	if !c.topology() {
		return
	}
	c.mu.Lock()
	hubs := append(append([]*hubInst(nil), c.hubs...), c.retired...)
	c.mu.Unlock()
	cl := http.Client{Timeout: 2 * time.Second}
	for _, h := range hubs {
		v.checked++
		b, _ := os.ReadFile(h.logPath)
		for _, pw := range []string{dataPassword, sentinelPassword} {
			if strings.Contains(string(b), pw) {
				v.fail("%s shows a Redis password in its log", h.logPath)
			}
		}
		if h.p == nil || !h.p.alive() {
			continue
		}
		resp, err := cl.Get(h.url() + "/readyz")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), dataPassword) || strings.Contains(string(body), sentinelPassword) {
			v.fail("hub-%s: /readyz shows a Redis password", h.key)
		}
	}
}
