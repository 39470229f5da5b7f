package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// cliFleet is a running hub (embedded Redis, a real git remote) with an
// agent per node in agents, and identities olga (operator, "op-token"),
// vera (viewer, "view-token") and adam (admin, "admin-token").
type cliFleet struct {
	t      *testing.T
	URL    string
	remote string // file:// URL of the config repository
}

func startCLIFleet(t *testing.T, files map[string]string, agents []string) *cliFleet {
	t.Helper()
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("FLEETWAVE_TOKEN", "")
	t.Setenv("FLEETWAVE_HUB", "")
	tokens := map[string]string{}
	for _, n := range agents {
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
		ReconcileInterval: hub.Duration(300 * time.Millisecond),
		Identities: []hub.Identity{
			{Name: "olga", Role: "operator", TokenSHA256: hub.HashToken("op-token")},
			{Name: "vera", Role: "viewer", TokenSHA256: hub.HashToken("view-token")},
			{Name: "adam", Role: "admin", TokenSHA256: hub.HashToken("admin-token")},
		},
	}, hub.WithLogger(log))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait(); h.Close() })
	wg.Go(func() { _ = h.Run(ctx) })
	for _, n := range agents {
		wg.Go(func() {
			_ = agent.Run(ctx, agent.Config{HubURL: "http://" + h.Addr(), Node: n, Token: "t-" + n,
				StateDir: filepath.Join(dir, n), PollWait: time.Second, Logger: log})
		})
	}
	return &cliFleet{t: t, URL: "http://" + h.Addr(), remote: remote}
}

// cli runs fleetwave against the fleet's hub, with the viewer's token
// unless args say another.
func (f *cliFleet) cli(args ...string) (stdout, stderr string, code int) {
	hasToken := false
	for _, a := range args {
		hasToken = hasToken || a == "--token"
	}
	if !hasToken {
		args = append(args, "--token", "view-token")
	}
	return runCLI(append(args, "--hub", f.URL)...)
}

// waitFor runs the command until ok accepts its output and exit code.
func (f *cliFleet) waitFor(what string, ok func(out string, code int) bool, args ...string) string {
	f.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, errb, code := f.cli(args...)
		if ok(out, code) {
			return out
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s never happened; last: exit %d\n%s%s", what, code, out, errb)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// commitText is a commit's author, then its message with the trailers.
func (f *cliFleet) commitText(commit string) string {
	f.t.Helper()
	return gittest.Git(f.t, "", "--git-dir", strings.TrimPrefix(f.remote, "file://"), "show", "-s", "--format=%an%n%B", commit)
}

// file is path at the tip of main, "" when absent.
func (f *cliFleet) file(path string) string {
	f.t.Helper()
	s, _ := gittest.ReadFile(f.t, f.remote, path)
	return s
}
