package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fault kinds.
const (
	faultHubKill    = "hub-kill"    // SIGKILL of the leader hub process, restarted (same hub id, same data dir)
	faultHubKillPG  = "hub-kill-pg" // the same, SIGKILL of its whole process group (a cgroup or container kill)
	faultHubStop    = "hub-stop"    // SIGSTOP of the leader past the lease TTL, then SIGCONT
	faultRedisKill  = "redis-kill"  // SIGKILL of redis-server, restarted on the same AOF (managed: the hub restarts it)
	faultRedisWipe  = "redis-wipe"  // redis-server loses everything (data deleted / FLUSHALL) and restarts
	faultAgentKill  = "agent-kill"  // SIGKILL of an agent mid-action (with its commands), restarted on its state dir
	faultRemoteDown = "remote-down" // the git remote is renamed away for a few seconds
	faultRedisSlow  = "redis-slow"  // for a few seconds one script in three is answered past the hubs' read timeout (url mode)
	faultDupHub     = "dup-hub"     // a second process with an existing hub id and another data dir
	// faultPrimaryKill is the SIGKILL of the Redis primary holding the
	// engine's keys (sentinel and cluster modes): its replica is promoted,
	// the killed server stays down.
	faultPrimaryKill = "primary-kill"
	// faultPrimaryKillLossy is the same kill after the replica was paused
	// (SIGSTOP) for a second while the fleet worked, and resumed as the
	// primary dies: the promoted replica lacks about a second of
	// acknowledged writes (dispatches, results, lease renewals).
	faultPrimaryKillLossy = "primary-kill-lossy"
)

