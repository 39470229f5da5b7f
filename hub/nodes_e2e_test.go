package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// writeFleet is a three-node repository with one node file per format,
// each with comments (JSON has none), and a block whose actions record
// each run in the agent's state directory.
func writeFleet() map[string]string {
	return map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\nmax_concurrent: 5\n",
		"blocks/app.cue": `kind: "block"
name: "app"
actions: {
	install: command: "echo install >> \"$FLEETWAVE_STATE_DIR/runs\""
	upgrade: command: "echo upgrade >> \"$FLEETWAVE_STATE_DIR/runs\""
	restart: command: "echo restart >> \"$FLEETWAVE_STATE_DIR/runs\""
}
`,
		"nodes/n1.cue": `// n1: the first web node
kind:        "node"
name:        "n1"
criticality: "low" // paged by nobody

// what the selectors see
labels: {
	tier: "web"
	rack: "r1"
}
`,
		"nodes/n2.yaml": `# n2: the second web node
kind: node
name: n2   # its id
criticality: high

# what the selectors see
labels:
  tier: web
  rack: r2
`,
		"nodes/n3.json": "{\n  \"kind\": \"node\",\n  \"name\": \"n3\",\n  \"labels\": {\"tier\": \"db\"}\n}\n",
	}
}

func appBRC(version string) string {
	return fmt.Sprintf("kind: \"trigger\"\nname: \"app\"\nblock_name: \"app\"\ntarget_version: %q\nnodes: [\"n1\", \"n2\", \"n3\"]\n", version)
}

// writeIdentities: alice (admin), bob (operator), vic (viewer).
func writeIdentities(c *hub.Config) {
	c.ReconcileInterval = hub.Duration(300 * time.Millisecond)
	c.Identities = []hub.Identity{
		{Name: "alice", Role: "admin", TokenSHA256: hub.HashToken("tok-alice")},
		{Name: "bob", Role: "operator", TokenSHA256: hub.HashToken("tok-bob")},
		{Name: "vic", Role: "viewer", TokenSHA256: hub.HashToken("tok-vic")},
	}
}

// appRuns is what the app block's actions recorded on node.
func appRuns(f *runningFleet, node string) string {
	b, _ := os.ReadFile(filepath.Join(f.stateDir(node), "blocks", "app", "runs"))
	return string(b)
}

// bareDir is the directory of a file:// remote.
func bareDir(remote string) string { return strings.TrimPrefix(remote, "file://") }

// commitText is a commit's author, subject, body and trailers on the remote.
func commitText(t *testing.T, remote, commit string) string {
	t.Helper()
	return gittest.Git(t, "", "--git-dir", bareDir(remote), "show", "-s", "--format=%an <%ae>%n%B", commit)
}

// pathCommits counts the commits of main that touch path.
func pathCommits(t *testing.T, remote, path string) int {
	t.Helper()
	out := gittest.Git(t, "", "--git-dir", bareDir(remote), "rev-list", "main", "--", path)
	if out == "" {
		return 0
	}
	return len(strings.Split(out, "\n"))
}

// apiJSON calls the API and decodes a 2xx answer into v.
func apiJSON(t *testing.T, addr, method, path, token, body string, want int, v any) string {
	t.Helper()
	st, b := apiCall(t, addr, method, path, token, body)
	if st != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, st, want, b)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(b), v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return b
}

func waitNode(t *testing.T, f *runningFleet, id string, ok func(*fleetwave.Node) bool) {
	t.Helper()
	waitUntil(t, "the snapshot shows the written "+id, func() bool {
		s := f.hub.Snapshot()
		return s != nil && s.Nodes[id] != nil && ok(s.Nodes[id])
	})
}

