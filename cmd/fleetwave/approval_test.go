package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// approvalHub stands in for the hub behind the real API handler (api.New):
// the API authenticates, checks roles, decodes bodies strictly and encodes
// errors exactly as in production; this fake answers the approval calls
// the way hub/approvals.go does. Any other Hub method panics (the embedded
// nil interface): the approval commands must not call them.
type approvalHub struct {
	api.Hub
	mu        sync.Mutex
	approvals map[string]fleetwave.Approval
	clock     time.Time
}

var approvalIdentities = map[string]api.Identity{
	"op-token":    {Name: "olga", Role: api.RoleOperator},
	"alice-token": {Name: "alice", Role: api.RoleAdmin},
	"bob-token":   {Name: "bob", Role: api.RoleAdmin},
	"view-token":  {Name: "vera", Role: api.RoleViewer},
}

// approvalNodes are the fake fleet's nodes and labels, in id order.
var approvalNodes = []struct {
	id     string
	labels map[string]string
}{
	{"core-01", map[string]string{"env": "prod", "tier": "core"}},
	{"edge-01", map[string]string{"env": "prod", "tier": "edge"}},
	{"edge-02", map[string]string{"env": "prod", "tier": "edge", "canary": "yes"}},
	{"lab-01", map[string]string{"env": "staging", "example.com/rack": "r7"}},
}

// IdentitiesConfigured: false, reads stay open as on a hub without
// identities for viewers (the writes below still need a token).
func (h *approvalHub) IdentitiesConfigured() bool { return false }

func (h *approvalHub) AuthenticateUser(token string) (api.Identity, bool) {
	id, ok := approvalIdentities[token]
	return id, ok
}

func (h *approvalHub) tick() time.Time {
	h.clock = h.clock.Add(time.Minute)
	return h.clock
}

func approvalErr(status int, code, msg string) error {
	return &api.Error{Status: status, Code: code, Message: msg}
}

func (h *approvalHub) SubmitApproval(_ context.Context, actor api.Identity, s api.ApprovalSubmission) (fleetwave.Approval, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.ID == "" {
		s.ID = s.BRC + "-" + strings.ReplaceAll(s.TargetVersion, ".", "-") + "-a1b2c3"
	}
	if _, ok := h.approvals[s.ID]; ok {
		return fleetwave.Approval{}, approvalErr(409, "already_exists", fmt.Sprintf("approval %s exists: a resubmission is a new request", s.ID))
	}
	switch {
	case s.BRC != "app":
		return fleetwave.Approval{}, approvalErr(422, "unknown_brc", fmt.Sprintf("brc %q is not defined", s.BRC))
	case s.TargetVersion != "2.1":
		return fleetwave.Approval{}, approvalErr(422, "version_mismatch", fmt.Sprintf("brc %s targets %q, not %q: an approval pins the version the brc asks for", s.BRC, "2.1", s.TargetVersion))
	}
	var nodes []string
	for _, n := range approvalNodes {
		if slices.Contains(s.Nodes, n.id) || (s.Selector != nil && s.Selector.Matches(n.labels)) {
			nodes = append(nodes, n.id)
		}
	}
	for _, n := range s.Nodes {
		if !slices.Contains(nodes, n) {
			return fleetwave.Approval{}, approvalErr(422, "unknown_node", "no node record for "+n)
		}
	}
	if len(nodes) == 0 {
		return fleetwave.Approval{}, approvalErr(422, "no_matching_nodes", "the request's nodes or selector match no node")
	}
	a := fleetwave.Approval{ID: s.ID, BRC: s.BRC, TargetVersion: s.TargetVersion, Generation: 3, Nodes: nodes, BatchSize: s.BatchSize,
		State: fleetwave.ApprovalPending, SubmittedBy: actor.Name, SubmittedVia: "api", SubmittedAt: h.tick()}
	if s.Selector != nil {
		b, _ := json.Marshal(s.Selector)
		a.Selector = string(b)
	}
	h.approvals[a.ID] = a
	return a, nil
}

func (h *approvalHub) DecideApproval(_ context.Context, actor api.Identity, id string, decision fleetwave.ApprovalState) (fleetwave.Approval, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if actor.Role != api.RoleAdmin {
		return fleetwave.Approval{}, approvalErr(403, "forbidden", "only admins decide approval requests")
	}
	a, ok := h.approvals[id]
	switch {
	case !ok:
		return fleetwave.Approval{}, approvalErr(404, "not_found", "no approval "+id)
	case a.State != fleetwave.ApprovalPending:
		return fleetwave.Approval{}, approvalErr(409, "not_pending", fmt.Sprintf("approval %s is %s: only a pending request is decided", id, a.State))
	case a.SubmittedBy == actor.Name:
		return fleetwave.Approval{}, approvalErr(403, "self_approval", "the submitter cannot decide their own request: another admin must")
	}
	a.State, a.DecidedBy, a.DecidedAt = decision, actor.Name, h.tick()
	h.approvals[id] = a
	return a, nil
}

