package hub_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestAFollowerAsksForTheReportALostResultAwaits: the leader (a hub
// process) dispatches, and the node's agent talks to another replica, a
// follower, only. The agent's result is lost on the way (a proxy drops
// it), so at the attempt's deadline the leader's Step makes the item
// ambiguous, awaiting the node's full report. The follower hears of it
// and asks the agent for the report at once; the report completes the
// item. Before, only the leader knew which reports it awaited, and the
// agent, which never talks to it, reported at its interval (an hour here).
func TestAFollowerAsksForTheReportALostResultAwaits(t *testing.T) {
	remote := webOfOneNode(t, "", "{"+runInstall+`, timeout: "1s"}`, "")
	srv := redistest.Start(t)
	redisURL := "unix://" + srv.Addr
	dir := t.TempDir()
	startHubChild(t, childHubConfig(t, dir, remote, redisURL, freeAddr(t), "reconcile_interval: 200ms\n"), "")
	waitUntil(t, "hub-a leads", func() bool { owner, _ := leaseHolder(t, srv); return owner == "hub-a" })
	f := startFleetCfg(t, remote, redisURL, nil, nil, func(c *hub.Config) {
		c.HubID, c.LeaseTTL = "hub-b", hub.Duration(time.Second)
		c.Agents.Tokens = map[string]string{"n1": hub.HashToken("token-n1")}
	})

	// the agent reaches hub-b through a proxy that drops its first result
	// (a 4xx the agent does not send again)
	target, err := url.Parse("http://" + f.hub.Addr())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var dropped atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/result") && dropped.Add(1) == 1 {
			http.Error(w, `{"error":{"code":"lost_on_the_way","message":"dropped by the test's proxy"}}`, http.StatusBadRequest)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	runAgent(t, strings.TrimPrefix(front.URL, "http://"), "n1", filepath.Join(dir, "n1"), time.Hour)

	// the attempt's deadline is its dispatch, its timeout (1 s) and the
	// delivery grace; an ambiguous item is completed by a full report only
	eng := f.hub.Engine()
	var item fleetwave.Item
	for wait := time.Now().Add(2 * time.Minute); item.Status != fleetwave.ItemCompleted; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("item %+v not completed: the agent was not asked for its report", item)
		}
		if rs, err := eng.Rollouts(context.Background()); err == nil && len(rs) == 1 {
			item = onlyItem(t, eng)
		}
	}
	if item.Attempts != 1 || item.LastClass != fleetwave.ResultLost || dropped.Load() != 1 {
		t.Fatalf("item %+v, results dropped %d: want one attempt, its result dropped and counted lost", item, dropped.Load())
	}
	deadline := item.DispatchedAt.Add(time.Second + engine.DefaultDeliveryGrace)
	t.Logf("completed by n1's report %v after the attempt's deadline", item.CompletedAt.Sub(deadline).Round(time.Millisecond))
}
