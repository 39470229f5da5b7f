package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

func TestRolloutStateChangesNeedAnOperator(t *testing.T) {
	tests := []struct {
		name       string
		req        request
		wantStatus int
		wantCode   string
		wantCall   string
	}{
		{"no token is unauthorized", request{method: "POST", path: "/api/v1/rollouts/r1/pause"}, 401, "unauthorized", ""},
		{"an unknown token is unauthorized", request{method: "POST", path: "/api/v1/rollouts/r1/pause", token: "forged"}, 401, "unauthorized", ""},
		{"a viewer is forbidden", request{method: "POST", path: "/api/v1/rollouts/r1/pause", token: "tok-view"}, 403, "forbidden", ""},
		{"an operator pauses", request{method: "POST", path: "/api/v1/rollouts/r1/pause", token: "tok-op"}, 200, "", "pause r1 by otto"},
		{"an admin cancels", request{method: "POST", path: "/api/v1/rollouts/r1/cancel", token: "tok-admin"}, 200, "", "cancel r1 by ada"},
		{"an unknown action is not found", request{method: "POST", path: "/api/v1/rollouts/r1/explode", token: "tok-op"}, 404, "not_found", ""},
		{"an unknown rollout is not found", request{method: "POST", path: "/api/v1/rollouts/missing/resume", token: "tok-op"}, 404, "not_found", "resume missing by otto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &fakeHub{rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
				return fleetwave.Rollout{ID: id, Status: fleetwave.RolloutPaused}, nil, nil
			}}
			srv := httptest.NewServer(api.New(h))
			defer srv.Close()
			got := do(t, srv, tt.req)
			if got.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantCode != "" && errorCode(t, got) != tt.wantCode {
				t.Fatalf("code = %s, want %s", errorCode(t, got), tt.wantCode)
			}
			calls := strings.Join(h.Calls(), ",")
			if tt.wantCall == "" && strings.Contains(calls, " by ") || tt.wantCall != "" && !strings.Contains(calls, tt.wantCall) {
				t.Fatalf("calls = %q, want %q", calls, tt.wantCall)
			}
		})
	}
}

func TestGitHookWithABadSignatureIsRefused(t *testing.T) {
	h := &fakeHub{}
	srv := httptest.NewServer(api.New(h))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/hooks/git", strings.NewReader("{}"))
	req.Header.Set("X-Fleetwave-Signature", "bad")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || h.synced != 0 {
		t.Fatalf("status %d, synced %d: want 401 and no sync", resp.StatusCode, h.synced)
	}
}
