package agent

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// childEnv, when set, makes the test binary run an agent (see TestMain)
// instead of the tests: a real agent process that a test can SIGKILL.
const childEnv = "FLEETWAVE_TEST_AGENT_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

func runChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := Run(ctx, Config{
		HubURL:         os.Getenv("FLEETWAVE_TEST_HUB"),
		Node:           testNode,
		Token:          testToken,
		StateDir:       os.Getenv("FLEETWAVE_TEST_STATE"),
		PollWait:       time.Second,
		ReportInterval: time.Hour,
		Logger:         zerolog.New(os.Stderr),
	})
	if err != nil {
		os.Stderr.WriteString("agent: " + err.Error() + "\n")
		return 1
	}
	return 0
}

// startChild runs an agent process against h's hub.
func startChild(t *testing.T, h *harness) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "FLEETWAVE_TEST_HUB="+h.srv.URL, "FLEETWAVE_TEST_STATE="+filepath.Join(h.dir, "state"))
	cmd.Stderr = testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitLimit):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return cmd
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSIGKILLedAgentReportsTheOneShotActionLost(t *testing.T) {
	h := newHarness(t)
	work := h.work("web")
	// a one-shot action (a migration): records that it ran, then takes long
	att := attempt("att-migrate", 5, `echo $$ > pgid; echo ran >> runs.log; sleep 60`)
	att.Action = "migrate"

	first := startChild(t, h)
	h.hub.registration(t)
	h.hub.enqueue(att)
	waitFor(t, "the action to start", func() bool { return len(lines(t, filepath.Join(work, "runs.log"))) == 1 })
	if err := first.Process.Kill(); err != nil { // SIGKILL: no chance to journal anything
		t.Fatal(err)
	}
	_ = first.Wait()
	// the command survives its agent (own process group): end it here
	if pg := lines(t, filepath.Join(work, "pgid")); len(pg) == 1 {
		if pgid, err := strconv.Atoi(pg[0]); err == nil {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}

	startChild(t, h)
	h.hub.registration(t)
	res := h.hub.result(t)
	if res.AttemptID != att.ID || res.Class != fleetwave.ResultLost || res.Fence != 5 {
		t.Fatalf("result after the restart = %+v, want lost", res)
	}
	// the hub (or a replayed message) sends it again: still not run
	h.hub.enqueue(att)
	if res := h.hub.result(t); res.AttemptID != att.ID || res.Class != fleetwave.ResultLost {
		t.Fatalf("re-sent attempt = %+v", res)
	}
	if got := lines(t, filepath.Join(work, "runs.log")); len(got) != 1 {
		t.Fatalf("the one-shot action ran %d times", len(got))
	}
}

func TestAttemptPastItsDeadlineIsRefused(t *testing.T) {
	h := newHarness(t)
	h.start(t)
	att := attempt("att-late", 3, "echo ran >> runs.log")
	att.Deadline = time.Now().Add(-time.Second)
	h.hub.enqueue(att)
	res := h.hub.result(t)
	if res.Class != fleetwave.ResultTransient || res.Output != "deadline passed before start" || res.ExitCode != -1 {
		t.Fatalf("result = %+v", res)
	}
	if got := lines(t, filepath.Join(h.work("web"), "runs.log")); len(got) != 0 {
		t.Fatal("a late attempt ran")
	}
}

func TestOutputIsRedacted(t *testing.T) {
	h := newHarness(t)
	h.start(t)
	att := attempt("att-secret", 3, `cat "$FLEETWAVE_CONFIG"; echo "connecting with hunter22-password"; echo "replicas=3 ok"`)
	att.Payload.Config = "replicas: 3\npassword: \"hunter22-password\"\ntls:\n  key: |\n    -----BEGIN KEY-----\n    c2VjcmV0LWtleS1ieXRlcw==\n    -----END KEY-----\nname: web\n"
	h.hub.enqueue(att)
	res := h.hub.result(t)
	for _, leak := range []string{"hunter22-password", "c2VjcmV0LWtleS1ieXRlcw==", "BEGIN KEY"} {
		if strings.Contains(res.Output, leak) {
			t.Fatalf("output leaks %q:\n%s", leak, res.Output)
		}
	}
	if !strings.Contains(res.Output, "connecting with [redacted]") || !strings.Contains(res.Output, "replicas=3 ok") {
		t.Fatalf("output = %q", res.Output)
	}
}

func TestRedact(t *testing.T) {
	cfg := "user: admin\ntoken: abcdef123456\nurl: https://db.example:5432/app\nnot yaml: [\n"
	out := "token abcdef123456 for https://db.example:5432/app as admin\n"
	want := "token [redacted] for [redacted] as admin\n"
	if got := redact(out, cfg); got != want {
		t.Fatalf("redact = %q, want %q", got, want)
	}
}
