package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

const (
	testNode  = "edge-01"
	testToken = "secret-token-edge-01"
	// waitLimit only keeps a broken test from hanging; nothing asserts on time.
	waitLimit = 60 * time.Second
)

// testHub is an in-memory hub behind the real api handler: it queues
// attempts and records what agents send.
type testHub struct {
	// api.Hub (nil) supplies the methods agents never call, so that the
	// API can grow without breaking this fake; calling one panics.
	api.Hub

	mu        sync.Mutex
	queue     []fleetwave.Attempt
	kick      chan struct{}
	results   chan fleetwave.AttemptResult
	registers chan fleetwave.Report
	reports   []fleetwave.Report
	// failRegister answers 503 to that many registrations first.
	failRegister int
	// wantReport answers that many polls asking for a full report.
	wantReport   int
	registerHits int
	// polls counts the long polls in progress (server side).
	polls int
	// receipts are what each poll said it received, in order, failed the
	// indexes of those answered 503: failPolls more are, each followed by
	// an answer asking for a report when reportAfterFail.
	receipts        []fleetwave.Receipt
	failed          []int
	failPolls       int
	reportAfterFail bool
}

func newTestHub() *testHub {
	return &testHub{
		kick:      make(chan struct{}, 1),
		results:   make(chan fleetwave.AttemptResult, 64),
		registers: make(chan fleetwave.Report, 64),
	}
}

func (h *testHub) WantsReport(string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.wantReport > 0 {
		h.wantReport--
		return true
	}
	return false
}

func (h *testHub) AuthenticateAgent(token string) (string, bool) {
	if token == testToken {
		return testNode, true
	}
	return "", false
}

func (h *testHub) RegisterAgent(_ context.Context, r fleetwave.Report) error {
	h.mu.Lock()
	h.registerHits++
	fail := h.registerHits <= h.failRegister
	h.mu.Unlock()
	if fail {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "hub starting"}
	}
	h.registers <- r
	return nil
}

