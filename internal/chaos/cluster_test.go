package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/freeport"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// The API callers of every hub.yaml (an admin and an operator: the hub
// wants two identities).
const (
	adminToken    = "chaos-admin-token"
	operatorToken = "chaos-operator-token"
	keyPrefix     = "fw{fleetwave}:"
)

// Action timeouts: the commands sleep at most 1 s. A lost attempt holds
// its instance until the timeout plus the engine's delivery grace (30 s),
// then until the node's next full report.
const (
	actionTimeout  = 4 * time.Second
	migrateTimeout = 10 * time.Second
	// killGrace is the agent's SIGTERM-to-SIGKILL grace for a command past
	// its timeout.
	killGrace = 5 * time.Second
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(s)))
	return hex.EncodeToString(sum[:])
}

// clusterOpts shapes one fleet under test.
type clusterOpts struct {
	// redis is "managed" (the hub supervises redis-server), "url" (the
	// suite runs it, AOF on), "sentinel" (a primary, a replica and three
	// Sentinels) or "cluster" (a 6-process Redis Cluster); the last two
	// are started by the suite, with passwords, and named in hub.yaml's
	// redis: mapping.
	redis    string
	replicas int // hubs sharing one Redis (not in managed mode)
	// statusBranch is where the hub commits status: "" leaves
	// repo.status_branch out of hub.yaml (the product's default,
	// defaultStatusBranch), "main" puts it on the tracked branch, where
	// it races people's pushes.
	statusBranch string
	nodes        int
	appMax       int // max_concurrent of BRC app
	sideMax      int // max_concurrent of BRC side (0 = no side BRC)
	// firstMax, when set, is the max_concurrent of both BRCs' first
	// version (a quick install); later versions have appMax and sideMax.
	firstMax int
	sleepMin time.Duration
	sleepMax time.Duration
	leaseTTL time.Duration
}

// cluster is one fleet: a git remote, Redis, hub processes and agent
// processes, the ledgers their commands write, and what the suite did to
// them.
type cluster struct {
	t        *testing.T
	failures []string // what failed, said again after the logs dumped (errorf)
	name     string
	o        clusterOpts
	bin      string
	dir      string

	bare   string // the bare remote's directory
	url    string // its file:// URL
	human  string // a clone humans push from
	ledger string // ledger files, one per node
	nodes  []string

	redis    *redisInst          // url mode
	proxy    *slowProxy          // url mode: the hubs reach redis through it (redis-slow)
	sentinel *redistest.Sentinel // sentinel mode
	rcluster *redistest.Cluster  // cluster mode
	// secrets are the password files hub.yaml names (sentinel and
	// cluster modes): data servers', Sentinels'.
	dataPassFile, sentinelPassFile string
	hubs                           []*hubInst
	retired                        []*hubInst // stopped for good (their logs stay)
	agents                         map[string]*agentInst

	mu          sync.Mutex
	rng         *rand.Rand
	gitMu       sync.Mutex // one human push at a time from the human clone
	remoteDown  bool
	versions    map[string]int // block -> target version in force on main
	humanHashes []string
	requests    []string // manual one-shot requests pushed
	faults      []*faultRec
	kills       map[string][]time.Time // node -> when its agent was killed
	samples     samplerStats
	stopSample  chan struct{}
	samplerWG   sync.WaitGroup
	tips        map[string][]string // branch -> tips sampled, consecutive duplicates folded
	ambiguous   map[string]bool     // items seen ambiguous (sentinel and cluster modes)
	pushStats   pushStats
}

// pushStats counts the human pushes, the pushes the remote refused
// because main moved (a status commit or another person got there
// first), and the longest time a push took to land.
type pushStats struct {
	pushes, rejected int
	longest          time.Duration
}

type hubInst struct {
	key     string // "a", "b", "a2" (a second process of a hub id)
	hubID   string
	port    int
	dataDir string
	cfgPath string
	logPath string
	p       *proc
	// startups are the start-up times of this hub's processes: exec to
	// /healthz answering.
	startups []time.Duration
}

func (h *hubInst) url() string { return fmt.Sprintf("http://127.0.0.1:%d", h.port) }

type agentInst struct {
	node, hubURL, stateDir, tokenFile, logPath string
	p                                          *proc
}

type redisInst struct {
	dir, sock, logPath string
	p                  *proc
}

