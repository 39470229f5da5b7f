package fleetsim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave/internal/freeport"
)

// gitEnv keeps the developer's git configuration out of the scenario's
// repositories and fixes the author.
func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=fleetwave scale", "GIT_AUTHOR_EMAIL=scale@fleetwave.invalid",
		"GIT_COMMITTER_NAME=fleetwave scale", "GIT_COMMITTER_EMAIL=scale@fleetwave.invalid")
}

// git runs the git CLI in dir.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%.2000s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Tokens makes one agent token per node and the hub.yaml map of their
// sha256 (node -> hex digest).
func Tokens(ids []string) ([]Node, map[string]string, error) {
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, nil, fmt.Errorf("token secret: %w", err)
	}
	nodes := make([]Node, 0, len(ids))
	hashes := make(map[string]string, len(ids))
	for _, id := range ids {
		s := sha256.Sum256(append(append([]byte{}, secret...), id...))
		tok := hex.EncodeToString(s[:16])
		h := sha256.Sum256([]byte(tok))
		nodes = append(nodes, Node{ID: id, Token: tok})
		hashes[id] = hex.EncodeToString(h[:])
	}
	return nodes, hashes, nil
}

// hubProc is a `fleetwave serve` child process in its own process group.
type hubProc struct {
	id      string // its hub_id ("" for the one hub of a run)
	cmd     *exec.Cmd
	done    chan struct{}
	url     string
	dataDir string
	log     string
	// debugURL serves the hub's profiles (hub.yaml debug.listen).
	debugURL string
}

// startHub writes hub.yaml into dir and starts the hub on it; it returns
// once /readyz answers 200 (or fails after timeout).
// hubLeaseTTL is the hubs' lease_ttl unless a scenario says otherwise: a
// follower takes over within it once the leader is gone.
const hubLeaseTTL = 15 * time.Second

// hubSettings are the hub.yaml settings a scale run chooses.
type hubSettings struct {
	statusInterval, staleAfter, maxPollWait time.Duration
	// id is the replica's hub_id and names its files (hub-<id>.yaml,
	// .log, its data dir); "": the one hub of a run (hub.yaml, ...)
	id string
	// redis is the hub's redis setting: "" for managed (its own
	// redis-server), else the URL of the one replicas share
	redis string
	// mutexProfile turns on the hub's mutex profile
	mutexProfile bool
	// leaseTTL is the hub's lease_ttl
	leaseTTL time.Duration
}

// mutexProfileFraction is the hub's debug.mutex_profile_fraction when a
// run asks for its mutex profile: one contention sampled in ten.
const mutexProfileFraction = 10

// errPortTaken: a port the hub was given was bound by somebody else
// before the hub bound it (another process, a connection's local port).
var errPortTaken = errors.New("a port of the hub was taken before it bound it")

// startHub starts a hub and waits until it is ready and its debug
// listener answers. A hub that found one of its ports taken is started
// again on fresh ones (at most freeport.StartTries times), in the same
// directory.
func startHub(ctx context.Context, bin, dir, remote string, tokens map[string]string, set hubSettings, timeout time.Duration, logLevel string) (*hubProc, error) {
	for try := 1; ; try++ {
		h, err := startHubOnce(ctx, bin, dir, remote, tokens, set, timeout, logLevel)
		if errors.Is(err, errPortTaken) && try < freeport.StartTries {
			continue
		}
		return h, err
	}
}