// TestNodeLabelsAndDrainThroughTheAPI: label and drain writes are commits
// of the node's own file, authored by the hub with the caller in a
// trailer, the rest of the file as written; an invalid set writes
// nothing; a draining node's item waits with node_draining and runs once
// it is undrained.
func TestNodeLabelsAndDrainThroughTheAPI(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	remote := gittest.NewRemote(t, writeFleet())
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3"}, nil, writeIdentities)
	addr := f.hub.Addr()
	waitUntil(t, "a snapshot", func() bool { return f.hub.Snapshot() != nil })

	t.Run("reads need a token once identities are configured", func(t *testing.T) {
		if st, b := apiCall(t, addr, "GET", "/api/v1/nodes", "", ""); st != http.StatusUnauthorized || errCode(b) != "unauthorized" {
			t.Fatalf("GET /api/v1/nodes without a token: %d %s", st, b)
		}
		if st, b := apiCall(t, addr, "GET", "/api/v1/summary", "", ""); st != http.StatusUnauthorized {
			t.Fatalf("GET /api/v1/summary without a token: %d %s", st, b)
		}
		if st, _ := apiCall(t, addr, "GET", "/", "", ""); st != http.StatusOK {
			t.Fatalf("the console page: %d", st)
		}
		var page api.NodesAnswer
		apiJSON(t, addr, "GET", "/api/v1/nodes?limit=2", "tok-vic", "", 200, &page)
		if len(page.Nodes) != 2 || page.Nodes[0].ID != "n1" || page.Nodes[1].ID != "n2" || page.Next == "" {
			t.Fatalf("first page: %+v", page)
		}
		if page.Nodes[0].Criticality != "low" || page.Nodes[1].Criticality != "high" || page.Nodes[0].Labels["rack"] != "r1" {
			t.Fatalf("node views: %+v", page.Nodes)
		}
		apiJSON(t, addr, "GET", "/api/v1/nodes?limit=2&cursor="+page.Next, "tok-vic", "", 200, &page)
		if len(page.Nodes) != 1 || page.Nodes[0].ID != "n3" || page.Next != "" || page.Nodes[0].Criticality != "medium" {
			t.Fatalf("second page: %+v", page)
		}
		if st, b := apiCall(t, addr, "GET", "/api/v1/nodes/nope", "tok-vic", ""); st != http.StatusNotFound || errCode(b) != "not_found" {
			t.Fatalf("an unknown node: %d %s", st, b)
		}
	})

	labelsCases := []struct {
		node, path, token, actor string
		keep                     []string // lines the file keeps
	}{
		{"n1", "nodes/n1.cue", "tok-bob", "bob", []string{"// n1: the first web node", "criticality: \"low\" // paged by nobody", "// what the selectors see"}},
		{"n2", "nodes/n2.yaml", "tok-alice", "alice", []string{"# n2: the second web node", "name: n2   # its id", "# what the selectors see"}},
	}
	for _, tc := range labelsCases {
		t.Run("labels of "+tc.path, func(t *testing.T) {
			want := map[string]string{"tier": "web", "rack": "r9", "example.com/zone": "b"}
			var w api.NodeWrite
			apiJSON(t, addr, "PUT", "/api/v1/nodes/"+tc.node+"/labels", tc.token, `{"labels":{"tier":"web","rack":"r9","example.com/zone":"b"},"reason":"moved to rack 9"}`, 200, &w)
			if w.Commit == "" || !maps.Equal(w.Node.Labels, want) {
				t.Fatalf("answer %+v", w)
			}
			msg := commitText(t, remote, w.Commit)
			for _, line := range []string{"fleetwave hub <", "nodes: labels of " + tc.node + " (by " + tc.actor + ")", "Fleetwave-Actor: " + tc.actor, "Fleetwave-Reason: moved to rack 9"} {
				if !strings.Contains(msg, line) {
					t.Fatalf("commit lacks %q:\n%s", line, msg)
				}
			}
			if err := exec.Command("git", "--git-dir", bareDir(remote), "merge-base", "--is-ancestor", w.Commit, "main").Run(); err != nil {
				t.Fatalf("commit %s is not on main: %v", w.Commit, err)
			}
			doc, ok := gittest.ReadFile(t, remote, tc.path)
			if !ok {
				t.Fatalf("%s is gone", tc.path)
			}
			for _, line := range append(tc.keep, "example.com/zone", "r9") {
				if !strings.Contains(doc, line) {
					t.Fatalf("%s lacks %q:\n%s", tc.path, line, doc)
				}
			}
			waitNode(t, f, tc.node, func(n *fleetwave.Node) bool { return maps.Equal(n.Labels, want) })

			// the same set again: nothing to commit
			before := pathCommits(t, remote, tc.path)
			apiJSON(t, addr, "PUT", "/api/v1/nodes/"+tc.node+"/labels", tc.token, `{"labels":{"rack":"r9","tier":"web","example.com/zone":"b"}}`, 200, &w)
			if w.Commit != "" {
				t.Fatalf("an unchanged set committed %s", w.Commit)
			}
			// an invalid set: 400 with each bad label, nothing written
			st, b := apiCall(t, addr, "PUT", "/api/v1/nodes/"+tc.node+"/labels", tc.token, `{"labels":{"tier":"web","Bad Key":"x","rack":"-r"}}`)
			if st != http.StatusBadRequest || errCode(b) != "invalid_labels" || !strings.Contains(b, `"key":"Bad Key"`) || !strings.Contains(b, `"key":"rack"`) {
				t.Fatalf("an invalid set: %d %s", st, b)
			}
			if st, b := apiCall(t, addr, "PUT", "/api/v1/nodes/"+tc.node+"/labels", "tok-vic", `{"labels":{}}`); st != http.StatusForbidden {
				t.Fatalf("a viewer's write: %d %s", st, b)
			}
			if after := pathCommits(t, remote, tc.path); after != before {
				t.Fatalf("%d commits of %s after refused and unchanged writes, want %d", after, tc.path, before)
			}
		})
	}

	t.Run("a draining node's item waits, and runs once undrained", func(t *testing.T) {
		gittest.Push(t, remote, map[string]string{"brc/app.cue": appBRC("1.0")}, nil, "app 1.0")
		f.waitRollout(t, "app-g1", fleetwave.RolloutCompleted)

		var w api.NodeWrite
		apiJSON(t, addr, "POST", "/api/v1/nodes/n3/drain", "tok-bob", `{"reason":"disk swap"}`, 200, &w)
		if w.Commit == "" || !w.Node.Drain {
			t.Fatalf("drain answer %+v", w)
		}
		if msg := commitText(t, remote, w.Commit); !strings.Contains(msg, "nodes: drain n3 (by bob)") || !strings.Contains(msg, "Fleetwave-Reason: disk swap") {
			t.Fatalf("drain commit:\n%s", msg)
		}
		if doc, _ := gittest.ReadFile(t, remote, "nodes/n3.json"); doc != "{\n  \"kind\": \"node\",\n  \"name\": \"n3\",\n  \"labels\": {\"tier\": \"db\"},\n  \"drain\": true\n}\n" {
			t.Fatalf("nodes/n3.json after drain:\n%s", doc)
		}
		waitNode(t, f, "n3", func(n *fleetwave.Node) bool { return n.Drain })

		gittest.Push(t, remote, map[string]string{"brc/app.cue": appBRC("1.1")}, nil, "app 1.1")
		var items []fleetwave.Item
		waitUntil(t, "n1 and n2 upgraded while n3 waits, draining", func() bool {
			var err error
			_, items, err = f.hub.Engine().Rollout(context.Background(), "app-g2")
			if err != nil || len(items) != 3 {
				return false
			}
			for _, it := range items {
				switch {
				case it.Node == "n3" && (it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonNodeDraining):
					return false
				case it.Node != "n3" && it.Status != fleetwave.ItemCompleted:
					return false
				}
			}
			return true
		})
		var n3 api.NodeView
		apiJSON(t, addr, "GET", "/api/v1/nodes/n3", "tok-vic", "", 200, &n3)
		if !n3.Drain || len(n3.Waiting) != 1 || n3.Waiting[0].Rollout != "app-g2" || n3.Waiting[0].Reason != fleetwave.ReasonNodeDraining {
			t.Fatalf("n3 while draining: %+v", n3)
		}
		if !n3.Reported || n3.Stale || len(n3.Instances) != 1 || n3.Instances[0].Version != "1.0" || !slices.Contains(n3.ObservedVersions["app"], "1.0") {
			t.Fatalf("n3's report in its view: %+v", n3)
		}

		apiJSON(t, addr, "POST", "/api/v1/nodes/n3/undrain", "tok-alice", "", 200, &w)
		if w.Commit == "" || w.Node.Drain {
			t.Fatalf("undrain answer %+v", w)
		}
		if doc, _ := gittest.ReadFile(t, remote, "nodes/n3.json"); strings.Contains(doc, "drain") {
			t.Fatalf("nodes/n3.json after undrain:\n%s", doc)
		}
		_, items = f.waitRollout(t, "app-g2", fleetwave.RolloutCompleted)
		if got := appRuns(f, "n3"); got != "install\nupgrade\n" {
			t.Fatalf("n3 ran %q", got)
		}
	})
}