func (h *approvalHub) Approvals(context.Context) ([]fleetwave.Approval, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := make([]fleetwave.Approval, 0, len(h.approvals))
	for _, a := range h.approvals {
		list = append(list, a)
	}
	// the engine's order is not the CLI's: list sorts newest first itself
	slices.SortFunc(list, func(a, b fleetwave.Approval) int { return strings.Compare(a.ID, b.ID) })
	return list, nil
}

func (h *approvalHub) Approval(_ context.Context, id string) (fleetwave.Approval, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.approvals[id]
	if !ok {
		return a, approvalErr(404, "not_found", "no approval "+id)
	}
	return a, nil
}

type recordedRequest struct {
	Method, Path, Auth, ContentType, Body string
	Status                                int
}

// approvalFixture is a fake hub API on an httptest server that records
// every request and its answer's status.
type approvalFixture struct {
	t    *testing.T
	URL  string
	hub  *approvalHub
	mu   sync.Mutex
	reqs []recordedRequest
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func newApprovalFixture(t *testing.T) *approvalFixture {
	t.Helper()
	// The CLI must not pick the developer's environment up.
	t.Setenv("FLEETWAVE_TOKEN", "")
	t.Setenv("FLEETWAVE_HUB", "")
	fx := &approvalFixture{t: t, hub: &approvalHub{approvals: map[string]fleetwave.Approval{},
		clock: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}}
	handler := api.New(fx.hub)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		handler.ServeHTTP(rec, r)
		fx.mu.Lock()
		fx.reqs = append(fx.reqs, recordedRequest{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization"),
			ContentType: r.Header.Get("Content-Type"), Body: string(body), Status: rec.status})
		fx.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	fx.URL = srv.URL
	return fx
}

// cli runs fleetwave with args and --hub pointing at the fixture.
func (fx *approvalFixture) cli(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(context.Background(), append(args, "--hub", fx.URL), &out, &errb)
	return out.String(), errb.String(), code
}

// requests returns the recorded requests and forgets them.
func (fx *approvalFixture) requests() []recordedRequest {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	r := fx.reqs
	fx.reqs = nil
	return r
}

// only returns the one recorded request, failing otherwise.
func (fx *approvalFixture) only() recordedRequest {
	fx.t.Helper()
	reqs := fx.requests()
	if len(reqs) != 1 {
		fx.t.Fatalf("want one request, got %d: %+v", len(reqs), reqs)
	}
	return reqs[0]
}

// seed stores an approval as if submitted earlier.
func (fx *approvalFixture) seed(a fleetwave.Approval) {
	fx.hub.mu.Lock()
	defer fx.hub.mu.Unlock()
	if a.SubmittedAt.IsZero() {
		a.SubmittedAt = fx.hub.tick()
	}
	fx.hub.approvals[a.ID] = a
}

// fieldAfter returns the rest of the first line of table starting with
// name, trimmed.
func fieldAfter(table, name string) string {
	for line := range strings.SplitSeq(table, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

func mustOK(t *testing.T, what string, out, errb string, code int) {
	t.Helper()
	if code != 0 {
		t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, code, out, errb)
	}
}

func TestApprovalSubmitNodes(t *testing.T) {
	fx := newApprovalFixture(t)
	out, errb, code := fx.cli("approval", "submit", "--brc", "app", "--target-version", "2.1", "--nodes", "edge-02,edge-01",
		"--batch-size", "1", "--id", "rel-1", "--token", "op-token")
	mustOK(t, "submit", out, errb, code)
	req := fx.only()
	if req.Method != "POST" || req.Path != "/api/v1/config-approvals" || req.Auth != "Bearer op-token" || req.ContentType != "application/json" || req.Status != 201 {
		t.Fatalf("request: %+v", req)
	}
	if want := `{"id":"rel-1","brc":"app","target_version":"2.1","nodes":["edge-02","edge-01"],"batch_size":1}`; req.Body != want {
		t.Fatalf("body\n got %s\nwant %s", req.Body, want)
	}
	if !strings.HasPrefix(out, "approval rel-1 submitted: pending, 2 node(s) pinned\n") ||
		!hasRow(out, "nodes", "2") || !hasRow(out, "edge-01") || !hasRow(out, "edge-02") ||
		!hasRow(out, "brc", "app", "version", "2.1", "generation", "3") || !hasRow(out, "batch", "size", "1") ||
		!hasRow(out, "submitted", "by", "olga", "via", "api") ||
		!strings.Contains(out, "next: another admin approves it: fleetwave approval approve rel-1") {
		t.Fatalf("output:\n%s", out)
	}

	// FLEETWAVE_TOKEN is the default token; repeated --nodes add up; the
	// hub names the request.
	t.Setenv("FLEETWAVE_TOKEN", "alice-token")
	out, errb, code = fx.cli("approval", "submit", "--brc", "app", "--target-version", "2.1", "--nodes", "edge-01", "--nodes", "lab-01")
	mustOK(t, "submit without --id", out, errb, code)
	req = fx.only()
	if want := `{"brc":"app","target_version":"2.1","nodes":["edge-01","lab-01"]}`; req.Body != want || req.Auth != "Bearer alice-token" {
		t.Fatalf("request %+v, want body %s", req, want)
	}
	if !strings.HasPrefix(out, "approval app-2-1-a1b2c3 submitted: pending, 2 node(s) pinned\n") || !hasRow(out, "lab-01") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestApprovalSubmitSelectors(t *testing.T) {
	cases := []struct {
		name      string
		selectors []string
		body      string // the selector's JSON in the body
		nodes     []string
		shown     string // the selector as get shows it
	}{
		{"equality", []string{"env=prod"}, `{"match_labels":{"env":"prod"}}`, []string{"core-01", "edge-01", "edge-02"}, "env=prod"},
		{"double equals and spaces", []string{" env == prod , tier=edge "}, `{"match_labels":{"env":"prod","tier":"edge"}}`, []string{"edge-01", "edge-02"}, "env=prod,tier=edge"},
		{"in", []string{"tier in (edge, core)"}, `{"match_expressions":[{"key":"tier","operator":"in","values":["edge","core"]}]}`, []string{"core-01", "edge-01", "edge-02"}, "tier in (edge,core)"},
		{"notin", []string{"env notin (prod)"}, `{"match_expressions":[{"key":"env","operator":"notin","values":["prod"]}]}`, []string{"lab-01"}, "env notin (prod)"},
		{"not equal", []string{"tier!=edge"}, `{"match_expressions":[{"key":"tier","operator":"notin","values":["edge"]}]}`, []string{"core-01", "lab-01"}, "tier notin (edge)"},
		{"exists", []string{"canary"}, `{"match_expressions":[{"key":"canary","operator":"exists"}]}`, []string{"edge-02"}, "canary"},
		{"does not exist", []string{"!canary"}, `{"match_expressions":[{"key":"canary","operator":"doesnotexist"}]}`, []string{"core-01", "edge-01", "lab-01"}, "!canary"},
		{"prefixed key", []string{"example.com/rack in (r7,r8)"}, `{"match_expressions":[{"key":"example.com/rack","operator":"in","values":["r7","r8"]}]}`, []string{"lab-01"}, "example.com/rack in (r7,r8)"},
		{"all forms", []string{"env=prod,tier in (edge,core),!canary,tier notin (db),env"},
			`{"match_labels":{"env":"prod"},"match_expressions":[{"key":"tier","operator":"in","values":["edge","core"]},{"key":"canary","operator":"doesnotexist"},{"key":"tier","operator":"notin","values":["db"]},{"key":"env","operator":"exists"}]}`,
			[]string{"core-01", "edge-01"}, "env=prod,tier in (edge,core),!canary,tier notin (db),env"},
		{"repeated flags AND", []string{"env=prod", "tier in (edge)", "canary"},
			`{"match_labels":{"env":"prod"},"match_expressions":[{"key":"tier","operator":"in","values":["edge"]},{"key":"canary","operator":"exists"}]}`,
			[]string{"edge-02"}, "env=prod,tier in (edge),canary"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newApprovalFixture(t)
			args := []string{"approval", "submit", "--brc", "app", "--target-version", "2.1", "--id", "sel", "--token", "op-token"}
			for _, s := range tc.selectors {
				args = append(args, "--selector", s)
			}
			out, errb, code := fx.cli(args...)
			mustOK(t, "submit", out, errb, code)
			req := fx.only()
			if want := `{"id":"sel","brc":"app","target_version":"2.1","selector":` + tc.body + `}`; req.Body != want {
				t.Fatalf("body\n got %s\nwant %s", req.Body, want)
			}
			for _, n := range tc.nodes {
				if !hasRow(out, n) {
					t.Fatalf("pinned node %s not shown:\n%s", n, out)
				}
			}
			if !hasRow(out, "nodes", fmt.Sprint(len(tc.nodes))) || fieldAfter(out, "selector") != tc.shown {
				t.Fatalf("output (want %d nodes, selector %s):\n%s", len(tc.nodes), tc.shown, out)
			}
		})
	}
}

func TestApprovalSubmitStructuredOutput(t *testing.T) {
	fx := newApprovalFixture(t)
	out, errb, code := fx.cli("approval", "submit", "--brc", "app", "--target-version", "2.1", "--selector", "tier=edge", "--id", "j1", "--token", "op-token", "-o", "json")
	mustOK(t, "submit -o json", out, errb, code)
	var a fleetwave.Approval
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("not an approval: %v\n%s", err, out)
	}
	if a.ID != "j1" || a.State != fleetwave.ApprovalPending || !slices.Equal(a.Nodes, []string{"edge-01", "edge-02"}) || a.SubmittedBy != "olga" {
		t.Fatalf("approval: %+v", a)
	}
	out, errb, code = fx.cli("approval", "submit", "--brc", "app", "--target-version", "2.1", "--nodes", "core-01", "--id", "y1", "--token", "op-token", "-o", "yaml")
	mustOK(t, "submit -o yaml", out, errb, code)
	for _, want := range []string{"id: y1\n", "state: pending\n", "nodes:\n    - core-01\n", "submitted_by: olga\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("yaml lacks %q:\n%s", want, out)
		}
	}
}

