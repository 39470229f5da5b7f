package fleetsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/fleetgen"
	"github.com/fleetwave/fleetwave/status"
)

// Scenario configures one scale run (Run).
type Scenario struct {
	// Bin is the fleetwave binary the hub runs as (`fleetwave serve`).
	Bin   string
	Nodes int
	// Dir is the working directory (repositories, hub data, hub log); ""
	// makes a temporary one, removed afterwards unless Keep.
	Dir  string
	Keep bool
	// Duration is each simulated action's duration (default
	// ActionFor(Nodes)).
	Duration time.Duration
	// MaxConcurrent is the rollout's max_concurrent (default Nodes/20, at
	// least 10): the ideal makespan is ceil(Nodes/MaxConcurrent) x Duration.
	MaxConcurrent int
	// Pushes is how many probe pushes sample push -> first dispatch while
	// the rollout runs (default 5), besides the push starting the rollout.
	Pushes int
	// Pollers, Posters, H2C and LocalAddrs are the fleet's (Options);
	// Pollers defaults to PollersFor(Nodes, H2C). `fleetwave dev scale`
	// sets H2C to H2CFor(Nodes) unless told otherwise.
	Pollers, Posters int
	H2C              bool
	// HeapProfile, when set, is the file the hub's heap profile is
	// written to once the rollout is done (and the status committed).
	HeapProfile string
	// MutexProfile, when set, is the file the hub's mutex profile is
	// written to at the same time: its lock waits over the whole run (the
	// hub samples one contention in mutexProfileFraction).
	MutexProfile string
	// CPUProfile, when set, is the file the leading hub's CPU profile is
	// written to: sampled from the rollout's first dispatch for its ideal
	// makespan (a whole second at least), where the hub's cores go while
	// the fleet runs. A run that kills that hub says it got none.
	CPUProfile string
	LocalAddrs []string
	// StatusInterval is the hub's status.interval (default 2s).
	StatusInterval time.Duration
	// HubLogLevel is the hub's --log-level (default warn: info logs a line
	// per attempt delivered and per result).
	HubLogLevel string
	// Timeout bounds the whole run (default 10 min + 20 ms per node).
	Timeout time.Duration
	Seed    int64
	Logger  zerolog.Logger
	// Progress receives one line per phase (nil: none).
	Progress io.Writer
	// Replicas, above 1, runs that many hubs sharing one redis-server
	// (started as the managed one is) instead of one hub with its managed
	// Redis: the first leads, the agents are spread over all of them, and
	// the probes' agent and the API probe use the last, a follower.
	Replicas int
	// KillLeader, with Replicas, kills the leading hub (SIGKILL) once half
	// the rollout's items are done: its agents move to the next replica,
	// a follower takes the lease, and the run measures how long that took.
	KillLeader bool
	// LeaseTTL is the hubs' lease_ttl (default 15 s).
	LeaseTTL time.Duration
}

// HubFigures are one hub replica's figures in a run of several.
type HubFigures struct {
	ID string
	// Leader: it held the leader lease at the end of the run
	Leader bool
	// Agents is how many agents it served (the probes' included), Results
	// how many attempt results it answered (its histogram of the route)
	Agents  int
	Results int64
	CPU     time.Duration // during the rollout, as Result.HubCPU
	RSSPeak int64         // bytes (VmHWM)
	// Killed: the run killed it (Scenario.KillLeader); its figures are
	// those read just before
	Killed bool `json:",omitempty"`
}

// Failover is what a run that killed its leader measured (Scenario.KillLeader),
// read from the lease in Redis: its fence, holder, expiry and acquisition.
type Failover struct {
	// DoneAtKill is how many of the rollout's items were done then
	DoneAtKill int
	// LeaseLeft is how long the dead leader's lease was still valid at the
	// kill (it renews every third of its TTL); Takeover runs from the kill
	// to a follower's lease (its acquired_at); FirstDispatch to the first
	// attempt of a higher fence received by an agent
	LeaseLeft, Takeover, FirstDispatch time.Duration
	// FirstStatus runs from the kill to the first status commit of the
	// new leader (its fence) on the remote, to the second (Git's commit
	// time)
	FirstStatus time.Duration
	// TakeoverPush runs from a probe push that landed once the new leader
	// took the lease (while it may still catch up with the status
	// history; after the probes pushed before and their action, when one
	// still ran) to the probe's first attempt received
	TakeoverPush time.Duration
	// LeaseTTL is the hubs' lease_ttl, the bound a takeover is held to
	LeaseTTL time.Duration
	// NewLeader is the replica that took over
	NewLeader string

	at    time.Time // the kill
	fence int64     // the highest fence received before it
	// the killed hub's process figures and results answered, read just
	// before
	stat    procStat
	results int64
}

// takeoverPush pushes probe version 0.0.k once the new leader took the
// lease, while it may still catch up with the status the dead one
// committed, and records in fo how long the probe took to be dispatched.
func takeoverPush(ctx context.Context, fo *Failover, k int, push func(version, msg string, withMain bool) (time.Time, error), tr *tracker) error {
	version := fmt.Sprintf("0.0.%d", k)
	at, err := push(version, "probe "+version+", as a follower takes the lease", false)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 2*time.Minute, func() bool { _, _, ok := tr.probe(version); return ok }); err != nil {
		return fmt.Errorf("probe %s, pushed as the new leader took the lease, never dispatched: %w", version, err)
	}
	seen, _, _ := tr.probe(version)
	fo.TakeoverPush = seen.Sub(at)
	return nil
}

