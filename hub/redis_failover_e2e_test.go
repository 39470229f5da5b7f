package hub_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// epochKey is the engine's fencing epoch under the default prefix.
const epochKey = "fw{fleetwave}:epoch"

// writeSecret writes a password file and returns its path.
func writeSecret(t *testing.T, name, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// redisFromYAML loads a hub.yaml whose redis: is the given YAML (indented
// under it) and returns the Config.Redis it becomes.
func redisFromYAML(t *testing.T, redisYAML string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hub.yaml")
	doc := "repo:\n  url: file:///unused.git\ndata_dir: " + t.TempDir() + "\nredis:\n" + redisYAML
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := hub.LoadConfig(p)
	if err != nil {
		t.Fatalf("hub.yaml:\n%s\n%v", doc, err)
	}
	return c.Redis
}

// failoverRun is what a rollout through a failover observed.
type failoverRun struct {
	promoted   time.Duration // from the kill to the replica taking over
	completed  time.Duration // from the kill to the rollout completed
	before     int64         // the epoch before the kill
	fences     []int64       // the status commits' fences
	maxAttempt int           // the most attempts an item took
	ambiguous  []string      // items seen ambiguous
}

// rolloutThroughFailover runs a 6-node rollout (max_concurrent 2, each
// install ~0.6 s) through a hub on redisMode; once two items are done,
// kill takes the primary holding the engine's keys down (SIGKILL) and
// returns once a replica took over. The rollout must complete, every node
// must have run its install exactly once, the status commits' fences must
// never go down, a status commit must carry a fence above the epoch before
// the kill, and no secret may appear in the logs or the readiness checks.
func rolloutThroughFailover(t *testing.T, redisMode string, rdb func() redis.UniversalClient, kill func() time.Duration, secrets ...string) failoverRun {
	t.Helper()
	const n = 6
	running := t.TempDir()
	files := capFleet(n, running)
	files["brc/db.cue"] = "kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: \"1\"\nmax_concurrent: 2\n"
	remote := gittest.NewRemote(t, files)
	var nodes []string
	for i := 1; i <= n; i++ {
		nodes = append(nodes, fmt.Sprintf("n%d", i))
	}
	f := startFleetCfg(t, remote, redisMode, nodes, nil, func(c *hub.Config) {
		c.LeaseTTL = hub.Duration(2 * time.Second)
		c.ReconcileInterval = hub.Duration(300 * time.Millisecond)
	})
	eng := f.hub.Engine()
	ctx := context.Background()

	// a sampler records what the items went through, failover included
	var (
		mu         sync.Mutex
		maxAttempt int
		ambiguous  = map[string]bool{}
	)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			_, items, err := eng.Rollout(sctx, "db-g1")
			cancel()
			if err != nil {
				continue
			}
			mu.Lock()
			for _, it := range items {
				maxAttempt = max(maxAttempt, it.Attempts)
				if it.Status == fleetwave.ItemAmbiguous {
					ambiguous[it.Node] = true
				}
			}
			mu.Unlock()
		}
	})
	defer func() { close(stop); sampler.Wait() }()

	waitUntil(t, "two items of db-g1 done", func() bool {
		r, _, err := eng.Rollout(ctx, "db-g1")
		return err == nil && r.Counters.Done >= 2
	})
	if r, _, _ := eng.Rollout(ctx, "db-g1"); r.Status == fleetwave.RolloutCompleted {
		t.Fatal("the rollout completed before the kill: the test proves nothing")
	}
	if !strings.Contains(f.logs.String(), "lease replicated") {
		t.Fatal("the campaign did not wait for the replica (no \"lease replicated\" line)")
	}
	var run failoverRun
	var err error
	if run.before, err = rdb().Get(ctx, epochKey).Int64(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	run.promoted = kill()
	r, items := f.waitEveryAgent(t, "db-g1")
	run.completed = time.Since(start)
	if r.Counters.Done != n || r.Counters.Failed != 0 {
		t.Fatalf("counters after the failover %+v; items %+v", r.Counters, items)
	}
	for _, node := range nodes {
		runs, _ := os.ReadFile(filepath.Join(f.stateDir(node), "blocks", "db", "runs"))
		if got := string(runs); got != "install\n" {
			t.Errorf("%s ran %q, want one install", node, got)
		}
	}

	// a status commit under the new epoch, and never a fence going down
	waitUntil(t, "a status commit with a fence above the epoch before the kill", func() bool {
		fs := statusFences(t, remote)
		return len(fs) > 0 && fs[len(fs)-1] > run.before
	})
	run.fences = statusFences(t, remote)
	for i := 1; i < len(run.fences); i++ {
		if run.fences[i] < run.fences[i-1] {
			t.Fatalf("status commit fences went back: %v", run.fences)
		}
	}
	epoch, err := rdb().Get(ctx, epochKey).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if last := run.fences[len(run.fences)-1]; epoch < last {
		t.Fatalf("epoch %d after the failover, below the fence %d committed to Git", epoch, last)
	}

	rd := f.hub.Readiness(ctx)
	if rd.Checks["redis"] != "ok" {
		t.Errorf("readiness after the failover: %v", rd.Checks)
	}
	for _, s := range secrets {
		if strings.Contains(f.logs.String(), s) || strings.Contains(fmt.Sprint(rd), s) {
			t.Errorf("a password appears in the logs or the readiness checks")
		}
	}
	mu.Lock()
	run.maxAttempt = maxAttempt
	for node := range ambiguous {
		run.ambiguous = append(run.ambiguous, node)
	}
	mu.Unlock()
	return run
}

