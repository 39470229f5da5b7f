package hub_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// nodeAgent is one node's agent, stoppable on its own.
type nodeAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (a *nodeAgent) stop() {
	a.cancel()
	<-a.done
}

// runNodeAgent runs node's agent with the capabilities and data addresses
// it advertises, reporting every second.
func runNodeAgent(t *testing.T, hubURL, node, stateDir string, caps []string, addrs map[string]string, log zerolog.Logger) *nodeAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &nodeAgent{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		err := agent.Run(ctx, agent.Config{
			HubURL: hubURL, Node: node, Token: "token-" + node, StateDir: stateDir,
			Capabilities: caps, DataAddresses: addrs,
			PollWait: time.Second, ReportInterval: time.Second,
			Logger: log.With().Str("node", node).Logger(),
		})
		if err != nil && ctx.Err() == nil {
			t.Errorf("agent %s: %v", node, err)
		}
	}()
	t.Cleanup(a.stop)
	return a
}

// startNodeSideHub starts a hub on a real redis-server without agents of
// its own; the agents of nodes may connect.
func startNodeSideHub(t *testing.T, remote string, nodes []string) *runningFleet {
	t.Helper()
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	redisURL := "unix://" + redistest.Start(t).Addr
	return startFleetCfg(t, remote, redisURL, nil, nil, func(c *hub.Config) {
		c.Agents.Tokens = tokensFor(nodes)
		c.ReconcileInterval = hub.Duration(200 * time.Millisecond)
	})
}