// faultRec is one injected fault and how the system recovered from it.
type faultRec struct {
	kind        string
	target      string
	at          time.Time // injected
	restored    time.Time // process back, resumed, remote back (zero: nothing to restore)
	fenceBefore int64     // the lease's fence at injection
	node        string    // agent-kill
	block       string    // agent-kill: the block its lost command ran
	recovery    time.Duration
	recovered   bool
	note        string
	// promoted (primary-kill) is the time from the kill to a replica
	// serving as the primary.
	promoted time.Duration
	// leaderBack (hub-kill with replicas) is the time from the kill to a
	// hub leading under a higher fence, leaderTo that hub.
	leaderBack time.Duration
	leaderTo   string
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// inject runs one fault to its end (the process restarted, the remote
// back) and records it.
func (c *cluster) inject(kind string) error {
	f := &faultRec{kind: kind}
	var err error
	switch kind {
	case faultHubKill, faultHubKillPG:
		err = c.hubKill(f)
	case faultHubStop:
		err = c.hubStop(f)
	case faultRedisKill:
		err = c.redisKill(f, false)
	case faultRedisWipe:
		err = c.redisKill(f, true)
	case faultAgentKill:
		err = c.agentKill(f)
	case faultRemoteDown:
		err = c.remoteOutage(f)
	case faultRedisSlow:
		err = c.redisSlow(f)
	case faultDupHub:
		err = c.dupHub(f)
	case faultPrimaryKill, faultPrimaryKillLossy:
		err = c.primaryKill(f)
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	if !f.at.IsZero() {
		c.mu.Lock()
		c.faults = append(c.faults, f)
		c.mu.Unlock()
		c.logf("fault %s on %s: injected, restored after %v %s", kind, f.target, f.restored.Sub(f.at).Round(time.Millisecond), f.note)
	}
	return err
}

// targetHub picks the leader (waiting a while for one: an earlier fault
// may still be settling), or any live hub when none leads.
func (c *cluster) targetHub() *hubInst {
	if h := c.waitLeader(20 * time.Second); h != nil {
		return h
	}
	if live := c.liveHubs(); len(live) > 0 {
		return live[c.intn(len(live))]
	}
	return nil
}

func (c *cluster) hubKill(f *faultRec) error {
	h := c.targetHub()
	if h == nil {
		return fmt.Errorf("%s: no live hub", f.kind)
	}
	f.target, f.fenceBefore = "hub-"+h.key, c.leaseFence()
	f.at = time.Now()
	if f.kind == faultHubKillPG {
		h.p.kill() // with the git processes it runs
	} else {
		h.p.crash()
	}
	// on a shared Redis, how long the fleet has no leader
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if c.redis != nil || c.topology() {
			c.watchLeader(f, 30*time.Second)
		}
	}()
	time.Sleep(c.between(200*time.Millisecond, 1500*time.Millisecond))
	err := c.startHub(h)
	f.restored = time.Now()
	<-watched
	if f.leaderBack > 0 {
		f.note += fmt.Sprintf("(%s leads after %v; lease TTL %v)", f.leaderTo, f.leaderBack.Round(time.Millisecond), c.o.leaseTTL)
	}
	return err
}

func (c *cluster) hubStop(f *faultRec) error {
	h := c.targetHub()
	if h == nil {
		return fmt.Errorf("%s: no live hub", f.kind)
	}
	f.target, f.fenceBefore = "hub-"+h.key, c.leaseFence()
	f.at = time.Now()
	if err := h.p.stop(); err != nil {
		return err
	}
	time.Sleep(c.o.leaseTTL + c.between(time.Second, 2*time.Second))
	err := h.p.cont()
	f.restored = time.Now()
	return err
}

func (c *cluster) redisKill(f *faultRec, wipe bool) error {
	f.fenceBefore = c.leaseFence()
	if c.redis != nil { // url mode: the suite's server
		f.target = "redis (url)"
		f.at = time.Now()
		c.redis.p.kill()
		if wipe {
			entries, _ := os.ReadDir(c.redis.dir)
			for _, e := range entries {
				if e.Name() != "redis.log" {
					_ = os.RemoveAll(filepath.Join(c.redis.dir, e.Name()))
				}
			}
			f.note = "(AOF deleted)"
		}
		time.Sleep(c.between(300*time.Millisecond, 1500*time.Millisecond))
		err := c.startRedis()
		f.restored = time.Now()
		return err
	}
	// managed: the hub's supervised server; the hub restarts it
	f.target = "redis (managed)"
	sock := c.redisSocket()
	rc := redisClient(sock)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := rc.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("managed redis: %w", err)
	}
	pid := 0
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid <= 0 || !isRedis(pid) {
		return fmt.Errorf("managed redis: no process id in INFO")
	}
	f.at = time.Now()
	if wipe {
		if err := rc.FlushAll(ctx).Err(); err != nil {
			return err
		}
		f.note = "(FLUSHALL)"
	}
	if err := syscallKill(pid); err != nil {
		return err
	}
	// back when the hub's new server answers on the socket
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		rc2 := redisClient(sock)
		info, err := rc2.Info(context.Background(), "server").Result()
		rc2.Close()
		if err == nil && !strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r") {
			f.restored = time.Now()
			return nil
		}
	}
	return fmt.Errorf("the hub did not restart its redis-server")
}

// agentKill kills an agent while one of its commands runs (when one does:
// the ledger shows a start without an end), as a node crash would, and
// restarts it on the same state dir.
func (c *cluster) agentKill(f *faultRec) error {
	var node string
	busy := c.busyNodes()
	if len(busy) > 0 {
		node = busy[c.intn(len(busy))]
		f.note = "(mid-action)"
	} else {
		node = c.nodes[c.intn(len(c.nodes))]
		f.note = "(idle)"
	}
	a := c.agents[node]
	f.target, f.node = "agent-"+node, node
	f.at = time.Now()
	a.p.killWithChildren()
	c.mu.Lock()
	c.kills[node] = append(c.kills[node], time.Now())
	c.mu.Unlock()
	time.Sleep(c.between(300*time.Millisecond, 2*time.Second))
	err := c.startAgent(a)
	f.restored = time.Now()
	return err
}

// busyNodes lists the nodes whose ledger ends with an open start.
func (c *cluster) busyNodes() []string {
	var out []string
	for _, n := range c.nodes {
		b, err := os.ReadFile(filepath.Join(c.ledger, n+".log"))
		if err != nil {
			continue
		}
		open := map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 6 {
				continue
			}
			switch f[0] {
			case "start":
				open[f[4]] = true
			case "end":
				delete(open, f[4])
			}
		}
		if len(open) > 0 {
			out = append(out, n)
		}
	}
	return out
}