func TestApprovalApproveAndReject(t *testing.T) {
	fx := newApprovalFixture(t)
	fx.seed(fleetwave.Approval{ID: "rel-1", BRC: "app", TargetVersion: "2.1", Nodes: []string{"edge-01"}, State: fleetwave.ApprovalPending, SubmittedBy: "olga"})
	fx.seed(fleetwave.Approval{ID: "rel-2", BRC: "app", TargetVersion: "2.1", Nodes: []string{"edge-02"}, State: fleetwave.ApprovalPending, SubmittedBy: "olga"})
	fx.seed(fleetwave.Approval{ID: "rel-3", BRC: "app", TargetVersion: "2.1", Nodes: []string{"core-01"}, State: fleetwave.ApprovalPending, SubmittedBy: "olga"})

	out, errb, code := fx.cli("approval", "approve", "rel-1", "--token", "alice-token")
	mustOK(t, "approve", out, errb, code)
	req := fx.only()
	if req.Method != "POST" || req.Path != "/api/v1/config-approvals/rel-1/approve" || req.Auth != "Bearer alice-token" || req.Body != "" || req.Status != 200 {
		t.Fatalf("request: %+v", req)
	}
	if want := "approval rel-1 approved by alice\nnext: the hub creates rollout approval-rel-1: fleetwave rollout watch approval-rel-1\n"; out != want {
		t.Fatalf("output\n got %q\nwant %q", out, want)
	}

	out, errb, code = fx.cli("approval", "reject", "rel-2", "--token", "bob-token")
	mustOK(t, "reject", out, errb, code)
	if req := fx.only(); req.Path != "/api/v1/config-approvals/rel-2/reject" || req.Body != "" {
		t.Fatalf("request: %+v", req)
	}
	if want := "approval rel-2 rejected by bob\n"; out != want {
		t.Fatalf("output\n got %q\nwant %q", out, want)
	}

	out, errb, code = fx.cli("approval", "approve", "rel-3", "--token", "bob-token", "-o", "json")
	mustOK(t, "approve -o json", out, errb, code)
	var a fleetwave.Approval
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.ID != "rel-3" || a.State != fleetwave.ApprovalApproved || a.DecidedBy != "bob" || a.DecidedAt.IsZero() {
		t.Fatalf("approve -o json: %v %+v\n%s", err, a, out)
	}
}