// waitItems waits until the items of rollout id satisfy ok.
func waitItems(t *testing.T, f *runningFleet, id, what string, ok func(fleetwave.Rollout, []fleetwave.Item) bool) []fleetwave.Item {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, items, err := f.hub.Engine().Rollout(context.Background(), id)
		if err == nil && ok(r, items) {
			return items
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout %s never showed %s: %+v (err %v), items %+v", id, what, r, err, items)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func itemOf(items []fleetwave.Item, node, action string) *fleetwave.Item {
	for i := range items {
		if items[i].Node == node && items[i].Action == action {
			return &items[i]
		}
	}
	return nil
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// TestNodeSideHandInstalledBlockIsDetectedSkippedAndTakenOver: web was
// installed by hand on n1 (version 0.9 in the file its detect command
// reads) before n1's agent started. The agent reports it managed_by cli;
// the BRC installs web on n2 and skips n1 (cli_managed), leaving the hand
// install alone. A pushed rollouts/ request takes it over (the agent's
// built-in takeover: the block has no takeover action); status shows the
// takeover with its actor; from then on fleetwave owns it, and the next
// generation upgrades it.
func TestNodeSideHandInstalledBlockIsDetectedSkippedAndTakenOver(t *testing.T) {
	nodes := []string{"n1", "n2"}
	files := map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/web.cue": `kind: "block"
name: "web"
actions: {
	install: command: "echo \"$FLEETWAVE_VERSION\" > \"$FLEETWAVE_STATE_DIR/version\"; echo install >> \"$FLEETWAVE_STATE_DIR/runs\""
	upgrade: command: "echo \"$FLEETWAVE_VERSION\" > \"$FLEETWAVE_STATE_DIR/version\"; echo upgrade >> \"$FLEETWAVE_STATE_DIR/runs\""
}
detect: {
	command: "cat \"$FLEETWAVE_STATE_DIR/version\" 2>/dev/null || exit 1"
	timeout: "5s"
}
`,
		"brc/web.cue": "kind: \"trigger\"\nname: \"web\"\nblock_name: \"web\"\ntarget_version: \"1.0\"\nnodes: [\"n1\", \"n2\"]\nmax_concurrent: 2\n",
	}
	for _, n := range nodes {
		files["nodes/"+n+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\n", n)
	}
	remote := gittest.NewRemote(t, files)
	f := startNodeSideHub(t, remote, nodes)
	url := "http://" + f.hub.Addr()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)

	// installed by hand on n1, before its agent starts
	handDir := filepath.Join(f.dir, "n1", "blocks", "web")
	if err := os.MkdirAll(handDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(handDir, "version"), []byte("0.9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		runNodeAgent(t, url, n, f.stateDir(n), nil, nil, log)
	}

	// detected, reported managed_by cli, skipped by the BRC
	items := waitItems(t, f, "web-g1", "n2 installed and n1 skipped", func(r fleetwave.Rollout, items []fleetwave.Item) bool {
		n1, n2 := itemOf(items, "n1", "upgrade"), itemOf(items, "n2", "install")
		return r.Status == fleetwave.RolloutCompleted && n1 != nil && n2 != nil && n2.Status == fleetwave.ItemCompleted
	})
	if n1 := itemOf(items, "n1", "upgrade"); n1.Status != fleetwave.ItemSkipped || n1.Reason != fleetwave.ReasonCLIManaged || len(items) != 2 {
		t.Fatalf("web-g1 items = %+v, want n1 skipped cli_managed", items)
	}
	obs, _, err := f.hub.Engine().Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in := obs.Instance(fleetwave.InstanceKey{Node: "n1", Block: "web"}); in == nil || in.ManagedBy != fleetwave.ManagedByCLI || in.Version != "0.9" {
		t.Fatalf("n1's web as observed = %+v, want managed_by cli at 0.9", in)
	}
	if !slices.Contains(obs["n1"].Detected, "web") || !slices.Contains(obs["n2"].Detected, "web") {
		t.Fatalf("reports' detected: n1 %v, n2 %v", obs["n1"].Detected, obs["n2"].Detected)
	}
	waitFile(t, remote, "status/nodes/n1.yaml", func(s string) bool { return strings.Contains(s, "managed_by: cli") })
	if v, runs := readTrim(filepath.Join(handDir, "version")), readTrim(filepath.Join(handDir, "runs")); v != "0.9" || runs != "" {
		t.Fatalf("the hand install was touched: version %q, runs %q", v, runs)
	}

	// a takeover request, pushed to the repository
	gittest.Push(t, remote, map[string]string{
		"rollouts/take-n1.cue": "kind: \"rollout\"\nname: \"take-n1\"\nbrc: \"web\"\naction_name: \"takeover\"\nnodes: [\"n1\"]\n",
	}, nil, "Take over the hand-installed web on n1")
	r, items := f.waitRollout(t, "manual-take-n1", fleetwave.RolloutCompleted)
	if len(items) != 1 || items[0].Node != "n1" || items[0].Action != fleetwave.ActionTakeover || items[0].Status != fleetwave.ItemCompleted {
		t.Fatalf("takeover items = %+v", items)
	}
	if r.Source.Actor != gittest.AuthorEmail || r.Source.Kind != fleetwave.SourceManual {
		t.Fatalf("takeover source = %+v, want the pusher as actor", r.Source)
	}
	waitFile(t, remote, "status/rollouts/manual-take-n1.yaml", func(s string) bool {
		return strings.Contains(s, "action: takeover") && strings.Contains(s, "actor: "+gittest.AuthorEmail) && strings.Contains(s, "status: completed")
	})
	// fleetwave owns it now: the agent's state records it as web's
	waitUntil(t, "n1's agent records web as fleetwave's", func() bool {
		b, _ := os.ReadFile(filepath.Join(f.stateDir("n1"), "state.json"))
		return strings.Contains(string(b), `"managed_by": "web"`)
	})

	// the next generation upgrades it, like any instance fleetwave manages
	gittest.Push(t, remote, map[string]string{
		"brc/web.cue": strings.Replace(files["brc/web.cue"], `"1.0"`, `"2.0"`, 1),
	}, nil, "web 2.0")
	waitItems(t, f, "web-g2", "both nodes upgraded", func(r fleetwave.Rollout, items []fleetwave.Item) bool {
		n1, n2 := itemOf(items, "n1", "upgrade"), itemOf(items, "n2", "upgrade")
		return r.Status == fleetwave.RolloutCompleted && n1 != nil && n2 != nil &&
			n1.Status == fleetwave.ItemCompleted && n2.Status == fleetwave.ItemCompleted
	})
	if v := readTrim(filepath.Join(handDir, "version")); v != "2.0" {
		t.Fatalf("n1's web is at %q, want 2.0", v)
	}
	waitUntil(t, "n1 reports web 2.0 managed by web", func() bool {
		obs, _, err := f.hub.Engine().Observe(context.Background())
		in := obs.Instance(fleetwave.InstanceKey{Node: "n1", Block: "web"})
		return err == nil && in != nil && in.Version == "2.0" && in.ManagedBy == "web"
	})
}

// TestNodeSideSplitActionPlacementRejectedThenDispatchedWhole: job's
// shuffle action is split: it runs on all the requested nodes together or
// on none, each needing the capability network_shuffle and the data
// address shuffle. n3's agent does not advertise the capability: a
// request for shuffle on n1..n3 is refused whole (placement_rejected,
// naming n3 and what it lacks) and nothing runs. Once n3's agent restarts
// advertising it, a new request dispatches the three items in one wave,
// although the BRC's max_concurrent is 1.
func TestNodeSideSplitActionPlacementRejectedThenDispatchedWhole(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	files := map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/job.cue": `kind: "block"
name: "job"
actions: {
	install: command: "true"
	upgrade: command: "true"
	shuffle: {
		command:   "echo shuffled >> \"$FLEETWAVE_STATE_DIR/shuffles\""
		placement: "split"
		requires: ["network_shuffle", "address:shuffle"]
	}
}
`,
		"brc/job.cue": "kind: \"trigger\"\nname: \"job\"\nblock_name: \"job\"\ntarget_version: \"1\"\nmax_concurrent: 1\n",
	}
	for _, n := range nodes {
		files["nodes/"+n+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\n", n)
	}
	remote := gittest.NewRemote(t, files)
	f := startNodeSideHub(t, remote, nodes)
	url := "http://" + f.hub.Addr()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	shuffle := []string{"network_shuffle"}
	addr := func(n string) map[string]string { return map[string]string{"shuffle": n + ".internal:7077"} }
	runNodeAgent(t, url, "n1", f.stateDir("n1"), shuffle, addr("n1"), log)
	runNodeAgent(t, url, "n2", f.stateDir("n2"), shuffle, addr("n2"), log)
	n3 := runNodeAgent(t, url, "n3", f.stateDir("n3"), nil, addr("n3"), log)
	// job installed on the three nodes: the agents register one by one,
	// and a node whose install is still pending or running would sit out
	// the request below (its instance busy), not be refused with it
	waitItems(t, f, "job-g1", "job installed on the three nodes", func(r fleetwave.Rollout, items []fleetwave.Item) bool {
		if r.Status != fleetwave.RolloutCompleted || len(items) != len(nodes) {
			return false
		}
		for _, it := range items {
			if it.Status != fleetwave.ItemCompleted {
				return false
			}
		}
		return true
	})

	shuffles := func() []string {
		var out []string
		for _, n := range nodes {
			out = append(out, readTrim(filepath.Join(f.stateDir(n), "blocks", "job", "shuffles")))
		}
		return out
	}
	request := func(name string) {
		gittest.Push(t, remote, map[string]string{
			"rollouts/" + name + ".cue": fmt.Sprintf("kind: \"rollout\"\nname: %q\nbrc: \"job\"\naction_name: \"shuffle\"\nnodes: [\"n1\", \"n2\", \"n3\"]\n", name),
		}, nil, "Run the shuffle job")
	}

	request("shuffle-1")
	items := waitItems(t, f, "manual-shuffle-1", "every item terminal", func(r fleetwave.Rollout, items []fleetwave.Item) bool {
		if len(items) != 3 {
			return false
		}
		for _, it := range items {
			if !it.Status.Terminal() {
				return false
			}
		}
		return true
	})
	const lack = "split action shuffle on n1, n2, n3: n3 lacks capability network_shuffle"
	for _, it := range items {
		if it.Status != fleetwave.ItemBlocked || it.Reason != "placement_rejected" || it.Message != lack || it.Attempts != 0 {
			t.Fatalf("item %s = %+v, want blocked placement_rejected %q", it.Node, it, lack)
		}
	}
	if got := shuffles(); strings.Join(got, "") != "" {
		t.Fatalf("a refused split action ran: %q", got)
	}
	waitFile(t, remote, "status/rollouts/manual-shuffle-1.yaml", func(s string) bool {
		return strings.Contains(s, "reason: placement_rejected") && strings.Contains(s, "n3 lacks capability network_shuffle")
	})

	// n3's agent restarts advertising the capability
	n3.stop()
	runNodeAgent(t, url, "n3", f.stateDir("n3"), shuffle, addr("n3"), log)
	waitUntil(t, "n3 advertises network_shuffle", func() bool {
		obs, _, err := f.hub.Engine().Observe(context.Background())
		return err == nil && obs["n3"] != nil && slices.Contains(obs["n3"].Capabilities, "network_shuffle")
	})

	request("shuffle-2")
	_, items = f.waitRollout(t, "manual-shuffle-2", fleetwave.RolloutCompleted)
	if len(items) != 3 {
		t.Fatalf("items = %+v", items)
	}
	for _, it := range items {
		if it.Status != fleetwave.ItemCompleted || it.Action != "shuffle" || it.Wave != items[0].Wave {
			t.Fatalf("item %s = %+v, want all three completed in one wave", it.Node, it)
		}
	}
	if got := shuffles(); !slices.Equal(got, []string{"shuffled", "shuffled", "shuffled"}) {
		t.Fatalf("shuffles per node = %q, want one on each", got)
	}
}
