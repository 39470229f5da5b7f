package hub_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestASupersededVersionIsNotRunAgain: version 1 of a BRC runs on a node
// (a hub process, a real agent) when version 2 is pushed; then version
// 1's action fails transiently (exit 75), which would be retried. Its
// rollout was superseded: what ran finishes, nothing of it runs again.
// The node runs version 1 once and then version 2, not version 1 again
// until its retries run out.
func TestASupersededVersionIsNotRunAgain(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	// version 1 waits for the file "go" and fails transiently
	const command = `echo "$FLEETWAVE_ACTION $FLEETWAVE_VERSION" >> "$FLEETWAVE_STATE_DIR/runs"
if [ "$FLEETWAVE_VERSION" = 1 ]; then
  while [ ! -e "$FLEETWAVE_STATE_DIR/go" ]; do sleep 0.05; done
  exit 75
fi`
	brc := func(version string) string {
		return "kind: \"trigger\"\nname: \"web\"\nblock_name: \"web\"\ntarget_version: \"" + version + "\"\nmax_concurrent: 1\nmax_retries: 3\n"
	}
	remote := gittest.NewRemote(t, map[string]string{
		"fleetwave.cue":  "kind: \"config\"\nname: \"fleetwave\"\nbackoff: \"1s\"\n",
		"blocks/web.cue": "kind: \"block\"\nname: \"web\"\nactions: {\n\tinstall: command: " + strconv.Quote(command) + "\n\tupgrade: command: " + strconv.Quote(command) + "\n}\n",
		"brc/web.cue":    brc("1"),
		"nodes/n1.cue":   "kind: \"node\"\nname: \"n1\"\n",
	})
	srv := redistest.Start(t)
	dir, addr := t.TempDir(), freeAddr(t)
	cfgPath := childHubConfig(t, dir, remote, "unix://"+srv.Addr, addr, "agents: {tokens: {n1: "+hub.HashToken("token-n1")+"}}\n")
	startHubChild(t, cfgPath, "")

	stateDir := filepath.Join(dir, "n1")
	runAgent(t, addr, "n1", stateDir, 2*time.Second)
	blockDir := filepath.Join(stateDir, "blocks", "web")
	runs := func() string { b, _ := os.ReadFile(filepath.Join(blockDir, "runs")); return string(b) }

	waitUntil(t, "version 1 runs", func() bool { return runs() == "install 1\n" })
	gittest.Push(t, remote, map[string]string{"brc/web.cue": brc("2")}, nil, "web: version 2")
	eng := engine.New(srv.Client(t))
	waitUntil(t, "version 1's rollout is superseded", func() bool {
		r, _, err := eng.Rollout(context.Background(), "web-g1")
		return err == nil && r.Status == fleetwave.RolloutSuperseded
	})
	if err := os.WriteFile(filepath.Join(blockDir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "version 2 is done", func() bool {
		r, _, err := eng.Rollout(context.Background(), "web-g2")
		return err == nil && r.Status == fleetwave.RolloutCompleted
	})
	if got := runs(); got != "install 1\ninstall 2\n" {
		t.Fatalf("the node ran %q, want version 1 once, then version 2", got)
	}
	_, items, err := eng.Rollout(context.Background(), "web-g1")
	if err != nil || len(items) != 1 || items[0].Status != fleetwave.ItemSkipped || items[0].Reason != fleetwave.ReasonSuperseded {
		t.Fatalf("version 1's item %+v (%v), want skipped superseded", items, err)
	}
}