// TestRolloutCreateThroughTheAPI: a dry run shows the pinned targets and
// writes nothing; a request lands as a rollouts/ file with the resolved
// nodes and its rollout runs once; refusals carry the request's codes.
func TestRolloutCreateThroughTheAPI(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := writeFleet()
	files["brc/app.cue"] = appBRC("1.0")
	remote := gittest.NewRemote(t, files)
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3"}, nil, writeIdentities)
	addr := f.hub.Addr()
	f.waitRollout(t, "app-g1", fleetwave.RolloutCompleted)
	restart := `"brc":"app","action_name":"restart","selector":{"match_labels":{"tier":"web"}}`

	var dry struct {
		Name             string                `json:"name"`
		Rollout          string                `json:"rollout"`
		Targets          []string              `json:"targets"`
		Items            []api.RolloutPlanItem `json:"items"`
		ApprovalRequired *bool                 `json:"approval_required"`
	}
	apiJSON(t, addr, "POST", "/api/v1/rollouts", "tok-bob", `{"name":"restart-web",`+restart+`,"dry_run":true}`, 200, &dry)
	if dry.Name != "restart-web" || dry.Rollout != "manual-restart-web" || strings.Join(dry.Targets, ",") != "n1,n2" ||
		len(dry.Items) != 2 || dry.Items[0].Node != "n2" || dry.Items[0].Action != "restart" || dry.ApprovalRequired == nil || *dry.ApprovalRequired {
		t.Fatalf("dry run: %+v", dry)
	}
	if n := pathCommits(t, remote, "rollouts"); n != 0 {
		t.Fatalf("a dry run wrote %d commits under rollouts/", n)
	}

	var created struct {
		Name, Commit, Rollout string
		Targets               []string
	}
	apiJSON(t, addr, "POST", "/api/v1/rollouts", "tok-bob", `{"name":"restart-web",`+restart+`,"reason":"stuck workers"}`, 201, &created)
	if created.Commit == "" || created.Rollout != "manual-restart-web" || strings.Join(created.Targets, ",") != "n1,n2" {
		t.Fatalf("created: %+v", created)
	}
	if msg := commitText(t, remote, created.Commit); !strings.Contains(msg, "Fleetwave-Actor: bob") || !strings.Contains(msg, "Fleetwave-Reason: stuck workers") || !strings.Contains(msg, "fleetwave hub <") {
		t.Fatalf("request commit:\n%s", msg)
	}
	doc, ok := gittest.ReadFile(t, remote, "rollouts/restart-web.yaml")
	if !ok || !strings.Contains(doc, "nodes:\n  - n1\n  - n2\n") || !strings.Contains(doc, "action_name: restart") || !strings.Contains(doc, `# from the selector {"match_labels":{"tier":"web"}}`) {
		t.Fatalf("rollouts/restart-web.yaml (found %v):\n%s", ok, doc)
	}
	_, items := f.waitRollout(t, "manual-restart-web", fleetwave.RolloutCompleted)
	if got := itemNodes(items); got != "n2,n1" { // n2 is high, n1 low
		t.Fatalf("the request ran on %s", got)
	}
	// once: later reconciles create nothing more, each agent ran it once
	waitFile(t, remote, "status/summary.yaml", func(s string) bool { return strings.Contains(s, "rollout: manual-restart-web") })
	time.Sleep(time.Second)
	rs, err := f.hub.Engine().Rollouts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rs {
		if r.Source.Object == "rollout/restart-web" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d rollouts of request restart-web", n)
	}
	for node, want := range map[string]string{"n1": "install\nrestart\n", "n2": "install\nrestart\n", "n3": "install\n"} {
		if got := appRuns(f, node); got != want {
			t.Fatalf("%s ran %q, want %q", node, got, want)
		}
	}

	var page api.RolloutsPage
	apiJSON(t, addr, "GET", "/api/v1/rollouts?brc=app&state=completed", "tok-vic", "", 200, &page)
	var ids []string
	for _, r := range page.Rollouts {
		ids = append(ids, r.ID)
	}
	if !slices.Contains(ids, "app-g1") || !slices.Contains(ids, "manual-restart-web") || page.Next != "" {
		t.Fatalf("completed rollouts of brc app: %v", ids)
	}
	var bare []fleetwave.Rollout
	apiJSON(t, addr, "GET", "/api/v1/rollouts", "tok-vic", "", 200, &bare)
	if len(bare) != len(rs) {
		t.Fatalf("the bare list has %d rollouts, the engine %d", len(bare), len(rs))
	}

	for _, tc := range []struct{ name, body, code string }{
		{"a name used before", `{"name":"restart-web",` + restart + `}`, "already_exists"},
		{"an unknown brc", `{"brc":"nope","nodes":["n1"]}`, "unknown_brc"},
		{"an unknown node", `{"brc":"app","nodes":["n9"]}`, "unknown_node"},
		{"a selector matching nothing", `{"brc":"app","selector":{"match_labels":{"tier":"cache"}}}`, "no_matching_nodes"},
		{"a version the brc would undo", `{"brc":"app","target_version":"9.9","nodes":["n1"]}`, "conflicts_with_brc"},
		{"an unknown action", `{"brc":"app","action_name":"explode","nodes":["n1"]}`, "invalid_request"},
	} {
		st, b := apiCall(t, addr, "POST", "/api/v1/rollouts", "tok-alice", tc.body)
		if errCode(b) != tc.code || (st != http.StatusConflict && st != http.StatusUnprocessableEntity) {
			t.Fatalf("%s: %d %s, want %s", tc.name, st, b, tc.code)
		}
	}
	if st, b := apiCall(t, addr, "POST", "/api/v1/rollouts", "tok-vic", `{"brc":"app","nodes":["n1"]}`); st != http.StatusForbidden {
		t.Fatalf("a viewer's request: %d %s", st, b)
	}
	if n := pathCommits(t, remote, "rollouts"); n != 1 {
		t.Fatalf("%d commits under rollouts/, want the one request", n)
	}
}

