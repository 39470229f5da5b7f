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

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// procNode is one node's agent process, run from its own configuration
// file (`fleetwave agent --config`).
type procNode struct {
	node, dir, bin, hubURL string
}

func (n procNode) configPath() string { return filepath.Join(n.dir, "agent.yaml") }
func (n procNode) stateDir() string   { return filepath.Join(n.dir, "state") }

// writeConfig writes the node's agent configuration file with the
// capabilities and data addresses it advertises.
func (n procNode) writeConfig(t *testing.T, caps []string, addrs map[string]string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "hub: %s\nnode: %s\ntoken_file: token\nstate_dir: state\npoll_wait: 1s\nreport_interval: 1s\n", n.hubURL, n.node)
	if len(caps) > 0 {
		fmt.Fprintf(&b, "capabilities: [%s]\n", strings.Join(caps, ", "))
	}
	if len(addrs) > 0 {
		b.WriteString("addresses:\n")
		for k, v := range addrs {
			fmt.Fprintf(&b, "  %s: %q\n", k, v)
		}
	}
	if err := os.WriteFile(n.configPath(), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// start runs `fleetwave agent --config FILE` (restarted if it exits, as a
// service manager would).
func (n procNode) start(t *testing.T) *upgAgent {
	t.Helper()
	return startUpgAgent(t, n.node, n.bin, filepath.Join(n.dir, "agent.log"), "agent", "--config", n.configPath())
}

// newProcNodes prepares a directory and a token file per node.
func newProcNodes(t *testing.T, bin, hubURL string, nodes []string) map[string]procNode {
	t.Helper()
	root := t.TempDir()
	out := map[string]procNode{}
	for _, n := range nodes {
		dir := filepath.Join(root, n)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte("token-"+n+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out[n] = procNode{node: n, dir: dir, bin: bin, hubURL: hubURL}
	}
	return out
}

// TestNodeSideWithAgentProcesses runs the node-side scenarios over real
// `fleetwave agent` processes, each configured by its own file, against a
// hub on a real redis-server following a real git remote.
func TestNodeSideWithAgentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fleetwave binary")
	}
	start := time.Now()
	bin, err := upgBuild(t.TempDir(), "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built fleetwave in %v", time.Since(start).Round(time.Millisecond))
	t.Run("a hand-installed block is detected, skipped, then taken over", func(t *testing.T) {
		nodeSideProcTakeover(t, bin)
	})
	t.Run("a split action is refused while a node lacks the capability, then dispatched whole", func(t *testing.T) {
		nodeSideProcSplit(t, bin)
	})
	t.Run("an agent killed part way through an answer is sent again what it never took", func(t *testing.T) {
		nodeSideProcKilledMidAnswer(t, bin)
	})
	t.Logf("whole test %v", time.Since(start).Round(time.Millisecond))
}