func startHubOnce(ctx context.Context, bin, dir, remote string, tokens map[string]string, set hubSettings, timeout time.Duration, logLevel string) (*hubProc, error) {
	port, err := freeport.Take()
	if err != nil {
		return nil, fmt.Errorf("free port: %w", err)
	}
	name := "hub"
	if set.id != "" {
		name += "-" + set.id
	}
	dataDir := filepath.Join(dir, name)
	debugPort, err := freeport.Take()
	if err != nil {
		return nil, fmt.Errorf("free port: %w", err)
	}
	debug := map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", debugPort)}
	if set.mutexProfile {
		debug["mutex_profile_fraction"] = mutexProfileFraction
	}
	redisSetting := "managed"
	if set.redis != "" {
		redisSetting = set.redis
	}
	cfg := map[string]any{
		"repo":        map[string]any{"url": "file://" + remote, "branch": "main", "poll_interval": "30s"},
		"redis":       redisSetting,
		"listen":      fmt.Sprintf("127.0.0.1:%d", port),
		"data_dir":    dataDir,
		"status":      map[string]any{"interval": set.statusInterval.String()},
		"agents":      map[string]any{"tokens": tokens, "max_poll_wait": set.maxPollWait.String()},
		"lease_ttl":   set.leaseTTL.String(),
		"stale_after": set.staleAfter.String(),
		"debug":       debug,
	}
	if set.id != "" {
		cfg["hub_id"] = set.id
	}
	b, err := json.Marshal(cfg) // JSON is YAML
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--log-level", logLevel)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = gitEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start hub: %w", err)
	}
	h := &hubProc{id: set.id, cmd: cmd, done: make(chan struct{}), url: fmt.Sprintf("http://127.0.0.1:%d", port), dataDir: dataDir, log: logPath,
		debugURL: fmt.Sprintf("http://127.0.0.1:%d", debugPort)}
	go func() { _ = cmd.Wait(); close(h.done) }()
	deadline := time.Now().Add(timeout)
	for {
		// the debug listener opens beside the main one, and a loaded
		// machine can answer /readyz first; a hub that could not open it
		// (its port taken) runs on without it and says so in its log
		if answers(h.url + "/readyz") {
			if answers(h.debugURL + "/debug/pprof/") {
				return h, nil
			}
			if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("debug listener not opened")) {
				h.stop()
				if freeport.Taken(string(b)) {
					return nil, errPortTaken
				}
				return nil, fmt.Errorf("the hub's debug listener is not open; its log %s ends:\n%s", logPath, tail(logPath, 20))
			}
		}
		select {
		case <-h.done:
			end := tail(logPath, 20)
			if freeport.Taken(end) {
				return nil, errPortTaken
			}
			return nil, fmt.Errorf("hub exited before it was ready; its log %s ends:\n%s", logPath, end)
		case <-ctx.Done():
			h.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.stop()
			return nil, fmt.Errorf("hub not ready (or its debug listener not answering) after %v; its log %s ends:\n%s", timeout, logPath, tail(logPath, 20))
		}
	}
}

// answers says whether url answers 200.
func answers(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (h *hubProc) pid() int { return h.cmd.Process.Pid }

// stop sends SIGTERM, then SIGKILL to the group after 20 s.
func (h *hubProc) stop() { terminate(h.cmd, h.done, 20*time.Second) }

// terminate ends a process started in a group of its own (Setpgid): done
// closes once it was waited for. SIGTERM first, then SIGKILL to its group
// after grace.
func terminate(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) {
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// procStat is a process's memory and CPU from /proc.
type procStat struct {
	RSS, HWM int64         // bytes: resident now, peak resident
	CPU      time.Duration // user + system
}

func readProc(pid int) (procStat, error) {
	var st procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			st.RSS = n << 10
		case "VmHWM":
			st.HWM = n << 10
		}
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) > 12 {
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		st.CPU = time.Duration(ut+stime) * time.Second / 100 // USER_HZ is 100 on Linux
	}
	return st, nil
}

// histogram is one Prometheus histogram as scraped.
type histogram struct {
	Sum     float64
	Count   float64
	Buckets map[float64]float64 // upper bound -> cumulative count
}

// Mean is the mean observation (0 without observations).
func (h histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return seconds(h.Sum / h.Count)
}

// minus is the observations of h that before (an earlier scrape) does not
// hold.
func (h histogram) minus(before histogram) histogram {
	d := histogram{Sum: h.Sum - before.Sum, Count: h.Count - before.Count, Buckets: map[float64]float64{}}
	for b, n := range h.Buckets {
		d.Buckets[b] = n - before.Buckets[b]
	}
	return d
}

// within is the share of the observations at most bound (a bucket's
// upper bound), NaN without observations or without that bucket.
func (h histogram) within(bound float64) float64 {
	n, ok := h.Buckets[bound]
	if !ok || h.Count == 0 {
		return math.NaN()
	}
	return n / h.Count
}

