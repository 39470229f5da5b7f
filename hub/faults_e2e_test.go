package hub_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestManagedRedisKilledMidRollout: the supervised redis-server is killed
// (SIGKILL) while a rollout runs; it is restarted from its AOF and the
// rollout finishes with nothing lost and nothing run twice.
func TestManagedRedisKilledMidRollout(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	lockDir := t.TempDir()
	remote := gittest.NewRemote(t, fleet(lockDir))
	f := startFleet(t, remote, "managed", []string{"n1", "n2", "n3"})
	// the rollout must span the three nodes (three waves of one) for the
	// kill to land mid-rollout: a node reporting after the plan would join
	// it only later, possibly after the rollout first completed
	waitUntil(t, "the three agents reported", func() bool {
		obs, err := f.hub.Engine().Observations(context.Background())
		return err == nil && len(obs) == 3
	})
	gittest.Push(t, remote, map[string]string{"brc/web.cue": webBRC}, nil, "Roll out web 1.0.0")

	// wait for the first item to complete, then kill Redis
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, _, err := f.hub.Engine().Rollout(context.Background(), "web-g1")
		if err == nil && r.Counters.Done >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rollout did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid := f.hub.ManagedRedisPID()
	if pid == 0 {
		t.Fatal("no managed redis-server")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The kill may cut the delivery of the next wave's attempt: popped
	// from its node's queue, never received. That attempt is then known
	// only at its deadline (the install's 1m timeout and the delivery
	// grace), when it is retried once a report shows it never ran.
	r, items := f.waitRolloutWithin(t, "web-g1", fleetwave.RolloutCompleted, 4*time.Minute)
	if f.hub.ManagedRedisPID() == pid {
		t.Fatal("redis-server was not restarted")
	}
	if r.Counters.Done != 3 || r.Counters.Total != 3 {
		t.Fatalf("counters after the crash = %+v, items %+v", r.Counters, items)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		runs, _ := os.ReadFile(filepath.Join(f.stateDir(n), "blocks", "web", "runs"))
		if string(runs) != "run\n" {
			t.Fatalf("%s ran %q, want exactly one run", n, runs)
		}
	}
}

// TestHumanPushesAreNeverLostWhileTheHubWritesStatus: people push while
// the hub commits status to the same branch; every human commit survives.
func TestHumanPushesAreNeverLostWhileTheHubWritesStatus(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	remote := gittest.NewRemote(t, dbFleet())
	// status on the branch people push to: where the races are
	f := startFleetCfg(t, remote, "embedded", []string{"n1", "n2", "n3"}, nil, func(c *hub.Config) { c.Repo.StatusBranch = "main" })
	f.waitEveryAgent(t, "db-g1")
	var wg sync.WaitGroup
	const pushers, each = 3, 4
	for p := range pushers {
		wg.Go(func() {
			for i := range each {
				// each push changes the fleet (a new node label), so the hub
				// writes status in between
				gittest.Push(t, remote, map[string]string{
					fmt.Sprintf("organizations/org-%d-%d.cue", p, i): fmt.Sprintf("kind: \"organization\"\nname: \"org-%d-%d\"\n", p, i),
				}, nil, fmt.Sprintf("human %d.%d", p, i))
			}
		})
	}
	wg.Wait()
	// the hub writes status on top of the last human commit; every human
	// commit is in the first-parent history
	deadline := time.Now().Add(30 * time.Second)
	for !strings.HasPrefix(gittest.Log(t, remote)[0], "status: ") {
		if time.Now().After(deadline) {
			t.Fatalf("no status commit after the last human push: %v", gittest.Log(t, remote)[:3])
		}
		time.Sleep(50 * time.Millisecond)
	}
	log := strings.Join(gittest.Log(t, remote), "\n")
	for p := range pushers {
		for i := range each {
			if !strings.Contains(log, fmt.Sprintf("human %d.%d", p, i)) {
				t.Fatalf("human commit %d.%d lost:\n%s", p, i, log)
			}
		}
	}
	if !strings.Contains(log, "status: ") {
		t.Fatalf("no status commit in:\n%s", log)
	}
}

// TestTotalRedisLoss: Redis loses everything (FLUSHALL) after a rollout.
// The hub takes a new fencing epoch above the one committed to Git, waits
// for the agents' next reports instead of re-installing, and keeps working.
func TestTotalRedisLoss(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	srv := redistest.Start(t)
	remote := gittest.NewRemote(t, dbFleet())
	f := startFleet(t, remote, "unix://"+srv.Addr, []string{"n1", "n2", "n3"})
	f.waitEveryAgent(t, "db-g1")
	waitFile(t, remote, "status/rollouts/db-g1.yaml", func(s string) bool { return strings.Contains(s, "status: completed") })
	before := lastFence(t, remote)

	if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // the lease is gone, a new epoch, the agents report again (every 5 s)
	for _, n := range []string{"n1", "n2", "n3"} {
		if c := strings.Count(runs(t, f, n), "install"); c != 1 {
			t.Fatalf("%s installed %d times after the loss of Redis", n, c)
		}
	}
	gittest.Push(t, remote, map[string]string{"brc/db.cue": "kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: \"2\"\nmax_concurrent: 3\n"}, nil, "db 2")
	f.waitRollout(t, "db-g2", fleetwave.RolloutCompleted)
	for _, n := range []string{"n1", "n2", "n3"} {
		if got := runs(t, f, n); got != "install 1\nupgrade 2\n" {
			t.Fatalf("%s ran %q", n, got)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for lastFence(t, remote) <= before {
		if time.Now().After(deadline) {
			t.Fatalf("fence after the loss %d, want above %d", lastFence(t, remote), before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastFence reads the Fleetwave-Fence trailer of the newest status commit.
func lastFence(t *testing.T, remote string) int64 {
	t.Helper()
	out := gittest.Git(t, "", "--git-dir", strings.TrimPrefix(remote, "file://"), "log", "-1", "--grep", "^status:", "--format=%(trailers:key=Fleetwave-Fence,valueonly)", hub.DefaultStatusBranch)
	var f int64
	fmt.Sscan(strings.TrimSpace(out), &f)
	return f
}

// TestStatusBranch: with repo.status_branch the tracked branch holds only
// people's commits; status goes to its own branch.
func TestStatusBranch(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	remote := gittest.NewRemote(t, dbFleet())
	f := startFleetCfg(t, remote, "embedded", []string{"n1", "n2", "n3"}, nil, func(c *hub.Config) { c.Repo.StatusBranch = "fleetwave-status" })
	f.waitEveryAgent(t, "db-g1")
	bare := strings.TrimPrefix(remote, "file://")
	deadline := time.Now().Add(30 * time.Second)
	show := func() string {
		out, _ := exec.Command("git", "--git-dir", bare, "show", "fleetwave-status:status/rollouts/db-g1.yaml").Output()
		return string(out)
	}
	for !strings.Contains(show(), "status: completed") {
		if time.Now().After(deadline) {
			t.Fatal("no completed status on the status branch")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if log := strings.Join(gittest.Log(t, remote), "\n"); strings.Contains(log, "status: ") {
		t.Fatalf("status commits on main:\n%s", log)
	}
}
