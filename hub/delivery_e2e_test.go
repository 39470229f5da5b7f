package hub_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestADeliveryCutByAHubCrashIsSentAgainAtOnce: the hub (a process) dies
// between taking a node's attempt from its queue and answering the
// agent's poll, so the agent never receives it. Started again, the hub
// hears from the agent's next poll that it never did, and sends the item
// again at once, where it used to wait out the action's timeout (5
// minutes here, then a report). The node runs the action once.
func TestADeliveryCutByAHubCrashIsSentAgainAtOnce(t *testing.T) {
	remote := webOfOneNode(t, "backoff: \"1s\"\n", runInstall, "max_concurrent: 1\n")
	srv := redistest.Start(t)
	dir, addr := t.TempDir(), freeAddr(t)
	cfgPath := childHubConfig(t, dir, remote, "unix://"+srv.Addr, addr, "agents: {tokens: {n1: "+hub.HashToken("token-n1")+"}}\n")
	first, firstLog := startHubChild(t, cfgPath, "attempts_popped")

	runAgent(t, addr, "n1", filepath.Join(dir, "n1"), 5*time.Second)
	waitUntil(t, "the hub dies with the attempt taken", func() bool { return strings.Contains(firstLog.String(), "crash at attempts_popped") })
	_, _ = first.Process.Wait()
	_, log := startHubChild(t, cfgPath, "")
	restarted := time.Now()

	eng := engine.New(srv.Client(t))
	var item fleetwave.Item
	waitUntil(t, "the item is completed", func() bool {
		rs, err := eng.Rollouts(context.Background())
		if err != nil || len(rs) != 1 {
			return false
		}
		_, items, err := eng.Rollout(context.Background(), rs[0].ID)
		if err != nil || len(items) != 1 {
			return false
		}
		item = items[0]
		return item.Status == fleetwave.ItemCompleted
	})
	t.Logf("completed %v after the restart", time.Since(restarted).Round(time.Millisecond))
	// sent again as never delivered: its second attempt ran, its first
	// never reached the agent
	if item.Attempts != 2 || !strings.HasSuffix(item.LastAttempt, ".2") {
		t.Fatalf("item %+v, want completed by its second attempt", item)
	}
	if !strings.Contains(log.String(), "attempts delivered that the agent never received") {
		t.Fatalf("the restarted hub did not say what it sent again:\n%s", log.String())
	}
	if got := metricValue(t, httpGet(t, "http://"+addr+"/metrics"), `fleetwave_attempts_unreceived_total{reason="agent_said"}`); got != 1 {
		t.Fatalf("fleetwave_attempts_unreceived_total{reason=\"agent_said\"} = %v, want 1", got)
	}
	time.Sleep(500 * time.Millisecond) // a second run would show by now
	if b, _ := os.ReadFile(filepath.Join(dir, "n1", "blocks", "web", "runs")); string(b) != "run\n" {
		t.Fatalf("n1 ran %q, want one install", b)
	}
}