// remoteOutage makes the remote unavailable (its directory renamed away)
// for a few seconds. Recovery: the first status commit landing after it is
// back.
func (c *cluster) remoteOutage(f *faultRec) error {
	f.target = "remote"
	before, _ := runGit("", "--git-dir", c.bare, "rev-parse", "refs/heads/"+c.statusRef())
	c.mu.Lock()
	c.remoteDown = true
	c.mu.Unlock()
	if err := os.Rename(c.bare, c.bare+".away"); err != nil {
		return err
	}
	f.at = time.Now()
	time.Sleep(c.between(1500*time.Millisecond, 4*time.Second))
	err := os.Rename(c.bare+".away", c.bare)
	c.mu.Lock()
	c.remoteDown = false
	c.mu.Unlock()
	f.restored = time.Now()
	if err != nil {
		return err
	}
	// A receive-pack that was writing when the directory moved may leave a
	// ref lock behind, as on a server that crashed mid-push: one that had
	// the directory open wrote its lock into the moved directory (the lock
	// then dates from the outage, not before it) and failed to rename or
	// remove it by its old path. Its owner has long finished. Clear such
	// locks as the remote's admin would: those made before the remote was
	// back.
	time.Sleep(time.Second)
	var cleared string
	if stale := staleLocks(c.bare, f.restored); len(stale) > 0 {
		cleared = "(stale lock cleared: " + strings.Join(stale, ", ") + ")"
		f.note = cleared
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		tip, err := runGit("", "--git-dir", c.bare, "rev-parse", "refs/heads/"+c.statusRef())
		if err == nil && tip != before {
			msg, _ := runGit("", "--git-dir", c.bare, "log", "-1", "--format=%B", tip)
			if strings.Contains(msg, "Fleetwave-Fence:") {
				f.recovery, f.recovered = time.Since(f.at), true
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.note = strings.TrimSpace(cleared + " (no status commit within 30s of the remote's return)")
	return nil
}

// staleLocks removes the *.lock files of bare repository dir modified
// before t and returns their paths relative to dir.
func staleLocks(dir string, t time.Time) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".lock") {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().Before(t) {
			if os.Remove(path) == nil {
				rel, _ := filepath.Rel(dir, path)
				out = append(out, rel)
			}
		}
		return nil
	})
	return out
}

// dupHub starts a second process with the hub id of a running hub, with
// its own data dir and port; both keep running. On a shared Redis (url
// mode) the two compete for one lease; in managed mode the second one
// supervises a Redis of its own (one per data dir) and shares only the
// repository with the first. No agent talks to it.
func (c *cluster) dupHub(f *faultRec) error {
	if c.redis == nil {
		f.note = "(its own managed Redis)"
	}
	c.mu.Lock()
	orig := c.hubs[c.rng.Intn(len(c.hubs))]
	key := orig.key + "2"
	for _, h := range c.hubs {
		if h.key == key {
			key += "x"
		}
	}
	c.mu.Unlock()
	f.target, f.fenceBefore = orig.hubID+" twice", c.leaseFence()
	f.at = time.Now()
	dup, err := c.addHub(key, orig.hubID)
	f.restored = time.Now()
	if err != nil || c.redis != nil {
		return err // on a shared Redis both run to the end
	}
	// with a Redis of its own, both run for a while; then the duplicate
	// is stopped, and the fleet must come back to what its agents' hub
	// says
	time.Sleep(c.between(4*time.Second, 8*time.Second))
	dup.p.kill()
	c.mu.Lock()
	for i, h := range c.hubs {
		if h == dup {
			c.hubs = append(c.hubs[:i], c.hubs[i+1:]...)
			break
		}
	}
	c.retired = append(c.retired, dup)
	c.mu.Unlock()
	f.note += fmt.Sprintf(" (stopped after %v)", time.Since(f.restored).Round(time.Millisecond))
	return nil
}
