package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// detectingHub is a fakeHub with detect commands.
type detectingHub struct {
	*fakeHub
	cmds func(node string) ([]fleetwave.DetectCommand, error)
}

func (h *detectingHub) DetectCommands(_ context.Context, node string) ([]fleetwave.DetectCommand, error) {
	h.record("detect " + node)
	return h.cmds(node)
}

func TestDetectRoute(t *testing.T) {
	cmds := map[string][]fleetwave.DetectCommand{"node-a": {{Block: "web", Command: "cat version", TimeoutSeconds: 30}}}
	var ready atomic.Bool
	ready.Store(true)
	dh := &detectingHub{fakeHub: &fakeHub{}, cmds: func(node string) ([]fleetwave.DetectCommand, error) {
		if !ready.Load() {
			return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "no snapshot yet"}
		}
		return cmds[node], nil
	}}
	srv := httptest.NewServer(api.New(dh, api.WithLogger(zerolog.New(zerolog.NewTestWriter(t)))))
	t.Cleanup(srv.Close)
	path := "/api/v1/agent/nodes/node-a/detect"

	a := do(t, srv, request{method: "GET", path: path, token: "token-a"})
	if a.status != 200 || a.body != `{"blocks":[{"block":"web","command":"cat version","timeout_seconds":30}]}`+"\n" || a.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("detect = %d %q %v", a.status, a.body, a.header)
	}
	if a := do(t, srv, request{method: "GET", path: "/api/v1/agent/nodes/node-b/detect", token: "token-b"}); a.status != 200 || a.body != `{"blocks":[]}`+"\n" {
		t.Fatalf("node without commands: %d %q, want an empty list", a.status, a.body)
	}
	if a := do(t, srv, request{method: "GET", path: path, token: "token-b"}); a.status != 403 || errorCode(t, a) != "forbidden" {
		t.Fatalf("another node's token: %d %s", a.status, a.body)
	}
	if a := do(t, srv, request{method: "GET", path: path}); a.status != 401 {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
	ready.Store(false)
	if a := do(t, srv, request{method: "GET", path: path, token: "token-a"}); a.status != 503 || errorCode(t, a) != "not_ready" {
		t.Fatalf("hub not ready: %d %s", a.status, a.body)
	}
	// a hub without detect commands answers an empty list
	plain := newServer(t, &fakeHub{})
	if a := do(t, plain, request{method: "GET", path: path, token: "token-a"}); a.status != 200 || a.body != `{"blocks":[]}`+"\n" {
		t.Fatalf("hub without DetectHub: %d %q", a.status, a.body)
	}
}
