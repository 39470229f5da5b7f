package hub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/browser"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// fleet is a three-node config repository without any trigger yet.
func fleet(lockDir string) map[string]string {
	files := map[string]string{
		"fleetwave.cue": `kind: "config"
name: "fleetwave"
max_concurrent: 5
`,
		// The install command fails (permanently) if another install of this
		// block is in flight anywhere: mkdir is atomic.
		"blocks/web.cue": fmt.Sprintf(`kind: "block"
name: "web"
actions: {
	install: {
		command: "mkdir %[1]s/inflight || exit 3; echo run >> \"$FLEETWAVE_STATE_DIR/runs\"; cp \"$FLEETWAVE_CONFIG\" \"$FLEETWAVE_STATE_DIR/config.yaml\"; sleep 0.3; rmdir %[1]s/inflight"
		timeout: "1m"
	}
	upgrade: {
		command: "echo up >> \"$FLEETWAVE_STATE_DIR/runs\""
	}
}
`, lockDir),
	}
	for i, crit := range []string{"low", "high", "medium"} {
		id := fmt.Sprintf("n%d", i+1)
		files["nodes/"+id+".cue"] = fmt.Sprintf(`kind: "node"
name: %q
criticality: %q
labels: { tier: "web" }
`, id, crit)
	}
	return files
}

const webBRC = `kind: "trigger"
name: "web"
block_name: "web"
target_version: "1.0.0"
nodes: ["n1", "n2", "n3"]
max_concurrent: 1
block_config_template: """
	node: {{ node.id }}
	version: {{ brc.target_version }}
	"""
`

type backend struct {
	name  string
	redis func(t *testing.T) string
}

var backends = []backend{
	{"real redis-server", func(t *testing.T) string { return "unix://" + redistest.Start(t).Addr }},
	{"embedded redis", func(*testing.T) string { return "embedded" }},
}