// killLeader kills the hub holding the lease (SIGKILL to its group, as a
// crash) and waits until a follower holds it, reading the lease from the
// Redis the hubs share (the socket under redisDir). It returns what it
// measured and the hub it killed.
func killLeader(ctx context.Context, hubs []*hubProc, redisDir string, ttl time.Duration, tr *tracker, done int) (*Failover, *hubProc, error) {
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(redisDir, "redis", "redis.sock")})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "fw{*}:lease").Result()
	if err != nil || len(keys) != 1 {
		return nil, nil, fmt.Errorf("the lease in redis: %v keys, %v", keys, err)
	}
	lease := func() (owner string, fence, expires, acquired int64, err error) {
		v, err := rdb.HMGet(ctx, keys[0], "owner", "fence", "expires_at", "acquired_at").Result()
		if err != nil {
			return "", 0, 0, 0, err
		}
		n := func(x any) int64 { s, _ := x.(string); i, _ := strconv.ParseInt(s, 10, 64); return i }
		owner, _ = v[0].(string)
		return owner, n(v[1]), n(v[2]), n(v[3]), nil
	}
	owner, _, _, _, err := lease()
	if err != nil {
		return nil, nil, err
	}
	var leader *hubProc
	for _, h := range hubs {
		if h.id == owner {
			leader = h
		}
	}
	if leader == nil {
		return nil, nil, fmt.Errorf("the lease is %q's, not a replica's", owner)
	}
	results, err := leader.results()
	if err != nil {
		return nil, nil, fmt.Errorf("hub %s: %w", leader.id, err)
	}
	st, err := readProc(leader.pid())
	if err != nil {
		return nil, nil, fmt.Errorf("hub %s: %w", leader.id, err)
	}
	fo := &Failover{DoneAtKill: done, LeaseTTL: ttl, fence: tr.topFence(), stat: st, results: results, at: time.Now()}
	_ = syscall.Kill(-leader.pid(), syscall.SIGKILL)
	<-leader.done
	// the dead leader's lease, as it stays until a follower takes it
	_, oldFence, expires, _, err := lease()
	if err != nil {
		return nil, nil, err
	}
	fo.LeaseLeft = time.UnixMilli(expires).Sub(fo.at)
	deadline := fo.at.Add(time.Minute + 4*ttl)
	for {
		owner, fence, _, acquired, err := lease()
		if err == nil && fence > oldFence {
			fo.NewLeader, fo.Takeover = owner, time.UnixMilli(acquired).Sub(fo.at)
			return fo, leader, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("no follower led within %v of the leader's kill", time.Since(fo.at).Round(time.Second))
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
}

// resultRoute is the hub's histogram of the agents' results.
const resultRoute = `fleetwave_http_request_duration_seconds{route="POST /api/v1/agent/nodes/{node}/attempts/{attempt}/result"}`

// Latency is a sample of request latencies.
type Latency struct {
	N        int
	P50, P99 time.Duration
	Errors   int
	// HubWithin100ms is the share of the route's requests (the probe's and
	// any other's) the hub answered within 100 ms while the rollout ran,
	// as its own histogram measured them: the hub's part of the latency,
	// without the client's and the network's. Nil when not measured.
	HubWithin100ms *float64 `json:",omitempty"`
}

// apiRoutes are the hub's histograms of the routes the probe reads.
var apiRoutes = []string{
	`fleetwave_http_request_duration_seconds{route="GET /api/v1/summary"}`,
	`fleetwave_http_request_duration_seconds{route="GET /api/v1/rollouts/{id}"}`,
}

func latencyOf(d []time.Duration, errs int) Latency {
	if len(d) == 0 {
		return Latency{Errors: errs}
	}
	slices.Sort(d)
	return Latency{N: len(d), P50: d[len(d)/2], P99: d[min(len(d)-1, len(d)*99/100)], Errors: errs}
}

// Result is what one scale run measured.
type Result struct {
	Nodes, Pollers, MaxConcurrent int
	ActionDuration                time.Duration
	// Posters is how many results and reports the fleet posts at once at
	// most (0 in runs recorded before it was: 256).
	Posters int `json:",omitempty"`
	// PollWait is the agents' long poll wait (0 in runs recorded before
	// it was: the fleet's default, 25 s).
	PollWait time.Duration `json:",omitempty"`
	// Protocol is the fleet's: "HTTP/1.1" or "h2c" ("" in runs recorded
	// before it was).
	Protocol string `json:",omitempty"`
	Started  time.Time
	Load     string // the machine's load averages at the start
	LoadEnd  string // and at the end

	Validate time.Duration // `fleetwave validate` of the whole tree, wall time
	// CueVet is the baseline of Validate: `cue vet` of the tree's YAML and
	// JSON objects (CueVetFiles of them), once; 0 when no cue binary was
	// found, and in the runs recorded before it was measured.
	CueVet       time.Duration `json:",omitempty"`
	CueVetFiles  int           `json:",omitempty"`
	Register     time.Duration // every agent registered, from the fleet's start
	PushDispatch []time.Duration
	PushStages   []PushStage     // the probe pushes' stages
	GitPush      []time.Duration // the git CLI's push of each commit (not counted above)
	SyncMean     time.Duration   // hub: fetch, validate and apply a commit (mean)
	SyncMax      time.Duration   // upper bound of the slowest one's bucket
	PlanMean     time.Duration   // hub: plan the fleet and hand rollouts to the engine
	PlanMax      time.Duration
	StatusMean   time.Duration // hub: build and push a status commit
	StatusMax    time.Duration
	StatusCount  int
	// StatusSlowest is the slowest status write as the hub's log gives it
	// (its took_ms), when one took 1 s or more (the hub's threshold for
	// logging it at warn); 0 when none
	// did, or in runs recorded before it was read (StatusMax, the bound
	// of its histogram bucket, is all they have).
	StatusSlowest time.Duration `json:",omitempty"`
	// PoolWaits and PoolWait are the hub's Redis calls that waited for a
	// connection of its pool from the push to the rollout's end, and
	// their waits summed; AgentCallWaits the calls made for agents that
	// waited for their share of the pool. PoolMeasured is false in runs
	// recorded before they were read.
	PoolWaits      int64         `json:",omitempty"`
	PoolWait       time.Duration `json:",omitempty"`
	AgentCallWaits int64         `json:",omitempty"`
	PoolMeasured   bool          `json:",omitempty"`
	Makespan       time.Duration // the rollout's first dispatch -> its last item completed
	Ideal          time.Duration // ceil(Nodes/MaxConcurrent) x ActionDuration
	HubRSSPeak     int64         // bytes (VmHWM); the largest replica's
	HubCPU         time.Duration // hub CPU time during the rollout; every replica's
	RolloutWall    time.Duration // the rollout's wall time for HubCPU (push -> last result)
	Waves          Waves         // the makespan wave by wave, as the fleet saw it
	RedisUsed      int64
	RedisPeak      int64
	Summary        Latency // GET /api/v1/summary while the rollout ran, as the console reads it (Cache-Control: max-stale=2)
	RolloutPage    Latency // GET /api/v1/rollouts/{id} while the rollout ran: its first page of items, as the console reads it

	// the same reads as a client that accepts no stale answer (N is 0 in
	// the runs from before the console accepted them)
	SummaryPlain, RolloutPagePlain Latency

	Rollout      string // the rollout's id
	RolloutState fleetwave.RolloutStatus
	Items        int // items of the rollout (API)
	Completed    int // of them completed
	DoneOnce     int // completed items the fleet ran and reported exactly once
	Duplicates   int // items with more than one success taken
	// StatusItems is how many of the rollout's items the status committed
	// to Git shows completed once the rollout is (its document and, above
	// status.PartItems items, its parts); StatusParts counts the parts.
	StatusItems, StatusParts int
	Fleet                    Stats

	// PollStack is the hub's goroutine stacks per poll the fleet holds,
	// once the rollout is done (less those of the hub before the fleet
	// came); 0 in the runs from before it was measured
	PollStack int64

	// StatusSteps and ReconcileSteps are the mean time of each step of the
	// hub's status writes and reconciles over the run, by step (its
	// fleetwave_status_step_seconds and fleetwave_reconcile_step_seconds);
	// none in the runs from before they were read
	StatusSteps, ReconcileSteps map[string]time.Duration `json:",omitempty"`

	// GitCLIStatus is the baseline of a status commit: the git CLI writing,
	// committing and pushing GitCLIFiles changed node documents to the same
	// remote after the rollout (gitCLIStatus); 0 in the runs recorded
	// before it was measured.
	GitCLIStatus time.Duration `json:",omitempty"`
	GitCLIFiles  int           `json:",omitempty"`
	// Healthz is the baseline of the API's latency: GET /healthz (an
	// answer of "ok" that reads nothing), read by the probe beside the
	// summary and the rollout's page while the rollout ran (N is 0 in the
	// runs recorded before it was).
	Healthz Latency `json:",omitzero"`
	// Hubs are each replica's figures when the run had several
	// (Scenario.Replicas), in the order they started
	Hubs []HubFigures `json:",omitempty"`
	// Failover is set when the run killed its leader
	Failover *Failover `json:",omitempty"`
}

// PushStage splits one push -> first dispatch into the hub's stages, each
// counted from the push: the snapshot applied (the summary's sync.at), the
// rollout created, its item dispatched (queued for the agent), the attempt
// received by the agent.
type PushStage struct {
	Applied, Created, Dispatched, Received time.Duration
}

// pushStages reads the stages of a probe push from the API (zero where
// the API no longer tells).
func pushStages(ctx context.Context, hubURL, rollout string, pushed, received time.Time) PushStage {
	st := PushStage{Received: received.Sub(pushed)}
	c := &http.Client{Timeout: 30 * time.Second}
	var sum fleetwave.Summary
	if _, err := timedGet(ctx, c, hubURL+"/api/v1/summary", false, &sum); err == nil && !sum.Sync.At.IsZero() {
		st.Applied = sum.Sync.At.Sub(pushed)
	}
	var page struct {
		Rollout fleetwave.Rollout `json:"rollout"`
		Items   []fleetwave.Item  `json:"items"`
	}
	if _, err := timedGet(ctx, c, hubURL+"/api/v1/rollouts/"+rollout, false, &page); err == nil {
		st.Created = page.Rollout.CreatedAt.Sub(pushed)
		if len(page.Items) > 0 && !page.Items[0].DispatchedAt.IsZero() {
			st.Dispatched = page.Items[0].DispatchedAt.Sub(pushed)
		}
	}
	return st
}

// slowestStatus is the slowest status write: as the hub logged it when
// one took 1 s or more, else the bound of its histogram
// bucket.
func (r Result) slowestStatus() time.Duration {
	if r.StatusSlowest > 0 {
		return r.StatusSlowest
	}
	return r.StatusMax
}

// PushDispatchP50 is the median push -> first dispatch (0 without samples).
func (r Result) PushDispatchP50() time.Duration {
	if len(r.PushDispatch) == 0 {
		return 0
	}
	d := slices.Clone(r.PushDispatch)
	slices.Sort(d)
	return d[len(d)/2]
}

const (
	mainBRC   = "scale-main"
	mainBlock = "block-000"
	probeBRC  = "scale-probe"
	probeNode = "node-000000"
)

// tracker records what the fleet saw of the scenario's rollouts.
type tracker struct {
	mu         sync.Mutex
	mainID     string
	firstMain  time.Time
	probeSeen  map[string]time.Time // probe target version -> first attempt
	probeRoll  map[string]string    // probe target version -> its rollout
	mainDone   map[string]int       // main item -> successes taken
	lastDone   time.Time
	mainFailed int
	// each main attempt's receipt by its agent and its result's answer
	received map[string]time.Time
	answered map[string]time.Time
	// fences: the first receipt of an attempt of each fence (a leader's)
	fences map[int64]time.Time
}

func (t *tracker) attempt(a fleetwave.Attempt, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.fences[a.Fence]; !ok {
		t.fences[a.Fence] = at
	}
	switch {
	case strings.HasPrefix(a.Rollout, mainBRC+"-g"):
		if t.mainID == "" {
			t.mainID, t.firstMain = a.Rollout, at
		}
		if a.Rollout == t.mainID {
			t.received[a.ID] = at
		}
	case strings.HasPrefix(a.Rollout, probeBRC+"-g"):
		if _, ok := t.probeSeen[a.TargetVersion]; !ok {
			t.probeSeen[a.TargetVersion] = at
			t.probeRoll[a.TargetVersion] = a.Rollout
		}
	}
}

func (t *tracker) result(a fleetwave.Attempt, res fleetwave.AttemptResult, err error, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.Rollout != t.mainID || err != nil {
		return
	}
	t.answered[a.ID] = at
	switch res.Class {
	case fleetwave.ResultSuccess:
		t.mainDone[a.Item]++
		t.lastDone = at
	case fleetwave.ResultPermanent:
		t.mainFailed++
		t.lastDone = at
	}
}

func (t *tracker) main() (id string, first time.Time, done int, failed int, last time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mainID, t.firstMain, len(t.mainDone), t.mainFailed, t.lastDone
}

// fenceAbove is the first receipt of an attempt of a fence above f.
func (t *tracker) fenceAbove(f int64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first time.Time
	for fence, at := range t.fences {
		if fence > f && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// topFence is the highest fence an attempt received so far carried.
func (t *tracker) topFence() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var top int64
	for f := range t.fences {
		top = max(top, f)
	}
	return top
}

// waves splits the main rollout's attempts into its waves: by the wave
// each item ran in, as items (the rollout read from the API) give it, and
// by when they were received for an attempt of an item not there.
func (t *tracker) waves(action time.Duration, items []fleetwave.Item) Waves {
	wave := make(map[string]int, len(items))
	for _, it := range items {
		wave[it.ID] = it.Wave
	}
	waveOf := func(attempt string) int {
		if i := strings.LastIndexByte(attempt, '.'); i > 0 {
			return wave[attempt[:i]]
		}
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return splitWaves(t.received, t.answered, action, waveOf)
}

func (t *tracker) probe(version string) (time.Time, string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.probeSeen[version]
	return at, t.probeRoll[version], ok
}

// Run runs one scale scenario: it writes a repository of sc.Nodes nodes
// with internal/fleetgen, starts a hub process and a fleet, rolls a block
// out to every node and measures it. It fails only when the scenario could
// not run; a missed target is a figure of the Result.
func Run(ctx context.Context, sc Scenario) (res Result, err error) {
	if sc.Bin == "" {
		return res, errors.New("scale: no fleetwave binary")
	}
	if sc.Nodes < 2 {
		return res, fmt.Errorf("scale: %d nodes: want at least 2", sc.Nodes)
	}
	if sc.Duration <= 0 {
		sc.Duration = ActionFor(sc.Nodes)
	}
	if sc.Pollers <= 0 {
		sc.Pollers = PollersFor(sc.Nodes, sc.H2C)
	}
	if sc.MaxConcurrent <= 0 {
		sc.MaxConcurrent = max(10, sc.Nodes/20)
	}
	if sc.Pushes <= 0 {
		sc.Pushes = 5
	}
	if sc.StatusInterval <= 0 {
		sc.StatusInterval = 2 * time.Second
	}
	if sc.LeaseTTL <= 0 {
		sc.LeaseTTL = hubLeaseTTL
	}
	if sc.HubLogLevel == "" {
		sc.HubLogLevel = "warn"
	}
	if sc.Timeout <= 0 {
		sc.Timeout = 10*time.Minute + time.Duration(sc.Nodes)*20*time.Millisecond
	}
	progress := sc.Progress
	if progress == nil {
		progress = io.Discard
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(progress, "scale %d: "+format+"\n", append([]any{sc.Nodes}, args...)...)
	}
	ctx, cancel := context.WithTimeout(ctx, sc.Timeout)
	defer cancel()

	res = Result{Nodes: sc.Nodes, MaxConcurrent: sc.MaxConcurrent, ActionDuration: sc.Duration, PollWait: PollWait(sc.Nodes),
		Protocol: protocolOf(sc.H2C), Started: time.Now().UTC(), Load: uptime()}
	dir := sc.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "fwscale"); err != nil {
			return res, err
		}
		if !sc.Keep {
			defer os.RemoveAll(dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	work, remote := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")

	// the repository: fleetgen's fleet, two blocks, no BRC yet
	start := time.Now()
	if err := fleetgen.Generate(work, sc.Nodes, 0, 2, sc.Seed); err != nil {
		return res, err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "fleet"}} {
		if _, err := git(ctx, work, args...); err != nil {
			return res, err
		}
	}
	if _, err := git(ctx, dir, "init", "-q", "--bare", "-b", "main", remote); err != nil {
		return res, err
	}
	if _, err := git(ctx, work, "push", "-q", remote, "main"); err != nil {
		return res, err
	}
	say("repository of %d nodes written and pushed in %v", sc.Nodes, time.Since(start).Round(time.Millisecond))

	// full validation, as a user runs it (a process of its own): the
	// median of validateRuns, the first of which comes right after the
	// repository was written and pushed (the machine still busy with it)
	var took []time.Duration
	for range validateRuns {
		start = time.Now()
		if out, err := exec.CommandContext(ctx, sc.Bin, "validate", work).CombinedOutput(); err != nil {
			return res, fmt.Errorf("fleetwave validate: %w\n%.2000s", err, out)
		}
		took = append(took, time.Since(start))
	}
	res.Validate = median(took)
	say("validate: %v (median of %v)", res.Validate.Round(time.Millisecond), took)
	if res.CueVet, res.CueVetFiles, err = cueVet(ctx, dir, work); err != nil {
		return res, err
	}
	if res.CueVetFiles > 0 {
		say("baseline: cue vet of %d YAML and JSON objects: %v", res.CueVetFiles, res.CueVet.Round(time.Millisecond))
	} else {
		say("baseline: cue vet not measured, no cue binary (CUE_BIN or PATH)")
	}

	ids := make([]string, sc.Nodes)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%06d", i)
	}
	nodes, hashes, err := Tokens(ids)
	if err != nil {
		return res, err
	}
	settings := hubSettings{statusInterval: sc.StatusInterval, staleAfter: StaleAfter(sc.Nodes),
		maxPollWait: max(30*time.Second, PollWait(sc.Nodes)), mutexProfile: sc.MutexProfile != "", leaseTTL: sc.LeaseTTL}
	redisDir := "" // the data dir holding redis/redis.sock (redisMemory)
	var hubs []*hubProc
	if sc.Replicas > 1 {
		shared, err := startSharedRedis(ctx, filepath.Join(dir, "redis-shared"))
		if err != nil {
			return res, err
		}
		defer shared.stop() // after the hubs (deferred below)
		redisDir, settings.redis = shared.dataDir, shared.url()
	}
	for k := range max(1, sc.Replicas) {
		set := settings
		if sc.Replicas > 1 {
			set.id = string(rune('a' + k))
		}
		h, err := startHub(ctx, sc.Bin, dir, remote, hashes, set, 2*time.Minute+time.Duration(sc.Nodes)*time.Millisecond, sc.HubLogLevel)
		if err != nil {
			return res, err
		}
		defer h.stop()
		hubs = append(hubs, h)
		name := "hub"
		if set.id != "" {
			name += " " + set.id
		}
		say("%s ready at %s (pid %d, log %s)", name, h.url, h.pid(), h.log)
		if k == 0 && sc.Replicas > 1 {
			// the first leads: the others start once it holds the lease
			if err := waitFor(ctx, time.Minute, func() bool { ok, _ := h.isLeader(); return ok }); err != nil {
				return res, fmt.Errorf("hub %s never led: %w", set.id, err)
			}
		}
	}
	// hub is the leader (the one hub, or the first replica), front the
	// hub the probes' agent and the API probe use (the last: a follower
	// when there are replicas)
	hub, front := hubs[0], hubs[len(hubs)-1]
	if redisDir == "" {
		redisDir = hub.dataDir
	}
	// a hub the run killed (KillLeader): its figures read just before,
	// and the results it had answered
	var killed *hubProc
	// the goroutine stacks of the hubs alive, each
	stacksOf := func() ([]int64, error) {
		out := make([]int64, len(hubs))
		for i, h := range hubs {
			if h == killed {
				continue
			}
			st, err := h.stacks(ctx)
			if err != nil {
				return nil, err
			}
			out[i] = st
		}
		return out, nil
	}
	procOf := func(h *hubProc) (procStat, error) {
		if h == killed {
			return res.Failover.stat, nil
		}
		return readProc(h.pid())
	}
	cpuOf := func() []time.Duration {
		out := make([]time.Duration, len(hubs))
		for i, h := range hubs {
			st, _ := procOf(h)
			out[i] = st.CPU
		}
		return out
	}
	stacks0, err := stacksOf()
	if err != nil {
		return res, fmt.Errorf("hub stacks: %w", err)
	}

	tr := &tracker{probeSeen: map[string]time.Time{}, probeRoll: map[string]string{}, mainDone: map[string]int{},
		received: map[string]time.Time{}, answered: map[string]time.Time{}, fences: map[int64]time.Time{}}
	// the probes' node has an agent process of its own (agentproc.go)
	if nodes[0].ID != probeNode {
		return res, fmt.Errorf("the first node is %s, not the probes' %s", nodes[0].ID, probeNode)
	}
	probeAgent, err := startAgentProc(ctx, sc.Bin, dir, front.url, nodes[0], sc.Duration, PollWait(sc.Nodes), ReportEvery(sc.Nodes), sc.Seed, tr.attempt, tr.result)
	if err != nil {
		return res, err
	}
	stopAgent := sync.OnceValue(probeAgent.stop)
	defer stopAgent()
	var urls []string
	for _, h := range hubs {
		urls = append(urls, h.url)
	}
	fleet, err := New(Options{
		HubURLs: urls, Nodes: nodes[1:], Duration: sc.Duration, Pollers: sc.Pollers, Posters: sc.Posters, H2C: sc.H2C, LocalAddrs: sc.LocalAddrs,
		Seed: uint64(sc.Seed), OnAttempt: tr.attempt, OnResult: tr.result, Logger: sc.Logger,
		// full reports as a real agent sends them: an attempt the hub
		// counted lost (a late result) is settled by the next report
		ReportEvery: ReportEvery(sc.Nodes),
		Wait:        PollWait(sc.Nodes),
	})
	if err != nil {
		return res, err
	}
	spread := fleet.Spread() // its agents on each hub, the probes' node aside
	// the polls held at once: the fleet's, and the probe's agent's
	res.Pollers, res.Posters = fleet.Pollers()+1, fleet.Posters()
	fctx, stopFleet := context.WithCancel(ctx)
	fleetDone := make(chan struct{})
	go func() { _ = fleet.Run(fctx); close(fleetDone) }()
	defer func() { stopFleet(); <-fleetDone }()
	start = time.Now()
	if err := waitFor(ctx, 5*time.Minute+time.Duration(sc.Nodes)*5*time.Millisecond, func() bool {
		return fleet.Stats().Registered == int64(sc.Nodes-1) && probeAgent.ready()
	}); err != nil {
		return res, fmt.Errorf("registration: %d of %d simulated agents registered, the probes' node's agent %v: %w",
			fleet.Stats().Registered, sc.Nodes-1, probeAgent.ready(), err)
	}
	res.Register = time.Since(start)
	say("%d agents registered in %v (%d pollers)", sc.Nodes, res.Register.Round(time.Millisecond), res.Pollers)

	// the fleet-wide rollout and the first probe, in one push
	cpu0 := cpuOf()
	pool0, err := scrapeSums(hub.url, poolSeries...)
	if err != nil {
		return res, err
	}
	var probeMu sync.Mutex // guards res.PushDispatch, PushStages and GitPush
	var pushMu sync.Mutex  // one push at a time from the work tree
	push := func(version, msg string, withMain bool) (time.Time, error) {
		pushMu.Lock()
		defer pushMu.Unlock()
		files := map[string]string{"brc/" + probeBRC + ".cue": brcProbe(version)}
		if withMain {
			files["brc/"+mainBRC+".cue"] = brcMain(sc.MaxConcurrent)
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
				return time.Time{}, err
			}
		}
		if _, err := git(ctx, work, "add", "-A"); err != nil {
			return time.Time{}, err
		}
		if _, err := git(ctx, work, "commit", "-q", "-m", msg); err != nil {
			return time.Time{}, err
		}
		// counted from when the push landed: the git client's own time
		// (packing, receive-pack) is the pusher's, not the hub's
		start := time.Now()
		_, err := git(ctx, work, "push", "-q", remote, "main")
		probeMu.Lock()
		res.GitPush = append(res.GitPush, time.Since(start))
		probeMu.Unlock()
		return landed(remote, "main", start), err
	}
	if err := os.MkdirAll(filepath.Join(work, "brc"), 0o755); err != nil {
		return res, err
	}
	// API latency while the rollout runs, read by a process of its own
	// that starts before the push, as a console open when it lands: its
	// reads before the first dispatch are not counted
	wantMain := mainBRC + "-g1" // the trigger's first generation
	probe, err := startProbe(ctx, sc.Bin, front.url, wantMain)
	if err != nil {
		return res, err
	}
	stopProbe := sync.OnceValue(probe.stop)
	defer stopProbe()
	pushed, err := push("0.0.1", "roll block-000 out to every node", true)
	if err != nil {
		return res, err
	}
	if err := waitFor(ctx, 5*time.Minute, func() bool { id, _, _, _, _ := tr.main(); return id != "" }); err != nil {
		return res, fmt.Errorf("no attempt of %s dispatched: %w; hub log:\n%s", mainBRC, err, tail(hub.log, 20))
	}
	mainID, firstMain, _, _, _ := tr.main()
	res.Rollout = mainID
	res.PushDispatch = append(res.PushDispatch, firstMain.Sub(pushed))
	say("rollout %s: first dispatch %v after the push", mainID, firstMain.Sub(pushed).Round(time.Millisecond))
	if mainID != wantMain {
		return res, fmt.Errorf("rollout %s, where the API probe reads %s", mainID, wantMain)
	}
	probe.samples.countFrom(firstMain)
	ideal := time.Duration((sc.Nodes+sc.MaxConcurrent-1)/sc.MaxConcurrent) * sc.Duration
	cpuProfiled := make(chan error, 1)
	if sc.CPUProfile != "" {
		secs := max(1, int((ideal+time.Second-1)/time.Second))
		go func(url string) {
			cpuProfiled <- fetchProfile(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", url, secs), sc.CPUProfile, time.Duration(secs)*time.Second)
		}(hub.debugURL)
	} else {
		cpuProfiled <- nil
	}
	routes0, err := scrapeHistograms(front.url, apiRoutes...)
	if err != nil {
		return res, err
	}

	// probe pushes while the rollout runs: each bumps the probe BRC
	res.Ideal = ideal
	probesDone, probesOver := make(chan error, 1), make(chan struct{})
	var lastProbe time.Time // the last probe's first attempt received, read once probesOver is closed
	go func() {
		defer close(probesOver)
		spacing := max(ideal/time.Duration(sc.Pushes+1), 300*time.Millisecond)
		for k := 2; k <= sc.Pushes+1; k++ {
			if sleep(ctx, spacing) != nil {
				probesDone <- ctx.Err()
				return
			}
			version := fmt.Sprintf("0.0.%d", k)
			at, err := push(version, "probe "+version, false)
			if err != nil {
				probesDone <- err
				return
			}
			if err := waitFor(ctx, 2*time.Minute, func() bool { _, _, ok := tr.probe(version); return ok }); err != nil {
				probesDone <- fmt.Errorf("probe %s never dispatched: %w", version, err)
				return
			}
			seen, rollout, _ := tr.probe(version)
			lastProbe = seen
			stage := pushStages(ctx, hub.url, rollout, at, seen) // the leader applies the push
			probeMu.Lock()
			res.PushDispatch = append(res.PushDispatch, seen.Sub(at))
			res.PushStages = append(res.PushStages, stage)
			probeMu.Unlock()
		}
		probesDone <- nil
	}()

	finished := func() bool {
		_, _, done, failed, _ := tr.main()
		st := probe.samples.state()
		return done+failed >= sc.Nodes || st == fleetwave.RolloutCompleted || st == fleetwave.RolloutBlocked || st == fleetwave.RolloutCancelled
	}
	var waitErr error
	takeoverPushed := make(chan error, 1)
	takeoverPushed <- nil // none pushed unless the leader is killed
	if sc.KillLeader && len(hubs) > 1 {
		// half the items done, the leader is killed; the run goes on
		// with the followers, one of which takes the lease
		waitErr = waitFor(ctx, sc.Timeout, func() bool { _, _, done, failed, _ := tr.main(); return done+failed >= sc.Nodes/2 || finished() })
		if waitErr == nil {
			_, _, done, _, _ := tr.main()
			fo, dead, err := killLeader(ctx, hubs, redisDir, sc.LeaseTTL, tr, done)
			if err != nil {
				return res, err
			}
			res.Failover, killed = fo, dead
			for _, h := range hubs {
				if h.id == fo.NewLeader {
					hub = h
				}
			}
			say("killed the leader, hub %s, at %d items done, its lease valid %v more: hub %s leads %v after the kill", dead.id, fo.DoneAtKill,
				fo.LeaseLeft.Round(time.Millisecond), fo.NewLeader, fo.Takeover.Round(time.Millisecond))
			<-takeoverPushed
			go func() {
				// after the probes pushed before: a probe waiting for its
				// dispatch would be replaced by this one, and one whose
				// action runs holds this one back on the same node
				<-probesOver
				if err := sleep(ctx, time.Until(lastProbe.Add(sc.Duration+time.Second))); err != nil {
					takeoverPushed <- err
					return
				}
				takeoverPushed <- takeoverPush(ctx, fo, sc.Pushes+2, push, tr)
			}()
		}
	}
	if waitErr == nil {
		waitErr = waitFor(ctx, sc.Timeout, finished)
	}
	if err := <-takeoverPushed; err != nil && waitErr == nil {
		waitErr = err
	}
	if fo := res.Failover; fo != nil && fo.TakeoverPush > 0 {
		say("a probe pushed once hub %s led was dispatched %v after its push", fo.NewLeader, fo.TakeoverPush.Round(time.Millisecond))
	}
	_, _, done, _, last := tr.main()
	if fo := res.Failover; fo != nil {
		if first, ok := tr.fenceAbove(fo.fence); ok {
			fo.FirstDispatch = first.Sub(fo.at)
			say("the new leader's first attempt reached an agent %v after the kill", fo.FirstDispatch.Round(time.Millisecond))
		}
	}
	cpu1 := cpuOf()
	res.Makespan = last.Sub(firstMain)
	res.RolloutWall = last.Sub(pushed)
	for i := range hubs {
		res.HubCPU += cpu1[i] - cpu0[i]
	}
	if waitErr != nil {
		return res, fmt.Errorf("rollout %s: %d of %d items done: %w", mainID, done, sc.Nodes, waitErr)
	}
	say("rollout %s: %d items done, makespan %v (ideal %v)", mainID, done, res.Makespan.Round(time.Millisecond), ideal)
	if err := <-probesDone; err != nil {
		return res, err
	}
	if err := stopProbe(); err != nil {
		return res, err
	}
	res.Summary, res.RolloutPage = probe.samples.latency("summary"), probe.samples.latency("rollout")
	res.SummaryPlain, res.RolloutPagePlain = probe.samples.latency("summary-plain"), probe.samples.latency("rollout-plain")
	res.Healthz = probe.samples.latency("healthz")
	routes, err := scrapeHistograms(front.url, apiRoutes...)
	if err != nil {
		return res, err
	}
	for i, l := range []*Latency{&res.Summary, &res.RolloutPage} {
		if share := routes[apiRoutes[i]].minus(routes0[apiRoutes[i]]).within(0.1); !math.IsNaN(share) {
			l.HubWithin100ms = &share
		}
	}

	// a status commit after the rollout; the hub's histograms, steps
	// included, from the scrape that saw it
	names := []string{"fleetwave_sync_seconds", "fleetwave_reconcile_seconds", "fleetwave_status_commit_seconds"}
	names = append(names, stepKeys("fleetwave_status_step_seconds", statusStepNames)...)
	names = append(names, stepKeys("fleetwave_reconcile_step_seconds", reconcileStepNames)...)
	h0, err := scrapeHistograms(hub.url, names...)
	if err != nil {
		return res, err
	}
	var hs map[string]histogram
	if err := waitFor(ctx, 2*time.Minute+time.Duration(sc.Nodes)*time.Millisecond, func() bool {
		hs, err = scrapeHistograms(hub.url, names...)
		return err == nil && hs["fleetwave_status_commit_seconds"].Count > h0["fleetwave_status_commit_seconds"].Count
	}); err != nil {
		return res, fmt.Errorf("no status commit after the rollout: %w", err)
	}
	syncH, plan, status := hs[names[0]], hs[names[1]], hs[names[2]]
	res.SyncMean, res.SyncMax = syncH.Mean(), syncH.Max()
	res.PlanMean, res.PlanMax = plan.Mean(), plan.Max()
	res.StatusMean, res.StatusMax, res.StatusCount = status.Mean(), status.Max(), int(status.Count)
	pool1, err := scrapeSums(hub.url, poolSeries...)
	if err != nil {
		return res, err
	}
	if killed == nil { // else: the counters of another hub than the one read before
		res.PoolWaits = int64(pool1[poolSeries[0]] - pool0[poolSeries[0]])
		res.PoolWait = seconds(pool1[poolSeries[1]] - pool0[poolSeries[1]])
		res.AgentCallWaits = int64(pool1[poolSeries[2]] - pool0[poolSeries[2]])
		res.PoolMeasured = true
	}
	if slowest, ok, err := slowestStatus(hub.log); err != nil {
		return res, fmt.Errorf("hub log: %w", err)
	} else if ok {
		res.StatusSlowest = slowest
	}
	res.StatusSteps = stepMeans(hs, "fleetwave_status_step_seconds", statusStepNames)
	res.ReconcileSteps = stepMeans(hs, "fleetwave_reconcile_step_seconds", reconcileStepNames)

	// the rollout as the API tells it, against what the fleet ran
	rollout, items, err := readRollout(ctx, &http.Client{Timeout: time.Minute}, front.url, mainID)
	if err != nil {
		return res, err
	}
	succ := fleet.Successes()
	probeAgent.addSuccesses(succ)
	res.RolloutState, res.Items = rollout.Status, len(items)
	res.Waves = tr.waves(sc.Duration, items)
	w := res.Waves
	say("rollout %s: %d waves; median (max): handed out in %v (%v), last result %v (%v) after the action, next wave %v (%v) after it",
		mainID, w.Count, w.Spread.Round(time.Millisecond), w.SpreadMax.Round(time.Millisecond), w.Tail.Round(time.Millisecond),
		w.TailMax.Round(time.Millisecond), w.Gap.Round(time.Millisecond), w.GapMax.Round(time.Millisecond))
	for _, it := range items {
		// an item settled by a report rather than its result ends then
		if d := it.CompletedAt.Sub(firstMain); it.Status == fleetwave.ItemCompleted && d > res.Makespan {
			res.Makespan = d
		}
		if it.Status == fleetwave.ItemCompleted {
			res.Completed++
			if succ[it.ID] == 1 && it.Attempts == 1 {
				res.DoneOnce++
			}
		}
	}
	for item, n := range succ {
		if n > 1 && strings.HasPrefix(item, mainID+".") {
			res.Duplicates++
		}
	}
	// the status in Git: every item, as the rollout's last commit holds it
	var statusErr error
	if err := waitFor(ctx, 2*time.Minute+time.Duration(sc.Nodes)*time.Millisecond, func() bool {
		res.StatusItems, res.StatusParts, statusErr = committedItems(ctx, dir, remote, mainID)
		return statusErr == nil && res.StatusItems == res.Completed
	}); err != nil {
		return res, fmt.Errorf("status in git shows %d of %d items completed (%v): %w", res.StatusItems, res.Completed, statusErr, err)
	}
	say("status in git: %d items completed, in %d parts", res.StatusItems, res.StatusParts)
	if fo := res.Failover; fo != nil {
		at, err := firstStatusAbove(ctx, dir, remote, fo.fence)
		if err != nil {
			return res, err
		}
		fo.FirstStatus = at.Sub(fo.at)
		say("the new leader's first status commit landed %v after the kill", fo.FirstStatus.Round(time.Second))
	}
	if res.GitCLIStatus, res.GitCLIFiles, err = gitCLIStatus(ctx, dir, remote, max(1, sc.Nodes/10)); err != nil {
		return res, err
	}
	say("baseline: the git CLI wrote, committed and pushed %d status documents in %v", res.GitCLIFiles, res.GitCLIStatus.Round(time.Millisecond))
	for i, h := range hubs {
		st, err := procOf(h)
		if err != nil {
			return res, fmt.Errorf("hub process: %w", err)
		}
		res.HubRSSPeak = max(res.HubRSSPeak, st.HWM)
		if sc.Replicas > 1 {
			var leads bool
			var results int64
			if h == killed {
				results = res.Failover.results
			} else {
				if leads, err = h.isLeader(); err != nil {
					return res, fmt.Errorf("hub %s: %w", h.url, err)
				}
				if results, err = h.results(); err != nil {
					return res, fmt.Errorf("hub %s: %w", h.url, err)
				}
			}
			agents := spread[i]
			if h == front {
				agents++ // the probes' node
			}
			fig := HubFigures{ID: h.id, Leader: leads, Agents: agents, Results: results, CPU: cpu1[i] - cpu0[i], RSSPeak: st.HWM, Killed: h == killed}
			res.Hubs = append(res.Hubs, fig)
			say("hub %s: leader %v, %d agents, %d results answered, %.2f cores during the rollout, peak RSS %d MiB", fig.ID, leads, agents, fig.Results,
				fig.CPU.Seconds()/res.RolloutWall.Seconds(), st.HWM>>20)
		}
	}
	// every poller of the fleet holds a poll now (results and reports
	// aside): the stacks they cost the hubs
	stacks1, err := stacksOf()
	if err != nil {
		return res, fmt.Errorf("hub stacks: %w", err)
	}
	var stacks, grown int64
	for i := range hubs {
		if hubs[i] != killed {
			stacks, grown = stacks+stacks1[i], grown+stacks1[i]-stacks0[i]
		}
	}
	if res.Pollers > 0 {
		res.PollStack = grown / int64(res.Pollers) // Pollers: at most one per agent
	}
	say("hub goroutine stacks: %d MiB, %d KiB per poll held", stacks>>20, res.PollStack>>10)
	if sc.HeapProfile != "" {
		if err := fetchProfile(ctx, hub.debugURL+"/debug/pprof/heap?gc=1", sc.HeapProfile, 0); err != nil {
			return res, fmt.Errorf("heap profile: %w", err)
		}
		say("heap profile of the hub written to %s (go tool pprof -top -inuse_space %s)", sc.HeapProfile, sc.HeapProfile)
	}
	if sc.CPUProfile != "" {
		switch err := <-cpuProfiled; {
		case err == nil:
			say("CPU profile of the hub over the rollout written to %s (go tool pprof -top %s)", sc.CPUProfile, sc.CPUProfile)
		case killed != nil:
			say("no CPU profile: the run killed the hub it was sampling (%v)", err)
		default:
			return res, fmt.Errorf("CPU profile: %w", err)
		}
	}
	if sc.MutexProfile != "" {
		if err := fetchProfile(ctx, hub.debugURL+"/debug/pprof/mutex", sc.MutexProfile, 0); err != nil {
			return res, fmt.Errorf("mutex profile: %w", err)
		}
		say("mutex profile of the hub written to %s (go tool pprof -top %s)", sc.MutexProfile, sc.MutexProfile)
	}
	if res.RedisUsed, res.RedisPeak, err = redisMemory(ctx, redisDir); err != nil {
		return res, err
	}
	res.Fleet = fleet.Stats()
	if err := stopAgent(); err != nil {
		return res, err
	}
	res.LoadEnd = uptime()
	say("done: status commit mean %v, hub peak RSS %d MiB, redis %d MiB", res.StatusMean.Round(time.Millisecond), res.HubRSSPeak>>20, res.RedisUsed>>20)
	return res, nil
}

// firstStatusAbove returns the commit time of the oldest commit on the
// remote's status branch whose fence trailer is above fence.
func firstStatusAbove(ctx context.Context, dir, remote string, fence int64) (time.Time, error) {
	out, err := git(ctx, dir, "--git-dir", remote, "log", "--first-parent", "--reverse",
		"--format=%ct %(trailers:key=Fleetwave-Fence,valueonly,separator=%x2C)", "fleetwave/status")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		ct, err1 := strconv.ParseInt(fields[0], 10, 64)
		f, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 == nil && err2 == nil && f > fence {
			return time.Unix(ct, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("no status commit on fleetwave/status with a fence above %d", fence)
}

// committedItems reads rollout id's status from the remote's status
// branch (its document and its parts) and counts the items it shows
// completed, once the document says the rollout completed; -1 before.
func committedItems(ctx context.Context, dir, remote, id string) (completed, parts int, err error) {
	show := func(p string) ([]byte, bool) {
		out, err := git(ctx, dir, "--git-dir", remote, "show", "fleetwave/status:"+p)
		return []byte(out), err == nil
	}
	data, ok := show(status.RolloutPath(id))
	if !ok {
		return -1, 0, fmt.Errorf("no %s on fleetwave/status", status.RolloutPath(id))
	}
	head, err := status.DecodeRollout(data)
	if err != nil {
		return -1, 0, err
	}
	if head.Rollout.Status != fleetwave.RolloutCompleted {
		return -1, len(head.Parts), fmt.Errorf("the document says %s", head.Rollout.Status)
	}
	d, err := status.ReadRollout(id, data, show)
	if err != nil {
		return -1, len(head.Parts), err
	}
	for _, it := range d.Items {
		if it.Status == fleetwave.ItemCompleted {
			completed++
		}
	}
	return completed, len(head.Parts), nil
}

// ReportEvery is the full report interval (the agents' report_interval)
// the scale runs use for a fleet of n agents: the agent's default 30 s up
// to 15,000 agents, then longer, so that the fleet sends about 500 full
// reports a second (200 s at 100,000). At 30 s, 100,000 agents sent 3,300
// a second: their posts held back the results, and attempts ran past
// their deadlines.
func ReportEvery(n int) time.Duration {
	return max(30*time.Second, time.Duration(n)*time.Second/500)
}

// The shape of a scale run of n agents, unless told otherwise: the three
// rules below make `make scale` run every size as the figures in
// docs/scale.md were taken.

// maxHTTP1Polls is the most polls the simulated fleet holds open over
// HTTP/1.1, a connection (a descriptor in the fleet's process and one in
// the hub's) each: this machine lets a process open 20,000 descriptors.
const maxHTTP1Polls = 15000

// H2CFor says whether a scale run of n agents speaks h2c: above
// maxHTTP1Polls, where HTTP/1.1 cannot hold every agent's poll open
// (agents would take turns, and an attempt wait in the hub's queue for
// its agent's turn). Up to it, HTTP/1.1, as `fleetwave agent` speaks.
func H2CFor(n int) bool { return n > maxHTTP1Polls }

// PollersFor is how many polls a scale run of n agents holds open: one
// per agent, but no more than maxHTTP1Polls over HTTP/1.1.
func PollersFor(n int, h2c bool) int {
	if h2c {
		return n
	}
	return min(n, maxHTTP1Polls)
}

// ActionFor is the simulated action's duration in a scale run of n
// agents: 500 ms up to 10,000 agents, then 50 µs per agent (5 s at
// 100,000). A wave is n/20 attempts, and handing one out costs the hub
// about 160 µs on this 2-core machine (a wave of 5,000 took 0.8 s at
// 100,000): with a fixed 500 ms, the makespan at 100,000 would measure
// the hand-out more than the waves, and its ideal would mean little.
func ActionFor(n int) time.Duration {
	return max(500*time.Millisecond, time.Duration(n)*50*time.Microsecond)
}

// protocolOf names the fleet's protocol as Result records it.
func protocolOf(h2c bool) string {
	if h2c {
		return "h2c"
	}
	return "HTTP/1.1"
}

// validateRuns is how many times a scale run validates the whole tree.
const validateRuns = 3

// PollWait is the agents' long poll wait (poll_wait, with the hub's
// agents.max_poll_wait at least as long) the scale runs use for a fleet
// of n agents: 25 s up to 25,000 agents, then longer, so that the idle
// fleet polls about 1,000 times a second (100 s at 100,000). At 25 s,
// 100,000 agents sent 4,000 polls a second that carried nothing.
func PollWait(n int) time.Duration {
	return max(25*time.Second, time.Duration(n)*time.Second/1000)
}

// StaleAfter is the hub's stale_after that goes with ReportEvery(n):
// three report intervals, at least the default 2 minutes.
func StaleAfter(n int) time.Duration { return max(2*time.Minute, 3*ReportEvery(n)) }

func brcMain(maxConcurrent int) string {
	return fmt.Sprintf(`kind: "trigger"
name: %q
block_name: %q
target_version: "1.0.0"
managed_by: "scale"
max_concurrent: %d
failure_threshold_percent: 100
max_retries: 3
quiescence_seconds: 0
bypass_maintenance_window: true
`, mainBRC, mainBlock, maxConcurrent)
}

func brcProbe(version string) string {
	return fmt.Sprintf(`kind: "trigger"
name: %q
block_name: "block-001"
target_version: %q
managed_by: "probe"
nodes: [%q]
max_concurrent: 1
quiescence_seconds: 0
bypass_maintenance_window: true
`, probeBRC, version, probeNode)
}

// timedGet GETs url, decodes a 200 answer into out (when not nil) and
// returns the time to the whole answer.
// readRollout reads rollout id with every item, following the cursors of
// GET /api/v1/rollouts/{id} (pages of 1000 items, the API's largest).
func readRollout(ctx context.Context, c *http.Client, hubURL, id string) (fleetwave.Rollout, []fleetwave.Item, error) {
	var items []fleetwave.Item
	cursor := ""
	for {
		var page struct {
			Rollout fleetwave.Rollout `json:"rollout"`
			Items   []fleetwave.Item  `json:"items"`
			Next    string            `json:"next"`
		}
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if _, err := timedGet(ctx, c, hubURL+"/api/v1/rollouts/"+url.PathEscape(id)+"?"+q.Encode(), false, &page); err != nil {
			return fleetwave.Rollout{}, nil, fmt.Errorf("read rollout %s: %w", id, err)
		}
		items = append(items, page.Items...)
		if page.Next == "" || page.Next == cursor {
			return page.Rollout, items, nil
		}
		cursor = page.Next
	}
}

func timedGet(ctx context.Context, c *http.Client, url string, console bool, out any) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if console {
		req.Header.Set("Cache-Control", "max-stale=2") // as the console's repeated reads
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return 0, notFound{url}
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return 0, fmt.Errorf("GET %s: %w", url, err)
		}
	}
	return d, nil
}

// notFound is timedGet's error for an answer 404.
type notFound struct{ url string }

func (e notFound) Error() string { return fmt.Sprintf("GET %s: 404 Not Found", e.url) }

// waitFor checks cond every 5 ms until it holds, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// fetchProfile saves the profile at addr (on the hub's debug.listen) to
// path; sampled is how long the hub samples it before it answers (a CPU
// profile's seconds, 0 for the others).
func fetchProfile(ctx context.Context, addr, path string, sampled time.Duration) error {
	return get(ctx, &http.Client{Timeout: sampled + time.Minute}, addr, func(r io.Reader) error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// landed returns when a push to branch of the bare repository remote,
// begun at start, landed: when receive-pack wrote the branch's ref (its
// file's modification time), or now, when the push returned, if the ref
// is not a file of its own or says otherwise. A hub that follows the
// remote may apply the push before the client returns (its watcher sees
// the ref move), so the client's return would count some of the hub's
// work as the pusher's. The file's time is the kernel's coarse clock,
// a few ms behind at most: the figures counted from it are that much
// longer, never shorter.
func landed(remote, branch string, start time.Time) time.Time {
	now := time.Now()
	fi, err := os.Stat(filepath.Join(remote, "refs", "heads", branch))
	if err != nil || fi.ModTime().Before(start) || fi.ModTime().After(now) {
		return now
	}
	return fi.ModTime()
}