func (h *testHub) enqueue(atts ...fleetwave.Attempt) {
	h.mu.Lock()
	h.queue = append(h.queue, atts...)
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// NotHanded: the test hub does not redeliver; an attempt its agent never
// got stays lost, as the tests expect.
func (h *testHub) NotHanded(context.Context, string, []fleetwave.Attempt, bool) {}

func (h *testHub) PollAttempts(ctx context.Context, node string, wait time.Duration, rc fleetwave.Receipt) ([]fleetwave.Attempt, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	h.mu.Lock()
	h.receipts = append(h.receipts, rc)
	if h.failPolls > 0 {
		h.failPolls--
		h.failed = append(h.failed, len(h.receipts)-1)
		if h.reportAfterFail {
			h.wantReport++
		}
		h.mu.Unlock()
		return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "hub restarting"}
	}
	h.polls++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.polls--
		h.mu.Unlock()
	}()
	for {
		h.mu.Lock()
		if len(h.queue) > 0 && ctx.Err() == nil {
			atts := h.queue
			h.queue = nil
			h.mu.Unlock()
			return atts, nil
		}
		h.mu.Unlock()
		select {
		case <-h.kick:
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (h *testHub) CompleteAttempt(_ context.Context, node string, res fleetwave.AttemptResult) error {
	if node != testNode {
		return errors.New("wrong node")
	}
	h.results <- res
	return nil
}

func (h *testHub) Report(_ context.Context, r fleetwave.Report) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reports = append(h.reports, r)
	return nil
}

func (h *testHub) Summary(context.Context) (fleetwave.Summary, error) {
	return fleetwave.Summary{}, nil
}

func (h *testHub) Rollout(context.Context, string) (fleetwave.Rollout, []fleetwave.Item, error) {
	return fleetwave.Rollout{}, nil, api.ErrNotFound
}

func (h *testHub) TriggerSync()                {}
func (h *testHub) Ready(context.Context) error { return nil }

func (h *testHub) result(t *testing.T) fleetwave.AttemptResult {
	t.Helper()
	select {
	case r := <-h.results:
		return r
	case <-time.After(waitLimit):
		t.Fatal("no attempt result reached the hub")
	}
	return fleetwave.AttemptResult{}
}

func (h *testHub) registration(t *testing.T) fleetwave.Report {
	t.Helper()
	select {
	case r := <-h.registers:
		return r
	case <-time.After(waitLimit):
		t.Fatal("the agent did not register")
	}
	return fleetwave.Report{}
}

type harness struct {
	hub *testHub
	srv *httptest.Server
	dir string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{hub: newTestHub(), dir: t.TempDir()}
	h.srv = httptest.NewServer(api.New(h.hub, api.WithLogger(zerolog.New(zerolog.NewTestWriter(t)))))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *harness) config(t *testing.T) Config {
	return Config{
		HubURL:         h.srv.URL,
		Node:           testNode,
		Token:          testToken,
		StateDir:       filepath.Join(h.dir, "state"),
		Capabilities:   []string{"network_shuffle"},
		DataAddresses:  map[string]string{"data": "10.0.0.5:9000"},
		PollWait:       2 * time.Second,
		ReportInterval: time.Hour,
		Logger:         zerolog.New(zerolog.NewTestWriter(t)),
	}
}

// start runs an agent; the returned stop cancels it and returns Run's error.
func (h *harness) start(t *testing.T) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	cfg := h.config(t)
	go func() { errc <- Run(ctx, cfg) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(waitLimit):
				err = errors.New("Run did not return after cancel")
			}
			// The server ends a cancelled long poll once it sees the
			// connection closed, which takes a while on a loaded machine:
			// until then an attempt queued for the next agent could be
			// handed to the gone one. Wait for it.
			for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				h.hub.mu.Lock()
				polls := h.hub.polls
				h.hub.mu.Unlock()
				if polls == 0 {
					return
				}
			}
			if err == nil {
				err = errors.New("a long poll of the stopped agent is still open on the server")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// work is the instance directory of a block, where commands run.
func (h *harness) work(block string) string { return filepath.Join(h.dir, "state", "blocks", block) }

func attempt(id string, fence int64, command string) fleetwave.Attempt {
	return fleetwave.Attempt{
		ID: id, Item: "item-" + id, Rollout: "web-g4", Node: testNode, Block: "web", Action: "upgrade",
		Generation: 4, TargetVersion: "2.1.0", ConfigHash: "c0ffee", DesiredState: fleetwave.StateRunning,
		ManagedBy: "web-upgrade", Fence: fence, Deadline: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		Payload: fleetwave.AttemptPayload{Command: command, Config: "replicas: 3\nimage: web:2.1.0\n", TimeoutSeconds: 60},
	}
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

func TestAttemptOutcomes(t *testing.T) {
	tests := []struct {
		name      string
		command   string
		wantClass fleetwave.ResultClass
		wantExit  int
		wantOut   string
		// wantInstance: the result carries the updated instance.
		wantInstance bool
	}{
		{
			name:      "a successful command runs once and updates the instance",
			command:   `echo ran >> runs.log; env | grep '^FLEETWAVE_' | sort > env.txt; cat "$FLEETWAVE_CONFIG" > seen.yaml; pwd > cwd.txt; echo all good`,
			wantClass: fleetwave.ResultSuccess, wantExit: 0, wantOut: "all good", wantInstance: true,
		},
		{
			name:      "exit 75 is transient and leaves the instance alone",
			command:   `echo ran >> runs.log; echo busy >&2; exit 75`,
			wantClass: fleetwave.ResultTransient, wantExit: 75, wantOut: "busy",
		},
		{
			name:      "exit 3 is permanent and leaves the instance alone",
			command:   `echo ran >> runs.log; echo broken; exit 3`,
			wantClass: fleetwave.ResultPermanent, wantExit: 3, wantOut: "broken",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			stop := h.start(t)
			reg := h.hub.registration(t)
			if reg.AgentVersion != fleetwave.Version || !slices.Equal(reg.Capabilities, []string{"network_shuffle"}) ||
				reg.DataAddresses["data"] != "10.0.0.5:9000" || len(reg.Instances) != 0 {
				t.Fatalf("registration report = %+v", reg)
			}
			att := attempt("att-1", 7, tt.command)
			h.hub.enqueue(att)
			res := h.hub.result(t)
			rep := h.hub.reportWith(t, "att-1")
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}

			if res.AttemptID != "att-1" || res.Fence != 7 || res.Class != tt.wantClass || res.ExitCode != tt.wantExit {
				t.Fatalf("result = %+v", res)
			}
			if !strings.Contains(res.Output, tt.wantOut) {
				t.Errorf("output %q lacks %q", res.Output, tt.wantOut)
			}
			if got := lines(t, filepath.Join(h.work("web"), "runs.log")); len(got) != 1 {
				t.Fatalf("command ran %d times, want 1", len(got))
			}
			cfgPath := filepath.Join(h.dir, "state", "configs", "web.yaml")
			b, err := os.ReadFile(cfgPath)
			if err != nil || string(b) != att.Payload.Config {
				t.Fatalf("config.yaml = %q (%v), want the payload config", b, err)
			}
			if fi, _ := os.Stat(cfgPath); fi.Mode().Perm() != 0o600 {
				t.Errorf("config.yaml mode = %v, want 0600", fi.Mode().Perm())
			}
			if !tt.wantInstance {
				if res.Instance != nil {
					t.Errorf("failed attempt reported an instance: %+v", res.Instance)
				}
				return
			}
			in := res.Instance
			if in == nil || in.Block != "web" || in.Version != "2.1.0" || in.ConfigHash != "c0ffee" || in.Generation != 4 ||
				in.State != fleetwave.StateRunning || in.ManagedBy != "web-upgrade" || in.LastAttempt != "att-1" || in.UpdatedAt.IsZero() {
				t.Fatalf("instance = %+v", in)
			}
			if seen, _ := os.ReadFile(filepath.Join(h.work("web"), "seen.yaml")); string(seen) != att.Payload.Config {
				t.Errorf("command read config %q through FLEETWAVE_CONFIG", seen)
			}
			if cwd := lines(t, filepath.Join(h.work("web"), "cwd.txt")); len(cwd) != 1 || filepath.Clean(cwd[0]) != h.work("web") {
				t.Errorf("command ran in %q, want %q", cwd, h.work("web"))
			}
			wantEnv := []string{
				"FLEETWAVE_ACTION=upgrade",
				"FLEETWAVE_ATTEMPT=att-1",
				"FLEETWAVE_BLOCK=web",
				"FLEETWAVE_CONFIG=" + cfgPath,
				"FLEETWAVE_GENERATION=4",
				"FLEETWAVE_NODE=" + testNode,
				"FLEETWAVE_STATE_DIR=" + h.work("web"),
				"FLEETWAVE_VERSION=2.1.0",
			}
			if got := lines(t, filepath.Join(h.work("web"), "env.txt")); !slices.Equal(got, wantEnv) {
				t.Errorf("environment:\n got %q\nwant %q", got, wantEnv)
			}
			if len(rep.Instances) != 1 || rep.Instances[0].Version != "2.1.0" || rep.Instances[0].LastAttempt != "att-1" {
				t.Errorf("full report after the attempt lacks the new instance: %+v", rep.Instances)
			}
		})
	}
}