func TestApprovalListAndGet(t *testing.T) {
	fx := newApprovalFixture(t)
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	fx.seed(fleetwave.Approval{ID: "old", BRC: "app", TargetVersion: "2.0", Nodes: []string{"edge-01", "edge-02"}, State: fleetwave.ApprovalConsumed,
		SubmittedBy: "olga", SubmittedVia: "api", SubmittedAt: base, DecidedBy: "alice", DecidedAt: base.Add(time.Hour),
		Rollout: "approval-old", ConsumedAt: base.Add(2 * time.Hour)})
	fx.seed(fleetwave.Approval{ID: "mid", BRC: "app", TargetVersion: "2.1", Nodes: []string{"lab-01"}, State: fleetwave.ApprovalStale,
		Reason: "version_changed", Message: "the brc's target version changed", SubmittedBy: "bob", SubmittedVia: "0123456789abcdef0123", SubmittedAt: base.Add(3 * time.Hour)})
	fx.seed(fleetwave.Approval{ID: "new", BRC: "app", TargetVersion: "2.1", Generation: 4, Nodes: []string{"core-01", "edge-01", "edge-02"}, State: fleetwave.ApprovalPending,
		Selector: `{"match_labels":{"env":"prod"},"match_expressions":[{"key":"tier","operator":"in","values":["edge","core"]}]}`, BatchSize: 2,
		SubmittedBy: "olga", SubmittedVia: "api", SubmittedAt: base.Add(4 * time.Hour)})

	out, errb, code := fx.cli("approval", "list")
	mustOK(t, "list", out, errb, code)
	if req := fx.only(); req.Method != "GET" || req.Path != "/api/v1/config-approvals" || req.Auth != "" {
		t.Fatalf("request: %+v", req)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID BRC VERSION NODES STATE SUBMITTED BY DECIDED BY ROLLOUT REASON" {
		t.Fatalf("list:\n%s", out)
	}
	wantRows := [][]string{
		{"new", "app", "2.1", "3", "pending", "olga", "-", "-", "-"},
		{"mid", "app", "2.1", "1", "stale", "bob", "-", "-", "version_changed"},
		{"old", "app", "2.0", "2", "consumed", "olga", "alice", "approval-old", "-"},
	}
	for i, want := range wantRows { // newest first
		if got := strings.Fields(lines[i+1]); !slices.Equal(got, want) {
			t.Fatalf("row %d: got %q, want %q\n%s", i, got, want, out)
		}
	}

	out, errb, code = fx.cli("approval", "list", "-o", "json")
	mustOK(t, "list -o json", out, errb, code)
	var list []fleetwave.Approval
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 3 || list[0].ID != "new" || list[2].Rollout != "approval-old" {
		t.Fatalf("list -o json: %v %+v\n%s", err, list, out)
	}
	fx.requests()

	out, errb, code = fx.cli("approval", "get", "new")
	mustOK(t, "get", out, errb, code)
	if req := fx.only(); req.Method != "GET" || req.Path != "/api/v1/config-approvals/new" {
		t.Fatalf("request: %+v", req)
	}
	for _, row := range [][]string{
		{"approval", "new", "pending"},
		{"brc", "app", "version", "2.1", "generation", "4"},
		{"selector", "env=prod,tier", "in", "(edge,core)"},
		{"batch", "size", "2"},
		{"submitted", "by", "olga", "via", "api", "at", "2026-03-01T13:00:00Z"},
		{"nodes", "3"}, {"core-01"}, {"edge-01"}, {"edge-02"},
	} {
		if !hasRow(out, row...) {
			t.Fatalf("get lacks row %q:\n%s", row, out)
		}
	}

	out, errb, code = fx.cli("approval", "get", "old")
	mustOK(t, "get old", out, errb, code)
	for _, row := range [][]string{
		{"approval", "old", "consumed"},
		{"decided", "by", "alice", "at", "2026-03-01T10:00:00Z"},
		{"rollout", "approval-old", "consumed", "at", "2026-03-01T11:00:00Z"},
		{"nodes", "2"}, {"edge-01"}, {"edge-02"},
	} {
		if !hasRow(out, row...) {
			t.Fatalf("get old lacks row %q:\n%s", row, out)
		}
	}
	out, errb, code = fx.cli("approval", "get", "mid")
	mustOK(t, "get mid", out, errb, code)
	if !hasRow(out, "reason", "version_changed", "the", "brc's", "target", "version", "changed") || !hasRow(out, "submitted", "by", "bob", "via", "0123456789abcdef0123") {
		t.Fatalf("get mid:\n%s", out)
	}

	out, errb, code = fx.cli("approval", "get", "old", "-o", "json")
	mustOK(t, "get -o json", out, errb, code)
	var a fleetwave.Approval
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.ID != "old" || a.DecidedBy != "alice" || !a.ConsumedAt.Equal(base.Add(2*time.Hour)) {
		t.Fatalf("get -o json: %v %+v\n%s", err, a, out)
	}
}