// TestSentinelFailoverMidRollout: a hub on Redis Sentinel (a primary, a
// replica, three Sentinels, passwords on both) whose primary is killed in
// the middle of a rollout. First, on the same servers, a campaign whose
// write no replica acknowledges is refused. Then the rollout: the
// Sentinels promote the replica, the hub follows it, and the rollout
// completes with every node having run its action once and the fence
// never going back.
func TestSentinelFailoverMidRollout(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	const password, sentinelPassword = "data-pw-6b1f0c", "sentinel-pw-93ad2e"
	s := redistest.StartSentinel(t, redistest.SentinelOptions{Password: password, SentinelPassword: sentinelPassword})
	mode := redisFromYAML(t, fmt.Sprintf("  sentinel:\n    master: %s\n    addrs: [%s]\n    password_file: %s\n    sentinel_password_file: %s\n",
		s.Master, strings.Join(s.Addrs, ", "), writeSecret(t, "redis.pass", password), writeSecret(t, "sentinel.pass", sentinelPassword)))
	if !strings.HasPrefix(mode, "redis-sentinel://") || strings.Contains(mode, password) {
		t.Fatalf("redis = %q", mode)
	}
	ctx := context.Background()

	t.Run("a wrong password is refused without being shown", func(t *testing.T) {
		wrong := "wrong-pw-41c7"
		sen, err := hub.ParseRedisSentinel(mode)
		if err != nil {
			t.Fatal(err)
		}
		sen.PasswordFile = writeSecret(t, "wrong.pass", wrong)
		nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		dir := t.TempDir()
		_, err = hub.New(nctx, hub.Config{Repo: hub.RepoConfig{URL: "file:///unused.git"}, DataDir: dir, Redis: sen.URL(), Listen: "127.0.0.1:0"})
		if err == nil {
			t.Fatal("a hub started with a wrong password")
		}
		if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), password) || strings.Contains(err.Error(), sentinelPassword) {
			t.Fatalf("the error shows a password: %v", err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("a campaign no replica acknowledges is refused", func(t *testing.T) {
		primary, err := s.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		replica := s.Servers[0]
		if replica == primary {
			replica = s.Servers[1]
		}
		rdb := s.Client(t)
		a := engine.New(rdb, engine.WithPrefix("waitcheck"))
		if err := a.Load(ctx); err != nil {
			t.Fatal(err)
		}
		fa, err := a.Campaign(ctx, "hub-a/1", 3*time.Second)
		if err != nil {
			t.Fatalf("campaign with the replica up: %v", err)
		}
		if err := a.Resign(ctx, "hub-a/1", fa); err != nil {
			t.Fatal(err)
		}
		s.Signal(t, replica, syscall.SIGSTOP)
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				s.Signal(t, replica, syscall.SIGCONT)
			}
		}
		defer resume()
		b := engine.New(rdb, engine.WithPrefix("waitcheck"))
		if _, err := b.Campaign(ctx, "hub-b/1", 3*time.Second); !errors.Is(err, engine.ErrNotReplicated) {
			t.Fatalf("campaign with the replica paused: %v, want ErrNotReplicated", err)
		}
		resume()
		var fb int64
		waitUntil(t, "a campaign once the replica is back", func() bool {
			fb, err = b.Campaign(ctx, "hub-b/1", 3*time.Second)
			return err == nil
		})
		epoch, err := rdb.Get(ctx, "fw{waitcheck}:epoch").Int64()
		if err != nil {
			t.Fatal(err)
		}
		// the refused campaign's fence was kept: the retry extended it
		if fb != fa+1 || epoch != fb {
			t.Fatalf("fences %d then %d, epoch %d; want %d, %d", fa, fb, epoch, fa+1, fa+1)
		}
	})

	t.Run("a rollout survives the failover", func(t *testing.T) {
		rdb := s.Client(t)
		run := rolloutThroughFailover(t, mode, func() redis.UniversalClient { return rdb }, func() time.Duration {
			primary, err := s.Primary(ctx)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			s.Kill(t, primary)
			now := s.WaitPrimary(t, primary)
			took := time.Since(start)
			t.Logf("primary %s killed; %s promoted after %v", primary, now, took.Round(time.Millisecond))
			return took
		}, password, sentinelPassword)
		t.Logf("rollout completed %v after the kill; epoch before %d, status fences %v; most attempts of an item %d; ambiguous items %v",
			run.completed.Round(time.Millisecond), run.before, run.fences, run.maxAttempt, run.ambiguous)
	})
}