func TestStaleFenceIsRefusedWithoutRunning(t *testing.T) {
	h := newHarness(t)
	h.start(t)
	h.hub.registration(t)
	h.hub.enqueue(attempt("att-new", 5, "touch new"))
	if res := h.hub.result(t); res.Class != fleetwave.ResultSuccess {
		t.Fatalf("fresh attempt: %+v", res)
	}
	h.hub.enqueue(attempt("att-old", 3, "touch old"))
	res := h.hub.result(t)
	if res.AttemptID != "att-old" || res.Class != fleetwave.ResultPermanent || res.Output != "stale fencing token" {
		t.Fatalf("stale attempt result = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(h.work("web"), "old")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale attempt ran its command (stat: %v)", err)
	}
	h.hub.enqueue(attempt("att-same", 5, "touch same"))
	if res := h.hub.result(t); res.Class != fleetwave.ResultSuccess {
		t.Fatalf("attempt at the accepted fence refused: %+v", res)
	}
}

func TestSameAttemptTwiceRunsOnce(t *testing.T) {
	h := newHarness(t)
	h.start(t)
	h.hub.registration(t)
	att := attempt("att-1", 1, "echo ran >> runs.log")
	h.hub.enqueue(att, att)
	first, second := h.hub.result(t), h.hub.result(t)
	h.hub.enqueue(att)
	third := h.hub.result(t)
	for _, r := range []fleetwave.AttemptResult{first, second, third} {
		if r.AttemptID != "att-1" || r.Class != fleetwave.ResultSuccess || r.Instance == nil || r.Instance.LastAttempt != "att-1" {
			t.Fatalf("result = %+v", r)
		}
	}
	if got := lines(t, filepath.Join(h.work("web"), "runs.log")); len(got) != 1 {
		t.Fatalf("command ran %d times, want 1", len(got))
	}
}