// nodeSideProcTakeover: web was installed by hand on n1 (0.9 in the file
// its detect command reads) before n1's agent process started. The agent
// reports it managed_by cli; the BRC installs web on n2 and skips n1
// (cli_managed) without touching it. A pushed rollouts/ request takes it
// over; from then on the next generation upgrades it.
func nodeSideProcTakeover(t *testing.T, bin string) {
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
	ctx := context.Background()
	pn := newProcNodes(t, bin, "http://"+f.hub.Addr(), nodes)

	// installed by hand on n1, before its agent starts
	handDir := filepath.Join(pn["n1"].stateDir(), "blocks", "web")
	if err := os.MkdirAll(handDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(handDir, "version"), []byte("0.9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*upgAgent{}
	for _, n := range nodes {
		pn[n].writeConfig(t, nil, nil)
		procs[n] = pn[n].start(t)
	}

	var items []fleetwave.Item
	upgWait(t, procs, "web-g1: n2 installed, n1 settled", func() bool {
		r, its, err := f.hub.Engine().Rollout(ctx, "web-g1")
		n1, n2 := itemOf(its, "n1", "upgrade"), itemOf(its, "n2", "install")
		items = its
		return err == nil && r.Status == fleetwave.RolloutCompleted && n1 != nil && n2 != nil && n2.Status == fleetwave.ItemCompleted
	})
	if n1 := itemOf(items, "n1", "upgrade"); n1.Status != fleetwave.ItemSkipped || n1.Reason != fleetwave.ReasonCLIManaged || len(items) != 2 {
		t.Fatalf("web-g1 items = %+v, want n1 skipped cli_managed", items)
	}
	obs, _, err := f.hub.Engine().Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in := obs.Instance(fleetwave.InstanceKey{Node: "n1", Block: "web"}); in == nil || in.ManagedBy != fleetwave.ManagedByCLI || in.Version != "0.9" {
		t.Fatalf("n1's web as observed = %+v, want managed_by cli at 0.9", in)
	}
	if v, err := f.hub.Node(ctx, "n1"); err != nil || v.AgentVersion != "1.0.0" {
		t.Fatalf("n1's agent version as the hub knows it: %+v, %v; want the process's 1.0.0", v, err)
	}
	if v, runs := readTrim(filepath.Join(handDir, "version")), readTrim(filepath.Join(handDir, "runs")); v != "0.9" || runs != "" {
		t.Fatalf("the hand install was touched: version %q, runs %q", v, runs)
	}
	waitFile(t, remote, "status/nodes/n1.yaml", func(s string) bool { return strings.Contains(s, "managed_by: cli") })

	gittest.Push(t, remote, map[string]string{
		"rollouts/take-n1.cue": "kind: \"rollout\"\nname: \"take-n1\"\nbrc: \"web\"\naction_name: \"takeover\"\nnodes: [\"n1\"]\n",
	}, nil, "Take over the hand-installed web on n1")
	upgWait(t, procs, "manual-take-n1 completed", func() bool {
		r, its, err := f.hub.Engine().Rollout(ctx, "manual-take-n1")
		items = its
		return err == nil && r.Status == fleetwave.RolloutCompleted
	})
	if len(items) != 1 || items[0].Node != "n1" || items[0].Action != fleetwave.ActionTakeover || items[0].Status != fleetwave.ItemCompleted {
		t.Fatalf("takeover items = %+v", items)
	}
	upgWait(t, procs, "n1's agent records web as fleetwave's", func() bool {
		b, _ := os.ReadFile(filepath.Join(pn["n1"].stateDir(), "state.json"))
		return strings.Contains(string(b), `"managed_by": "web"`)
	})

	gittest.Push(t, remote, map[string]string{
		"brc/web.cue": strings.Replace(files["brc/web.cue"], `"1.0"`, `"2.0"`, 1),
	}, nil, "web 2.0")
	upgWait(t, procs, "n1 reports web 2.0 managed by web", func() bool {
		obs, _, err := f.hub.Engine().Observe(ctx)
		in := obs.Instance(fleetwave.InstanceKey{Node: "n1", Block: "web"})
		return err == nil && in != nil && in.Version == "2.0" && in.ManagedBy == "web"
	})
	// taken over at 0.9, then upgraded (to 1.0 by web-g1, which it
	// joined once managed, and to 2.0), never installed again
	if v, runs := readTrim(filepath.Join(handDir, "version")), readTrim(filepath.Join(handDir, "runs")); v != "2.0" || strings.Contains(runs, "install") || !strings.HasSuffix(runs, "upgrade") {
		t.Fatalf("n1's web: version %q, runs %q; want 2.0 by upgrades only", v, runs)
	}
	for _, n := range nodes {
		if s := procs[n].startCount(); s != 1 {
			t.Errorf("%s's agent was started %d times, want once", n, s)
		}
	}
}

// nodeSideProcSplit: job's shuffle action is split (all the requested
// nodes together or none), each node needing the capability
// network_shuffle and the data address shuffle, both from the agents'
// configuration files. n3's file lacks the capability: a request on
// n1..n3 is refused whole (placement_rejected) and nothing runs. The
// capability is added to n3's file and its agent process restarted; a new
// request then dispatches the three items in one wave, although the BRC's
// max_concurrent is 1.
func nodeSideProcSplit(t *testing.T, bin string) {
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
	ctx := context.Background()
	pn := newProcNodes(t, bin, "http://"+f.hub.Addr(), nodes)
	shuffle := []string{"network_shuffle"}
	addr := func(n string) map[string]string { return map[string]string{"shuffle": n + ".internal:7077"} }
	procs := map[string]*upgAgent{}
	for _, n := range nodes {
		caps := shuffle
		if n == "n3" {
			caps = nil
		}
		pn[n].writeConfig(t, caps, addr(n))
		procs[n] = pn[n].start(t)
	}
	// job installed on the three nodes: the agents register one by one, and
	// a node whose install is still pending or running would sit out the
	// shuffle request below (its instance busy), not be refused with it
	upgWait(t, procs, "job-g1 completed on the three nodes", func() bool {
		r, items, err := f.hub.Engine().Rollout(ctx, "job-g1")
		if err != nil || r.Status != fleetwave.RolloutCompleted || len(items) != len(nodes) {
			return false
		}
		for _, it := range items {
			if it.Status != fleetwave.ItemCompleted {
				return false
			}
		}
		return true
	})
	// the rollout may complete before every agent registered: wait for
	// each node's report, then check the address it carries
	upgWait(t, procs, "every node reported", func() bool {
		obs, _, err := f.hub.Engine().Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if obs[n] == nil {
				return false
			}
		}
		for _, n := range nodes {
			if got := obs[n].DataAddresses["shuffle"]; got != n+".internal:7077" {
				t.Fatalf("%s's shuffle address as reported: %q, want the one of its file", n, got)
			}
		}
		return true
	})

	shuffles := func() []string {
		var out []string
		for _, n := range nodes {
			out = append(out, readTrim(filepath.Join(pn[n].stateDir(), "blocks", "job", "shuffles")))
		}
		return out
	}
	request := func(name string) {
		gittest.Push(t, remote, map[string]string{
			"rollouts/" + name + ".cue": fmt.Sprintf("kind: \"rollout\"\nname: %q\nbrc: \"job\"\naction_name: \"shuffle\"\nnodes: [\"n1\", \"n2\", \"n3\"]\n", name),
		}, nil, "Run the shuffle job")
	}

	request("shuffle-1")
	var items []fleetwave.Item
	upgWait(t, procs, "manual-shuffle-1: every item terminal", func() bool {
		_, its, err := f.hub.Engine().Rollout(ctx, "manual-shuffle-1")
		items = its
		if err != nil || len(its) != 3 {
			return false
		}
		for _, it := range its {
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

	// the capability goes into n3's file; its agent process restarts
	pn["n3"].writeConfig(t, shuffle, addr("n3"))
	procs["n3"].stop()
	procs["n3"] = pn["n3"].start(t)
	upgWait(t, procs, "n3 advertises network_shuffle", func() bool {
		obs, _, err := f.hub.Engine().Observe(ctx)
		return err == nil && obs["n3"] != nil && slices.Contains(obs["n3"].Capabilities, "network_shuffle")
	})

	request("shuffle-2")
	upgWait(t, procs, "manual-shuffle-2 completed", func() bool {
		r, its, err := f.hub.Engine().Rollout(ctx, "manual-shuffle-2")
		items = its
		return err == nil && r.Status == fleetwave.RolloutCompleted
	})
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

// nodeSideProcKilledMidAnswer: two one-shot installs (blocks a and b) are
// queued for n1 while its agent process is stopped (after its first
// report), so its next poll takes both in one answer. Each action notes its block, then holds until the
// test lets it go. The agent process is killed (SIGKILL) while it runs the
// first of the two, and restarted. It says it took nothing after that
// first attempt: the hub sends the second item again at once, where it
// would have waited out the action's timeout (10 minutes) first. The
// first, whose command may still run, keeps its place until its deadline.
// Each action ran exactly once.
func nodeSideProcKilledMidAnswer(t *testing.T, bin string) {
	work := t.TempDir()
	marks, hold := filepath.Join(work, "marks"), filepath.Join(work, "hold")
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\nbackoff: \"1s\"\n",
		"nodes/n1.cue":  "kind: \"node\"\nname: \"n1\"\n",
	}
	brcs := map[string]string{}
	for _, b := range []string{"a", "b"} {
		files["blocks/"+b+".cue"] = fmt.Sprintf(`kind: "block"
name: %q
actions: {
	install: {
		command:  "echo %s >> %s; while [ -e %s ]; do sleep 0.05; done"
		one_shot: true
		timeout:  "10m"
	}
	upgrade: command: "true"
}
`, b, b, marks, hold)
		brcs["brc/"+b+".cue"] = fmt.Sprintf("kind: \"trigger\"\nname: %q\nblock_name: %q\ntarget_version: \"1\"\nnodes: [\"n1\"]\n", b, b)
	}
	remote := gittest.NewRemote(t, files)
	f := startNodeSideHub(t, remote, []string{"n1"})
	ctx := context.Background()
	pn := newProcNodes(t, bin, "http://"+f.hub.Addr(), []string{"n1"})["n1"]
	pn.writeConfig(t, nil, nil)
	// a node is planned once it reported: the agent registers, then stops
	proc := pn.start(t)
	upgWait(t, map[string]*upgAgent{"n1": proc}, "n1 reported", func() bool {
		obs, _, err := f.hub.Engine().Observe(ctx)
		return err == nil && obs["n1"] != nil
	})
	proc.stop()
	gittest.Push(t, remote, brcs, nil, "Install a and b on n1")
	item := func(rollout string) (fleetwave.Item, bool) {
		_, its, err := f.hub.Engine().Rollout(ctx, rollout)
		if err != nil || len(its) != 1 {
			return fleetwave.Item{}, false
		}
		return its[0], true
	}
	waitItems(t, f, "a-g1", "its item queued", func(_ fleetwave.Rollout, its []fleetwave.Item) bool {
		return len(its) == 1 && its[0].Status == fleetwave.ItemInProgress
	})
	waitItems(t, f, "b-g1", "its item queued", func(_ fleetwave.Rollout, its []fleetwave.Item) bool {
		return len(its) == 1 && its[0].Status == fleetwave.ItemInProgress
	})

	proc = pn.start(t)
	procs := map[string]*upgAgent{"n1": proc}
	upgWait(t, procs, "the first action of the answer runs", func() bool { return readTrim(marks) != "" })
	first := readTrim(marks)
	second := map[string]string{"a": "b", "b": "a"}[first]
	// both attempts came in one answer: the agent journalled the first and
	// holds the answer's second, untaken, in memory
	b, err := os.ReadFile(filepath.Join(pn.stateDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	firstItem, _ := item(first + "-g1")
	secondItem, _ := item(second + "-g1")
	if !strings.Contains(string(b), firstItem.LastAttempt) || strings.Contains(string(b), secondItem.LastAttempt) ||
		secondItem.Status != fleetwave.ItemInProgress || secondItem.Attempts != 1 {
		t.Fatalf("before the kill: %s's item %+v, %s's item %+v; journal:\n%s", first, firstItem, second, secondItem, b)
	}
	proc.kill()
	killed := time.Now()
	if err := os.Remove(hold); err != nil { // the next actions run through
		t.Fatal(err)
	}

	upgWait(t, procs, second+"-g1 completed", func() bool {
		it, ok := item(second + "-g1")
		return ok && it.Status == fleetwave.ItemCompleted
	})
	t.Logf("%s's item completed %v after the kill", second, time.Since(killed).Round(time.Millisecond))
	// the first's command may still run, orphaned: its item keeps its place
	// until its deadline (then the report journalling it blocks it), and is
	// never run again
	upgWait(t, procs, "a report from the restarted agent", func() bool {
		obs, _, err := f.hub.Engine().Observe(ctx)
		return err == nil && obs["n1"] != nil && obs["n1"].SentAt.After(killed)
	})
	if it, _ := item(first + "-g1"); it.Status != fleetwave.ItemInProgress || it.Attempts != 1 || it.LastAttempt != firstItem.LastAttempt {
		t.Fatalf("%s's item = %+v, want still in progress by its one attempt", first, it)
	}
	if it, _ := item(second + "-g1"); it.Attempts != 2 || it.LastAttempt == secondItem.LastAttempt {
		t.Fatalf("%s's item = %+v, want completed by a second attempt (the first, %s, never taken)", second, it, secondItem.LastAttempt)
	}
	if got := strings.Fields(readTrim(marks)); !slices.Equal(got, []string{first, second}) {
		t.Fatalf("actions run: %q, want %s then %s, once each", got, first, second)
	}
	if s := proc.startCount(); s != 2 {
		t.Errorf("the agent was started %d times, want twice", s)
	}
	if !strings.Contains(f.logs.String(), "attempts delivered that the agent never received") {
		t.Error("the hub did not log what it sent again")
	}
}