// Max is the upper bound of the bucket holding the largest observation;
// when that one is above every finite bucket, the largest finite bound
// negated (the report prints "> bound" and counts it as missing its
// target).
func (h histogram) Max() time.Duration {
	bounds := make([]float64, 0, len(h.Buckets))
	for b := range h.Buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	largest := 0.0
	for _, b := range bounds {
		if h.Buckets[b] >= h.Count && h.Count > 0 {
			if math.IsInf(b, 1) {
				return -seconds(largest)
			}
			return seconds(b)
		}
		if !math.IsInf(b, 1) {
			largest = b
		}
	}
	return 0
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// scrapeHistograms reads the hub's /metrics and returns the named
// histograms. A name is a metric's, or a metric's with its labels but le
// as the exposition writes them (fleetwave_http_request_duration_seconds{route="GET /api/v1/summary"}).
func scrapeHistograms(url string, names ...string) (map[string]histogram, error) {
	out := map[string]histogram{}
	for _, n := range names {
		out[n] = histogram{Buckets: map[float64]float64{}}
	}
	err := scrapeSamples(url, func(series string, v float64) {
		name, labels, _ := strings.Cut(series, "{")
		labels = strings.TrimSuffix(labels, "}")
		var le string
		var rest []string
		for _, l := range splitLabels(labels) {
			if v, ok := strings.CutPrefix(l, `le="`); ok {
				le = strings.TrimSuffix(v, `"`)
			} else {
				rest = append(rest, l)
			}
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, ok := strings.CutSuffix(name, suffix)
			if !ok {
				continue
			}
			key := base
			if len(rest) > 0 {
				key += "{" + strings.Join(rest, ",") + "}"
			}
			h, want := out[key]
			if !want {
				break
			}
			switch suffix {
			case "_bucket":
				if bound, err := strconv.ParseFloat(le, 64); err == nil {
					h.Buckets[bound] = v
				}
			case "_sum":
				h.Sum = v
			case "_count":
				h.Count = v
			}
			out[key] = h
			break
		}
	})
	return out, err
}

// scrapeSamples reads the hub's /metrics and hands each sample to each:
// its series (name and labels, as the exposition writes them) and value.
func scrapeSamples(url string, each func(series string, v float64)) error {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// the value follows the last space (label values hold spaces)
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			each(line[:i], v)
		}
	}
	return sc.Err()
}

// poolSeries are the hub's counters of waits for Redis connections
// (docs/metrics.md): calls that waited for a pooled connection, their
// waits summed, and calls for agents that waited for their share.
var poolSeries = []string{"fleetwave_redis_pool_waits_total", "fleetwave_redis_pool_wait_seconds_total", "fleetwave_redis_agent_call_waits_total"}

// scrapeSums reads the hub's /metrics and returns, for each of names, the
// sum of its series (0 when it has none).
func scrapeSums(url string, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	err := scrapeSamples(url, func(series string, v float64) {
		if name, _, _ := strings.Cut(series, "{"); slices.Contains(names, name) {
			out[name] += v
		}
	})
	return out, err
}

// The steps of the hub's status writes and reconciles, in order, as its
// fleetwave_status_step_seconds and fleetwave_reconcile_step_seconds label
// them (docs/metrics.md).
var (
	statusStepNames    = []string{"read", "engine", "rollouts", "summary", "nodes", "fetch", "edit", "encode", "store", "push", "record", "ack"}
	reconcileStepNames = []string{"wait", "observe", "drained", "plan", "create", "requests", "approvals"}
)

// stepKeys are the keys scrapeHistograms gives the series of each step of
// histogram name (its step label).
func stepKeys(name string, steps []string) []string {
	keys := make([]string, len(steps))
	for i, st := range steps {
		keys[i] = name + `{step="` + st + `"}`
	}
	return keys
}

// stepMeans returns the mean of each step of histogram name that hs (a
// scrape that asked for stepKeys(name, steps)) saw observed at least once.
func stepMeans(hs map[string]histogram, name string, steps []string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for i, key := range stepKeys(name, steps) {
		if h := hs[key]; h.Count > 0 {
			out[steps[i]] = h.Mean()
		}
	}
	return out
}

// get asks url and hands read the body of a 200 answer.
func get(ctx context.Context, client *http.Client, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return read(resp.Body)
}

