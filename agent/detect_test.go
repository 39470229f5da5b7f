package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// detectHub is a testHub that hands out detect commands; it answers 503
// not_ready to the first notReady requests.
type detectHub struct {
	*testHub
	cmds     []fleetwave.DetectCommand
	notReady int
	asked    int
}

func (h *detectHub) DetectCommands(_ context.Context, node string) ([]fleetwave.DetectCommand, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked++
	if h.asked <= h.notReady {
		return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "no snapshot yet"}
	}
	if node != testNode {
		return nil, nil
	}
	return h.cmds, nil
}

func newDetectHarness(t *testing.T, dh *detectHub) *harness {
	t.Helper()
	h := &harness{hub: newTestHub(), dir: t.TempDir()}
	dh.testHub = h.hub
	h.srv = httptest.NewServer(api.New(dh, api.WithLogger(zerolog.New(zerolog.NewTestWriter(t)))))
	t.Cleanup(h.srv.Close)
	return h
}

// handInstall writes what an install by hand of block left in the state
// directory, for a detect command to find.
func (h *harness) handInstall(t *testing.T, block, version string) {
	t.Helper()
	if err := os.MkdirAll(h.work(block), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.work(block), "version"), []byte(version+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

const catVersion = `cat "$FLEETWAVE_STATE_DIR/version" 2>/dev/null || exit 1`

func instanceOf(r fleetwave.Report, block string) *fleetwave.InstanceStatus {
	for i := range r.Instances {
		if r.Instances[i].Block == block {
			return &r.Instances[i]
		}
	}
	return nil
}

// TestDetectReportsInstancesInstalledByHand: the hub is not ready at first
// (503); the agent waits for its detect commands, then registers with the
// instance its detect command found (managed_by cli, the version it
// printed) and the blocks whose commands answered; a command that exits 3
// or times out answers nothing.
func TestDetectReportsInstancesInstalledByHand(t *testing.T) {
	dh := &detectHub{notReady: 2, cmds: []fleetwave.DetectCommand{
		{Block: "db", Command: catVersion},
		{Block: "odd", Command: "echo 9; exit 3"},
		{Block: "slow", Command: "sleep 30", TimeoutSeconds: 1},
		{Block: "web", Command: catVersion + `; echo "env $FLEETWAVE_ACTION $FLEETWAVE_BLOCK" > "$FLEETWAVE_STATE_DIR/env"`},
	}}
	h := newDetectHarness(t, dh)
	h.handInstall(t, "web", "1.4")
	h.start(t)
	reg := h.hub.registration(t)
	web := instanceOf(reg, "web")
	if web == nil || web.Version != "1.4" || web.ManagedBy != fleetwave.ManagedByCLI || web.State != fleetwave.StateInstalled {
		t.Fatalf("registration instances = %+v, want web 1.4 managed by cli", reg.Instances)
	}
	if len(reg.Instances) != 1 {
		t.Fatalf("registration instances = %+v, want web only", reg.Instances)
	}
	if !slices.Equal(reg.Detected, []string{"db", "web"}) {
		t.Fatalf("detected = %v, want [db web] (odd and slow did not answer)", reg.Detected)
	}
	if env := lines(t, filepath.Join(h.work("web"), "env")); len(env) != 1 || env[0] != "env detect web" {
		t.Fatalf("detect environment = %v", env)
	}
	if _, err := os.Stat(h.work("db")); !os.IsNotExist(err) {
		t.Fatalf("detect created the instance dir of db: %v", err)
	}
}

// TestBuiltinTakeoverAdoptsTheDetectedInstance: a takeover without a
// command records the instance detected as fleetwave's (its version
// kept, the attempt's owner and generation), in state.json; the next
// report shows it managed. A takeover of a block nothing detected fails.
func TestBuiltinTakeoverAdoptsTheDetectedInstance(t *testing.T) {
	dh := &detectHub{cmds: []fleetwave.DetectCommand{{Block: "web", Command: catVersion}, {Block: "db", Command: catVersion}}}
	h := newDetectHarness(t, dh)
	h.handInstall(t, "web", "1.4")
	stop := h.start(t)
	h.hub.registration(t)

	take := attempt("take-1", 3, "")
	take.Action, take.Generation, take.TargetVersion, take.ConfigHash, take.DesiredState, take.ManagedBy = fleetwave.ActionTakeover, 5, "", "", "", "web"
	take.Payload = fleetwave.AttemptPayload{}
	h.hub.enqueue(take)
	res := h.hub.result(t)
	in := res.Instance
	if res.Class != fleetwave.ResultSuccess || in == nil || in.Version != "1.4" || in.ManagedBy != "web" || in.Generation != 5 ||
		in.State != fleetwave.StateInstalled || in.LastAttempt != "take-1" || !strings.Contains(res.Output, "built-in takeover") {
		t.Fatalf("takeover result = %+v instance %+v", res, in)
	}

	nothing := take
	nothing.ID, nothing.Block = "take-2", "db"
	h.hub.enqueue(nothing)
	if res := h.hub.result(t); res.Class != fleetwave.ResultPermanent || res.Instance != nil || !strings.Contains(res.Output, "nothing to take over") {
		t.Fatalf("takeover of nothing = %+v", res)
	}

	// the report after the attempts shows web managed by fleetwave
	deadline := time.Now().Add(waitLimit)
	for {
		h.hub.mu.Lock()
		var last fleetwave.Report
		if n := len(h.hub.reports); n > 0 {
			last = h.hub.reports[n-1]
		}
		h.hub.mu.Unlock()
		if w := instanceOf(last, "web"); w != nil && w.ManagedBy == "web" && slices.Equal(last.Detected, []string{"db", "web"}) && len(last.Instances) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("last report = %+v", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(h.dir, "state", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if w := st.Instances["web"]; w.ManagedBy != "web" || w.Version != "1.4" || st.Journal["take-1"] == nil {
		t.Fatalf("state.json = %s", b)
	}
}

func TestDetectedVersionIsOneCleanLine(t *testing.T) {
	for in, want := range map[string]string{
		"1.4\n":                  "1.4",
		"  v2.0.1 \nmore\n":      "v2.0.1",
		"a\x1b[31mred\x00\n":     "a[31mred",
		"":                       "",
		strings.Repeat("x", 300): strings.Repeat("x", maxDetectVersion),
		"\xff\xfe9.9":            "9.9",
	} {
		if got := detectedVersion([]byte(in)); got != want {
			t.Errorf("detectedVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDetectLeavesABlockAnAttemptWorksOn: while an install runs (it has
// written the file the detect command reads, then still works), the
// periodic reports never show the half-done install as one made by hand;
// once it is done, the instance is fleetwave's.
func TestDetectLeavesABlockAnAttemptWorksOn(t *testing.T) {
	dh := &detectHub{cmds: []fleetwave.DetectCommand{{Block: "web", Command: catVersion}}}
	h := newDetectHarness(t, dh)
	cfg := h.config(t)
	cfg.ReportInterval = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
	h.hub.registration(t)

	install := attempt("inst-1", 1, `echo 2.1.0 > version; sleep 1`)
	install.Action = fleetwave.ActionInstall
	h.hub.enqueue(install)
	if res := h.hub.result(t); res.Class != fleetwave.ResultSuccess || res.Instance == nil || res.Instance.ManagedBy != "web-upgrade" {
		t.Fatalf("install = %+v", res)
	}
	h.hub.mu.Lock()
	defer h.hub.mu.Unlock()
	if len(h.hub.reports) < 5 {
		t.Fatalf("only %d reports while the install ran", len(h.hub.reports))
	}
	for _, r := range h.hub.reports {
		if in := instanceOf(r, "web"); in != nil && in.ManagedBy == fleetwave.ManagedByCLI {
			t.Fatalf("a report showed the running install as installed by hand: %+v", r)
		}
	}
}