// TestAResultWhoseAnswerWasLostIsAcceptedAgain: the hub (a process)
// records an agent's result and dies before answering. The agent sends
// the result again to the restarted hub, which answers as the first time
// (it used to refuse it as stale_attempt, and the agent logged a result
// refused and dropped): the item stays completed by that one result,
// nothing is counted refused, the node ran the action once.
func TestAResultWhoseAnswerWasLostIsAcceptedAgain(t *testing.T) {
	remote := webOfOneNode(t, "", runInstall, "")
	srv := redistest.Start(t)
	dir, addr := t.TempDir(), freeAddr(t)
	cfgPath := childHubConfig(t, dir, remote, "unix://"+srv.Addr, addr, "agents: {tokens: {n1: "+hub.HashToken("token-n1")+"}}\n")
	first, firstLog := startHubChild(t, cfgPath, "result_recorded")

	agentLog := runAgent(t, addr, "n1", filepath.Join(dir, "n1"), time.Hour)
	waitUntil(t, "the hub dies with the result recorded", func() bool { return strings.Contains(firstLog.String(), "crash at result_recorded") })
	_, _ = first.Process.Wait()
	eng := engine.New(srv.Client(t))
	item := onlyItem(t, eng)
	if item.Status != fleetwave.ItemCompleted || item.Attempts != 1 {
		t.Fatalf("item %+v, want completed by its one attempt before the crash", item)
	}
	_, log := startHubChild(t, cfgPath, "")

	waitUntil(t, "the restarted hub answers the result sent again", func() bool {
		return strings.Contains(log.String(), "attempt result sent again; recorded before") || strings.Contains(log.String(), "attempt result refused")
	})
	if !strings.Contains(log.String(), "attempt result sent again; recorded before") {
		t.Fatalf("the restarted hub refused the result sent again:\n%s", log.String())
	}
	page := httpGet(t, "http://"+addr+"/metrics")
	for _, series := range []string{`fleetwave_attempt_results_refused_total{cause="stale_attempt"}`, `fleetwave_attempt_results_total{class="success"}`} {
		if got := metricValue(t, page, series); got != 0 {
			t.Errorf("the restarted hub counts %s = %v, want 0 (the result was counted by the first hub)", series, got)
		}
	}
	if got := onlyItem(t, eng); got != item {
		t.Fatalf("the result sent again changed its item:\n%+v\nwas\n%+v", got, item)
	}
	waitUntil(t, "the agent journals the result delivered", func() bool {
		var st struct {
			Journal map[string]struct{ Delivered bool }
		}
		b, err := os.ReadFile(filepath.Join(dir, "n1", "state.json"))
		return err == nil && json.Unmarshal(b, &st) == nil && len(st.Journal) == 1 && st.Journal[item.LastAttempt].Delivered
	})
	if !strings.Contains(agentLog.String(), `"call":"result"`) {
		t.Fatalf("the agent did not send its result again:\n%s", agentLog.String())
	}
	for _, refused := range []string{"result refused by the hub", "stale_attempt"} {
		if strings.Contains(agentLog.String(), refused) {
			t.Fatalf("the agent's log says %s:\n%s", refused, agentLog.String())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "n1", "blocks", "web", "runs")); string(b) != "run\n" {
		t.Fatalf("n1 ran %q, want one install", b)
	}
}

// runInstall is an install action that appends "run" to the instance's
// runs file: the file says how often the node ran it.
const runInstall = `command: "echo run >> \"$FLEETWAVE_STATE_DIR/runs\""`

// webOfOneNode makes the remote of a repository of one node, n1, block
// web (its install action install, a CUE value; its upgrade appends
// "upgrade" to the runs file) and BRC web at version 1; config and brc
// add lines to fleetwave.cue and the BRC. Git reads no user or system
// configuration while the test runs.
func webOfOneNode(t *testing.T, config, install, brc string) string {
	t.Helper()
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	return gittest.NewRemote(t, map[string]string{
		"fleetwave.cue":  "kind: \"config\"\nname: \"fleetwave\"\n" + config,
		"blocks/web.cue": "kind: \"block\"\nname: \"web\"\nactions: {\n\tinstall: " + install + "\n\tupgrade: command: \"echo upgrade >> \\\"$FLEETWAVE_STATE_DIR/runs\\\"\"\n}\n",
		"brc/web.cue":    "kind: \"trigger\"\nname: \"web\"\nblock_name: \"web\"\ntarget_version: \"1\"\n" + brc,
		"nodes/n1.cue":   "kind: \"node\"\nname: \"n1\"\n",
	})
}

// onlyItem returns the one item of the one rollout eng holds.
func onlyItem(t *testing.T, eng *engine.Engine) fleetwave.Item {
	t.Helper()
	rs, err := eng.Rollouts(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("rollouts %+v (%v), want one", rs, err)
	}
	_, items, err := eng.Rollout(context.Background(), rs[0].ID)
	if err != nil || len(items) != 1 {
		t.Fatalf("items %+v (%v), want one", items, err)
	}
	return items[0]
}

// runAgent runs node's agent (token "token-<node>") against the hub at
// addr until the test ends, then checks that it stopped without error. It
// returns the agent's log, which the test's log shows as well.
func runAgent(t *testing.T, addr, node, stateDir string, reportInterval time.Duration) *lockedBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := &lockedBuffer{}
	go func() {
		done <- agent.Run(ctx, agent.Config{HubURL: "http://" + addr, Node: node, Token: "token-" + node,
			StateDir: stateDir, PollWait: time.Second, ReportInterval: reportInterval,
			Logger: zerolog.New(io.MultiWriter(log, zerolog.NewTestWriter(t))).With().Str("node", node).Logger()})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", node, err)
		}
	})
	return log
}