// stacks is the bytes of goroutine stacks the hub holds
// (go_memstats_stack_inuse_bytes) after two collections, asked of its
// debug listener: a collection halves the stacks of goroutines that use
// less than a quarter of theirs, and frees the spans left empty at its
// end.
func (h *hubProc) stacks(ctx context.Context) (int64, error) {
	client := &http.Client{Timeout: time.Minute}
	discard := func(r io.Reader) error { _, err := io.Copy(io.Discard, r); return err }
	for range 2 {
		if err := get(ctx, client, h.debugURL+"/debug/pprof/heap?gc=1", discard); err != nil {
			return 0, err
		}
	}
	n := int64(-1)
	err := get(ctx, client, h.url+"/metrics", func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_stack_inuse_bytes "); ok {
				f, err := strconv.ParseFloat(v, 64)
				n = int64(f)
				return err
			}
		}
		return sc.Err()
	})
	if err == nil && n < 0 {
		err = errors.New("no go_memstats_stack_inuse_bytes in the hub's /metrics")
	}
	return n, err
}

// splitLabels splits the labels of an exposition line (a="x",b="y") at
// the commas outside their quoted values.
func splitLabels(s string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// sharedRedis is the redis-server that a run's hub replicas share: started
// as the managed one is (a unix socket, AOF with a sync per write), its
// socket where redisMemory finds a managed one (<dataDir>/redis/).
type sharedRedis struct {
	cmd     *exec.Cmd
	done    chan struct{}
	dataDir string
}

// url is what the replicas' hub.yaml says of it.
func (r *sharedRedis) url() string {
	return "unix://" + filepath.Join(r.dataDir, "redis", "redis.sock")
}

func startSharedRedis(ctx context.Context, dataDir string) (*sharedRedis, error) {
	dir := filepath.Join(dataDir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command("redis-server",
		"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--dir", dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r := &sharedRedis{cmd: cmd, done: make(chan struct{}), dataDir: dataDir}
	go func() { _ = cmd.Wait(); close(r.done) }()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		select {
		case <-r.done:
			return nil, fmt.Errorf("redis-server exited; its log %s ends:\n%s", filepath.Join(dir, "redis.log"), tail(filepath.Join(dir, "redis.log"), 10))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.stop()
			return nil, fmt.Errorf("redis-server not answering on %s", sock)
		}
	}
	return r, nil
}

// stop ends the server (SIGTERM: it flushes its AOF and exits).
func (r *sharedRedis) stop() { terminate(r.cmd, r.done, 10*time.Second) }

// results is how many attempt results the hub answered (its histogram of
// the route).
func (h *hubProc) results() (int64, error) {
	hs, err := scrapeHistograms(h.url, resultRoute)
	return int64(hs[resultRoute].Count), err
}

// isLeader says whether the hub holds the leader lease now (its
// fleetwave_leader gauge).
func (h *hubProc) isLeader() (bool, error) {
	v, err := scrapeSums(h.url, "fleetwave_leader")
	if err != nil {
		return false, err
	}
	return v["fleetwave_leader"] == 1, nil
}

// redisMemory reads used_memory and used_memory_peak of the hub's managed
// redis-server (its socket in the data dir).
func redisMemory(ctx context.Context, dataDir string) (used, peak int64, err error) {
	sock := filepath.Join(dataDir, "redis", "redis.sock")
	if _, err := os.Stat(sock); err != nil {
		return 0, 0, fmt.Errorf("managed redis socket: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redis INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "used_memory":
			used = n
		case "used_memory_peak":
			peak = n
		}
	}
	if used == 0 {
		return 0, 0, errors.New("redis INFO memory: no used_memory")
	}
	return used, peak, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 64<<10 {
		_, _ = f.Seek(-64<<10, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// slowestStatus returns the longest status write the hub's log at path
// records, and whether it records one. The hub logs each status commit
// that took 1 s or more at warn, with its took_ms, so a run
// at the default level has every slow write in its log, while its
// histogram knows the slowest only to within a factor of two (the bound
// of its bucket: 5.12 s for a write of 2.6 s).
func slowestStatus(path string) (time.Duration, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var (
		slowest time.Duration
		found   bool
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"message":"status committed"`) {
			continue
		}
		var l struct {
			TookMS *int64 `json:"took_ms"`
		}
		if err := json.Unmarshal(line, &l); err != nil || l.TookMS == nil {
			continue // not one of the hub's JSON lines
		}
		slowest, found = max(slowest, time.Duration(*l.TookMS)*time.Millisecond), true
	}
	return slowest, found, sc.Err()
}

// uptime is the load line of `uptime` (the machine's load averages).
func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return "load average: " + strings.Join(f[:3], ", ")
}
