package hub_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// dbFleet is a three-node repository with a db block that can be
// installed, upgraded and backed up.
func dbFleet() map[string]string {
	files := map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/db.cue": `kind: "block"
name: "db"
actions: {
	install: command: "echo \"install $FLEETWAVE_VERSION\" >> runs"
	upgrade: command: "echo \"upgrade $FLEETWAVE_VERSION\" >> runs"
	backup: command:  "echo backup >> runs"
}
`,
		"brc/db.cue": "kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: \"1\"\nmax_concurrent: 3\n",
	}
	for i, tier := range []string{"web", "web", "batch"} {
		id := fmt.Sprintf("n%d", i+1)
		files["nodes/"+id+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\nlabels: { tier: %q }\n", id, tier)
	}
	return files
}

func runs(t *testing.T, f *runningFleet, node string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(f.stateDir(node), "blocks", "db", "runs"))
	return string(b)
}

func TestReconcilerRulesEndToEnd(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	nodes := []string{"n1", "n2", "n3"}

	t.Run("a selector rollout pins its nodes and ignores a node labelled afterwards", func(t *testing.T) {
		remote := gittest.NewRemote(t, dbFleet())
		f := startFleet(t, remote, "unix://"+redistest.Start(t).Addr, nodes)
		f.waitEveryAgent(t, "db-g1")
		gittest.Push(t, remote, map[string]string{"rollouts/web-backup.cue": `kind: "rollout"
name: "web-backup"
brc: "db"
action_name: "backup"
selector: match_labels: tier: "web"
`}, nil, "Back up the web tier")
		_, items := f.waitRollout(t, "manual-web-backup", fleetwave.RolloutCompleted)
		if got := itemNodes(items); got != "n1,n2" {
			t.Fatalf("manual rollout targets %s, want n1,n2", got)
		}
		gittest.Push(t, remote, map[string]string{"nodes/n3.cue": "kind: \"node\"\nname: \"n3\"\nlabels: { tier: \"web\" }\n"}, nil, "n3 joins web")
		waitFile(t, remote, "status/summary.yaml", func(s string) bool {
			return strings.Contains(s, gittest.Head(t, remote)[:12]) || strings.Contains(s, "result: ok")
		})
		time.Sleep(500 * time.Millisecond) // a few reconciles
		if _, items := f.waitRollout(t, "manual-web-backup", fleetwave.RolloutCompleted); itemNodes(items) != "n1,n2" {
			t.Fatalf("a node labelled afterwards was added: %s", itemNodes(items))
		}
		if strings.Contains(runs(t, f, "n3"), "backup") {
			t.Fatal("n3 was backed up")
		}
	})

	t.Run("drain stops dispatch and lifting it resumes", func(t *testing.T) {
		remote := gittest.NewRemote(t, dbFleet())
		f := startFleet(t, remote, "unix://"+redistest.Start(t).Addr, nodes)
		f.waitEveryAgent(t, "db-g1")
		gittest.Push(t, remote, map[string]string{
			"nodes/n2.cue": "kind: \"node\"\nname: \"n2\"\ndrain: true\nlabels: { tier: \"web\" }\n",
			"brc/db.cue":   "kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: \"2\"\nmax_concurrent: 3\n",
		}, nil, "Drain n2, db 2")
		// drain changes availability, not intent: n2's item waits
		waitUntil(t, "n1 and n3 upgraded while n2 waits with node_draining", func() bool {
			_, items, err := f.hub.Engine().Rollout(context.Background(), "db-g2")
			if err != nil || len(items) != 3 {
				return false
			}
			for _, it := range items {
				switch {
				case it.Node == "n2" && (it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonNodeDraining):
					return false
				case it.Node != "n2" && it.Status != fleetwave.ItemCompleted:
					return false
				}
			}
			return true
		})
		waitFile(t, remote, "status/rollouts/db-g2.yaml", func(s string) bool { return strings.Contains(s, "reason: node_draining") })
		node := waitFile(t, remote, "status/nodes/n2.yaml", func(s string) bool { return strings.Contains(s, "drain: true") })
		if !strings.Contains(node, "node_draining") {
			t.Fatalf("n2 status does not say what waits for it:\n%s", node)
		}
		if strings.Contains(runs(t, f, "n2"), "upgrade 2") {
			t.Fatal("a draining node was upgraded")
		}
		gittest.Push(t, remote, map[string]string{"nodes/n2.cue": "kind: \"node\"\nname: \"n2\"\nlabels: { tier: \"web\" }\n"}, nil, "Undrain n2")
		_, items := f.waitRollout(t, "db-g2", fleetwave.RolloutCompleted)
		if got := itemNodes(items); got != "n1,n2,n3" {
			t.Fatalf("db-g2 items %s, want n1,n2,n3 in one rollout", got)
		}
		if got := runs(t, f, "n2"); strings.Count(got, "upgrade 2") != 1 {
			t.Fatalf("n2 ran %q after the drain was lifted, want one upgrade 2", got)
		}
	})

	t.Run("a rendered config failing the block schema blocks that instance only until a new generation", func(t *testing.T) {
		files := dbFleet()
		files["blocks/db.cue"] = strings.Replace(files["blocks/db.cue"], "actions: {", "config_schema: \"{replicas: int & >=1 & <=5}\"\nactions: {", 1)
		// the batch tier asks for more replicas than the schema allows
		files["brc/db.cue"] = "kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: \"1\"\nmax_concurrent: 3\n" +
			"block_config_template: \"replicas: {% if node.labels.tier == 'batch' %}9{% else %}2{% endif %}\"\n"
		remote := gittest.NewRemote(t, files)
		f := startFleet(t, remote, "unix://"+redistest.Start(t).Addr, nodes)
		// the agents report one by one: nodes that report later join db-g1
		waitUntil(t, "db-g1 completed with its three items", func() bool {
			r, _, err := f.hub.Engine().Rollout(context.Background(), "db-g1")
			return err == nil && r.Status == fleetwave.RolloutCompleted && r.Counters.Total == 3
		})
		r, items := f.waitEveryAgent(t, "db-g1")
		if r.Counters.Done != 2 || r.Counters.Failed != 1 {
			t.Fatalf("db-g1 counters %+v, want 2 done and 1 blocked", r.Counters)
		}
		for _, it := range items {
			blocked := it.Status == fleetwave.ItemBlocked && it.Reason == "invalid_config" && strings.Contains(it.Message, "replicas")
			if (it.Node == "n3") != blocked {
				t.Fatalf("item %s on %s: %s %q %q", it.ID, it.Node, it.Status, it.Reason, it.Message)
			}
		}
		if strings.Contains(runs(t, f, "n3"), "install") {
			t.Fatal("the instance with an invalid config was installed")
		}
		doc := waitFile(t, remote, "status/rollouts/db-g1.yaml", func(s string) bool { return strings.Contains(s, "invalid_config") })
		if strings.Contains(doc, "replicas: 9") {
			t.Fatalf("status shows the rendered config value:\n%s", doc)
		}
		time.Sleep(500 * time.Millisecond) // a few reconciles: the same generation is not retried
		if s, _ := f.hub.Summary(context.Background()); len(s.Rollouts) != 1 {
			t.Fatalf("the blocked instance was planned again at the same generation: %d rollouts", len(s.Rollouts))
		}
		gittest.Push(t, remote, map[string]string{"brc/db.cue": "kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: \"1\"\nmax_concurrent: 3\n" +
			"block_config_template: \"replicas: 2\"\n"}, nil, "db: 2 replicas everywhere")
		_, items = f.waitRollout(t, "db-g2", fleetwave.RolloutCompleted)
		for _, it := range items {
			if it.Node == "n3" && it.Status == fleetwave.ItemCompleted {
				return
			}
		}
		t.Fatalf("db-g2 did not install n3: %+v", items)
	})

	t.Run("observe mode dispatches nothing while status shows the drift", func(t *testing.T) {
		files := dbFleet()
		files["fleetwave.cue"] = "kind: \"config\"\nname: \"fleetwave\"\nreconcile_mode: \"observe\"\n"
		remote := gittest.NewRemote(t, files)
		f := startFleet(t, remote, "unix://"+redistest.Start(t).Addr, nodes)
		node := waitFile(t, remote, "status/nodes/n1.yaml", func(s string) bool { return strings.Contains(s, "kind: missing") })
		if !strings.Contains(node, "block: db") {
			t.Fatalf("n1 drift:\n%s", node)
		}
		if s, _ := f.hub.Summary(context.Background()); s.Counters.Total != 0 || len(s.Rollouts) != 0 {
			t.Fatalf("observe mode dispatched: %+v", s.Counters)
		}
		if runs(t, f, "n1") != "" {
			t.Fatal("an agent ran a command in observe mode")
		}
	})
}

// TestScheduleFiresOnTheFakeClock: a cron BRC fires once at its tick, on
// the instances that exist, and not before.
func TestScheduleFiresOnTheFakeClock(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := dbFleet()
	files["brc/db-backup.cue"] = `kind: "trigger"
name: "db-backup"
block_name: "db"
action_name: "backup"
trigger_type: "schedule"
cron_expression: "0 3 * * *"
timezone: "UTC"
`
	// Tomorrow 02:58 UTC: ahead of the agents' real clocks, so attempt
	// deadlines (hub time) are in their future.
	day := time.Now().UTC().AddDate(0, 0, 1)
	clk := clock.NewFake(time.Date(day.Year(), day.Month(), day.Day(), 2, 58, 0, 0, time.UTC))
	backupID := "db-backup-" + clk.Now().Format("20060102") + "0300"
	remote := gittest.NewRemote(t, files)
	f := startFleetWith(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3"}, clk)
	f.waitEveryAgent(t, "db-g1")
	time.Sleep(300 * time.Millisecond) // reconciles at 02:58: nothing due
	if _, _, err := f.hub.Engine().Rollout(context.Background(), backupID); err == nil {
		t.Fatal("the schedule fired before its tick")
	}
	clk.Advance(2*time.Minute + 30*time.Second)
	_, items := f.waitRollout(t, backupID, fleetwave.RolloutCompleted)
	if got := itemNodes(items); got != "n1,n2,n3" {
		t.Fatalf("backup targets %s", got)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if c := strings.Count(runs(t, f, n), "backup"); c != 1 {
			t.Fatalf("%s ran backup %d times", n, c)
		}
	}
	next := clk.Now().AddDate(0, 0, 1).Format("2006-01-02") + "T03:00:00Z"
	waitFile(t, remote, "status/summary.yaml", func(s string) bool { return strings.Contains(s, "next_fire_at: \""+next) })
}

func itemNodes(items []fleetwave.Item) string {
	var out []string
	for _, it := range items {
		out = append(out, it.Node)
	}
	return strings.Join(out, ",")
}
