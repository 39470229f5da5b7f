package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestApprovalEndpoints: who may call which approval endpoint, and what
// reaches the hub. The hub decides the rules of the requests themselves
// (hub's TestApprovalAuthorizationMatrix).
func TestApprovalEndpoints(t *testing.T) {
	submit := `{"brc":"web","target_version":"2","nodes":["n1"]}`
	tests := []struct {
		name       string
		req        request
		wantStatus int
		wantCode   string
		wantCall   string
	}{
		{"an operator submits", request{"POST", "/api/v1/config-approvals", "tok-op", submit}, http.StatusCreated, "", "submit web by otto"},
		{"a viewer cannot submit", request{"POST", "/api/v1/config-approvals", "tok-view", submit}, http.StatusForbidden, "forbidden", ""},
		{"no token", request{"POST", "/api/v1/config-approvals", "", submit}, http.StatusUnauthorized, "unauthorized", ""},
		{"an unknown token", request{"POST", "/api/v1/config-approvals", "nope", submit}, http.StatusUnauthorized, "unauthorized", ""},
		{"a submission without brc", request{"POST", "/api/v1/config-approvals", "tok-op", `{"target_version":"2","nodes":["n1"]}`}, http.StatusBadRequest, "invalid_body", ""},
		{"a submission without targets", request{"POST", "/api/v1/config-approvals", "tok-op", `{"brc":"web","target_version":"2"}`}, http.StatusBadRequest, "invalid_body", ""},
		{"nodes and a selector together", request{"POST", "/api/v1/config-approvals", "tok-op", `{"brc":"web","target_version":"2","nodes":["n1"],"selector":{"match_labels":{"a":"b"}}}`}, http.StatusBadRequest, "invalid_body", ""},
		{"an unknown field", request{"POST", "/api/v1/config-approvals", "tok-op", `{"brc":"web","target_version":"2","nodes":["n1"],"requested_by":"mallory"}`}, http.StatusBadRequest, "invalid_body", ""},
		{"an admin approves", request{"POST", "/api/v1/config-approvals/req-1/approve", "tok-admin", ""}, http.StatusOK, "", "approved req-1 by ada"},
		{"an admin rejects", request{"POST", "/api/v1/config-approvals/req-1/reject", "tok-admin", "{}"}, http.StatusOK, "", "rejected req-1 by ada"},
		{"an operator cannot approve", request{"POST", "/api/v1/config-approvals/req-1/approve", "tok-op", ""}, http.StatusForbidden, "forbidden", ""},
		{"an unknown decision", request{"POST", "/api/v1/config-approvals/req-1/maybe", "tok-admin", ""}, http.StatusNotFound, "not_found", ""},
		{"a decision on an unknown request", request{"POST", "/api/v1/config-approvals/missing/approve", "tok-admin", ""}, http.StatusNotFound, "not_found", "approved missing by ada"},
		{"a request is read", request{"GET", "/api/v1/config-approvals/req-1", "", ""}, http.StatusOK, "", ""},
		{"an unknown request is not found", request{"GET", "/api/v1/config-approvals/missing", "", ""}, http.StatusNotFound, "not_found", ""},
		{"the list", request{"GET", "/api/v1/config-approvals", "", ""}, http.StatusOK, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &fakeHub{}
			srv := newServer(t, h)
			a := do(t, srv, tt.req)
			if a.status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", a.status, tt.wantStatus, a.body)
			}
			if tt.wantCode != "" {
				if got := errorCode(t, a); got != tt.wantCode {
					t.Fatalf("code %q, want %q", got, tt.wantCode)
				}
			}
			calls := strings.Join(h.Calls(), "; ")
			if calls != tt.wantCall {
				t.Fatalf("hub calls %q, want %q", calls, tt.wantCall)
			}
		})
	}
}