func TestRestartKeepsInstancesAndJournal(t *testing.T) {
	h := newHarness(t)
	stop := h.start(t)
	h.hub.registration(t)
	att := attempt("att-1", 2, "echo ran >> runs.log")
	h.hub.enqueue(att)
	h.hub.result(t)
	h.hub.reportWith(t, "att-1") // sent after the result was marked delivered
	if err := stop(); err != nil {
		t.Fatalf("first Run: %v", err)
	}

	h.start(t)
	reg := h.hub.registration(t)
	if len(reg.Instances) != 1 || reg.Instances[0].Block != "web" || reg.Instances[0].Version != "2.1.0" || reg.Instances[0].Generation != 4 {
		t.Fatalf("instances after restart = %+v", reg.Instances)
	}
	if !slices.Contains(reg.Attempts, "att-1") {
		t.Fatalf("journal after restart = %q", reg.Attempts)
	}
	h.hub.enqueue(att)
	if res := h.hub.result(t); res.Class != fleetwave.ResultSuccess || res.AttemptID != "att-1" {
		t.Fatalf("re-sent result = %+v", res)
	}
	if got := lines(t, filepath.Join(h.work("web"), "runs.log")); len(got) != 1 {
		t.Fatalf("command ran %d times across restarts, want 1", len(got))
	}
	h.hub.enqueue(attempt("att-stale", 1, "touch stale"))
	if res := h.hub.result(t); res.Output != "stale fencing token" {
		t.Fatalf("the accepted fence was forgotten across restarts: %+v", res)
	}
}

// receiptsSince waits for a poll after the first n and returns every
// receipt polls said so far.
func (h *testHub) receiptsAfter(t *testing.T, n int) []fleetwave.Receipt {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		rs := slices.Clone(h.receipts)
		h.mu.Unlock()
		if len(rs) > n {
			return rs
		}
	}
	t.Fatalf("no poll after the first %d", n)
	return nil
}