func TestPushBecomesWavesAndStatusCommits(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			redisURL := b.redis(t)
			lockDir := t.TempDir()
			remote := gittest.NewRemote(t, fleet(lockDir))
			f := startFleet(t, remote, redisURL, []string{"n1", "n2", "n3"})
			// the criticality order below holds among the nodes that had
			// reported when the rollout was planned: a node reporting later
			// joins as a later wave
			waitUntil(t, "the three agents reported", func() bool {
				obs, err := f.hub.Engine().Observations(context.Background())
				return err == nil && len(obs) == 3
			})

			pushed := gittest.Push(t, remote, map[string]string{"brc/web.cue": webBRC}, nil, "Roll out web 1.0.0")

			r, items := f.waitRollout(t, "web-g1", fleetwave.RolloutCompleted)
			// the push's own plan said what each of its steps took
			if !regexp.MustCompile(`"commit":"` + pushed + `".*"create_ms":\d+.*"message":"push planned"`).MatchString(f.logs.String()) {
				t.Errorf("no \"push planned\" line of %s with its steps", pushed)
			}
			// the sync loaded the push from the commit before: its snapshot
			// says which objects changed, so the push step found the BRC
			// without comparing every object
			if snap := f.hub.Snapshot(); snap.Commit != pushed || snap.ChangedSince == "" || snap.ChangedSince == pushed ||
				!slices.Equal(snap.Changed, []fleetwave.ObjectKey{fleetwave.Key(fleetwave.KindTrigger, "web")}) {
				t.Errorf("snapshot of %s: loaded from %q, changed %v; want from the commit before, the BRC alone", pushed, snap.ChangedSince, snap.Changed)
			}
			if r.Counters.Total != 3 || r.Counters.Done != 3 {
				t.Fatalf("rollout counters = %+v, want total=3 done=3", r.Counters)
			}
			// Criticality order (n2 high, n3 medium, n1 low), one item per wave.
			var order []string
			for _, it := range items {
				order = append(order, fmt.Sprintf("%s@wave%d:%s", it.Node, it.Wave, it.Status))
			}
			if want := []string{"n2@wave1:completed", "n3@wave2:completed", "n1@wave3:completed"}; strings.Join(order, " ") != strings.Join(want, " ") {
				t.Fatalf("items = %v, want %v", order, want)
			}
			// Never two in flight: dispatch..completion intervals do not overlap.
			sort.Slice(items, func(i, j int) bool { return items[i].DispatchedAt.Before(items[j].DispatchedAt) })
			for i := 1; i < len(items); i++ {
				if items[i].DispatchedAt.Before(items[i-1].CompletedAt) {
					t.Fatalf("item %s dispatched at %v before %s completed at %v", items[i].Node, items[i].DispatchedAt, items[i-1].Node, items[i-1].CompletedAt)
				}
			}
			// Each agent ran the block command exactly once, with its rendered config.
			for _, n := range []string{"n1", "n2", "n3"} {
				runs, err := os.ReadFile(filepath.Join(f.stateDir(n), "blocks", "web", "runs"))
				if err != nil || string(runs) != "run\n" {
					t.Fatalf("%s ran %q (err %v), want exactly one run", n, runs, err)
				}
				cfg, _ := os.ReadFile(filepath.Join(f.stateDir(n), "blocks", "web", "config.yaml"))
				if !strings.Contains(string(cfg), "node: "+n) {
					t.Fatalf("%s config = %q", n, cfg)
				}
			}
			// A status commit on the remote shows total=3 done=3.
			doc := waitFile(t, remote, "status/rollouts/web-g1.yaml", func(s string) bool {
				return strings.Contains(s, "status: completed") && strings.Contains(s, "done: 3") && strings.Contains(s, "total: 3")
			})
			if msg := gittest.Git(t, "", "--git-dir", strings.TrimPrefix(remote, "file://"), "log", "-1", "--format=%B", hub.DefaultStatusBranch); !strings.Contains(msg, "Fleetwave-Fence: ") || !strings.Contains(msg, "Fleetwave-Generation: trigger/web@1") {
				t.Fatalf("status commit message lacks its trailers:\n%s", msg)
			}
			if strings.Contains(doc, "node: n1\n    version") || strings.Contains(doc, "command:") {
				t.Fatalf("status leaks payloads:\n%s", doc)
			}
			// Every transition recorded for Git was delivered and acknowledged.
			waitUntil(t, "the outbox is delivered", func() bool {
				n, err := f.hub.Engine().OutboxLen(context.Background())
				return err == nil && n == 0
			})
			metrics := httpGet(t, "http://"+f.hub.Addr()+"/metrics")
			readsBefore := metricValue(t, metrics, "fleetwave_status_rollout_reads_total")
			for _, want := range []string{`fleetwave_lane_items{lane="web",state="in_flight"} 0`, `fleetwave_lane_items{lane="web",state="pending"} 0`,
				"fleetwave_outbox_events 0", `fleetwave_items{bucket="done"} 3`, `fleetwave_lane_counters{bucket="done",lane="web"} 3`, "fleetwave_status_rollout_reads_total ", "fleetwave_polls_waiting "} {
				if !strings.Contains(metrics, want) {
					t.Fatalf("/metrics lacks %s", want)
				}
			}
			// The console, in a real browser, shows the same counters.
			if b.name == "real redis-server" {
				dom := browser.DumpDOM(t, "http://"+f.hub.Addr()+"/", 3*time.Second)
				for _, want := range []string{`id="count-total">3<`, `id="count-done">3<`, `id="count-failed">0<`, "web-g1"} {
					if !strings.Contains(dom, want) {
						t.Fatalf("console lacks %s:\n%s", want, dom)
					}
				}
			}
			// `fleetwave plan` on a pull-request branch reads the committed
			// status: only the version bump is planned, in 3 waves.
			if b.name == "real redis-server" {
				checkPlan(t, remote)
			}
			good := f.hub.Snapshot().Commit
			if g := f.hub.Snapshot().Generation("trigger/web"); g != 1 {
				t.Fatalf("generation of trigger/web = %d, want 1", g)
			}

			// An invalid commit is rejected; the last good snapshot stays in force.
			bad := gittest.Push(t, remote, map[string]string{"nodes/n4.cue": "kind: \"node\"\nname: \"n4\"\ncriticality: \"urgent\"\n"}, nil, "Add n4")
			summary := waitFile(t, remote, "status/summary.yaml", func(s string) bool {
				return strings.Contains(s, "result: rejected") && strings.Contains(s, bad)
			})
			if !strings.Contains(summary, "nodes/n4.cue:3:") {
				t.Fatalf("summary does not point at the bad line:\n%s", summary)
			}
			// That status write did not read the finished rollout's items again.
			if reads := metricValue(t, httpGet(t, "http://"+f.hub.Addr()+"/metrics"), "fleetwave_status_rollout_reads_total"); reads != readsBefore {
				t.Fatalf("status writes read rollouts %v times after web-g1 finished, want %v", reads, readsBefore)
			}
			// ... and its committed document stayed as it was.
			if doc, ok := readStatus(t, remote, "status/rollouts/web-g1.yaml"); !ok || !strings.Contains(doc, "status: completed") || !strings.Contains(doc, "done: 3") {
				t.Fatalf("status/rollouts/web-g1.yaml after a later status write (found %v):\n%s", ok, doc)
			}
			if snap := f.hub.Snapshot(); snap.Commit != good || snap.Generation("trigger/web") != 1 {
				t.Fatalf("snapshot in force = %s gen %d, want the last good %s gen 1", snap.Commit, snap.Generation("trigger/web"), good)
			}
			if b.name == "real redis-server" {
				dom := browser.DumpDOM(t, "http://"+f.hub.Addr()+"/", 3*time.Second)
				if !strings.Contains(dom, "nodes/n4.cue:3:") || !strings.Contains(dom, "rejected") {
					t.Fatalf("console does not show the rejected commit's error:\n%s", dom)
				}
			}
			// The rejected commit created no work.
			if s, _ := f.hub.Summary(context.Background()); s.Counters.Total != 3 {
				t.Fatalf("counters after rejected commit = %+v", s.Counters)
			}
		})
	}
}

