package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
)

// runMainEnv, set to 1, makes the test binary run the fleetwave command
// line instead of the tests: the demo starts its agent processes from its
// own binary (os.Executable), which under `go test` is this one. TestMain
// sets it for every child of the tests.
const runMainEnv = "FLEETWAVE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(Main())
	}
	os.Setenv(runMainEnv, "1")
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for the demo's writer and the test's reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(cmd.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// TestDemoRollsOutAndCommitsStatus drives `fleetwave demo` as a user would:
// the example rollout completes and status commits appear; then a push
// raising the system BRC's target_version upgrades the agents in waves,
// the agent processes by replacing their binaries.
func TestDemoRollsOutAndCommitsStatus(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--dir", dir, "--for", "3m", "--log-level", "info"}, &stdout, &stderr)
	}()
	remote := filepath.Join(dir, "remote.git")
	started := time.Now()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log := gitOut(t, "-C", remote, "log", "--format=%s", "fleetwave/status")
		doc := gitOut(t, "-C", remote, "show", "fleetwave/status:status/rollouts/operator-rollout-g1.yaml")
		if strings.Contains(log, "status: ") && strings.Contains(doc, "status: completed") && strings.Contains(doc, "done: 12") {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("demo exited early with %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed status commit in time\nlog:\n%s\nstatus:\n%s\nstdout:\n%s\nstderr:\n%s", log, doc, stdout.String(), stderr.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("operator-rollout-g1 completed and committed after %v", time.Since(started).Round(time.Millisecond))
	// the branch people push to carries only people's commits
	if main := gitOut(t, "-C", remote, "log", "--format=%s", "main"); strings.Contains(main, "status: ") {
		t.Fatalf("status commits on main:\n%s", main)
	}
	hubURL, tokens := checkDemoIdentities(t, stdout.String(), dir)
	checkDemoAgentUpgrade(t, hubURL, tokens["operator"], dir, remote, stdout.String(), done)
	if logs := stderr.String(); strings.Contains(logs, "agent process exited") || strings.Count(logs, "agent process started") != 3 {
		t.Errorf("the demo started its agent processes other than once each:\n%s", logs)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("demo exit code %d after Ctrl-C\nstderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop within 30s of cancellation")
	}
	out := stdout.String()
	for _, want := range []string{"console:", "remote repo: " + remote, "git clone", "git push", "Stop with Ctrl-C", "total="} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// logs to a buffer (not a terminal): plain text, no colour codes
	if logs := stderr.String(); !strings.Contains(logs, " INF ") || strings.Contains(logs, "\x1b[") {
		t.Errorf("demo log output (want info lines without ANSI escapes):\n%q", logs[:min(len(logs), 2000)])
	}
}

var (
	demoConsole      = regexp.MustCompile(`(?m)^  console: +(http://[0-9.:]+)/#token=([0-9a-f]{48})$`)
	demoIdentityLine = regexp.MustCompile(`(?m)^  (admin|operator|viewer) +(demo-[a-z]+) +([0-9a-f]{48})$`)
)

// checkDemoIdentities: the demo prints a console link signed in as its
// admin, and an admin, an operator and a viewer whose tokens the hub
// takes with their roles.
func checkDemoIdentities(t *testing.T, out, dir string) (hubURL string, tokens map[string]string) {
	t.Helper()
	m := demoConsole.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no console link with #token= in the demo output:\n%s", out)
	}
	hubURL, tokens = m[1], map[string]string{}
	for _, id := range demoIdentityLine.FindAllStringSubmatch(out, -1) {
		if id[2] != "demo-"+id[1] {
			t.Fatalf("identity line %q", id[0])
		}
		tokens[id[1]] = id[3]
		if file, err := os.ReadFile(filepath.Join(dir, "tokens", id[1])); err != nil || strings.TrimSpace(string(file)) != id[3] {
			t.Fatalf("tokens/%s: %q, %v; printed %s", id[1], file, err, id[3])
		}
	}
	if len(tokens) != 3 || tokens["admin"] != m[2] || tokens["admin"] == tokens["operator"] || tokens["operator"] == tokens["viewer"] {
		t.Fatalf("identities %v, console token %s:\n%s", tokens, m[2], out)
	}
	cli := func(token string, args ...string) (string, string, int) {
		if token != "" {
			args = append(args, "--token", token)
		}
		return runCLI(append(args, "--hub", hubURL)...)
	}
	if _, errb, code := cli("", "status"); code != 1 || !strings.Contains(errb, "(unauthorized)") {
		t.Fatalf("a read without a token: exit %d %s", code, errb)
	}
	if out, errb, code := cli(tokens["viewer"], "node", "labels", "get", "edge-01"); code != 0 || !hasRow(out, "region", "eu-west") {
		t.Fatalf("the viewer reads labels: exit %d\n%s%s", code, out, errb)
	}
	if _, errb, code := cli(tokens["viewer"], "node", "undrain", "edge-01"); code != 1 || !strings.Contains(errb, "(forbidden)") {
		t.Fatalf("the viewer undrained: exit %d %s", code, errb)
	}
	if out, errb, code := cli(tokens["operator"], "node", "undrain", "edge-01"); code != 0 || out != "node edge-01 was not drained (no commit)\n" {
		t.Fatalf("the operator undrains: exit %d\n%s%s", code, out, errb)
	}
	// deciding approvals is the admin's: the operator is refused, the
	// admin gets as far as the request (there is none)
	if _, errb, code := cli(tokens["operator"], "approval", "approve", "nope"); code != 1 || !strings.Contains(errb, "(forbidden)") {
		t.Fatalf("the operator approved: exit %d %s", code, errb)
	}
	if _, errb, code := cli(tokens["admin"], "approval", "approve", "nope"); code != 1 || !strings.Contains(errb, "(not_found)") {
		t.Fatalf("the admin approves an unknown request: exit %d %s", code, errb)
	}
	return hubURL, tokens
}

var agentVersionField = regexp.MustCompile(`"agent_version":\s*"([^"]*)"`)

// checkDemoAgentUpgrade follows the demo's printed agent upgrade: the
// agent processes (edge-01..03) run the demo build of the system BRC's
// version; a push raising it to 0.2.0 rolls the fleetwave-agent block out
// in waves, and each agent process downloads the 0.2.0 build from the
// hub, re-executes itself into it (no restart: its process was started
// once) and reports 0.2.0; its binary's path holds the 0.2.0 build, the
// previous one kept as .prev.
func checkDemoAgentUpgrade(t *testing.T, hubURL, token, dir, remote, out string, done <-chan int) {
	t.Helper()
	procs := []string{"edge-01", "edge-02", "edge-03"}
	if !strings.Contains(out, "Agent processes: edge-01, edge-02, edge-03 run as processes") || !strings.Contains(out, `sed -i 's/"0.1.0"/"0.2.0"/' brc/fleetwave-agent.cue`) {
		t.Fatalf("the demo output does not say how to upgrade its agent processes:\n%s", out)
	}
	agentVersion := func(node string) string {
		o, _, code := runCLI("node", "get", node, "-o", "json", "--hub", hubURL, "--token", token)
		m := agentVersionField.FindStringSubmatch(o)
		if code != 0 || m == nil {
			return ""
		}
		return m[1]
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			select {
			case code := <-done:
				t.Fatalf("demo exited early with %d while waiting until %s", code, what)
			default:
			}
			if time.Now().After(deadline) {
				for _, n := range procs {
					log, _ := os.ReadFile(filepath.Join(dir, "agents", n, "agent.log"))
					t.Logf("%s's agent log:\n%s", n, log[max(0, len(log)-4000):])
				}
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	wait("the agent processes report 0.1.0", func() bool {
		for _, n := range procs {
			if agentVersion(n) != "0.1.0" {
				return false
			}
		}
		return true
	})

	work := filepath.Join(dir, "work")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=Demo User", "-c", "user.email=user@fleetwave.invalid"}, args...)...)
		cmd.Env = append(cmd.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	git("clone", "-q", remote, work)
	brc := filepath.Join(work, "brc", "fleetwave-agent.cue")
	b, err := os.ReadFile(brc)
	if err != nil || !strings.Contains(string(b), `"0.1.0"`) {
		t.Fatalf("%s: %v\n%s", brc, err, b)
	}
	writeFile(t, brc, strings.Replace(string(b), `"0.1.0"`, `"0.2.0"`, 1))
	git("-C", work, "commit", "-qam", "agents 0.2.0")
	git("-C", work, "push", "-q")
	pushed := time.Now()

	var answer struct {
		Rollout fleetwave.Rollout `json:"rollout"`
		Items   []fleetwave.Item  `json:"items"`
	}
	wait("fleetwave-agent-g2 completed and the agent processes report 0.2.0", func() bool {
		o, _, code := runCLI("rollout", "get", "fleetwave-agent-g2", "-o", "json", "--hub", hubURL, "--token", token)
		if code != 0 || json.Unmarshal([]byte(o), &answer) != nil || answer.Rollout.Status != fleetwave.RolloutCompleted {
			return false
		}
		for _, n := range procs {
			if agentVersion(n) != "0.2.0" {
				return false
			}
		}
		return true
	})
	t.Logf("agents upgraded in %v after the push", time.Since(pushed).Round(time.Millisecond))
	waves := map[int]bool{}
	for _, it := range answer.Items {
		waves[it.Wave] = true
		if it.Status != fleetwave.ItemCompleted || it.TargetVersion != "0.2.0" {
			t.Errorf("item %s: %s %s, want completed at 0.2.0", it.Node, it.Status, it.TargetVersion)
		}
	}
	if len(answer.Items) != 30 || len(waves) < 2 {
		t.Errorf("fleetwave-agent-g2: %d items in waves %v, want 30 items in several waves", len(answer.Items), waves)
	}
	for _, n := range procs {
		bin := filepath.Join(dir, "agents", n, "bin", "fleetwave")
		for path, want := range map[string]string{bin: "0.2.0", bin + ".prev": "0.1.0"} {
			if v, ok, err := agent.DemoBuildVersion(path); !ok || err != nil || v != want {
				t.Errorf("%s is the build of %q (%v, %v), want %s", path, v, ok, err, want)
			}
		}
		log, _ := os.ReadFile(filepath.Join(dir, "agents", n, "agent.log"))
		if c := strings.Count(string(log), `"message":"agent starting"`); c != 2 || !strings.Contains(string(log), `"message":"agent upgraded"`) {
			t.Errorf("%s's agent log: %d starts (want 2: the first build, then the re-executed new one), upgraded: %v", n, c, strings.Contains(string(log), "agent upgraded"))
		}
	}
}

// TestDemoPortInUse: a taken port is named, with how to pick another,
// before the demo does any work.
func TestDemoPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dir := filepath.Join(t.TempDir(), "demo")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "--listen", ln.Addr().String(), "--dir", dir}, &stdout, &stderr)
	want := "fleetwave: port " + port + " is in use: make demo PORT=9090 (or fleetwave demo --listen 127.0.0.1:9090)\n"
	if code != 1 || stdout.String() != "" || stderr.String() != want {
		t.Fatalf("exit %d\nstdout %q\nstderr\n got %q\nwant %q", code, stdout.String(), stderr.String(), want)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the demo wrote %s before finding the port taken: %v", dir, err)
	}
}

func TestValidateExamplesAndBrokenCopy(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", "../../examples/fleet"}, &out, &errb); code != 0 {
		t.Fatalf("validate examples: exit %d\n%s%s", code, out.String(), errb.String())
	}
	broken := t.TempDir()
	if err := copyFS(osDirFS("../../examples/fleet"), ".", broken); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(broken, "nodes", "edge-01.cue"), "kind: \"node\"\nname: \"edge-01\"\ncriticality: \"urgent\"\n")
	out.Reset()
	code := run(context.Background(), []string{"validate", broken}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "nodes/edge-01.cue:3:") {
		t.Fatalf("validate broken copy: exit %d, output:\n%s", code, out.String())
	}
}