// newCluster writes the repository, starts Redis, the hubs and the agents,
// and returns once every hub answers /healthz.
func newCluster(t *testing.T, name string, o clusterOpts, seed int64) *cluster {
	t.Helper()
	if o.redis == "managed" {
		o.replicas = 1
	}
	dir, err := os.MkdirTemp("", "fwc-")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		t: t, name: name, o: o, bin: fleetwaveBinary(t), dir: dir,
		ledger: filepath.Join(dir, "ledger"), agents: map[string]*agentInst{},
		rng: rand.New(rand.NewSource(seed)), versions: map[string]int{"app": 1, "side": 1},
		kills: map[string][]time.Time{}, stopSample: make(chan struct{}), tips: map[string][]string{},
		ambiguous: map[string]bool{},
	}
	t.Cleanup(func() {
		c.teardown()
		if t.Failed() || *flagKeep {
			c.mu.Lock()
			failures := strings.Join(c.failures, "\n")
			c.mu.Unlock()
			if failures != "" {
				// last, below the logs dumped: what a truncated output keeps
				t.Logf("kept %s; what failed:\n%s", dir, failures)
				return
			}
			t.Logf("kept %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	for _, d := range []string{c.ledger, filepath.Join(dir, "sleep"), filepath.Join(dir, "tokens")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= o.nodes; i++ {
		c.nodes = append(c.nodes, fmt.Sprintf("n%02d", i))
	}
	// per node and block sleep durations, so the commands take 0.2-1 s
	for _, n := range c.nodes {
		for _, b := range []string{"app", "side"} {
			d := o.sleepMin + time.Duration(c.rng.Int63n(int64(o.sleepMax-o.sleepMin)+1))
			if err := os.WriteFile(filepath.Join(dir, "sleep", n+"."+b), fmt.Appendf(nil, "%.3f\n", d.Seconds()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	// the remote, with reflogs so that every update of a branch is on record
	c.bare = filepath.Join(dir, "remote.git")
	c.url = gittest.URL(c.bare)
	seedDir := filepath.Join(dir, "seed")
	gittest.Git(t, "", "init", "--quiet", "--bare", "--initial-branch=main", c.bare)
	gittest.Git(t, "", "--git-dir", c.bare, "config", "core.logAllRefUpdates", "always")
	gittest.Git(t, "", "init", "--quiet", "--initial-branch=main", seedDir)
	for p, content := range c.repoFiles() {
		full := filepath.Join(seedDir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Git(t, seedDir, "add", "-A")
	gittest.Git(t, seedDir, "commit", "--quiet", "-m", "Initial commit")
	gittest.Git(t, seedDir, "push", "--quiet", c.bare, "main:main")
	c.human = filepath.Join(dir, "human")
	gittest.Git(t, "", "clone", "--quiet", "--branch", "main", c.url, c.human)

	if o.redis == "url" {
		c.redis = &redisInst{dir: filepath.Join(dir, "redis"), logPath: filepath.Join(dir, "redis.out")}
		c.redis.sock = filepath.Join(c.redis.dir, "redis.sock")
		if err := os.MkdirAll(c.redis.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := c.startRedis(); err != nil {
			t.Fatal(err)
		}
		if c.proxy, err = startSlowProxy(filepath.Join(c.redis.dir, "proxy.sock"), c.redis.sock, seed); err != nil {
			t.Fatal(err)
		}
	}
	if o.redis == "sentinel" || o.redis == "cluster" {
		c.startTopology()
	}
	keys := []string{"a", "b", "c"}
	for i := 0; i < o.replicas; i++ {
		if _, err := c.addHub(keys[i], "hub-"+keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range c.nodes {
		a := &agentInst{
			node: n, hubURL: c.hubs[i%len(c.hubs)].url(), stateDir: filepath.Join(dir, "agents", n),
			tokenFile: filepath.Join(dir, "tokens", n), logPath: filepath.Join(dir, "agent-"+n+".log"),
		}
		if err := os.WriteFile(a.tokenFile, []byte("token-"+n+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.agents[n] = a
		if err := c.startAgent(a); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *cluster) logf(format string, args ...any) {
	c.t.Logf("[%s] %s %s", c.name, time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (c *cluster) env() []string { return gittest.Env() }

// repoFiles is the initial content of the config repository.
func (c *cluster) repoFiles() map[string]string {
	files := map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\nmax_retries: 10\nbackoff: \"1s\"\n",
		"blocks/app.cue": fmt.Sprintf("kind: \"block\"\nname: \"app\"\nactions: {\n\tinstall: {command: %s, timeout: \"%s\"}\n\tupgrade: {command: %s, timeout: \"%s\"}\n\tmigrate: {command: %s, timeout: \"%s\", one_shot: true}\n}\n",
			strconv.Quote(c.command("")), actionTimeout, strconv.Quote(c.command("")), actionTimeout, strconv.Quote(c.command("0.3")), migrateTimeout),
		"brc/app.cue": c.brc("app", 1, c.limit("app", 1)),
	}
	if c.o.sideMax > 0 {
		files["blocks/side.cue"] = fmt.Sprintf("kind: \"block\"\nname: \"side\"\nactions: {\n\tinstall: {command: %s, timeout: \"%s\"}\n\tupgrade: {command: %s, timeout: \"%s\"}\n}\n",
			strconv.Quote(c.command("")), actionTimeout, strconv.Quote(c.command("")), actionTimeout)
		files["brc/side.cue"] = c.brc("side", 1, c.limit("side", 1))
	}
	crit := []string{"high", "medium", "low"}
	for i, n := range c.nodes {
		files["nodes/"+n+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\ncriticality: %q\n", n, crit[i%3])
	}
	return files
}

// command is a block command that records its span in its node's ledger:
// "start|end node block action attempt unix-nanos". sleep "" sleeps the
// node's and block's duration from the sleep directory.
func (c *cluster) command(sleep string) string {
	rec := func(ev string) string {
		return fmt.Sprintf(`echo "%s $FLEETWAVE_NODE $FLEETWAVE_BLOCK $FLEETWAVE_ACTION $FLEETWAVE_ATTEMPT $(date +%%s%%N)" >> %s/$FLEETWAVE_NODE.log`, ev, c.ledger)
	}
	if sleep == "" {
		sleep = fmt.Sprintf("$(cat %s/sleep/$FLEETWAVE_NODE.$FLEETWAVE_BLOCK)", c.dir)
	}
	return rec("start") + "; sleep " + sleep + "; " + rec("end")
}

// limit is the max_concurrent of a BRC's version.
func (c *cluster) limit(block string, version int) int {
	switch {
	case version == 1 && c.o.firstMax > 0:
		return c.o.firstMax
	case block == "side":
		return c.o.sideMax
	}
	return c.o.appMax
}

func (c *cluster) brc(block string, version, maxConcurrent int) string {
	return fmt.Sprintf("kind: \"trigger\"\nname: %q\nblock_name: %q\ntarget_version: \"%d\"\nmax_concurrent: %d\n", block, block, version, maxConcurrent)
}

// --- Redis (url mode) ---

func redisBinary() string {
	if p := os.Getenv("REDIS_SERVER_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	return "/usr/bin/redis-server"
}

func (c *cluster) startRedis() error {
	r := c.redis
	p, err := startProc("redis", r.logPath, os.Environ(), redisBinary(),
		"--port", "0", "--unixsocket", r.sock, "--unixsocketperm", "700",
		"--dir", r.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning", "--logfile", filepath.Join(r.dir, "redis.log"))
	if err != nil {
		return err
	}
	r.p = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := pingRedis(r.sock); err == nil {
			return nil
		}
		if !p.alive() || time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer:\n%s", tail(filepath.Join(r.dir, "redis.log"), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func redisClient(sock string) *redis.Client {
	return redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 1})
}

func pingRedis(sock string) error {
	rc := redisClient(sock)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return rc.Ping(ctx).Err()
}

// redisSocket is the socket of the Redis the leader uses: the suite's, or
// the managed server in the (only) hub's data dir.
func (c *cluster) redisSocket() string {
	if c.redis != nil {
		return c.redis.sock
	}
	return filepath.Join(c.hubs[0].dataDir, "redis", "redis.sock")
}

// leaseFence reads the fence of the leader lease (0 when unreadable).
func (c *cluster) leaseFence() int64 {
	rc := c.engineRedis()
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f, _ := rc.HGet(ctx, keyPrefix+"lease", "fence").Int64()
	return f
}

// --- hubs ---

// addHub writes a hub's configuration and starts it. A port somebody else
// bound between its choice and the hub's own bind (another test binary, a
// connection's local port) makes the hub exit at start: it is started
// again on another port.
func (c *cluster) addHub(key, hubID string) (*hubInst, error) {
	for try := 1; ; try++ {
		port, err := freeport.Take()
		if err != nil {
			return nil, err
		}
		h := &hubInst{key: key, hubID: hubID, port: port, dataDir: filepath.Join(c.dir, "hub-"+key),
			cfgPath: filepath.Join(c.dir, "hub-"+key+".yaml"), logPath: filepath.Join(c.dir, "hub-"+key+".log")}
		if err := c.writeHubConfig(h); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.hubs = append(c.hubs, h)
		c.mu.Unlock()
		err = c.startHub(h)
		if err == nil || !freeport.Taken(err.Error()) || try == freeport.StartTries {
			return h, err
		}
		// forget the hub that never ran, and start it on another port
		c.mu.Lock()
		c.hubs = slices.DeleteFunc(c.hubs, func(x *hubInst) bool { return x == h })
		c.mu.Unlock()
	}
}

// writeHubConfig writes h's hub.yaml.
func (c *cluster) writeHubConfig(h *hubInst) error {
	redisYAML := "redis: managed\n"
	switch {
	case c.proxy != nil:
		redisYAML = fmt.Sprintf("redis: %q\n", "unix://"+c.proxy.ln.Addr().String())
	case c.sentinel != nil:
		redisYAML = fmt.Sprintf("redis:\n  sentinel:\n    master: %s\n    addrs: [%s]\n    password_file: %q\n    sentinel_password_file: %q\n",
			c.sentinel.Master, strings.Join(c.sentinel.Addrs, ", "), c.dataPassFile, c.sentinelPassFile)
	case c.rcluster != nil:
		redisYAML = fmt.Sprintf("redis:\n  cluster:\n    addrs: [%s]\n    password_file: %q\n", strings.Join(c.rcluster.Addrs, ", "), c.dataPassFile)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hub_id: %s\n", h.hubID)
	fmt.Fprintf(&b, "repo:\n  url: %q\n  branch: main\n  poll_interval: 250ms\n", c.url)
	if c.o.statusBranch != "" {
		fmt.Fprintf(&b, "  status_branch: %q\n", c.o.statusBranch)
	}
	b.WriteString(redisYAML)
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\ndata_dir: %q\n", h.port, h.dataDir)
	fmt.Fprintf(&b, "status: {interval: 300ms}\nlease_ttl: %s\nstep_interval: 100ms\nreconcile_interval: 500ms\n", c.o.leaseTTL)
	b.WriteString("agents:\n  tokens:\n")
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "    %s: %s\n", n, sha("token-"+n))
	}
	fmt.Fprintf(&b, "identities:\n  - {name: chaos-admin, role: admin, token_sha256: %s}\n  - {name: chaos-operator, role: operator, token_sha256: %s}\n",
		sha(adminToken), sha(operatorToken))
	return os.WriteFile(h.cfgPath, []byte(b.String()), 0o600)
}

// startHub starts (or restarts: same hub id, same data dir) a hub process
// and waits until it answers /healthz.
func (c *cluster) startHub(h *hubInst) error {
	p, err := startProc("hub-"+h.key, h.logPath, c.env(), c.bin, "serve", "--config", h.cfgPath)
	if err != nil {
		return err
	}
	c.mu.Lock()
	h.p = p
	c.mu.Unlock()
	start := time.Now()
	cl := http.Client{Timeout: time.Second}
	for {
		resp, err := cl.Get(h.url() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if !p.alive() {
			return fmt.Errorf("hub %s exited at start:\n%s", h.key, tail(h.logPath, 30))
		}
		if time.Since(start) > 60*time.Second {
			return fmt.Errorf("hub %s does not answer /healthz:\n%s", h.key, tail(h.logPath, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	h.startups = append(h.startups, time.Since(start))
	c.mu.Unlock()
	return nil
}

// liveHubs are the hubs whose process runs and is not paused.
func (c *cluster) liveHubs() []*hubInst {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*hubInst
	for _, h := range c.hubs {
		if h.p != nil && h.p.alive() && !h.p.isPaused() {
			out = append(out, h)
		}
	}
	return out
}

// leader returns the live hub whose /readyz says it leads, or nil. When
// two say so (one lost its lease and has not noticed yet: it cannot renew
// while Redis fails over), the one the lease names in Redis.
func (c *cluster) leader() *hubInst {
	cl := http.Client{Timeout: 2 * time.Second}
	var claim []*hubInst
	for _, h := range c.liveHubs() {
		resp, err := cl.Get(h.url() + "/readyz")
		if err != nil {
			continue
		}
		var a struct {
			Checks map[string]string `json:"checks"`
		}
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err == nil && a.Checks["leader"] == "leader" {
			claim = append(claim, h)
		}
	}
	if len(claim) > 1 {
		owner := c.leaseOwner()
		for _, h := range claim {
			if h.hubID == owner {
				return h
			}
		}
	}
	if len(claim) > 0 {
		return claim[0]
	}
	return nil
}

// leaseOwner reads the hub id the leader lease names ("" when unreadable).
func (c *cluster) leaseOwner() string {
	rc := c.engineRedis()
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	owner, _ := rc.HGet(ctx, keyPrefix+"lease", "owner").Result()
	return owner
}

// waitLeader waits (generously) until some hub leads.
func (c *cluster) waitLeader(within time.Duration) *hubInst {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if h := c.leader(); h != nil {
			return h
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// apiGet GETs path from the first live hub that answers 200.
func (c *cluster) apiGet(path string, out any) error {
	cl := http.Client{Timeout: 3 * time.Second}
	var last error = errors.New("no live hub")
	for _, h := range c.liveHubs() {
		req, _ := http.NewRequest(http.MethodGet, h.url()+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := cl.Do(req)
		if err != nil {
			last = err
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("GET %s%s: %d %s", h.url(), path, resp.StatusCode, strings.TrimSpace(string(body)))
			continue
		}
		return json.Unmarshal(body, out)
	}
	return last
}

type rolloutAnswer struct {
	Rollout fleetwave.Rollout `json:"rollout"`
	Items   []fleetwave.Item  `json:"items"`
}

// --- agents ---

func (c *cluster) startAgent(a *agentInst) error {
	p, err := startProc("agent-"+a.node, a.logPath, c.env(), c.bin, "agent", "--hub", a.hubURL, "--node", a.node,
		"--token-file", a.tokenFile, "--state-dir", a.stateDir)
	if err != nil {
		return err
	}
	c.mu.Lock()
	a.p = p
	c.mu.Unlock()
	return nil
}

// --- git, as people use it ---

func runGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gittest.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// push commits files (path -> content) to main as a person would: on top
// of the remote's tip, pulling with rebase when the hub's status commits
// (or other people) got there first, and waiting out an unavailable
// remote. It returns the hash of the commit that landed on main.
func (c *cluster) push(files map[string]string, msg string, within time.Duration) (string, error) {
	c.gitMu.Lock()
	defer c.gitMu.Unlock()
	start := time.Now()
	deadline := start.Add(within)
	var last error
	tries := 0
	for time.Now().Before(deadline) {
		hash, n, err := c.tryPush(files, msg)
		tries += n
		if err == nil {
			c.mu.Lock()
			c.humanHashes = append(c.humanHashes, hash)
			c.pushStats.pushes++
			c.pushStats.rejected += tries - 1
			c.pushStats.longest = max(c.pushStats.longest, time.Since(start))
			c.mu.Unlock()
			if tries > 1 {
				c.logf("push %q landed after %d rejected attempts (%v)", msg, tries-1, time.Since(start).Round(time.Millisecond))
			}
			return hash, nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return "", fmt.Errorf("push %q: %w", msg, last)
}

func (c *cluster) tryPush(files map[string]string, msg string) (string, int, error) {
	w := c.human
	if _, err := runGit(w, "fetch", "--quiet", "origin", "main"); err != nil {
		return "", 0, err
	}
	if _, err := runGit(w, "reset", "--quiet", "--hard", "origin/main"); err != nil {
		return "", 0, err
	}
	for p, content := range files {
		full := filepath.Join(w, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", 0, err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return "", 0, err
		}
	}
	if _, err := runGit(w, "add", "-A"); err != nil {
		return "", 0, err
	}
	if _, err := runGit(w, "commit", "--quiet", "-m", msg); err != nil {
		return "", 0, err
	}
	var last error
	for i := range 20 {
		if _, err := runGit(w, "push", "--quiet", "origin", "HEAD:main"); err == nil {
			hash, err := runGit(w, "rev-parse", "HEAD")
			return hash, i + 1, err
		} else {
			last = err
		}
		time.Sleep(time.Duration(10+i*15) * time.Millisecond)
		if _, err := runGit(w, "pull", "--quiet", "--rebase", "origin", "main"); err != nil {
			return "", i + 1, err
		}
	}
	return "", 20, last
}

// bumpVersion pushes the next target version of a BRC.
func (c *cluster) bumpVersion(block string) error {
	c.mu.Lock()
	v := c.versions[block] + 1
	maxC := c.limit(block, v)
	c.mu.Unlock()
	if _, err := c.push(map[string]string{"brc/" + block + ".cue": c.brc(block, v, maxC)}, fmt.Sprintf("%s %d", block, v), 90*time.Second); err != nil {
		return err
	}
	c.mu.Lock()
	c.versions[block] = v
	c.mu.Unlock()
	return nil
}

// pushUnrelated pushes a change that plans nothing (an organization).
func (c *cluster) pushUnrelated(i int) error {
	name := fmt.Sprintf("org-%d", i)
	_, err := c.push(map[string]string{"organizations/" + name + ".cue": fmt.Sprintf("kind: \"organization\"\nname: %q\n", name)}, "add "+name, 90*time.Second)
	return err
}

// pushRequest pushes a manual request running the one-shot action migrate
// of block app on some nodes.
func (c *cluster) pushRequest(i int, nodes []string) error {
	name := fmt.Sprintf("migrate-%d", i)
	quoted := make([]string, len(nodes))
	for j, n := range nodes {
		quoted[j] = strconv.Quote(n)
	}
	body := fmt.Sprintf("kind: \"rollout\"\nname: %q\nbrc: \"app\"\naction_name: \"migrate\"\nnodes: [%s]\n", name, strings.Join(quoted, ", "))
	if _, err := c.push(map[string]string{"rollouts/" + name + ".cue": body}, "request "+name, 90*time.Second); err != nil {
		return err
	}
	c.mu.Lock()
	c.requests = append(c.requests, name)
	c.mu.Unlock()
	return nil
}

// defaultStatusBranch is the branch status commits go to when hub.yaml
// names none (hub.DefaultStatusBranch).
const defaultStatusBranch = "fleetwave/status"

// statusRef is the branch the hub commits status to.
func (c *cluster) statusRef() string {
	if c.o.statusBranch != "" {
		return c.o.statusBranch
	}
	return defaultStatusBranch
}

// refs are the branches whose history the checks follow: main and, when
// it is another one, the status branch.
func (c *cluster) refs() []string {
	if c.statusRef() == "main" {
		return []string{"main"}
	}
	return []string{"main", c.statusRef()}
}

// --- samplers ---

type samplerStats struct {
	counterSamples    int
	counterErrors     int
	counterViolations []string
	tipSamples        int
}

// startSamplers polls /api/v1/summary every ~100 ms (counters never
// negative, Total the sum of the buckets, fleet-wide and per rollout) and
// the remote's branch tips every ~200 ms (each tip an ancestor of the next).
func (c *cluster) startSamplers() {
	c.samplerWG.Go(func() {
		for {
			select {
			case <-c.stopSample:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var s fleetwave.Summary
			if err := c.apiGet("/api/v1/summary", &s); err != nil {
				c.mu.Lock()
				c.samples.counterErrors++
				c.mu.Unlock()
				continue
			}
			v := counterProblems("fleet", s.Counters)
			v = append(v, counterProblems("history", s.History)...)
			for _, r := range s.Rollouts {
				v = append(v, counterProblems("rollout "+r.ID, r.Counters)...)
			}
			c.mu.Lock()
			c.samples.counterSamples++
			for _, p := range v {
				if len(c.samples.counterViolations) < 20 {
					c.samples.counterViolations = append(c.samples.counterViolations, time.Now().Format("15:04:05.000")+" "+p)
				}
			}
			c.mu.Unlock()
		}
	})
	c.samplerWG.Go(func() {
		for {
			select {
			case <-c.stopSample:
				return
			case <-time.After(200 * time.Millisecond):
			}
			c.sampleTips()
		}
	})
	if c.topology() {
		c.samplerWG.Go(func() {
			for {
				select {
				case <-c.stopSample:
					return
				case <-time.After(300 * time.Millisecond):
				}
				c.sampleAmbiguous()
			}
		})
	}
}

func (c *cluster) sampleTips() {
	for _, ref := range c.refs() {
		out, err := runGit("", "--git-dir", c.bare, "rev-parse", "--verify", "--quiet", "refs/heads/"+ref)
		if err != nil || out == "" {
			continue // not created yet, or the remote is away
		}
		c.mu.Lock()
		c.samples.tipSamples++
		if l := c.tips[ref]; len(l) == 0 || l[len(l)-1] != out {
			c.tips[ref] = append(l, out)
		}
		c.mu.Unlock()
	}
}

func (c *cluster) stopSamplers() {
	select {
	case <-c.stopSample:
	default:
		close(c.stopSample)
	}
	c.samplerWG.Wait()
}

func counterProblems(what string, k fleetwave.Counters) []string {
	var out []string
	for _, f := range []struct {
		name string
		v    int64
	}{{"total", k.Total}, {"done", k.Done}, {"in_progress", k.InProgress}, {"pending", k.Pending}, {"failed", k.Failed}, {"skipped", k.Skipped}} {
		if f.v < 0 {
			out = append(out, fmt.Sprintf("%s: %s = %d is negative (%+v)", what, f.name, f.v, k))
		}
	}
	if sum := k.Done + k.InProgress + k.Pending + k.Failed + k.Skipped; sum != k.Total {
		out = append(out, fmt.Sprintf("%s: total %d != done+in_progress+pending+failed+skipped %d (%+v)", what, k.Total, sum, k))
	}
	return out
}

// --- teardown and logs ---

// teardown kills every process the cluster started, and what they started:
// the managed redis-servers (they die with their hub; killed by pid as a
// backstop) and the commands of the agents.
func (c *cluster) teardown() {
	c.stopSamplers()
	if c.proxy != nil {
		c.proxy.close()
	}
	c.mu.Lock()
	hubs := append(append([]*hubInst(nil), c.hubs...), c.retired...)
	agents := make([]*agentInst, 0, len(c.agents))
	for _, a := range c.agents {
		agents = append(agents, a)
	}
	c.mu.Unlock()
	for _, a := range agents {
		if a.p != nil {
			a.p.killWithChildren()
		}
	}
	for _, h := range hubs {
		if h.p == nil {
			continue
		}
		h.p.kill()
		if b, err := os.ReadFile(filepath.Join(h.dataDir, "redis", "redis.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])); err == nil && pid > 0 && isRedis(pid) {
				_ = syscallKill(pid)
			}
		}
	}
	if c.redis != nil && c.redis.p != nil {
		c.redis.p.kill()
	}
	c.mu.Lock()
	down := c.remoteDown
	c.mu.Unlock()
	if down {
		_ = os.Rename(c.bare+".away", c.bare)
	}
}

// isRedis reports whether pid is a redis-server of this suite's cluster
// (its command line names the cluster's directory).
func isRedis(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "redis-server")
}

// dumpLogs prints the tails of the logs: the hubs', Redis', and those of
// the agents named (all when none).
// errorf fails t (the test of c or one of its subtests) and keeps the
// message to say again when c's directory is kept.
func (c *cluster) errorf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Error(msg)
	c.mu.Lock()
	c.failures = append(c.failures, msg)
	c.mu.Unlock()
}

func (c *cluster) dumpLogs(nodes ...string) {
	c.mu.Lock()
	hubs := append(append([]*hubInst(nil), c.hubs...), c.retired...)
	c.mu.Unlock()
	for _, h := range hubs {
		c.t.Logf("--- tail of %s ---\n%s", h.logPath, tail(h.logPath, 60))
	}
	if c.redis != nil {
		c.t.Logf("--- tail of redis log ---\n%s", tail(filepath.Join(c.redis.dir, "redis.log"), 20))
	}
	if len(nodes) == 0 {
		for n := range c.agents {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		if len(nodes) > 4 {
			nodes = nodes[:4]
		}
	}
	for _, n := range nodes {
		if a := c.agents[n]; a != nil {
			c.t.Logf("--- tail of %s ---\n%s", a.logPath, tail(a.logPath, 25))
		}
	}
}

func (c *cluster) intn(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Intn(n)
}

// between draws a duration in [lo, hi].
func (c *cluster) between(lo, hi time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lo + time.Duration(c.rng.Int63n(int64(hi-lo)+1))
}