func TestApprovalAPIErrors(t *testing.T) {
	fx := newApprovalFixture(t)
	fx.seed(fleetwave.Approval{ID: "mine", BRC: "app", TargetVersion: "2.1", Nodes: []string{"edge-01"}, State: fleetwave.ApprovalPending, SubmittedBy: "alice"})
	fx.seed(fleetwave.Approval{ID: "done", BRC: "app", TargetVersion: "2.1", Nodes: []string{"edge-01"}, State: fleetwave.ApprovalRejected, SubmittedBy: "olga", DecidedBy: "bob"})
	submit := []string{"approval", "submit", "--brc", "app", "--target-version", "2.1", "--nodes", "edge-01"}
	cases := []struct {
		name   string
		args   []string
		status int
		stderr string // exactly
	}{
		{"self approval", []string{"approval", "approve", "mine", "--token", "alice-token"}, 403,
			"error: the submitter cannot decide their own request: another admin must (self_approval)\nhint: you submitted this request: another admin must approve it\n"},
		{"self rejection", []string{"approval", "reject", "mine", "--token", "alice-token"}, 403,
			"error: the submitter cannot decide their own request: another admin must (self_approval)\nhint: you submitted this request: another admin must reject it\n"},
		{"operator approves", []string{"approval", "approve", "mine", "--token", "op-token"}, 403,
			"error: role operator may not do this; admin required (forbidden)\nhint: approve needs an admin token (--token or FLEETWAVE_TOKEN), of an admin other than the submitter\n"},
		{"viewer submits", append(slices.Clone(submit), "--token", "view-token"), 403,
			"error: role viewer may not do this; operator required (forbidden)\nhint: submitting needs an operator or admin token (--token or FLEETWAVE_TOKEN)\n"},
		{"no token", []string{"approval", "reject", "mine"}, 401,
			"error: missing bearer token (unauthorized)\nhint: pass a valid API token with --token or FLEETWAVE_TOKEN\n"},
		{"not pending", []string{"approval", "approve", "done", "--token", "alice-token"}, 409,
			"error: approval done is rejected: only a pending request is decided (not_pending)\nhint: only a pending request is decided; fleetwave approval get ID shows its state, a resubmission is a new request\n"},
		{"unknown approval", []string{"approval", "get", "nope"}, 404,
			"error: no approval nope (not_found)\nhint: fleetwave approval list shows the requests\n"},
		{"unknown brc", []string{"approval", "submit", "--brc", "nope", "--target-version", "2.1", "--nodes", "edge-01", "--token", "op-token"}, 422,
			"error: brc \"nope\" is not defined (unknown_brc)\n"},
		{"version mismatch", []string{"approval", "submit", "--brc", "app", "--target-version", "2.0", "--nodes", "edge-01", "--token", "op-token"}, 422,
			"error: brc app targets \"2.1\", not \"2.0\": an approval pins the version the brc asks for (version_mismatch)\nhint: --target-version must be the version the BRC targets now\n"},
		{"no matching nodes", []string{"approval", "submit", "--brc", "app", "--target-version", "2.1", "--selector", "env=qa", "--token", "op-token"}, 422,
			"error: the request's nodes or selector match no node (no_matching_nodes)\nhint: check --nodes or --selector against the nodes' labels\n"},
		{"unknown node", []string{"approval", "submit", "--brc", "app", "--target-version", "2.1", "--nodes", "edge-99", "--token", "op-token"}, 422,
			"error: no node record for edge-99 (unknown_node)\n"},
		{"already exists", append(slices.Clone(submit), "--id", "mine", "--token", "op-token"), 409,
			"error: approval mine exists: a resubmission is a new request (already_exists)\nhint: pick another --id, or leave it out and let the hub name the request\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errb, code := fx.cli(tc.args...)
			if code != 1 || out != "" || errb != tc.stderr {
				t.Fatalf("exit %d\nstdout %q\nstderr\n got %q\nwant %q", code, out, errb, tc.stderr)
			}
			if req := fx.only(); req.Status != tc.status {
				t.Fatalf("the API answered %d, want %d", req.Status, tc.status)
			}
		})
	}
	fx.hub.mu.Lock()
	defer fx.hub.mu.Unlock()
	if a := fx.hub.approvals["mine"]; a.State != fleetwave.ApprovalPending {
		t.Fatalf("a refused decision changed the request: %+v", a)
	}
}