// TestRolloutCreateUnderTheApprovalPolicy: a request that applies config
// is refused with approval_required (the dry run says so); an operational
// one is not gated.
func TestRolloutCreateUnderTheApprovalPolicy(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := writeFleet()
	files["brc/app.cue"] = appBRC("1.0")
	remote := gittest.NewRemote(t, files)
	f := startFleetCfg(t, remote, "embedded", nil, nil, func(c *hub.Config) {
		writeIdentities(c)
		c.Approval = hub.ApprovalConfig{Required: true}
	})
	addr := f.hub.Addr()
	waitUntil(t, "a snapshot", func() bool { return f.hub.Snapshot() != nil })
	var dry struct {
		ApprovalRequired bool     `json:"approval_required"`
		Targets          []string `json:"targets"`
	}
	apiJSON(t, addr, "POST", "/api/v1/rollouts", "tok-bob", `{"brc":"app","action_name":"install","nodes":["n1"],"dry_run":true}`, 200, &dry)
	if !dry.ApprovalRequired || strings.Join(dry.Targets, ",") != "n1" {
		t.Fatalf("gated dry run: %+v", dry)
	}
	st, b := apiCall(t, addr, "POST", "/api/v1/rollouts", "tok-bob", `{"brc":"app","action_name":"install","nodes":["n1"]}`)
	if st != http.StatusConflict || errCode(b) != "approval_required" || !strings.Contains(b, "/api/v1/config-approvals") {
		t.Fatalf("a gated request: %d %s", st, b)
	}
	apiJSON(t, addr, "POST", "/api/v1/rollouts", "tok-bob", `{"brc":"app","action_name":"restart","nodes":["n1"],"dry_run":true}`, 200, &dry)
	if dry.ApprovalRequired {
		t.Fatalf("an operational request is gated: %+v", dry)
	}
	if n := pathCommits(t, remote, "rollouts"); n != 0 {
		t.Fatalf("%d commits under rollouts/ after a refusal and dry runs", n)
	}
}