// TestClusterFailoverMidRollout: a hub on a six-process Redis Cluster
// (three primaries, three replicas, a password) whose primary holding the
// engine's hash slot is killed in the middle of a rollout. Its replica
// takes the slot over, the hub follows, and the rollout completes with
// every node having run its action once and the fence never going back.
func TestClusterFailoverMidRollout(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	const password = "cluster-pw-0d5e77"
	c := redistest.StartCluster(t, redistest.ClusterOptions{Password: password})
	mode := redisFromYAML(t, fmt.Sprintf("  cluster:\n    addrs: [%s]\n    password_file: %s\n", strings.Join(c.Addrs[:3], ", "), writeSecret(t, "redis.pass", password)))
	if !strings.HasPrefix(mode, "redis-cluster://") || strings.Contains(mode, password) {
		t.Fatalf("redis = %q", mode)
	}
	ctx := context.Background()
	var rdb redis.UniversalClient
	run := rolloutThroughFailover(t, mode, func() redis.UniversalClient {
		// a client of the cluster as it is now (a client made before the
		// failover would keep its old slot map for a while)
		if rdb != nil {
			_ = rdb.Close()
		}
		rdb = c.Client(t)
		return rdb
	}, func() time.Duration {
		primary, err := c.PrimaryOf(ctx, epochKey)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c.Kill(t, primary)
		now := c.WaitPrimary(t, epochKey, primary)
		took := time.Since(start)
		t.Logf("primary %s of the slot of %s killed; %s promoted after %v", primary, epochKey, now, took.Round(time.Millisecond))
		return took
	}, password)
	t.Logf("rollout completed %v after the kill; epoch before %d, status fences %v; most attempts of an item %d; ambiguous items %v",
		run.completed.Round(time.Millisecond), run.before, run.fences, run.maxAttempt, run.ambiguous)
}
