package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestBenchSyncLatency prints push -> new snapshot latency, with the local
// watcher and with the webhook (polling set to a minute so it never helps).
//
//	FLEETWAVE_BENCH=1 go test -run TestBenchSyncLatency -v ./hub/
func TestBenchSyncLatency(t *testing.T) {
	if os.Getenv("FLEETWAVE_BENCH") != "1" {
		t.Skip("set FLEETWAVE_BENCH=1 to run the sync latency benchmark")
	}
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	for _, mode := range []string{"watcher", "webhook"} {
		remote := gittest.NewRemote(t, dbFleet())
		dir := t.TempDir()
		cfg := hub.Config{
			Repo:  hub.RepoConfig{URL: remote, PollInterval: hub.Duration(time.Minute), NoWatch: mode == "webhook"},
			Redis: "unix://" + redistest.Start(t).Addr, Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "hub"),
			Status: hub.StatusConfig{Interval: hub.Duration(time.Minute)},
		}
		ctx, cancel := context.WithCancel(t.Context())
		h, err := hub.New(ctx, cfg, hub.WithLogger(zerolog.Nop()))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = h.Run(ctx); close(done) }()
		waitSnapshot(t, h, gittest.Head(t, remote))
		var lat []time.Duration
		for i := range 20 {
			c := gittest.Push(t, remote, map[string]string{"nodes/n1.cue": fmt.Sprintf("kind: \"node\"\nname: \"n1\"\nlabels: { tier: \"web\", round: \"r%d\" }\n", i)}, nil, fmt.Sprintf("round %d", i))
			start := time.Now()
			if mode == "webhook" {
				resp, err := http.Post("http://"+h.Addr()+"/api/v1/hooks/git", "application/json", strings.NewReader(`{"ref":"refs/heads/main"}`))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			waitSnapshot(t, h, c)
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		t.Logf("push -> snapshot applied (%s): p50 %v  p90 %v  max %v  (n=%d; target p50 < 200ms)",
			mode, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat))
		cancel()
		<-done
		h.Close()
	}
}

func waitSnapshot(t *testing.T, h *hub.Hub, commit string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s := h.Snapshot(); s != nil && s.Commit == commit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %s never applied", commit)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