// TestPollsSayWhatTheAgentReceived: a poll says the highest delivery
// number the agent journalled, saved with the journal (it survives a
// restart); the first poll of a run, and one after a failed poll, ask
// the hub to send again what the agent did not receive (again after an
// answer that only asks for a report). A state written by
// an older agent, which did not count what it received, asks for nothing.
func TestPollsSayWhatTheAgentReceived(t *testing.T) {
	h := newHarness(t)
	stop := h.start(t)
	h.hub.registration(t)
	if rs := h.hub.receiptsAfter(t, 0); rs[0] != (fleetwave.Receipt{Resume: true}) {
		t.Fatalf("first poll of a fresh agent said %+v, want resume with nothing received", rs[0])
	}
	att := attempt("att-1", 1, "true")
	att.Delivery = 7
	h.hub.enqueue(att)
	h.hub.result(t)
	h.hub.mu.Lock()
	h.hub.failPolls, h.hub.reportAfterFail = 1, true
	h.hub.mu.Unlock()
	// the polls after the attempt say it; the one after a failure resumes
	// (after an answer asking for a report, which the hub gives before it
	// looks at the poll), the one after that does not
	var rs []fleetwave.Receipt
	var failed int
	for {
		h.hub.mu.Lock()
		rs = slices.Clone(h.hub.receipts)
		failed = -1
		if len(h.hub.failed) > 0 {
			failed = h.hub.failed[0]
		}
		h.hub.mu.Unlock()
		if failed >= 0 && len(rs) > failed+2 {
			break
		}
		rs = h.hub.receiptsAfter(t, len(rs))
	}
	for i := failed; i < len(rs); i++ {
		if want := (fleetwave.Receipt{Delivered: 7, Resume: i == failed+1}); rs[i] != want {
			t.Fatalf("poll %d (the failed one: %d) said %+v, want %+v; all: %+v", i, failed, rs[i], want, rs)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// a restart resumes with what the journal holds
	h.hub.mu.Lock()
	n := len(h.hub.receipts)
	h.hub.mu.Unlock()
	stop = h.start(t)
	h.hub.registration(t)
	if rs := h.hub.receiptsAfter(t, n); rs[n] != (fleetwave.Receipt{Delivered: 7, Resume: true}) {
		t.Fatalf("first poll after a restart said %+v", rs[n])
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// an older agent's state: nothing counted, nothing asked
	path := statePath(filepath.Join(h.dir, "state"))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := regexp.MustCompile(`,\s*"(last_delivery|receipts)": [^,\n]*`).ReplaceAllString(string(b), "")
	if !strings.Contains(string(b), `"last_delivery": 7`) || strings.Contains(old, "receipts") || strings.Contains(old, "last_delivery") {
		t.Fatalf("state.json does not hold what was expected:\n%s", b)
	}
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	h.hub.mu.Lock()
	n = len(h.hub.receipts)
	h.hub.mu.Unlock()
	h.start(t)
	h.hub.registration(t)
	if rs := h.hub.receiptsAfter(t, n); rs[n] != (fleetwave.Receipt{}) {
		t.Fatalf("first poll from an older agent's state said %+v, want nothing", rs[n])
	}
}

// TestAnAgentStoppedPartWayThroughAnAnswerSaysWhatItTook: an answer of two
// attempts (numbered 3 and 4) whose first is running when the agent stops.
// Its next start says it holds 3, not the answer's highest: the hub sends
// the second again rather than wait out its deadline, and the agent never
// ran it.
func TestAnAgentStoppedPartWayThroughAnAnswerSaysWhatItTook(t *testing.T) {
	h := newHarness(t)
	stop := h.start(t)
	h.hub.registration(t)
	long, next := attempt("att-long", 1, "sleep 60"), attempt("att-next", 1, "true")
	long.Delivery, next.Delivery = 3, 4
	h.hub.enqueue(long, next)
	path := statePath(filepath.Join(h.dir, "state"))
	for deadline := time.Now().Add(waitLimit); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), `"att-long"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first attempt of the answer was never journalled")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	h.hub.mu.Lock()
	n := len(h.hub.receipts)
	h.hub.mu.Unlock()
	h.start(t)
	h.hub.registration(t)
	if rs := h.hub.receiptsAfter(t, n); rs[n] != (fleetwave.Receipt{Delivered: 3, Resume: true}) {
		t.Fatalf("first poll after stopping part way through an answer said %+v, want resume from 3", rs[n])
	}
	if b, err := os.ReadFile(path); err != nil || strings.Contains(string(b), `"att-next"`) {
		t.Fatalf("the attempt the agent did not take is in its journal (%v):\n%s", err, b)
	}
}

func TestAbsentDesiredStateRemovesTheInstance(t *testing.T) {
	h := newHarness(t)
	h.start(t)
	h.hub.registration(t)
	h.hub.enqueue(attempt("att-install", 1, "true"))
	if res := h.hub.result(t); res.Instance == nil {
		t.Fatalf("install: %+v", res)
	}
	rm := attempt("att-remove", 1, "true")
	rm.Action, rm.DesiredState, rm.Generation = "uninstall", fleetwave.StateAbsent, 5
	h.hub.enqueue(rm)
	res := h.hub.result(t)
	if res.Class != fleetwave.ResultSuccess || res.Instance == nil || res.Instance.State != fleetwave.StateAbsent || res.Instance.Generation != 5 {
		t.Fatalf("uninstall result = %+v", res.Instance)
	}
	if r := h.hub.reportWith(t, "att-remove"); len(r.Instances) != 0 {
		t.Fatalf("removed instance still reported: %+v", r.Instances)
	}
}

// reportWith waits for a full report that lists attempt id in its journal.
func (h *testHub) reportWith(t *testing.T, id string) fleetwave.Report {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		n := len(h.reports)
		var r fleetwave.Report
		if n > 0 {
			r = h.reports[n-1]
		}
		h.mu.Unlock()
		if n > 0 && slices.Contains(r.Attempts, id) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no full report listing attempt %s", id)
	return fleetwave.Report{}
}

func TestCrashMidRunIsReportedLostNotRerun(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(t)
	// A previous agent journalled the attempt as started, then died.
	st, err := openStore(cfg.StateDir, testNode, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st.st.MaxFence = 9
	st.record("att-crashed", &journalEntry{Status: journalStarted, Fence: 9, StartedAt: time.Now().UTC()})
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	st.close()

	h.start(t)
	reg := h.hub.registration(t)
	if !slices.Contains(reg.Attempts, "att-crashed") {
		t.Fatalf("journal = %q", reg.Attempts)
	}
	res := h.hub.result(t)
	if res.AttemptID != "att-crashed" || res.Class != fleetwave.ResultLost || res.Fence != 9 {
		t.Fatalf("result = %+v", res)
	}
	h.hub.enqueue(attempt("att-crashed", 9, "echo ran >> runs.log"))
	if res := h.hub.result(t); res.Class != fleetwave.ResultLost {
		t.Fatalf("re-delivered crashed attempt = %+v", res)
	}
	if got := lines(t, filepath.Join(h.work("web"), "runs.log")); len(got) != 0 {
		t.Fatalf("crashed attempt was run again")
	}
}

// gone reports whether pid no longer runs (absent, or a zombie nobody reaped).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// Format: pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func TestTimeoutKillsTheWholeProcessGroup(t *testing.T) {
	h := newHarness(t)
	h.start(t)
	h.hub.registration(t)
	att := attempt("att-slow", 1, `sleep 1000 & echo $! > child.pid; echo started; wait`)
	att.Payload.TimeoutSeconds = 1
	h.hub.enqueue(att)
	res := h.hub.result(t)
	if res.Class != fleetwave.ResultTransient || !strings.Contains(res.Output, "timed out") || !strings.Contains(res.Output, "started") {
		t.Fatalf("result = %+v", res)
	}
	if res.Instance != nil {
		t.Errorf("timed-out attempt changed the instance: %+v", res.Instance)
	}
	pids := lines(t, filepath.Join(h.work("web"), "child.pid"))
	if len(pids) != 1 {
		t.Fatalf("child.pid = %q", pids)
	}
	pid, err := strconv.Atoi(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// The kill is sent before the result; reaping by init may lag.
	deadline := time.Now().Add(waitLimit)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("background child %d survived the timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHubOutageIsRetried(t *testing.T) {
	h := newHarness(t)
	h.hub.failRegister = 2
	h.start(t)
	h.hub.registration(t)
	h.hub.mu.Lock()
	defer h.hub.mu.Unlock()
	if h.hub.registerHits != 3 {
		t.Fatalf("registration attempts = %d, want 3", h.hub.registerHits)
	}
}

func TestRunRefusesUntrustedState(t *testing.T) {
	tests := []struct {
		name  string
		state string
	}{
		{name: "a truncated state file is corrupted", state: `{"version":1,"node":"edge-01","instances":{`},
		{name: "a state file of garbage is corrupted", state: "\x00\x01garbage"},
		{name: "a state file of another node is refused", state: `{"version":1,"node":"edge-99","instances":{},"journal":{}}`},
		{name: "a state file of an unknown version is refused", state: `{"version":99,"node":"edge-01"}`},
		{name: "a journal entry without status is refused", state: `{"version":1,"node":"edge-01","journal":{"a":{"seq":1}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := h.config(t)
			if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(cfg.StateDir, "state.json")
			if err := os.WriteFile(path, []byte(tt.state), 0o600); err != nil {
				t.Fatal(err)
			}
			err := Run(context.Background(), cfg)
			if !errors.Is(err, ErrStateCorrupted) || !strings.Contains(err.Error(), "state.json") {
				t.Fatalf("Run = %v, want ErrStateCorrupted naming the file", err)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.state {
				t.Fatal("untrusted state file was rewritten")
			}
			select {
			case r := <-h.hub.registers:
				t.Fatalf("agent registered on untrusted state: %+v", r)
			default:
			}
		})
	}
}

func TestRunRefusesAnIncompleteConfig(t *testing.T) {
	err := Run(context.Background(), Config{HubURL: "http://127.0.0.1:1", Node: testNode})
	if err == nil || !strings.Contains(err.Error(), "token") || !strings.Contains(err.Error(), "state dir") {
		t.Fatalf("Run = %v", err)
	}
}

func TestReadTokenFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string
		wantErr bool
	}{
		{name: "a token with a trailing newline is trimmed", content: "abc123\n", want: "abc123"},
		{name: "surrounding whitespace is trimmed", content: "  abc123 \r\n", want: "abc123"},
		{name: "an empty file is refused", content: "", wantErr: true},
		{name: "a file of whitespace is refused", content: " \n\t\n", wantErr: true},
		{name: "two words are refused", content: "abc 123\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadTokenFile(path)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ReadTokenFile = %q, %v", got, err)
			}
		})
	}
	if _, err := ReadTokenFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing token file was accepted")
	}
}