type runningFleet struct {
	hub    *hub.Hub
	dir    string
	logs   *lockedBuffer // every log line of the hub and the agents
	stop   func()
	agents int // how many agents the fleet runs
}

// lockedBuffer collects log lines from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (f *runningFleet) stateDir(node string) string { return filepath.Join(f.dir, node) }

func startFleet(t *testing.T, remote, redisURL string, nodes []string) *runningFleet {
	t.Helper()
	return startFleetWith(t, remote, redisURL, nodes, nil)
}

func startFleetWith(t *testing.T, remote, redisURL string, nodes []string, clk clock.Clock) *runningFleet {
	t.Helper()
	return startFleetCfg(t, remote, redisURL, nodes, clk, nil)
}

func startFleetCfg(t *testing.T, remote, redisURL string, nodes []string, clk clock.Clock, edit func(*hub.Config)) *runningFleet {
	t.Helper()
	dir := t.TempDir()
	tokens := map[string]string{}
	for _, n := range nodes {
		tokens[n] = hub.HashToken("token-" + n)
	}
	logs := &lockedBuffer{}
	log := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.DebugLevel)
	keyFile := filepath.Join(dir, "credentials.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := hub.Config{
		CredentialsKeyFile: keyFile,
		Repo:               hub.RepoConfig{URL: remote, Branch: "main", PollInterval: hub.Duration(100 * time.Millisecond)},
		Redis:              redisURL,
		Listen:             "127.0.0.1:0",
		DataDir:            filepath.Join(dir, "hub"),
		Status:             hub.StatusConfig{Interval: hub.Duration(200 * time.Millisecond)},
		Agents:             hub.AgentsConfig{Tokens: tokens},
		StepInterval:       hub.Duration(50 * time.Millisecond),
		HubID:              "test-hub",
	}
	ctx, cancel := context.WithCancel(context.Background())
	if edit != nil {
		edit(&cfg)
	}
	opts := []hub.Option{hub.WithLogger(log)}
	if clk != nil {
		opts = append(opts, hub.WithClock(clk))
	}
	h, err := hub.New(ctx, cfg, opts...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := h.Run(ctx); err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	for _, n := range nodes {
		wg.Go(func() {
			err := agent.Run(ctx, agent.Config{
				HubURL: "http://" + h.Addr(), Node: n, Token: "token-" + n,
				StateDir: filepath.Join(dir, n), PollWait: time.Second, ReportInterval: 5 * time.Second,
				Logger: log.With().Str("node", n).Logger(),
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("agent %s: %v", n, err)
			}
		})
	}
	f := &runningFleet{hub: h, dir: dir, logs: logs, agents: len(nodes)}
	f.stop = func() { cancel(); wg.Wait(); h.Close() }
	t.Cleanup(f.stop)
	return f
}

func (f *runningFleet) waitRollout(t *testing.T, id string, want fleetwave.RolloutStatus) (fleetwave.Rollout, []fleetwave.Item) {
	t.Helper()
	return f.waitRolloutWithin(t, id, want, 60*time.Second)
}

func (f *runningFleet) waitRolloutWithin(t *testing.T, id string, want fleetwave.RolloutStatus, within time.Duration) (fleetwave.Rollout, []fleetwave.Item) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, items, err := f.hub.Engine().Rollout(context.Background(), id)
		if err == nil && r.Status == want {
			return r, items
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout %s: status %q (err %v), want %q; items %+v", id, r.Status, err, want, items)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEveryAgent waits until rollout id is completed with an item for
// every agent of the fleet. A rollout completes as soon as the nodes
// that had reported when it was planned are done; agents whose first
// report came later join it as a later wave, and it completes again.
func (f *runningFleet) waitEveryAgent(t *testing.T, id string) (fleetwave.Rollout, []fleetwave.Item) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, items, err := f.hub.Engine().Rollout(context.Background(), id)
		if err == nil && r.Status == fleetwave.RolloutCompleted && len(items) >= f.agents {
			return r, items
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout %s: status %q (err %v) with %d items, want completed with one per agent (%d); items %+v", id, r.Status, err, len(items), f.agents, items)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readStatus reads a status file from the status branch (the default,
// hub.DefaultStatusBranch), or from main when the hub writes status there.
func readStatus(t *testing.T, remote, path string) (string, bool) {
	t.Helper()
	if s, ok := gittest.ReadFileAt(t, remote, hub.DefaultStatusBranch, path); ok {
		return s, true
	}
	return gittest.ReadFile(t, remote, path)
}

// waitFile waits until path on the remote (a status file on the status
// branch, another on main) satisfies ok.
func waitFile(t *testing.T, remote, path string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, found := gittest.ReadFile(t, remote, path)
		if strings.HasPrefix(path, "status/") {
			s, found = readStatus(t, remote, path)
		}
		if found && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on the remote never matched; last:\n%s\nlog: %v", path, s, gittest.Log(t, remote))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func berlin(t *testing.T) *time.Location {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func checkPlan(t *testing.T, remote string) {
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "-q", remote, work)
	gittest.Git(t, work, "checkout", "-q", "-b", "bump")
	if err := os.WriteFile(filepath.Join(work, "brc", "web.cue"), []byte(strings.Replace(webBRC, `"1.0.0"`, `"1.1.0"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "commit", "-q", "-am", "web 1.1.0")
	rep, err := hub.Plan(context.Background(), hub.PlanRequest{Dir: work, Branch: "main", Base: "", Head: "", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Objects) != 1 || rep.Objects[0].Key != "trigger/web" || rep.Objects[0].From != 1 || rep.Objects[0].To != 2 {
		t.Fatalf("plan objects = %+v, want trigger/web 1 -> 2", rep.Objects)
	}
	if len(rep.Rollouts) != 1 || len(rep.Rollouts[0].Lanes) != 1 || len(rep.Rollouts[0].Lanes[0].Waves) != 3 {
		t.Fatalf("plan rollouts = %+v, want one rollout in 3 waves", rep.Rollouts)
	}
	var sb strings.Builder
	rep.WriteText(&sb, true)
	for _, want := range []string{"`trigger/web`", "generation 1 -> 2", "lane web wave 1: upgrade web@n2 -> 1.1.0 config ", "wave 3: upgrade web@n1"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("plan markdown lacks %q:\n%s", want, sb.String())
		}
	}
	if strings.Contains(sb.String(), "version: 1.1.0") {
		t.Fatalf("plan leaks a rendered config:\n%s", sb.String())
	}
	if rep.ApprovalsNeeded != 0 || rep.Rollouts[0].ApprovalRequired || !rep.Rollouts[0].ConfigChange {
		t.Fatalf("without the gate: approvals %d, rollout %+v", rep.ApprovalsNeeded, rep.Rollouts[0])
	}

	// Under the approval gate the version change needs an approved request;
	// new manual requests show the nodes they would pin, or why not.
	for name, body := range map[string]string{
		"web-again": "kind: \"rollout\"\nname: \"web-again\"\nbrc: \"web\"\nselector: match_labels: tier: \"web\"\n",
		"nobody":    "kind: \"rollout\"\nname: \"nobody\"\nbrc: \"web\"\nselector: match_labels: tier: \"db\"\n",
	} {
		if err := os.MkdirAll(filepath.Join(work, "rollouts"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "rollouts", name+".cue"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nightly := "kind: \"trigger\"\nname: \"nightly\"\nblock_name: \"web\"\ntrigger_type: \"schedule\"\naction_name: \"upgrade\"\n" +
		"cron_expression: \"30 2 * * *\"\ntimezone: \"Europe/Berlin\"\nnodes: [\"n1\"]\n"
	if err := os.WriteFile(filepath.Join(work, "brc", "nightly.cue"), []byte(nightly), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "rollouts", "brc")
	gittest.Git(t, work, "commit", "-q", "-m", "two requests and a schedule")
	gate := true
	gated, err := hub.Plan(context.Background(), hub.PlanRequest{Dir: work, Branch: "main", Now: time.Now(), ApprovalRequired: &gate})
	if err != nil {
		t.Fatal(err)
	}
	if gated.ApprovalsNeeded != 2 || !gated.Rollouts[0].ApprovalRequired {
		t.Fatalf("under the gate: %d approvals needed, rollouts %+v; want the git rollout and the manual one", gated.ApprovalsNeeded, gated.Rollouts)
	}
	if len(gated.Requests) != 2 || gated.Requests[0].Name != "nobody" || gated.Requests[0].Code != "no_matching_nodes" ||
		gated.Requests[1].Name != "web-again" || strings.Join(gated.Requests[1].Targets, ",") != "n1,n2,n3" {
		t.Fatalf("requests = %+v", gated.Requests)
	}
	if len(gated.Schedules) != 1 || gated.Schedules[0].Trigger != "nightly" || gated.Schedules[0].NextFireAt == "" {
		t.Fatalf("schedules = %+v", gated.Schedules)
	}
	if at, _ := time.Parse(time.RFC3339, gated.Schedules[0].NextFireAt); at.In(berlin(t)).Format("15:04") != "02:30" {
		t.Fatalf("next fire %s is not 02:30 in Berlin", gated.Schedules[0].NextFireAt)
	}
	sb.Reset()
	gated.WriteText(&sb, false)
	for _, want := range []string{"approval: REQUIRED", "Request nobody (brc web) would be refused: no_matching_nodes", "Request web-again (brc web) pins 3 node(s): n1, n2, n3", "Approvals needed: 2"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("plan text lacks %q:\n%s", want, sb.String())
		}
	}

	// No change at all says so.
	same, err := hub.Plan(context.Background(), hub.PlanRequest{Dir: work, Branch: "main", Base: "HEAD", Head: "HEAD", Now: time.Now()})
	if err != nil || !same.NoChanges() {
		t.Fatalf("plan HEAD..HEAD = %+v (%v), want no changes", same, err)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// metricValue returns the value of an unlabelled series in a /metrics page.
func metricValue(t *testing.T, page, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}