// TestApprovalErrorBodies covers answers the approval endpoints give in
// other situations (a gated change, a proxy in front of the hub).
func TestApprovalErrorBodies(t *testing.T) {
	t.Setenv("FLEETWAVE_TOKEN", "")
	cases := []struct {
		status int
		body   string
		stderr string
	}{
		{422, `{"error":{"code":"approval_required","message":"brc app version 2.1 needs an approved request"}}`,
			"error: brc app version 2.1 needs an approved request (approval_required)\nhint: the change needs an approved request: an operator or admin submits one (fleetwave approval submit), another admin approves it\n"},
		{503, `{"error":{"code":"not_leader","message":"this hub does not lead: send the decision to the leader"}}`,
			"error: this hub does not lead: send the decision to the leader (not_leader)\nhint: point --hub or FLEETWAVE_HUB at the leading hub\n"},
		{502, "<html>Bad Gateway</html>\n", "error: <html>Bad Gateway</html> (HTTP 502)\n"},
		{500, "", "error: Internal Server Error (HTTP 500)\n"},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, tc.body)
		}))
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"approval", "approve", "x", "--hub", srv.URL}, &out, &errb)
		srv.Close()
		if code != 1 || errb.String() != tc.stderr {
			t.Fatalf("HTTP %d %s: exit %d\nstderr\n got %q\nwant %q", tc.status, tc.body, code, errb.String(), tc.stderr)
		}
	}
}

func TestApprovalHubUnreachable(t *testing.T) {
	t.Setenv("FLEETWAVE_TOKEN", "")
	t.Setenv("FLEETWAVE_HUB", "")
	srv := httptest.NewServer(http.NotFoundHandler())
	dead := srv.URL
	srv.Close()

	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"approval", "list", "--hub", dead + "/"}, &out, &errb)
	if code != 1 || !strings.HasPrefix(errb.String(), "error: cannot reach the hub at "+dead+" (from --hub): ") ||
		!strings.Contains(errb.String(), "connection refused") || !strings.Contains(errb.String(), "FLEETWAVE_HUB") {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}

	t.Setenv("FLEETWAVE_HUB", dead)
	out.Reset()
	errb.Reset()
	code = run(context.Background(), []string{"approval", "approve", "x", "--token", "alice-token"}, &out, &errb)
	if code != 1 || !strings.HasPrefix(errb.String(), "error: cannot reach the hub at "+dead+" (from FLEETWAVE_HUB): ") {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
}

