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
	_, dir, follower := leaderAndFollower(t)
	f := follower()
	_, dropped := agentBehindLossyFront(t, dir, f)
	completedByReport(t, f.hub.Engine(), dropped)
}

// TestARestartedFollowerAsksForTheReportItMissed: as above, but the
// follower the agent talks to goes down once the agent's result was lost,
// and comes back (a new process's worth of state: a hub of its own) only
// after the leader's Step made the item ambiguous and announced it. The
// new follower never heard the announcement; the first poll of the node
// there looks in Redis, finds the item awaiting the node's report and
// asks for it. Before, the agent reported at its interval (an hour).
func TestARestartedFollowerAsksForTheReportItMissed(t *testing.T) {
	srv, dir, follower := leaderAndFollower(t)
	f := follower()
	to, dropped := agentBehindLossyFront(t, dir, f)
	waitUntil(t, "n1's result lost on the way", func() bool { return dropped.Load() == 1 })

	// hub-b goes down: the agent's polls fail until it is back
	to.Store(nil)
	f.stop()
	eng := engine.New(srv.Client(t), engine.WithPrefix("fleetwave"))
	waitUntil(t, "the leader's Step makes n1's item ambiguous", func() bool {
		return onlyItem(t, eng).Status == fleetwave.ItemAmbiguous
	})
	b := follower()
	addr := b.hub.Addr()
	to.Store(&addr)
	completedByReport(t, b.hub.Engine(), dropped)
}

// leaderAndFollower starts a Redis, a repository of one node (n1, whose
// install times out after 1 s) and hub-a, a hub process that takes the
// lease; follower starts hub-b in this process (a new one at each call).
func leaderAndFollower(t *testing.T) (srv *redistest.Server, dir string, follower func() *runningFleet) {
	t.Helper()
	remote := webOfOneNode(t, "", "{"+runInstall+`, timeout: "1s"}`, "")
	srv = redistest.Start(t)
	redisURL := "unix://" + srv.Addr
	dir = t.TempDir()
	startHubChild(t, childHubConfig(t, dir, remote, redisURL, freeAddr(t), "reconcile_interval: 200ms\n"), "")
	waitUntil(t, "hub-a leads", func() bool { owner, _ := leaseHolder(t, srv); return owner == "hub-a" })
	return srv, dir, func() *runningFleet {
		return startFleetCfg(t, remote, redisURL, nil, nil, func(c *hub.Config) {
			c.HubID, c.LeaseTTL = "hub-b", hub.Duration(time.Second)
			c.Agents.Tokens = map[string]string{"n1": hub.HashToken("token-n1")}
		})
	}
}

// agentBehindLossyFront runs n1's agent (its state in dir, a full report
// every hour) behind a proxy to f's hub, and returns where the proxy
// sends (the address to holds; 503 while it holds none) and the count of
// results posted through it. The proxy drops the first result, answering
// a 4xx the agent does not send again.
func agentBehindLossyFront(t *testing.T, dir string, f *runningFleet) (to *atomic.Pointer[string], dropped *atomic.Int32) {
	t.Helper()
	to, dropped = &atomic.Pointer[string]{}, &atomic.Int32{}
	addr := f.hub.Addr()
	to.Store(&addr)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := to.Load()
		if addr == nil {
			http.Error(w, `{"error":{"code":"unavailable","message":"no hub behind the test's proxy"}}`, http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/result") && dropped.Add(1) == 1 {
			http.Error(w, `{"error":{"code":"lost_on_the_way","message":"dropped by the test's proxy"}}`, http.StatusBadRequest)
			return
		}
		httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: *addr}).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	runAgent(t, strings.TrimPrefix(front.URL, "http://"), "n1", filepath.Join(dir, "n1"), time.Hour)
	return to, dropped
}

// completedByReport waits until the one item eng holds is completed, and
// checks that its one attempt's result was dropped (counted lost), so a
// full report of the node completed it.
func completedByReport(t *testing.T, eng *engine.Engine, dropped *atomic.Int32) {
	t.Helper()
	// the attempt's deadline is its dispatch, its timeout (1 s) and the
	// delivery grace; an ambiguous item is completed by a full report only
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
