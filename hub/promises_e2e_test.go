package hub_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// capFleet is a repository of n nodes and a block whose install marks the
// node as running in dir for the time it runs (the agents' side of "in
// flight"), and whose upgrade does the same.
func capFleet(n int, dir string) map[string]string {
	files := map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/db.cue": fmt.Sprintf(`kind: "block"
name: "db"
actions: {
	install: command: "touch %[1]s/$FLEETWAVE_NODE.running; echo install >> \"$FLEETWAVE_STATE_DIR/runs\"; sleep 0.6; rm %[1]s/$FLEETWAVE_NODE.running"
	upgrade: command: "touch %[1]s/$FLEETWAVE_NODE.running; echo upgrade >> \"$FLEETWAVE_STATE_DIR/runs\"; sleep 0.6; rm %[1]s/$FLEETWAVE_NODE.running"
}
`, dir),
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		files["nodes/"+id+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\n", id)
	}
	return files
}

// startAgent runs node's agent against hubURL until ctx ends.
func startAgent(t *testing.T, ctx context.Context, wg *sync.WaitGroup, hubURL, node, stateDir string, log zerolog.Logger) {
	t.Helper()
	wg.Go(func() {
		err := agent.Run(ctx, agent.Config{
			HubURL: hubURL, Node: node, Token: "token-" + node,
			StateDir: stateDir, PollWait: time.Second, ReportInterval: 2 * time.Second,
			Logger: log.With().Str("node", node).Logger(),
		})
		if err != nil && ctx.Err() == nil {
			t.Errorf("agent %s: %v", node, err)
		}
	})
}

// TestMaxConcurrentHoldsWhileAgentsArriveOverSeconds: a BRC with
// max_concurrent 2 over 10 nodes, served by two hub replicas on one Redis;
// the agents start one by one over several seconds, each talking to a
// replica picked at random, so the nodes report in random order while the
// rollout runs. Then a second generation is pushed while the first is in
// flight. A sampler reads, every few milliseconds, both the agents' side
// (which commands are running) and Redis (the items in flight of the BRC's
// rollouts): never more than 2. Each generation is one rollout, and every
// node ran each action once.
func TestMaxConcurrentHoldsWhileAgentsArriveOverSeconds(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	const n, maxConcurrent = 10, 2
	running := t.TempDir()
	files := capFleet(n, running)
	files["brc/db.cue"] = fmt.Sprintf("kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: \"1\"\nmax_concurrent: %d\n", maxConcurrent)
	remote := gittest.NewRemote(t, files)
	srv := redistest.Start(t)
	redisURL := "unix://" + srv.Addr
	var nodes []string
	for i := 1; i <= n; i++ {
		nodes = append(nodes, fmt.Sprintf("n%d", i))
	}
	// two replicas, no agents of their own
	a := startFleetCfg(t, remote, redisURL, nil, nil, func(c *hub.Config) {
		c.HubID, c.LeaseTTL = "hub-a", hub.Duration(time.Second)
		c.ReconcileInterval = hub.Duration(300 * time.Millisecond)
		c.Agents.Tokens = tokensFor(nodes)
	})
	b := startFleetCfg(t, remote, redisURL, nil, nil, func(c *hub.Config) {
		c.HubID, c.LeaseTTL = "hub-b", hub.Duration(time.Second)
		c.ReconcileInterval = hub.Duration(300 * time.Millisecond)
		c.Agents.Tokens = tokensFor(nodes)
	})
	eng := a.hub.Engine()

	// the sampler: agents' side and Redis' side
	var maxRunning, maxInFlight, samples atomic.Int64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	rdb := srv.Client(t)
	sampler.Go(func() {
		ctx := context.Background()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(3 * time.Millisecond):
			}
			entries, _ := os.ReadDir(running)
			maxRunning.Store(max(maxRunning.Load(), int64(len(entries))))
			inFlight, err := brcInFlight(ctx, rdb, "trigger/db")
			if err != nil {
				continue
			}
			maxInFlight.Store(max(maxInFlight.Load(), int64(inFlight)))
			samples.Add(1)
		}
	})

	// agents arrive over ~4 s, in random order, at random replicas
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	order := rng.Perm(n)
	ctx, cancel := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	t.Cleanup(func() { cancel(); agents.Wait() })
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	stateDirs := t.TempDir()
	for _, i := range order {
		node := nodes[i]
		url := "http://" + a.hub.Addr()
		if rng.Intn(2) == 0 {
			url = "http://" + b.hub.Addr()
		}
		startAgent(t, ctx, &agents, url, node, filepath.Join(stateDirs, node), log)
		time.Sleep(time.Duration(200+rng.Intn(400)) * time.Millisecond)
	}

	// generation 2 while generation 1 is still in flight
	waitUntil(t, "a few items of generation 1 done", func() bool {
		r, _, err := eng.Rollout(context.Background(), "db-g1")
		return err == nil && r.Counters.Done >= 3
	})
	gittest.Push(t, remote, map[string]string{"brc/db.cue": strings.Replace(files["brc/db.cue"], `"1"`, `"2"`, 1)}, nil, "db 2")
	r2, items2 := a.waitRollout(t, "db-g2", fleetwave.RolloutCompleted)
	waitUntil(t, "every node at version 2", func() bool {
		obs, err := eng.Observations(context.Background())
		if err != nil {
			return false
		}
		for _, node := range nodes {
			in := obs.Instance(fleetwave.InstanceKey{Node: node, Block: "db"})
			if in == nil || in.Version != "2" {
				return false
			}
		}
		return true
	})
	close(stopSampling)
	sampler.Wait()

	t.Logf("%d samples: at most %d commands running, %d items in flight in Redis", samples.Load(), maxRunning.Load(), maxInFlight.Load())
	if samples.Load() < 100 {
		t.Fatalf("only %d samples", samples.Load())
	}
	if maxRunning.Load() > maxConcurrent || maxInFlight.Load() > maxConcurrent {
		t.Fatalf("max_concurrent %d exceeded: %d commands running at once, %d items in flight", maxConcurrent, maxRunning.Load(), maxInFlight.Load())
	}
	if maxRunning.Load() < maxConcurrent {
		t.Fatalf("never %d commands at once: the test proves nothing", maxConcurrent)
	}
	rs, err := eng.Rollouts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	perGen := map[int64][]string{}
	for _, r := range rs {
		if r.Source.Object == "trigger/db" {
			perGen[r.Source.Generation] = append(perGen[r.Source.Generation], r.ID)
		}
	}
	if len(perGen[1]) != 1 || len(perGen[2]) != 1 {
		t.Fatalf("rollouts per generation %v, want one each", perGen)
	}
	if r1, _, _ := eng.Rollout(context.Background(), "db-g1"); r1.Status != fleetwave.RolloutSuperseded && r1.Status != fleetwave.RolloutCompleted {
		t.Fatalf("db-g1 ended %s", r1.Status)
	}
	if r2.Counters.Failed != 0 {
		t.Fatalf("db-g2 %+v; items %+v", r2.Counters, items2)
	}
	for _, node := range nodes {
		runs, _ := os.ReadFile(filepath.Join(stateDirs, node, "blocks", "db", "runs"))
		got := string(runs)
		if strings.Count(got, "install") != 1 || strings.Count(got, "upgrade") > 1 {
			t.Errorf("%s ran %q, want one install and at most one upgrade", node, got)
		}
	}
}

// brcInFlight counts, in one atomic read, the items in flight
// (in_progress, retrying, ambiguous) of every rollout of source object
// (every generation), from the engine's in-flight sets.
func brcInFlight(ctx context.Context, rdb *redis.Client, object string) (int, error) {
	const script = `
local p = ARGV[1]
local n = 0
for _, rid in ipairs(redis.call('ZRANGE', p .. 'src:' .. ARGV[2], 0, -1)) do
  for _, lane in ipairs(redis.call('HKEYS', p .. 'r:' .. rid .. ':lanes')) do
    n = n + redis.call('SCARD', p .. 'r:' .. rid .. ':f:' .. lane)
  end
end
return n`
	v, err := rdb.Eval(ctx, script, []string{"fw{fleetwave}:epoch"}, "fw{fleetwave}:", object).Int()
	return v, err
}

func tokensFor(nodes []string) map[string]string {
	m := map[string]string{}
	for _, n := range nodes {
		m[n] = hub.HashToken("token-" + n)
	}
	return m
}

// TestAManualRequestRunsOnceAcrossATotalLossOfRedis: a one-shot manual
// request (a backup, one_shot) completes and its record reaches Git. Then
// Redis loses everything: FLUSHALL, and the managed redis-server is killed
// and restarted by the hub. The restarted engine knows nothing, but the
// hub reads the request's record from the status in Git: the backup does
// not run again, and the request's status document in Git is unchanged.
func TestAManualRequestRunsOnceAcrossATotalLossOfRedis(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := dbFleet()
	files["blocks/db.cue"] = strings.Replace(files["blocks/db.cue"], `backup: command:  "echo backup >> runs"`,
		`backup: {command: "echo backup >> runs", one_shot: true}`, 1)
	remote := gittest.NewRemote(t, files)
	nodes := []string{"n1", "n2", "n3"}
	f := startFleetCfg(t, remote, "managed", nodes, nil, func(c *hub.Config) {
		c.ReconcileInterval = hub.Duration(300 * time.Millisecond)
	})
	f.waitEveryAgent(t, "db-g1")
	gittest.Push(t, remote, map[string]string{"rollouts/backup-now.cue": `kind: "rollout"
name: "backup-now"
brc: "db"
action_name: "backup"
nodes: ["n1", "n2"]
`}, nil, "Back up n1 and n2 now")
	f.waitRollout(t, "manual-backup-now", fleetwave.RolloutCompleted)
	doc := waitFile(t, remote, "status/rollouts/manual-backup-now.yaml", func(s string) bool { return strings.Contains(s, "status: completed") })
	waitFile(t, remote, "status/summary.yaml", func(s string) bool {
		return strings.Contains(s, "backup-now:") && strings.Contains(s, "rollout: manual-backup-now")
	})
	for _, n := range []string{"n1", "n2"} {
		if c := strings.Count(runs(t, f, n), "backup"); c != 1 {
			t.Fatalf("%s ran the backup %d times before the loss", n, c)
		}
	}

	// Redis loses everything, and its server restarts.
	rdb := f.hub.RedisClient()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	pid := f.hub.ManagedRedisPID()
	if pid == 0 {
		t.Fatal("no managed redis-server")
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the managed redis-server restarted", func() bool {
		np := f.hub.ManagedRedisPID()
		return np != 0 && np != pid && rdb.Ping(context.Background()).Err() == nil
	})
	waitUntil(t, "the hub leads again on the empty redis", func() bool {
		n, err := rdb.Exists(context.Background(), "fw{fleetwave}:lease").Result()
		return err == nil && n == 1
	})
	// a few reconciles and full reports (every 5 s) later
	time.Sleep(7 * time.Second)
	for _, n := range []string{"n1", "n2"} {
		if c := strings.Count(runs(t, f, n), "backup"); c != 1 {
			t.Fatalf("%s ran the backup %d times: the request ran again after the loss of Redis", n, c)
		}
	}
	if _, err := f.hub.Engine().RolloutRecord(context.Background(), "manual-backup-now"); err == nil {
		t.Fatal("the request's rollout was created again")
	}
	if after, _ := readStatus(t, remote, "status/rollouts/manual-backup-now.yaml"); after != doc {
		t.Fatalf("the request's status document changed:\nbefore:\n%s\nafter:\n%s", doc, after)
	}
	summary, _ := readStatus(t, remote, "status/summary.yaml")
	if !strings.Contains(summary, "rollout: manual-backup-now") {
		t.Fatalf("the request's record left status/summary.yaml:\n%s", summary)
	}
}

// TestARequestLostMidwayWithRedisIsClosedNotRunAgain: a one-shot request
// (a 3 s backup on n1 and n2, one at a time) is in flight when Redis loses
// everything. Its payloads were only in Redis and the backup may have run
// on a node: the hub neither runs it again nor leaves it "active" in Git
// forever. Its status document is closed (cancelled, state_lost: the item
// that was running blocked, the pending one skipped) and the request shows
// the same.
func TestARequestLostMidwayWithRedisIsClosedNotRunAgain(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := dbFleet()
	files["blocks/db.cue"] = strings.Replace(files["blocks/db.cue"], `backup: command:  "echo backup >> runs"`,
		`backup: {command: "echo backup >> runs; sleep 3", one_shot: true}`, 1)
	remote := gittest.NewRemote(t, files)
	srv := redistest.Start(t)
	nodes := []string{"n1", "n2", "n3"}
	f := startFleetCfg(t, remote, "unix://"+srv.Addr, nodes, nil, func(c *hub.Config) {
		c.ReconcileInterval = hub.Duration(300 * time.Millisecond)
	})
	f.waitEveryAgent(t, "db-g1")
	gittest.Push(t, remote, map[string]string{"rollouts/backup-now.cue": `kind: "rollout"
name: "backup-now"
brc: "db"
action_name: "backup"
nodes: ["n1", "n2"]
batch_size: 1
`}, nil, "Back up n1 and n2 now")
	// the claim is in Git and the first backup runs
	waitFile(t, remote, "status/rollouts/manual-backup-now.yaml", func(s string) bool { return strings.Contains(s, "status: in_progress") })
	if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	doc := waitFile(t, remote, "status/rollouts/manual-backup-now.yaml", func(s string) bool {
		return strings.Contains(s, "status: cancelled") && strings.Contains(s, "reason: state_lost")
	})
	for _, want := range []string{"status: blocked", "status: skipped", "check the node"} {
		if !strings.Contains(doc, want) {
			t.Fatalf("the closed document lacks %q:\n%s", want, doc)
		}
	}
	waitFile(t, remote, "status/summary.yaml", func(s string) bool {
		return strings.Contains(s, "rollout: manual-backup-now") && strings.Contains(s, "state: cancelled")
	})
	time.Sleep(4 * time.Second) // the running backup ends; a few reconciles
	total := 0
	for _, n := range []string{"n1", "n2"} {
		c := strings.Count(runs(t, f, n), "backup")
		if c > 1 {
			t.Fatalf("%s ran the backup %d times", n, c)
		}
		total += c
	}
	if total != 1 {
		t.Fatalf("the backup ran %d times in all, want the one in flight at the loss", total)
	}
	if _, err := f.hub.Engine().RolloutRecord(context.Background(), "manual-backup-now"); err == nil {
		t.Fatal("the request's rollout was created again")
	}
}

// TestABurstOfCommitsIsOneEvent: with quiescence_seconds, the generations
// a burst of commits gives a BRC become one rollout, of the last
// generation, started once the BRC saw no newer commit for that long. The
// hub's clock is a fake one that stands still while the burst is pushed:
// however slow the pushes, the window ends only when the test says so.
func TestABurstOfCommitsIsOneEvent(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	const quiet = 30 * time.Second
	files := dbFleet()
	brc := func(version string) string {
		return fmt.Sprintf("kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: %q\nmax_concurrent: 3\nquiescence_seconds: %d\n", version, int(quiet.Seconds()))
	}
	files["brc/db.cue"] = brc("1")
	remote := gittest.NewRemote(t, files)
	nodes := []string{"n1", "n2", "n3"}
	// a day ahead: attempt deadlines (hub time) stay in the agents' future
	clk := clock.NewFake(time.Now().UTC().Add(24 * time.Hour).Truncate(time.Second))
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, nodes, clk, func(c *hub.Config) {
		c.ReconcileInterval = hub.Duration(200 * time.Millisecond)
		c.LeaseTTL = hub.Duration(time.Hour) // the fake clock jumps: the lease must outlive the jumps
	})
	waitQuiet := func(commit string) {
		t.Helper()
		waitFile(t, remote, "status/summary.yaml", func(s string) bool {
			return strings.Contains(s, "applied: "+commit) && strings.Contains(s, "reason: quiescence")
		})
	}
	waitQuiet(gittest.Head(t, remote))
	if _, _, err := f.hub.Engine().Rollout(context.Background(), "db-g1"); err == nil {
		t.Fatal("db-g1 started inside its quiescence")
	}
	clk.Advance(quiet)
	f.waitEveryAgent(t, "db-g1")
	for _, v := range []string{"2", "3", "4"} {
		waitQuiet(gittest.Push(t, remote, map[string]string{"brc/db.cue": brc(v)}, nil, "db "+v))
	}
	clk.Advance(quiet - time.Second)
	time.Sleep(500 * time.Millisecond) // a few reconciles
	rs, err := f.hub.Engine().Rollouts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d rollouts before the burst's quiescence passed, want db-g1 only", len(rs))
	}
	clk.Advance(time.Second)
	f.waitRollout(t, "db-g4", fleetwave.RolloutCompleted)
	rs, err = f.hub.Engine().Rollouts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rs {
		if x.ID == "db-g2" || x.ID == "db-g3" {
			t.Fatalf("a rollout %s was created for a generation inside the burst", x.ID)
		}
	}
	for _, n := range nodes {
		if got := runs(t, f, n); got != "install 1\nupgrade 4\n" {
			t.Fatalf("%s ran %q, want install 1 then one upgrade 4", n, got)
		}
	}
}