func TestApprovalUsageErrors(t *testing.T) {
	fx := newApprovalFixture(t)
	base := []string{"approval", "submit", "--brc", "app", "--target-version", "2.1"}
	cases := []struct {
		name string
		args []string
		msg  string // the first stderr line, after "fleetwave: "
		try  string
	}{
		{"no brc nor version", []string{"approval", "submit", "--nodes", "a"}, "submit needs --brc and --target-version", "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"},
		{"no brc", []string{"approval", "submit", "--target-version", "2.1", "--nodes", "a"}, "submit needs --brc", "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"},
		{"no version", []string{"approval", "submit", "--brc", "app", "--nodes", "a"}, "submit needs --target-version (the version the BRC targets now)", "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"},
		{"nodes and selector", append(slices.Clone(base), "--nodes", "a", "--selector", "env=prod"), "give --nodes or --selector, not both", "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"},
		{"no targets", slices.Clone(base), "submit needs --nodes or --selector to say which nodes", "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"},
		{"empty nodes", append(slices.Clone(base), "--nodes", ""), "--nodes is empty", "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"},
		{"empty node id", append(slices.Clone(base), "--nodes", "a,,b"), "--nodes holds an empty node id (two commas, or one at an end)", "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"},
		{"negative batch", append(slices.Clone(base), "--nodes", "a", "--batch-size", "-1"), "--batch-size -1: want a positive number of nodes", "--batch-size 5"},
		{"bad selector", append(slices.Clone(base), "--selector", "tier in edge"), `--selector "tier in edge": "tier in edge": the values of in go in parentheses: want tier in (edge)`, selectorExample},
		{"conflicting selectors", append(slices.Clone(base), "--selector", "env=prod", "--selector", "env=qa"), "--selector: label env given twice (prod and qa): a node has one value per key; want env in (prod,qa)", selectorExample},
		{"bad output", append(slices.Clone(base), "--nodes", "a", "-o", "xml"), `--output "xml": want table, json or yaml`, "-o json"},
		{"submit with an argument", append(slices.Clone(base), "--nodes", "a", "extra"), `fleetwave approval submit takes no arguments, got "extra"`, "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01"},
		{"approve without id", []string{"approval", "approve"}, "fleetwave approval approve needs an approval id (fleetwave approval list shows them)", "fleetwave approval approve app-2-1-a1b2c3"},
		{"reject two ids", []string{"approval", "reject", "a", "b"}, "fleetwave approval reject takes one approval id, got 2 arguments", "fleetwave approval reject app-2-1-a1b2c3"},
		{"get without id", []string{"approval", "get"}, "fleetwave approval get needs an approval id (fleetwave approval list shows them)", "fleetwave approval get app-2-1-a1b2c3"},
		{"list with an argument", []string{"approval", "list", "x"}, `fleetwave approval list takes no arguments, got "x"`, "fleetwave approval list"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errb, code := fx.cli(tc.args...)
			want := "fleetwave: " + tc.msg + "\nTry: " + tc.try + "\n"
			if code != 2 || out != "" || errb != want {
				t.Fatalf("exit %d\nstdout %q\nstderr\n got %q\nwant %q", code, out, errb, want)
			}
			if reqs := fx.requests(); len(reqs) != 0 {
				t.Fatalf("a usage error reached the hub: %+v", reqs)
			}
		})
	}
}