func TestTailBufferKeepsTheLastBytes(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{name: "short output is kept whole", writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "long output keeps its tail", writes: []string{"abcdef", "gh"}, want: "defgh"},
		{name: "one oversized write keeps its tail", writes: []string{"0123456789"}, want: "56789"},
		{name: "a cut multi-byte character is dropped", writes: []string{"xx\u00e9abcd"}, want: "abcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &tailBuffer{max: 5}
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := b.String(); got != tt.want {
				t.Fatalf("tail = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestOperationalAttemptLeavesTheInstanceAlone: a backup (operational) run
// after an upgrade records the attempt but keeps the instance's version,
// config hash, state, owner and generation; on a block with no instance it
// creates none.
func TestOperationalAttemptLeavesTheInstanceAlone(t *testing.T) {
	h := newHarness(t)
	stop := h.start(t)
	defer stop()
	h.hub.registration(t)
	h.hub.enqueue(attempt("att-1", 7, "true"))
	if res := h.hub.result(t); res.Instance == nil || res.Instance.Generation != 4 {
		t.Fatalf("upgrade result = %+v", res)
	}
	backup := attempt("att-2", 7, "echo backup > backup.txt")
	backup.Action, backup.Generation, backup.TargetVersion, backup.ConfigHash, backup.DesiredState, backup.ManagedBy = "backup", 9, "", "", "", ""
	backup.Payload.Operational = true
	h.hub.enqueue(backup)
	res := h.hub.result(t)
	in := res.Instance
	if res.Class != fleetwave.ResultSuccess || in == nil || in.Version != "2.1.0" || in.ConfigHash != "c0ffee" ||
		in.Generation != 4 || in.State != fleetwave.StateRunning || in.ManagedBy != "web-upgrade" || in.LastAttempt != "att-2" {
		t.Fatalf("after the backup: %+v %+v, want the upgrade's instance with last_attempt att-2", res, in)
	}
	other := attempt("att-3", 7, "true")
	other.Block, other.Payload.Operational = "db", true
	h.hub.enqueue(other)
	if res := h.hub.result(t); res.Class != fleetwave.ResultSuccess || res.Instance != nil {
		t.Fatalf("an operational action on a block without an instance: %+v", res)
	}
}

// TestAHubThatLostItsObservationsGetsAReportAtOnce: the agent's periodic
// report is an hour away; the hub answers a poll with report: true (its
// Redis lost what it knew of this node) and the agent reports at once,
// once.
func TestAHubThatLostItsObservationsGetsAReportAtOnce(t *testing.T) {
	h := newHarness(t)
	h.hub.wantReport = 1
	h.start(t)
	h.hub.registration(t)
	deadline := time.Now().Add(waitLimit)
	for {
		h.hub.mu.Lock()
		n := len(h.hub.reports)
		h.hub.mu.Unlock()
		if n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no report after the hub asked for one")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a few more polls: no more reports
	h.hub.mu.Lock()
	defer h.hub.mu.Unlock()
	if len(h.hub.reports) != 1 {
		t.Fatalf("%d reports, want the one asked for", len(h.hub.reports))
	}
}
