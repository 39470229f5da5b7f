package hub

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/status"
)

// TestNodeDocumentsBeyondTheCapFollowInTheNextCommits: with more node
// documents changed than one status commit carries, each commit of the
// hub's status step (real redis-server, real mirror and remote) carries at
// most the cap and the summary; the next steps write the rest, the ones
// left out first, although nothing else changed; once all are written a
// step commits nothing.
func TestNodeDocumentsBeyondTheCapFollowInTheNextCommits(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"})
	bare := strings.TrimPrefix(url, "file://")
	h, clk, _ := statusHub(t, url)
	h.nodeDocsPerCommit = 3
	h.statusSoon = make(chan struct{}, 1)
	ctx := context.Background()
	nodes := map[string]*fleetwave.Node{}
	for i := range 8 {
		id := fmt.Sprintf("n%d", i)
		nodes[id] = &fleetwave.Node{ID: id}
		r := fleetwave.Report{Node: id, AgentVersion: "1.0.0", SentAt: clk.Now(),
			Instances: []fleetwave.InstanceStatus{{Block: "web", Version: "1", Generation: 1}}}
		if err := h.Report(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	h.snapshot = &fleetwave.Snapshot{Nodes: nodes}

	const branch = "fleetwave/status"
	commits := func() []string {
		t.Helper()
		cmd := exec.Command("git", "--git-dir", bare, "log", "--format=%H", branch)
		cmd.Env = gittest.Env()
		out, _ := cmd.Output() // no branch before the first commit
		return strings.Fields(string(out))
	}
	nodeDocs := func(args ...string) []string {
		t.Helper()
		var out []string
		for _, p := range strings.Fields(gittest.Git(t, bare, args...)) {
			if k, _ := status.ParsePath(p); k == status.KindNode {
				out = append(out, p)
			}
		}
		return out
	}
	var order []string // node documents in the order the commits carried them
	for step := 1; step <= 3; step++ {
		before := len(commits())
		h.statusStep(ctx)
		after := commits()
		if len(after) != before+1 {
			t.Fatalf("step %d: %d commits, want %d", step, len(after), before+1)
		}
		tip := after[0]
		var changed []string
		if before == 0 {
			changed = nodeDocs("ls-tree", "-r", "--name-only", tip)
		} else {
			changed = nodeDocs("diff-tree", "--no-commit-id", "--name-only", "-r", tip+"^", tip)
		}
		if len(changed) == 0 || len(changed) > 3 {
			t.Fatalf("step %d: the commit carries %d node documents %v, want 1 to 3", step, len(changed), changed)
		}
		if _, ok := gittest.ReadFileAt(t, url, branch, status.SummaryPath); !ok {
			t.Fatalf("step %d: no summary", step)
		}
		order = append(order, changed...)
		select {
		case <-h.statusSoon:
			if step == 3 {
				t.Fatal("step 3 wrote the last documents, yet asked for another write")
			}
		default:
			if step < 3 {
				t.Fatalf("step %d left documents out without asking for the next write", step)
			}
		}
	}
	var want []string
	for i := range 8 {
		want = append(want, status.NodePath(fmt.Sprintf("n%d", i)))
	}
	if !slices.Equal(order, want) {
		t.Fatalf("node documents committed in the order %v, want %v", order, want)
	}
	n := len(commits())
	h.statusStep(ctx)
	if got := len(commits()); got != n {
		t.Fatalf("a step with nothing left to write committed (%d commits, want %d)", got, n)
	}
}
