package fleetsim

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// fleetwaveBinary builds ./cmd/fleetwave once (without the race detector:
// the hub under test is a process of its own).
func fleetwaveBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "fwsim-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fleetwave")
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		cmd := exec.Command(goBin, "build", "-o", binPath, "./cmd/fleetwave")
		cmd.Dir = root
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOFLAGS=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/fleetwave: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// TestScenarioAgainstRealHub runs the scale scenario at 1,200 nodes
// against a real hub process (managed redis-server, a git remote): the
// rollout completes with every item run and reported exactly once, the
// status committed to Git shows every item completed (in two parts: a
// rollout above 1,000 items is written in parts), every row of the
// report is filled, and the slowest status write is read from the hub's
// log.
func TestScenarioAgainstRealHub(t *testing.T) {
	bin := fleetwaveBinary(t)
	var progress bytes.Buffer
	const n = 1200
	profiles := t.TempDir()
	res, err := Run(t.Context(), Scenario{Bin: bin, Nodes: n, Duration: 200 * time.Millisecond, Pushes: 2, Seed: 7,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Progress: &progress,
		HeapProfile: filepath.Join(profiles, "heap.pprof"), MutexProfile: filepath.Join(profiles, "mutex.pprof"),
		CPUProfile:  filepath.Join(profiles, "cpu.pprof"),
		HubLogLevel: "info"}) // every status write in the hub's log, the fast ones too
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.RolloutState != fleetwave.RolloutCompleted {
		t.Errorf("rollout %s is %s, want completed", res.Rollout, res.RolloutState)
	}
	if res.Items != n || res.Completed != n || res.DoneOnce != n || res.Duplicates != 0 {
		t.Errorf("items %d, completed %d, done exactly once %d, duplicates %d: want %d, %d, %d, 0",
			res.Items, res.Completed, res.DoneOnce, res.Duplicates, n, n, n)
	}
	if res.StatusItems != n || res.StatusParts != 2 {
		t.Errorf("status in git: %d items completed in %d parts, want %d in 2", res.StatusItems, res.StatusParts, n)
	}
	if len(res.PushDispatch) != 3 || len(res.PushStages) != 2 {
		t.Errorf("push samples %d and stages %d, want 3 and 2", len(res.PushDispatch), len(res.PushStages))
	}
	// A poll held over HTTP/1.1 is its connection's goroutine (8 KiB of
	// stack: its frames must stay under a quarter of 16 KiB, or the
	// runtime never halves the stack it grew to) and the one that watches
	// the connection (4 KiB); 16 KiB or more means a frame on the
	// waiting path grew.
	if res.PollStack <= 0 || res.PollStack >= 16<<10 {
		t.Errorf("hub goroutine stacks per poll held: %d bytes, want under 16 KiB", res.PollStack)
	}
	// the profiles the run asked for are the hub's, each of its kind
	for file, sampleType := range map[string]string{"heap.pprof": "inuse_space", "mutex.pprof": "contentions", "cpu.pprof": "samples"} {
		if text := gunzip(t, filepath.Join(profiles, file)); !strings.Contains(text, sampleType) {
			t.Errorf("%s: no %q sample type: not the profile asked for", file, sampleType)
		}
	}
	if res.Fleet.Redelivered != 0 || res.Fleet.Refused != 0 {
		t.Errorf("fleet stats %+v: want no redelivery and no refused result", res.Fleet)
	}
	// the slowest write as the hub logged it, within its histogram's
	// bucket (whose bound is at most twice the write; the log's time also
	// counts the acknowledgement after the commit)
	if res.StatusSlowest <= 0 || res.StatusSlowest > 2*res.StatusMax {
		t.Errorf("slowest status write %v from the hub's log, want one within its bucket's bound %v", res.StatusSlowest, res.StatusMax)
	}
	// the baselines, measured in the same run: cue vet of every YAML and
	// JSON object (cue is installed in CI), the git CLI's commit of a
	// tenth of the node documents, /healthz read beside the API
	noCue := cueBin() == ""
	if noCue && os.Getenv("CI") != "" {
		t.Error("no cue binary in CI: .ci/run installs it with go install cuelang.org/go/cmd/cue@v0.17.1")
	}
	if !noCue && res.CueVetFiles < n/2 {
		t.Errorf("cue vet of %d files, want the repository's YAML and JSON objects (at least %d)", res.CueVetFiles, n/2)
	}
	if res.GitCLIFiles != n/10 || res.GitCLIStatus <= 0 {
		t.Errorf("git CLI baseline: %d documents in %v, want %d", res.GitCLIFiles, res.GitCLIStatus, n/10)
	}
	if res.Healthz.N == 0 || res.Healthz.Errors != 0 {
		t.Errorf("GET /healthz beside the API reads: %+v, want answered reads only", res.Healthz)
	}
	for _, row := range Rows([]Result{res}) {
		if noCue && strings.HasPrefix(row.Name, "  baseline: cue vet") {
			continue // not measured without a cue binary (CI has one)
		}
		zero := row.HasTarget && row.Target == 0 // a count that must stay 0
		if v := row.Values[0]; row.Signed && !math.IsNaN(v) {
			continue // a difference of two moments: either sign is measured
		}
		if v := row.Values[0]; row.MayBeZero && !math.IsNaN(v) && v >= 0 {
			continue // a count of waits: 0 when nothing waited
		}
		if v := row.Values[0]; math.IsNaN(v) || (v <= 0) != zero {
			t.Errorf("row %q: %v, want a measured figure", row.Name, v)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, []Result{res}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "1200 nodes") || !strings.Contains(table.String(), "makespan / ideal") {
		t.Errorf("table lacks its header or rows:\n%s", table.String())
	}
	if err := xml.Unmarshal(SVG([]Result{res}), new(struct{})); err != nil {
		t.Errorf("SVG is not well-formed XML: %v", err)
	}
}

// TestScenarioOnThreeReplicas runs the scenario on three hub processes
// sharing one redis-server, the agents spread over them: one leads, each
// serves its third of the fleet, the API probe reads a follower, and every
// item runs exactly once.
func TestScenarioOnThreeReplicas(t *testing.T) {
	bin := fleetwaveBinary(t)
	var progress bytes.Buffer
	const n = 600
	res, err := Run(t.Context(), Scenario{Bin: bin, Nodes: n, Duration: 200 * time.Millisecond, Pushes: 1, Seed: 11, Replicas: 3,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Progress: &progress})
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.RolloutState != fleetwave.RolloutCompleted || res.Completed != n || res.DoneOnce != n || res.Duplicates != 0 {
		t.Errorf("rollout %s: %s, %d completed, %d exactly once, %d run twice: want completed, %d, %d, 0",
			res.Rollout, res.RolloutState, res.Completed, res.DoneOnce, res.Duplicates, n, n)
	}
	if res.StatusItems != n {
		t.Errorf("status in git: %d items completed, want %d", res.StatusItems, n)
	}
	if len(res.Hubs) != 3 {
		t.Fatalf("hub figures %+v, want three replicas", res.Hubs)
	}
	leaders, agents := 0, 0
	var largest, results int64
	for _, h := range res.Hubs {
		if h.Leader {
			leaders++
		}
		agents += h.Agents
		results += h.Results
		largest = max(largest, h.RSSPeak)
		// each served its third of the fleet: it answered their results
		// (counted by its own histogram), and spent CPU on them
		if h.Agents < n/3 || h.Results < int64(n/3) || h.CPU <= 0 || h.RSSPeak <= 0 {
			t.Errorf("hub %s: %d agents, %d results, %v CPU, %d bytes peak RSS: want its third of %d agents and of their results, CPU and memory measured",
				h.ID, h.Agents, h.Results, h.CPU, h.RSSPeak, n)
		}
	}
	// each item's one result (the probe BRC's too), answered by one hub
	if leaders != 1 || agents != n || results < int64(n) {
		t.Errorf("%d leaders, %d agents and %d results over the replicas, want 1, %d and at least %d", leaders, agents, results, n, n)
	}
	if res.HubRSSPeak != largest {
		t.Errorf("hub peak RSS %d, want the largest replica's %d", res.HubRSSPeak, largest)
	}
	// the API probe's reads were answered by a follower (its histogram)
	if res.Summary.N == 0 || res.Summary.Errors != 0 || res.Summary.HubWithin100ms == nil {
		t.Errorf("summary reads on a follower: %+v, want answered reads counted by its histogram", res.Summary)
	}
	var replicaRows int
	for _, row := range Rows([]Result{res}) {
		if strings.Contains(row.Name, "leader's") || strings.Contains(row.Name, "follower's") {
			replicaRows++
			if v := row.Values[0]; math.IsNaN(v) || v <= 0 {
				t.Errorf("row %q: %v, want a measured figure", row.Name, v)
			}
		}
	}
	if replicaRows != 4 {
		t.Errorf("%d rows of the leader and the followers, want 4", replicaRows)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, []Result{res}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "600 nodes, 3 hubs") {
		t.Errorf("table's column does not name the replicas:\n%s", table.String())
	}
}

// TestScenarioSurvivesTheLeadersKill kills the leading replica (SIGKILL)
// halfway through the rollout: its agents move to the next replica, a
// follower leads within the lease TTL (with a margin for a loaded
// machine), its own fence dispatches the rest, and no item runs twice.
// The rollout outlasts the dead leader's lease (20 waves of a second, the
// kill after 10, a lease of 6 s): results on the followers start waves
// under that lease while it is valid, and only the new leader's after.
func TestScenarioSurvivesTheLeadersKill(t *testing.T) {
	bin := fleetwaveBinary(t)
	var progress bytes.Buffer
	const n = 600
	res, err := Run(t.Context(), Scenario{Bin: bin, Nodes: n, Duration: time.Second, MaxConcurrent: 30, Pushes: 1, Seed: 13, Replicas: 3, KillLeader: true,
		LeaseTTL: 6 * time.Second,
		Logger:   zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Progress: &progress})
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.RolloutState != fleetwave.RolloutCompleted || res.Completed != n || res.Duplicates != 0 || res.StatusItems != n {
		t.Errorf("rollout %s: %s, %d completed, %d run twice, %d completed in Git: want completed, %d, 0, %d",
			res.Rollout, res.RolloutState, res.Completed, res.Duplicates, res.StatusItems, n, n)
	}
	fo := res.Failover
	if fo == nil {
		t.Fatal("no failover measured")
	}
	if fo.DoneAtKill < n/2 || fo.DoneAtKill >= n {
		t.Errorf("killed at %d items done, want half of %d", fo.DoneAtKill, n)
	}
	if fo.NewLeader == "" || fo.Takeover <= 0 || fo.Takeover > 2*fo.LeaseTTL {
		t.Errorf("new leader %q after %v: want a follower within the lease TTL %v (twice it on a loaded machine)", fo.NewLeader, fo.Takeover, fo.LeaseTTL)
	}
	// a follower takes the lease only once the dead leader's has ended
	// (both read from the lease in Redis, in milliseconds)
	if fo.LeaseLeft <= 0 || fo.LeaseLeft > fo.LeaseTTL || fo.Takeover < fo.LeaseLeft-time.Millisecond {
		t.Errorf("the dead leader's lease valid %v more, a follower's after %v: want one within the TTL %v, then the follower's", fo.LeaseLeft, fo.Takeover, fo.LeaseTTL)
	}
	// the rest was dispatched under the new leader's fence, once it led
	// (seen within the 100 ms its gauge is read at)
	if fo.FirstDispatch <= 0 || fo.FirstDispatch+time.Second < fo.Takeover {
		t.Errorf("the new leader's first attempt %v after the kill, it led after %v: want one, once it led", fo.FirstDispatch, fo.Takeover)
	}
	// a push that lands as the new leader takes the lease is dispatched
	// (the probes pushed before it were, with one push in this run)
	if fo.TakeoverPush <= 0 || fo.TakeoverPush > 2*time.Minute {
		t.Errorf("a probe pushed as the new leader took the lease dispatched after %v: want one, within the scenario's wait", fo.TakeoverPush)
	}
	// the new leader, a warm follower, writes status under its fence
	// once it leads (Git's commit times are whole seconds)
	if fo.FirstStatus <= 0 || fo.FirstStatus+time.Second < fo.Takeover {
		t.Errorf("the new leader's first status commit %v after the kill, it led after %v: want one, once it led", fo.FirstStatus, fo.Takeover)
	}
	leaders, killed := 0, 0
	for _, h := range res.Hubs {
		if h.Leader {
			leaders++
			if h.ID != fo.NewLeader || h.Killed {
				t.Errorf("hub %s leads at the end, killed %v; the failover says %s", h.ID, h.Killed, fo.NewLeader)
			}
		}
		if h.Killed {
			killed++
		}
		if h.Results == 0 {
			t.Errorf("hub %s answered no result: each served its agents (the killed one until it died)", h.ID)
		}
	}
	if leaders != 1 || killed != 1 {
		t.Errorf("%d leaders at the end and %d hubs killed, want 1 and 1", leaders, killed)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, []Result{res}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "leader killed") || !strings.Contains(table.String(), "a follower's lease acquired after") {
		t.Errorf("table lacks the failover's column or rows:\n%s", table.String())
	}
}

// fakeHub is the agent side of a hub as the wire format says, for the
// fleet's own behaviour: it queues attempts per node, answers polls,
// records results and asks each node once for a full report.
type fakeHub struct {
	mu         sync.Mutex
	queue      map[string][]fleetwave.Attempt
	registered map[string]int
	reports    map[string]int
	results    map[string][]fleetwave.AttemptResult // attempt -> results
	askReport  map[string]bool
	tokens     map[string]string // token -> node
	wrongToken int
	// queries are each node's polls' queries, in order
	queries map[string][]url.Values
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/api/v1/agent/nodes/")
	node, rest, _ := strings.Cut(rest, "/")
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")] != node {
		h.wrongToken++
		w.WriteHeader(http.StatusForbidden)
		return
	}
	switch {
	case rest == "register" || rest == "report":
		var rep fleetwave.Report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil || rep.Node != node || rep.Instances == nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if rest == "register" {
			h.registered[node]++
		} else {
			h.reports[node]++
		}
		w.WriteHeader(http.StatusNoContent)
	case rest == "attempts":
		if h.queries != nil {
			h.queries[node] = append(h.queries[node], r.URL.Query())
		}
		atts := h.queue[node]
		delete(h.queue, node)
		if atts == nil {
			atts = []fleetwave.Attempt{}
		}
		ask := h.askReport[node]
		h.askReport[node] = false
		_ = json.NewEncoder(w).Encode(map[string]any{"attempts": atts, "report": ask})
	case strings.HasPrefix(rest, "attempts/") && strings.HasSuffix(rest, "/result"):
		var res fleetwave.AttemptResult
		if err := json.NewDecoder(r.Body).Decode(&res); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.results[res.AttemptID] = append(h.results[res.AttemptID], res)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// TestFleetSpeaksTheAgentProtocol drives 60 agents through 8 pollers (so
// they take turns): every agent registers, each attempt runs once even
// when delivered twice, results carry the failure mix's classes and a
// success's instance, and a poll asking for a report gets one. Polls say
// what the agent received as fleetwave agent does: the first resumes, the
// next say the highest delivery run.
func TestFleetSpeaksTheAgentProtocol(t *testing.T) {
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%02d", i)
	}
	nodes, _, err := Tokens(ids)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHub{queue: map[string][]fleetwave.Attempt{}, registered: map[string]int{}, reports: map[string]int{},
		results: map[string][]fleetwave.AttemptResult{}, askReport: map[string]bool{}, tokens: map[string]string{},
		queries: map[string][]url.Values{}}
	for _, n := range nodes {
		h.tokens[n.Token] = n.ID
		att := fleetwave.Attempt{ID: "r-g1." + n.ID + ".1", Item: "r-g1." + n.ID, Rollout: "r-g1", Node: n.ID, Block: "b",
			Action: "install", Generation: 3, TargetVersion: "1.2.3", Fence: 1, Delivery: 5}
		h.queue[n.ID] = []fleetwave.Attempt{att, att} // delivered twice: run once
	}
	h.askReport["n07"] = true
	srv := httptest.NewServer(h)
	defer srv.Close()
	f, err := New(Options{HubURL: srv.URL, Nodes: nodes, Duration: 10 * time.Millisecond, Transient: 0.25, Permanent: 0.25,
		Pollers: 8, RotateWait: 10 * time.Millisecond, Seed: 3, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = f.Run(ctx); close(done) }()
	err = waitFor(ctx, time.Minute, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.results) != len(nodes) || h.reports["n07"] != 1 {
			return false
		}
		for _, n := range nodes {
			if q := h.queries[n.ID]; len(q) < 3 || q[len(q)-1].Get("delivered") != "5" {
				return false
			}
		}
		return true
	})
	time.Sleep(50 * time.Millisecond) // a second delivery would have run by now
	cancel()
	<-done
	if err != nil {
		t.Fatalf("%d of %d results, report of n07 %d: %v", len(h.results), len(nodes), h.reports["n07"], err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	classes := map[fleetwave.ResultClass]int{}
	for id, rs := range h.results {
		if len(rs) != 1 {
			t.Errorf("attempt %s: %d results, want 1", id, len(rs))
			continue
		}
		classes[rs[0].Class]++
		if rs[0].Class == fleetwave.ResultSuccess {
			in := rs[0].Instance
			if in == nil || in.Version != "1.2.3" || in.Generation != 3 || in.State != fleetwave.StateInstalled || in.LastAttempt != id {
				t.Errorf("attempt %s: success with instance %+v, want version 1.2.3, generation 3, installed", id, in)
			}
		}
	}
	for _, c := range []fleetwave.ResultClass{fleetwave.ResultSuccess, fleetwave.ResultTransient, fleetwave.ResultPermanent} {
		if classes[c] == 0 {
			t.Errorf("no %s result among %v", c, classes)
		}
	}
	for _, n := range nodes {
		if h.registered[n.ID] != 1 {
			t.Errorf("%s registered %d times, want once", n.ID, h.registered[n.ID])
		}
	}
	if h.wrongToken != 0 {
		t.Errorf("%d requests with another node's token", h.wrongToken)
	}
	for _, n := range nodes {
		q := h.queries[n.ID]
		// n07's first answer asked for a report before the hub looked at
		// the poll: its second resumes again
		resumes := 1
		if n.ID == "n07" {
			resumes = 2
		}
		for i, v := range q {
			if got, want := v.Get("resume") == "true", i < resumes; got != want {
				t.Errorf("%s poll %d: resume %v, want %v (%v)", n.ID, i, got, want, q)
			}
			if i == 0 && v.Has("delivered") {
				t.Errorf("%s's first poll says delivered %s", n.ID, v.Get("delivered"))
			}
		}
		if last := q[len(q)-1].Get("delivered"); last != "5" {
			t.Errorf("%s's last poll says delivered %q, want 5", n.ID, last)
		}
	}
	st := f.Stats()
	if st.Redelivered != int64(len(nodes)) || st.Attempts != int64(len(nodes)) || st.InFlight != 0 {
		t.Errorf("stats %+v: want %d attempts, each redelivered once, none in flight", st, len(nodes))
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	nodes := []Node{{ID: "a", Token: "t"}}
	for name, o := range map[string]Options{
		"no hub":           {Nodes: nodes},
		"no nodes":         {HubURL: "http://x"},
		"shares above one": {HubURL: "http://x", Nodes: nodes, Transient: 0.6, Permanent: 0.5},
		"node twice":       {HubURL: "http://x", Nodes: append(nodes, nodes...)},
		"no token":         {HubURL: "http://x", Nodes: []Node{{ID: "a"}}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := Run(t.Context(), Scenario{Nodes: 10}); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Errorf("Run without a binary: %v", err)
	}
}

// TestH2CPollsShareFewConnections starts 2,000 requests at once over the
// fleet's h2c client against an h2c server with the hub's 250 streams per
// connection: they open one connection per 100 of them, where one
// HTTP/2 transport opened more connections than requests, and a result
// goes while polls and reports hold every stream of theirs. Then 1,000
// more requests than the connections have streams wait for a stream
// and all complete.
func TestH2CPollsShareFewConnections(t *testing.T) {
	var conns atomic.Int64
	var gate atomic.Pointer[chan struct{}] // closed: the polls answer
	release := make(chan struct{})
	gate.Store(&release)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusBadRequest)
			return
		}
		if r.Method == http.MethodGet || strings.HasSuffix(r.URL.Path, "/report") {
			<-*gate.Load()
		}
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 250}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	const polls = 2000
	rt := newTransport(Options{Pollers: polls, Posters: 64, H2C: true})
	client := &http.Client{Transport: rt}
	defer client.CloseIdleConnections()
	errs := make(chan error, polls+201)
	var wg sync.WaitGroup
	for range polls {
		wg.Go(func() {
			resp, err := client.Get(srv.URL + "/poll")
			if err == nil {
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("poll answered %s", resp.Status)
				}
				resp.Body.Close()
			}
			errs <- err
		})
	}
	// 200 reports hold every stream of the reports' connection (and wait
	// for one)
	for range 200 {
		wg.Go(func() {
			resp, err := client.Post(srv.URL+"/report", "application/json", strings.NewReader("{}"))
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		})
	}
	// A result posted while every poll and every report holds its stream
	// still goes.
	time.Sleep(200 * time.Millisecond)
	resp, err := client.Post(srv.URL+"/result", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("result posted beside %d polls: %v", polls, err)
	}
	resp.Body.Close()
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// 2,016 polls at 100 a connection, one connection for reports and one
	// for results.
	if n := conns.Load(); n > 23 {
		t.Errorf("%d requests opened %d connections, want at most 23", polls+201, n)
	}

	// more requests than streams: they take turns, none hangs
	release = make(chan struct{})
	gate.Store(&release)
	errs = make(chan error, 3*polls)
	for range 3000 {
		wg.Go(func() {
			resp, err := client.Get(srv.URL + "/poll")
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		})
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("3,000 requests over 2,100 streams did not complete within a minute")
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// gunzip is the decompressed content of the gzip file at path (a pprof
// profile is a gzipped protocol buffer, its strings in the clear).
func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}