func TestInitScaffoldsARepositoryThatValidates(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	dir := filepath.Join(t.TempDir(), "config")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"init", dir}, &out, &errb); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"validate", dir}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "ok:") {
		t.Fatalf("validate after init: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if st := gitOut(t, "-C", dir, "status", "--porcelain"); st != "" {
		t.Fatalf("init left a dirty work tree:\n%s", st)
	}
	for _, f := range []string{"fleetwave.cue", "cue.mod/module.cue", "README.md"} {
		if !strings.Contains(gitOut(t, "-C", dir, "ls-files"), f) {
			t.Errorf("init did not commit %s", f)
		}
	}
	if code := run(context.Background(), []string{"init", dir}, &out, &errb); code == 0 {
		t.Fatal("a second init over an existing repository succeeded")
	}
}

func TestServeRequiresAConfigAndRunsFromOne(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "Try:") {
		t.Fatalf("serve without --config: exit %d, stderr %q", code, errb.String())
	}
}

func TestSchemaExportAndGenFleet(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"schema", "export", "--jsonschema"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"$defs"`) || !strings.Contains(out.String(), "block_config_template") {
		t.Fatalf("schema export: exit %d\n%.300s%s", code, out.String(), errb.String())
	}
	dir := filepath.Join(t.TempDir(), "gen")
	out.Reset()
	if code := run(context.Background(), []string{"dev", "gen-fleet", "--nodes", "50", "--brcs", "5", "--blocks", "3", dir}, &out, &errb); code != 0 {
		t.Fatalf("gen-fleet: exit %d %s", code, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"validate", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "50 nodes") {
		t.Fatalf("validate generated fleet: exit %d %s", code, out.String())
	}
}

// TestDemoLogsAreJSONWithEachKeyOnce: with --log-format json, every line a
// demo run writes (hub, engine, git, agents) is one JSON object in which
// no key appears twice, so `jq` reads one change through the system.
func TestDemoLogsAreJSONWithEachKeyOnce(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--dir", dir, "--for", "3m", "--log-level", "info", "--log-format", "json"}, &stdout, &stderr)
	}()
	remote := filepath.Join(dir, "remote.git")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		doc := gitOut(t, "-C", remote, "show", "fleetwave/status:status/rollouts/operator-rollout-g1.yaml")
		if strings.Contains(doc, "status: completed") {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("demo exited early with %d\nstderr:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("operator-rollout-g1 did not complete in time\nstderr:\n%s", stderr.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	cancel()
	<-done
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) < 20 {
		t.Fatalf("only %d log lines", len(lines))
	}
	for i, line := range lines {
		if dup, err := duplicateKey(line); err != nil || dup != "" {
			t.Fatalf("line %d is not one JSON object with each key once (duplicate %q, %v):\n%s", i+1, dup, err, line)
		}
	}
}

// duplicateKey returns the first key that appears twice in one object of
// the JSON document line ("" for none), reading it token by token.
func duplicateKey(line string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	var walk func() (string, error)
	walk = func() (string, error) {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return "", err
				}
				key := k.(string)
				if seen[key] {
					return key, nil
				}
				seen[key] = true
				if dup, err := walk(); err != nil || dup != "" {
					return dup, err
				}
			}
			_, err = dec.Token()
			return "", err
		case json.Delim('['):
			for dec.More() {
				if dup, err := walk(); err != nil || dup != "" {
					return dup, err
				}
			}
			_, err = dec.Token()
			return "", err
		}
		return "", nil
	}
	if !strings.HasPrefix(line, "{") {
		return "", fmt.Errorf("not a JSON object")
	}
	dup, err := walk()
	if err == nil && dec.More() {
		err = fmt.Errorf("data after the object")
	}
	return dup, err
}
