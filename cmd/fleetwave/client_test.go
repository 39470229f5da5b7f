package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// TestRolloutCommandsPauseResumeAndReadBack drives the API client commands
// against a running hub (embedded Redis, real git, real agents).
func TestRolloutCommandsPauseResumeAndReadBack(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := map[string]string{
		"fleetwave.cue":  "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/app.cue": "kind: \"block\"\nname: \"app\"\nactions: { install: { command: \"sleep 2; echo ok > out\" }, upgrade: { command: \"true\" } }\n",
		"brc/app.cue":    "kind: \"trigger\"\nname: \"app\"\nblock_name: \"app\"\ntarget_version: \"1\"\nmax_concurrent: 1\n",
	}
	nodes := []string{"a1", "a2", "a3", "a4"}
	tokens := map[string]string{}
	for _, n := range nodes {
		files["nodes/"+n+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\n", n)
		tokens[n] = hub.HashToken("t-" + n)
	}
	remote := gittest.NewRemote(t, files)
	dir := t.TempDir()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := hub.New(ctx, hub.Config{
		Repo: hub.RepoConfig{URL: remote, PollInterval: hub.Duration(100 * time.Millisecond)}, Redis: "embedded",
		Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "hub"), Agents: hub.AgentsConfig{Tokens: tokens},
		Status: hub.StatusConfig{Interval: hub.Duration(time.Second)}, StepInterval: hub.Duration(50 * time.Millisecond),
		Identities: []hub.Identity{
			{Name: "olga", Role: "operator", TokenSHA256: hub.HashToken("op-token")},
			{Name: "vera", Role: "viewer", TokenSHA256: hub.HashToken("view-token")},
		},
	}, hub.WithLogger(log))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait(); h.Close() }()
	wg.Go(func() { _ = h.Run(ctx) })
	for _, n := range nodes {
		wg.Go(func() {
			_ = agent.Run(ctx, agent.Config{HubURL: "http://" + h.Addr(), Node: n, Token: "t-" + n,
				StateDir: filepath.Join(dir, n), PollWait: time.Second, Logger: log})
		})
	}
	hubURL := "http://" + h.Addr()
	cli := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		if !slices.Contains(args, "--token") {
			args = append(args, "--token", "view-token") // identities configured: reads need one too
		}
		code := run(context.Background(), append(args, "--hub", hubURL), &out, &errb)
		return out.String(), errb.String(), code
	}
	anon := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append(args, "--hub", hubURL), &out, &errb)
		return errb.String(), code
	}
	waitFor := func(what string, ok func(string) bool, args ...string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, errb, _ := cli(args...)
			if ok(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened; last output:\n%s%s", what, out, errb)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// every node in the rollout (agents that register late join it), so
	// that it still has pending items when paused
	waitFor("every node to join the rollout", func(s string) bool {
		for _, n := range nodes {
			if !strings.Contains(s, "\n"+n+" ") {
				return false
			}
		}
		return true
	}, "rollout", "get", "app-g1")
	if errb, code := anon("rollout", "list"); code == 0 || !strings.Contains(errb, "unauthorized") {
		t.Fatalf("a read without a token on a hub with identities: exit %d, %s", code, errb)
	}

	if _, errb, code := cli("rollout", "pause", "app-g1", "--token", "view-token"); code != 1 || !strings.Contains(errb, "forbidden") {
		t.Fatalf("a viewer paused: exit %d, %s", code, errb)
	}
	if out, errb, code := cli("rollout", "pause", "app-g1", "--token", "op-token"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("pause: exit %d\n%s%s", code, out, errb)
	}
	// Paused: the in-flight item finishes, nothing new starts.
	out := waitFor("the in-flight item to finish", func(s string) bool { return !strings.Contains(s, "in_progress") }, "rollout", "get", "app-g1")
	if !strings.Contains(out, "pending") {
		t.Fatalf("no item left pending to show the pause (every node joined before it):\n%s", out)
	}
	time.Sleep(1500 * time.Millisecond)
	if later, _, _ := cli("rollout", "get", "app-g1"); strings.Count(later, "completed") != strings.Count(out, "completed") || strings.Contains(later, "in_progress") {
		t.Fatalf("a paused rollout went on:\n%s\nthen:\n%s", out, later)
	}
	if out, errb, code := cli("rollout", "resume", "app-g1", "--token", "op-token"); code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", code, out, errb)
	}
	waitFor("completion", func(s string) bool { return hasRow(s, "app-g1", "completed") }, "rollout", "list")
	out, _, code := cli("status")
	if code != 0 || !hasRow(out, "sync", "ok") || !hasRow(out, "4", "4", "0", "0", "0", "0") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	if _, errb, code := cli("rollout", "resume", "app-g1", "--token", "op-token"); code != 1 || !strings.Contains(errb, "invalid_state") {
		t.Fatalf("resuming a completed rollout: exit %d, %s", code, errb)
	}
}

// hasRow reports whether a table line starts with the given fields.
func hasRow(table string, fields ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}