func TestParseSelector(t *testing.T) {
	ok := []struct {
		in   string
		want fleetwave.Selector
	}{
		{"a=b", fleetwave.Selector{MatchLabels: map[string]string{"a": "b"}}},
		{"a=b,a=b", fleetwave.Selector{MatchLabels: map[string]string{"a": "b"}}},
		{"a==b", fleetwave.Selector{MatchLabels: map[string]string{"a": "b"}}},
		{"a!=b", fleetwave.Selector{MatchExpressions: []fleetwave.SelectorTerm{{Key: "a", Operator: "notin", Values: []string{"b"}}}}},
		{"a in (x, y ,x)", fleetwave.Selector{MatchExpressions: []fleetwave.SelectorTerm{{Key: "a", Operator: "in", Values: []string{"x", "y"}}}}},
		{"a in(x)", fleetwave.Selector{MatchExpressions: []fleetwave.SelectorTerm{{Key: "a", Operator: "in", Values: []string{"x"}}}}},
		{"a notin (x,y)", fleetwave.Selector{MatchExpressions: []fleetwave.SelectorTerm{{Key: "a", Operator: "notin", Values: []string{"x", "y"}}}}},
		{"a", fleetwave.Selector{MatchExpressions: []fleetwave.SelectorTerm{{Key: "a", Operator: "exists"}}}},
		{"! a", fleetwave.Selector{MatchExpressions: []fleetwave.SelectorTerm{{Key: "a", Operator: "doesnotexist"}}}},
		{"x.example.com/a_b-c.d=V_1.2-3", fleetwave.Selector{MatchLabels: map[string]string{"x.example.com/a_b-c.d": "V_1.2-3"}}},
		{"a in (x,y),b,!c,d=e", fleetwave.Selector{MatchLabels: map[string]string{"d": "e"}, MatchExpressions: []fleetwave.SelectorTerm{
			{Key: "a", Operator: "in", Values: []string{"x", "y"}}, {Key: "b", Operator: "exists"}, {Key: "c", Operator: "doesnotexist"}}}},
	}
	for _, tc := range ok {
		got, err := parseSelector(tc.in)
		if err != nil || !reflect.DeepEqual(*got, tc.want) {
			t.Fatalf("parseSelector(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		// What get shows parses back to the same selector.
		again, err := parseSelector(formatSelector(got))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("round trip of %q through %q: %+v, %v", tc.in, formatSelector(got), again, err)
		}
	}

	bad := []struct{ in, err string }{
		{"", "empty selector"},
		{"  ", "empty selector"},
		{"a=b,", "empty term: two commas in a row, or a comma at an end"},
		{",a", "empty term"},
		{"a=b,,c", "empty term"},
		{"a in (x,y", "'(' is never closed: want key in (a,b)"},
		{"a in x,y)", "')' without '(' at offset 8"},
		{"a in ((x))", "nested '(' at offset 6"},
		{"a in ()", `"a in ()": empty value in the list of in: want key in (a,b)`},
		{"a in (x,,y)", "empty value in the list of in"},
		{"a in (x) y", `"a in (x) y": nothing may follow the ')' of a value list`},
		{"a (x)", `"a (x)": a value list goes with in or notin: want key in (a,b) or key notin (a,b)`},
		{"a has (x)", "a value list goes with in or notin"},
		{"in (x)", "a value list goes with in or notin"},
		{"a notin x", `"a notin x": the values of notin go in parentheses: want a notin (x)`},
		{"a b", `"a b": unexpected space`},
		{"a=", `"a=": no value after = (label values are never empty; to select nodes without the label use !a)`},
		{"=b", `"=b": missing label key`},
		{"a=b c", `"a=b c": invalid label value "b c"`},
		{"-a=b", `"-a=b": invalid label key "-a"`},
		{"a in (x,-y)", `invalid label value "-y"`},
		{"a=" + strings.Repeat("v", 64), "invalid label value"},
		{"Example.com/a=b", `the prefix before '/' must be a DNS subdomain`},
		{"nodots/a", `the prefix before '/' must be a DNS subdomain`},
		{"!a=b", `invalid label key "!a"`},
		{"!", `"!": missing label key`},
		{"a>1", "the operators < and > are not supported"},
		{"a=b,a=c", "label a given twice (b and c): a node has one value per key; want a in (b,c)"},
	}
	for _, tc := range bad {
		_, err := parseSelector(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Fatalf("parseSelector(%q): error %v, want one containing %q", tc.in, err, tc.err)
		}
	}
}

func TestApprovalIDCompletion(t *testing.T) {
	fx := newApprovalFixture(t)
	fx.seed(fleetwave.Approval{ID: "rel-1", BRC: "app", TargetVersion: "2.1", Nodes: []string{"edge-01"}, State: fleetwave.ApprovalPending, SubmittedBy: "olga"})
	fx.seed(fleetwave.Approval{ID: "rel-2", BRC: "app", TargetVersion: "2.1", Nodes: []string{"edge-01", "edge-02"}, State: fleetwave.ApprovalRejected, SubmittedBy: "olga"})
	fx.seed(fleetwave.Approval{ID: "hotfix", BRC: "app", TargetVersion: "2.1", Nodes: []string{"core-01"}, State: fleetwave.ApprovalPending, SubmittedBy: "bob"})
	complete := func(hub string, args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"__complete", "--hub", hub}, args...), &out, &errb)
		return out.String(), code
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"approval", "approve", ""}, "hotfix\tapp 2.1, 1 node(s), pending by bob\nrel-1\tapp 2.1, 1 node(s), pending by olga\n:4\n"},
		{[]string{"approval", "reject", "r"}, "rel-1\tapp 2.1, 1 node(s), pending by olga\n:4\n"},
		{[]string{"approval", "get", "rel"}, "rel-1\tapp 2.1, 1 node(s), pending by olga\nrel-2\tapp 2.1, 2 node(s), rejected by olga\n:4\n"},
		{[]string{"approval", "get", "rel-1", ""}, ":4\n"}, // one id only
	}
	for _, tc := range cases {
		out, code := complete(fx.URL, tc.args...)
		if code != 0 || !strings.HasPrefix(out, tc.want) {
			t.Fatalf("complete %q: exit %d\n got %q\nwant prefix %q", tc.args, code, out, tc.want)
		}
	}
	// An unreachable hub completes nothing, quietly.
	srv := httptest.NewServer(http.NotFoundHandler())
	dead := srv.URL
	srv.Close()
	if out, code := complete(dead, "approval", "approve", ""); code != 0 || !strings.HasPrefix(out, ":4\n") {
		t.Fatalf("complete against a dead hub: exit %d %q", code, out)
	}
}
