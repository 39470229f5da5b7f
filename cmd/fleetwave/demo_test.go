package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

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

// TestDemoRollsOutAndCommitsStatus drives `fleetwave demo` as a user would
// and stops it once the example rollout completed and status commits appeared.
func TestDemoRollsOutAndCommitsStatus(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--dir", dir, "--for", "3m"}, &stdout, &stderr)
	}()
	remote := filepath.Join(dir, "remote.git")
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
	// the branch people push to carries only people's commits
	if main := gitOut(t, "-C", remote, "log", "--format=%s", "main"); strings.Contains(main, "status: ") {
		t.Fatalf("status commits on main:\n%s", main)
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