// humanEdit is a person's commit that replaces old by new in path, pushed
// to main as a diff: when main moved, it is rebased (like gittest.Push)
// and pushed again. It returns the pushed commit, or an error.
func humanEdit(remote, path, old, new, msg string) (string, error) {
	dir, err := os.MkdirTemp("", "human-edit-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, gittest.Env()
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := git("clone", "--quiet", "--branch", "main", remote, "."); err != nil {
		return "", fmt.Errorf("clone: %v: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		return "", err
	}
	if !strings.Contains(string(data), old) {
		return "", fmt.Errorf("%s lacks %q", path, old)
	}
	if err := os.WriteFile(filepath.Join(dir, path), []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		return "", err
	}
	if out, err := git("commit", "--quiet", "-am", msg); err != nil {
		return "", fmt.Errorf("commit: %v: %s", err, out)
	}
	for i := range 30 {
		if _, err := git("push", "--quiet", "origin", "HEAD:main"); err == nil {
			return git("rev-parse", "HEAD")
		}
		time.Sleep(time.Duration(i*7%50) * time.Millisecond)
		if out, err := git("pull", "--quiet", "--rebase", "origin", "main"); err != nil {
			return "", fmt.Errorf("rebase: %v: %s", err, out)
		}
	}
	return "", fmt.Errorf("push of %q kept failing", msg)
}

// TestRacingHumanPushesAndAPIWritesAllLand: people push to main (new
// files, and an edit of a node file the API writes too) while label
// writes of two nodes go on: every human commit and every API write is on
// main afterwards, and each node file holds the last write's labels with
// the people's change kept.
func TestRacingHumanPushesAndAPIWritesAllLand(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	remote := gittest.NewRemote(t, writeFleet())
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, nil, nil, writeIdentities)
	addr := f.hub.Addr()
	waitUntil(t, "a snapshot", func() bool { return f.hub.Snapshot() != nil })

	const humans, writes = 4, 4
	var (
		mu         sync.Mutex
		humanRevs  []string
		apiCommits []string
		last       = map[string]string{} // node -> labels JSON of its last write
		wg         sync.WaitGroup
	)
	for i := range humans {
		wg.Go(func() {
			rev := gittest.Push(t, remote, map[string]string{fmt.Sprintf("nodes/h%d.yaml", i): fmt.Sprintf("kind: node\nname: h%d\n", i)}, nil, fmt.Sprintf("add node h%d", i))
			mu.Lock()
			humanRevs = append(humanRevs, rev)
			mu.Unlock()
		})
	}
	wg.Go(func() {
		// a person raises n1's criticality while the API rewrites its labels
		rev, err := humanEdit(remote, "nodes/n1.cue", `criticality: "low"`, `criticality: "high"`, "n1 matters")
		if err != nil {
			t.Errorf("human edit: %v", err)
			return
		}
		mu.Lock()
		humanRevs = append(humanRevs, rev)
		mu.Unlock()
	})
	for _, node := range []string{"n1", "n2"} {
		wg.Go(func() {
			for round := range writes {
				body := fmt.Sprintf(`{"labels":{"tier":"web","round":"%s-%d"},"reason":"round %d"}`, node, round, round)
				var st int
				var b string
				for try := 0; try < 5; try++ { // a client retries what did not land (503 git_busy, 409 conflict)
					if st, b = tryCall(addr, "PUT", "/api/v1/nodes/"+node+"/labels", "tok-bob", body); st != http.StatusServiceUnavailable && st != http.StatusConflict {
						break
					}
				}
				var w api.NodeWrite
				if err := json.Unmarshal([]byte(b), &w); st != http.StatusOK || err != nil || w.Commit == "" {
					t.Errorf("write %s round %d: %d %s", node, round, st, b)
					return
				}
				mu.Lock()
				apiCommits = append(apiCommits, w.Commit)
				last[node] = fmt.Sprintf("%s-%d", node, round)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(humanRevs) != humans+1 || len(apiCommits) != 2*writes {
		t.Fatalf("%d human commits, %d API commits", len(humanRevs), len(apiCommits))
	}
	onMain := map[string]bool{}
	for _, c := range strings.Split(gittest.Git(t, "", "--git-dir", bareDir(remote), "rev-list", "main"), "\n") {
		onMain[c] = true
	}
	for _, c := range slices.Concat(humanRevs, apiCommits) {
		if !onMain[c] {
			t.Fatalf("commit %s is not on main:\n%s", c, strings.Join(gittest.Log(t, remote), "\n"))
		}
	}
	n1, _ := gittest.ReadFile(t, remote, "nodes/n1.cue")
	for _, want := range []string{`criticality: "high" // paged by nobody`, `round: "` + last["n1"] + `"`, "// what the selectors see", "// n1: the first web node"} {
		if !strings.Contains(n1, want) {
			t.Fatalf("nodes/n1.cue lacks %q:\n%s", want, n1)
		}
	}
	n2, _ := gittest.ReadFile(t, remote, "nodes/n2.yaml")
	if !strings.Contains(n2, "round: "+last["n2"]+"\n") || !strings.Contains(n2, "name: n2   # its id") {
		t.Fatalf("nodes/n2.yaml:\n%s", n2)
	}
	waitNode(t, f, "n1", func(n *fleetwave.Node) bool {
		return n.Labels["round"] == last["n1"] && n.Criticality == "high" && f.hub.Snapshot().Nodes["h0"] != nil
	})
}
