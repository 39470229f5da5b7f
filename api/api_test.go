package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// fakeHub is a function-field fake: a nil field answers a zero value.
type fakeHub struct {
	mu       sync.Mutex
	calls    []string
	register func(fleetwave.Report) error
	poll     func(node string, wait time.Duration) ([]fleetwave.Attempt, error)
	// pollCtx, when set, replaces poll and sees the request's context.
	pollCtx  func(ctx context.Context, node string, wait time.Duration) ([]fleetwave.Attempt, error)
	complete func(node string, res fleetwave.AttemptResult) error
	// owner answers AttemptNode; nil: every attempt is node-a's.
	owner  func(attempt string) (string, error)
	report func(fleetwave.Report) error
	// reportCtx, when set, replaces report and sees the request's context.
	reportCtx func(context.Context, fleetwave.Report) error
	summary   func() (fleetwave.Summary, error)
	// rollout answers RolloutPage with the whole rollout, which the fake
	// pages; pages records the RolloutPage calls.
	rollout   func(id string) (fleetwave.Rollout, []fleetwave.Item, error)
	pages     []string
	readiness func() api.Readiness
	verify    func(http.Header, []byte) error
	synced    int
	// ownerAsked counts AttemptNode calls (not in calls: it changes nothing).
	ownerAsked int
	// wantsReport answers WantsReport; nil: never.
	wantsReport func(node string) bool
}

var tokens = map[string]string{"token-a": "node-a", "token-b": "node-b"}

func (f *fakeHub) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeHub) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeHub) AuthenticateAgent(token string) (string, bool) {
	n, ok := tokens[token]
	return n, ok
}

func (f *fakeHub) RegisterAgent(_ context.Context, r fleetwave.Report) error {
	f.record("register " + r.Node)
	if f.register != nil {
		return f.register(r)
	}
	return nil
}

func (f *fakeHub) PollAttempts(ctx context.Context, node string, wait time.Duration, rc fleetwave.Receipt) ([]fleetwave.Attempt, error) {
	if rc != (fleetwave.Receipt{}) {
		f.record(fmt.Sprintf("poll %s %s delivered %d resume %v", node, wait, rc.Delivered, rc.Resume))
	} else {
		f.record(fmt.Sprintf("poll %s %s", node, wait))
	}
	if f.pollCtx != nil {
		return f.pollCtx(ctx, node, wait)
	}
	if f.poll != nil {
		return f.poll(node, wait)
	}
	return nil, nil
}

func (f *fakeHub) NotHanded(_ context.Context, node string, atts []fleetwave.Attempt, written bool) {
	ids := make([]string, len(atts))
	for i, a := range atts {
		ids[i] = a.ID
	}
	f.record(fmt.Sprintf("not handed %s %s written=%v", node, strings.Join(ids, ","), written))
}

func (f *fakeHub) CompleteAttempt(_ context.Context, node string, res fleetwave.AttemptResult) error {
	f.record("complete " + node + " " + res.AttemptID)
	if f.complete != nil {
		return f.complete(node, res)
	}
	return nil
}

func (f *fakeHub) AttemptNode(_ context.Context, attempt string) (string, error) {
	f.mu.Lock()
	f.ownerAsked++
	f.mu.Unlock()
	if f.owner != nil {
		return f.owner(attempt)
	}
	return "node-a", nil
}

func (f *fakeHub) Report(ctx context.Context, r fleetwave.Report) error {
	f.record("report " + r.Node)
	if f.reportCtx != nil {
		return f.reportCtx(ctx, r)
	}
	if f.report != nil {
		return f.report(r)
	}
	return nil
}

func (f *fakeHub) Summary(context.Context) (fleetwave.Summary, error) {
	if f.summary != nil {
		return f.summary()
	}
	return fleetwave.Summary{}, nil
}

// RolloutPage pages the items f.rollout answers as the hub does: after
// is an item id, and one the rollout does not hold is 400 invalid_query.
// Each call is recorded in pages as "id after limit".
func (f *fakeHub) RolloutPage(_ context.Context, id, after string, limit int) (fleetwave.Rollout, []fleetwave.Item, bool, error) {
	f.mu.Lock()
	f.pages = append(f.pages, fmt.Sprintf("%s %s %d", id, after, limit))
	f.mu.Unlock()
	if f.rollout == nil {
		return fleetwave.Rollout{}, nil, false, api.ErrNotFound
	}
	r, items, err := f.rollout(id)
	if err != nil {
		return r, nil, false, err
	}
	start := 0
	if after != "" {
		i := slices.IndexFunc(items, func(it fleetwave.Item) bool { return it.ID == after })
		if i < 0 {
			return r, nil, false, &api.Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: "cursor: not an item of this rollout",
				Details: map[string]string{"field": "cursor"}}
		}
		start = i + 1
	}
	end := min(start+limit, len(items))
	return r, items[start:end], end < len(items), nil
}

func (f *fakeHub) VerifyGitHook(h http.Header, body []byte) error {
	if f.verify != nil {
		return f.verify(h, body)
	}
	if h.Get("X-Fleetwave-Signature") == "bad" {
		return errors.New("signature mismatch")
	}
	return nil
}

var users = map[string]api.Identity{"tok-admin": {Name: "ada", Role: api.RoleAdmin}, "tok-op": {Name: "otto", Role: api.RoleOperator}, "tok-view": {Name: "vic", Role: api.RoleViewer}}

func (f *fakeHub) AuthenticateUser(token string) (api.Identity, bool) {
	id, ok := users[token]
	return id, ok
}

func (f *fakeHub) SetRolloutState(_ context.Context, id, action string, actor api.Identity) error {
	f.record(action + " " + id + " by " + actor.Name)
	if id == "missing" {
		return api.ErrNotFound
	}
	return nil
}

func (f *fakeHub) SubmitApproval(_ context.Context, actor api.Identity, sub api.ApprovalSubmission) (fleetwave.Approval, error) {
	f.record("submit " + sub.BRC + " by " + actor.Name)
	return fleetwave.Approval{ID: "req-1", BRC: sub.BRC, TargetVersion: sub.TargetVersion, State: fleetwave.ApprovalPending, SubmittedBy: actor.Name}, nil
}

func (f *fakeHub) DecideApproval(_ context.Context, actor api.Identity, id string, decision fleetwave.ApprovalState) (fleetwave.Approval, error) {
	f.record(string(decision) + " " + id + " by " + actor.Name)
	if id == "missing" {
		return fleetwave.Approval{}, &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no approval missing"}
	}
	return fleetwave.Approval{ID: id, State: decision, DecidedBy: actor.Name}, nil
}

func (f *fakeHub) Approvals(context.Context) ([]fleetwave.Approval, error) { return nil, nil }

func (f *fakeHub) Approval(_ context.Context, id string) (fleetwave.Approval, error) {
	if id == "missing" {
		return fleetwave.Approval{}, api.ErrNotFound
	}
	return fleetwave.Approval{ID: id}, nil
}

func (f *fakeHub) WantsReport(node string) bool {
	if f.wantsReport == nil {
		return false
	}
	f.record("wants report " + node)
	return f.wantsReport(node)
}

func (f *fakeHub) TriggerSync() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced++
}

func (f *fakeHub) Readiness(context.Context) api.Readiness {
	if f.readiness != nil {
		return f.readiness()
	}
	return api.Readiness{Checks: map[string]string{"redis": "ok", "snapshot": "ok", "git": "ok", "leader": "leader"}}
}

// fakeNodes are the nodes the fake hub knows.
var fakeNodes = []string{"node-a", "node-b", "node-c"}

// IdentitiesConfigured: reads are open (identityHub says otherwise).
func (f *fakeHub) IdentitiesConfigured() bool { return false }

func (f *fakeHub) Nodes(_ context.Context, after string, limit int) ([]api.NodeView, bool, error) {
	var out []api.NodeView
	for _, id := range fakeNodes {
		if id <= after {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, api.NodeView{ID: id, Labels: map[string]string{}})
	}
	return out, false, nil
}

func (f *fakeHub) Node(_ context.Context, id string) (api.NodeView, error) {
	for _, n := range fakeNodes {
		if n == id {
			return api.NodeView{ID: id, Labels: map[string]string{}}, nil
		}
	}
	return api.NodeView{}, api.ErrNotFound
}

func (f *fakeHub) SetNodeLabels(_ context.Context, actor api.Identity, id string, labels map[string]string, reason string) (api.NodeWrite, error) {
	f.record(fmt.Sprintf("labels %s by %s: %d %q", id, actor.Name, len(labels), reason))
	if _, err := f.Node(context.Background(), id); err != nil {
		return api.NodeWrite{}, err
	}
	return api.NodeWrite{Commit: "c0ffee", Node: api.NodeView{ID: id, Labels: labels}}, nil
}

func (f *fakeHub) SetNodeDrain(_ context.Context, actor api.Identity, id string, drain bool, reason string) (api.NodeWrite, error) {
	what := "undrain"
	if drain {
		what = "drain"
	}
	f.record(fmt.Sprintf("%s %s by %s %q", what, id, actor.Name, reason))
	n, err := f.Node(context.Background(), id)
	if err != nil {
		return api.NodeWrite{}, err
	}
	n.Drain = drain
	return api.NodeWrite{Commit: "c0ffee", Node: n}, nil
}

func (f *fakeHub) RequestRollout(_ context.Context, actor api.Identity, req api.RolloutCreate) (api.RolloutPlan, error) {
	f.record(fmt.Sprintf("request %s by %s dry_run=%v", req.BRC, actor.Name, req.DryRun))
	switch req.BRC {
	case "unknown":
		return api.RolloutPlan{}, &api.Error{Status: http.StatusUnprocessableEntity, Code: "unknown_brc", Message: "brc \"unknown\" is not defined"}
	case "gated":
		if !req.DryRun {
			return api.RolloutPlan{}, &api.Error{Status: http.StatusConflict, Code: "approval_required", Message: "submit it to POST /api/v1/config-approvals"}
		}
	}
	name := req.Name
	if name == "" {
		name = "req-1"
	}
	targets := req.Nodes
	if targets == nil {
		targets = []string{"node-a"}
	}
	p := api.RolloutPlan{Name: name, Rollout: "manual-" + name, Targets: targets, ApprovalRequired: req.BRC == "gated"}
	if req.DryRun {
		for _, n := range targets {
			p.Items = append(p.Items, api.RolloutPlanItem{Node: n, Block: "web", Action: "upgrade", TargetVersion: "2"})
		}
	} else {
		p.Commit = "c0ffee"
	}
	return p, nil
}

func (f *fakeHub) ListRollouts(ctx context.Context, flt api.RolloutFilter) ([]fleetwave.Rollout, error) {
	s, err := f.Summary(ctx)
	if err != nil {
		return nil, err
	}
	var out []fleetwave.Rollout
	for _, r := range s.Rollouts {
		// the fake's lanes: a rollout's lane is its BRC's name
		if (flt.State == "" || r.Status == flt.State) && (flt.BRC == "" || r.Source.Object == fleetwave.Key(fleetwave.KindTrigger, flt.BRC)) &&
			(flt.Lane == "" || r.Source.Object.Name() == flt.Lane) {
			out = append(out, r)
		}
	}
	return out, nil
}

var _ api.Hub = (*fakeHub)(nil)

var errNoSuchRollout = errors.New("engine: no such rollout")

func sampleSummary() fleetwave.Summary {
	return fleetwave.Summary{
		Counters: fleetwave.Counters{Total: 5, Done: 2, InProgress: 1, Pending: 1, Failed: 1},
		Sync: fleetwave.SyncState{Commit: "0123456789abcdef", Result: "rejected",
			Errors: []fleetwave.FileError{{Path: "brc/web.cue", Line: 3, Col: 7, Msg: "expected int"}}},
		Nodes:    2,
		Rollouts: []fleetwave.Rollout{{ID: "web-g1", Status: fleetwave.RolloutActive, Wave: 1}},
	}
}

func newServer(t *testing.T, h *fakeHub, opts ...api.Option) *httptest.Server {
	t.Helper()
	opts = append([]api.Option{api.WithLogger(zerolog.New(zerolog.NewTestWriter(t)))}, opts...)
	srv := httptest.NewServer(api.New(h, opts...))
	t.Cleanup(srv.Close)
	return srv
}

type request struct {
	method, path, token, body string
}

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, srv *httptest.Server, r request) answer {
	t.Helper()
	a, err := doWith(srv, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// doWith is do with header's fields added to the request, failing with an
// error (it may run outside the test's goroutine).
func doWith(srv *httptest.Server, r request, header http.Header) (answer, error) {
	req, err := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		return answer{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

// errorCode returns the code of an error answer, failing on another shape.
func errorCode(t *testing.T, a answer) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(a.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("not an error answer (%v): %s", err, a.body)
	}
	return e.Error.Code
}

func TestRoutes(t *testing.T) {
	report := `{"node":"node-a","agent_version":"1.0","instances":[],"sent_at":"2026-01-01T00:00:00Z"}`
	result := `{"attempt_id":"att-1","fence":3,"class":"success","exit_code":0}`
	tests := []struct {
		name       string
		hub        *fakeHub
		opts       []api.Option
		req        request
		wantStatus int
		wantCode   string   // error code, when an error is expected
		wantBody   []string // substrings of the body
		wantCalls  []string
	}{
		{name: "healthz answers ok", req: request{method: "GET", path: "/healthz"}, wantStatus: 200, wantBody: []string{"ok"}},
		{name: "readyz answers ok when the hub is ready", req: request{method: "GET", path: "/readyz"}, wantStatus: 200, wantBody: []string{`"ready":true`, `"redis":"ok"`}},
		{
			name:       "summary returns the hub's summary",
			hub:        &fakeHub{summary: func() (fleetwave.Summary, error) { return sampleSummary(), nil }},
			req:        request{method: "GET", path: "/api/v1/summary"},
			wantStatus: 200, wantBody: []string{`"total":5`, `"done":2`, `"commit":"0123456789abcdef"`, `"web-g1"`},
		},
		{
			name:       "rollouts lists the summary's rollouts",
			hub:        &fakeHub{summary: func() (fleetwave.Summary, error) { return sampleSummary(), nil }},
			req:        request{method: "GET", path: "/api/v1/rollouts"},
			wantStatus: 200, wantBody: []string{`[{"id":"web-g1"`},
		},
		{
			name:       "rollouts is an empty list, not null, without rollouts",
			req:        request{method: "GET", path: "/api/v1/rollouts"},
			wantStatus: 200, wantBody: []string{"[]"},
		},
		{
			name: "rollout returns the rollout and its items",
			hub: &fakeHub{rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
				return fleetwave.Rollout{ID: id}, []fleetwave.Item{{ID: "i1", Rollout: id, Status: fleetwave.ItemPending}}, nil
			}},
			req:        request{method: "GET", path: "/api/v1/rollouts/web-g1"},
			wantStatus: 200, wantBody: []string{`"rollout":{"id":"web-g1"`, `"items":[{"id":"i1"`},
		},
		{
			name: "rollout is not_found when the hub wraps ErrNotFound",
			hub: &fakeHub{rollout: func(string) (fleetwave.Rollout, []fleetwave.Item, error) {
				return fleetwave.Rollout{}, nil, fmt.Errorf("rollout x: %w", api.ErrNotFound)
			}},
			req:        request{method: "GET", path: "/api/v1/rollouts/x"},
			wantStatus: 404, wantCode: "not_found",
		},
		{
			name: "rollout answers a hub *Error as is",
			hub: &fakeHub{rollout: func(string) (fleetwave.Rollout, []fleetwave.Item, error) {
				return fleetwave.Rollout{}, nil, fmt.Errorf("wrapped: %w", &api.Error{Status: 409, Code: "approval_required", Message: "needs approval"})
			}},
			req:        request{method: "GET", path: "/api/v1/rollouts/x"},
			wantStatus: 409, wantCode: "approval_required",
		},
		{
			name: "rollout maps a sentinel passed by option",
			hub: &fakeHub{rollout: func(string) (fleetwave.Rollout, []fleetwave.Item, error) {
				return fleetwave.Rollout{}, nil, fmt.Errorf("get: %w", errNoSuchRollout)
			}},
			opts:       []api.Option{api.WithErrorMapping(errNoSuchRollout, api.Error{Status: 404, Code: "not_found", Message: "no such rollout"})},
			req:        request{method: "GET", path: "/api/v1/rollouts/x"},
			wantStatus: 404, wantCode: "not_found",
		},
		{
			name: "an internal error is answered without its text",
			hub: &fakeHub{summary: func() (fleetwave.Summary, error) {
				return fleetwave.Summary{}, errors.New("redis password hunter2 rejected")
			}},
			req:        request{method: "GET", path: "/api/v1/summary"},
			wantStatus: 500, wantCode: "internal",
		},
		{name: "an unknown api path is a json not_found", req: request{method: "GET", path: "/api/v1/nope"}, wantStatus: 404, wantCode: "not_found"},
		{
			name: "git hook triggers a sync", req: request{method: "POST", path: "/api/v1/hooks/git", body: `{"ref":"refs/heads/main"}`},
			wantStatus: 202, wantBody: []string{"accepted"},
		},
		{
			name: "git hook refuses an oversized body", opts: []api.Option{api.WithMaxBody(16)},
			req:        request{method: "POST", path: "/api/v1/hooks/git", body: strings.Repeat("x", 64)},
			wantStatus: 413, wantCode: "body_too_large",
		},
		{
			name:       "register stores the report under the token's node",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/register", token: "token-a", body: report},
			wantStatus: 204, wantCalls: []string{"register node-a"},
		},
		{
			name:       "register without a token is unauthorized",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/register", body: report},
			wantStatus: 401, wantCode: "unauthorized",
		},
		{
			name:       "register with an unknown token is unauthorized",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/register", token: "forged", body: report},
			wantStatus: 401, wantCode: "unauthorized",
		},
		{
			name:       "register for another node is forbidden",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/register", token: "token-b", body: report},
			wantStatus: 403, wantCode: "forbidden",
		},
		{
			name:       "a report naming another node in its body is invalid_report",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-b/report", token: "token-b", body: report},
			wantStatus: 400, wantCode: "invalid_report",
		},
		{
			name:       "report with an unknown field is invalid_body",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a", body: `{"node":"node-a","desired":"x"}`},
			wantStatus: 400, wantCode: "invalid_body",
		},
		{
			name:       "report with trailing data is invalid_body",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a", body: `{"node":"node-a"} {}`},
			wantStatus: 400, wantCode: "invalid_body",
		},
		{
			name:       "report with an empty body is invalid_body",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a"},
			wantStatus: 400, wantCode: "invalid_body",
		},
		{
			name: "report too large is body_too_large", opts: []api.Option{api.WithMaxBody(64)},
			req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a",
				body: `{"node":"node-a","capabilities":["` + strings.Repeat("x", 200) + `"]}`},
			wantStatus: 413, wantCode: "body_too_large",
		},
		{
			name:       "report is stored",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a", body: report},
			wantStatus: 204, wantCalls: []string{"report node-a"},
		},
		{
			name: "attempts returns the node's attempts with their payloads",
			hub: &fakeHub{poll: func(node string, _ time.Duration) ([]fleetwave.Attempt, error) {
				return []fleetwave.Attempt{{ID: "att-1", Node: node, Fence: 3, Payload: fleetwave.AttemptPayload{Command: "true"}}}, nil
			}},
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=2s", token: "token-a"},
			wantStatus: 200, wantBody: []string{`{"attempts":[{"id":"att-1"`, `"command":"true"`},
			wantCalls: []string{"poll node-a 2s"},
		},
		{
			name: "a poll that ends empty asks for the report the hub came to want meanwhile",
			hub: func() *fakeHub {
				polled := false
				return &fakeHub{
					poll: func(string, time.Duration) ([]fleetwave.Attempt, error) { polled = true; return nil, nil },
					// not before the poll: the item became ambiguous while it waited
					wantsReport: func(string) bool { return polled },
				}
			}(),
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=2s", token: "token-a"},
			wantStatus: 200, wantBody: []string{`{"attempts":[],"report":true}`},
			wantCalls: []string{"wants report node-a", "poll node-a 2s", "wants report node-a"},
		},
		{
			name:       "attempts caps the wait at 30s",
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=5m", token: "token-a"},
			wantStatus: 200, wantBody: []string{`{"attempts":[]}`}, wantCalls: []string{"poll node-a 30s"},
		},
		{
			name: "attempts caps the wait at WithMaxPollWait", opts: []api.Option{api.WithMaxPollWait(2 * time.Minute)},
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=5m", token: "token-a"},
			wantStatus: 200, wantBody: []string{`{"attempts":[]}`}, wantCalls: []string{"poll node-a 2m0s"},
		},
		{
			name: "attempts caps whole seconds at WithMaxPollWait", opts: []api.Option{api.WithMaxPollWait(2 * time.Minute)},
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=100", token: "token-a"},
			wantStatus: 200, wantCalls: []string{"poll node-a 1m40s"},
		},
		{
			name:       "attempts accepts whole seconds",
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=7", token: "token-a"},
			wantStatus: 200, wantCalls: []string{"poll node-a 7s"},
		},
		{
			name:       "attempts refuses a bad wait",
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=soon", token: "token-a"},
			wantStatus: 400, wantCode: "invalid_query",
		},
		{
			name:       "attempts passes on what the agent says it received",
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=7&delivered=41&resume=true", token: "token-a"},
			wantStatus: 200, wantCalls: []string{"poll node-a 7s delivered 41 resume true"},
		},
		{
			name:       "attempts refuses a delivered that is no whole number",
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?delivered=-3", token: "token-a"},
			wantStatus: 400, wantCode: "invalid_query", wantBody: []string{"delivered"},
		},
		{
			name:       "attempts refuses a resume that is neither true nor false",
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?resume=maybe", token: "token-a"},
			wantStatus: 400, wantCode: "invalid_query", wantBody: []string{"resume"},
		},
		{
			name:       "attempts of another node are forbidden",
			req:        request{method: "GET", path: "/api/v1/agent/nodes/node-b/attempts", token: "token-a"},
			wantStatus: 403, wantCode: "forbidden",
		},
		{
			name:       "result is applied",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/att-1/result", token: "token-a", body: result},
			wantStatus: 204, wantCalls: []string{"complete node-a att-1"},
		},
		{
			name:       "result for an attempt id differing from the path is refused",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/att-2/result", token: "token-a", body: result},
			wantStatus: 400, wantCode: "attempt_mismatch",
		},
		{
			name: "result refused by the hub keeps the hub's code",
			hub: &fakeHub{complete: func(string, fleetwave.AttemptResult) error {
				return &api.Error{Status: 409, Code: "stale_attempt", Message: "attempt is no longer current"}
			}},
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/att-1/result", token: "token-a", body: result},
			wantStatus: 409, wantCode: "stale_attempt",
		},
		{
			name:       "result of another node is forbidden",
			req:        request{method: "POST", path: "/api/v1/agent/nodes/node-b/attempts/att-1/result", token: "token-a", body: result},
			wantStatus: 403, wantCode: "forbidden",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.hub
			if h == nil {
				h = &fakeHub{}
			}
			srv := newServer(t, h, tt.opts...)
			got := do(t, srv, tt.req)
			if got.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantCode != "" {
				if code := errorCode(t, got); code != tt.wantCode {
					t.Fatalf("code = %q, want %q", code, tt.wantCode)
				}
				if strings.Contains(got.body, "hunter2") || strings.Contains(got.body, "10.1.2.3") {
					t.Fatalf("error answer leaks an internal cause: %s", got.body)
				}
			}
			for _, s := range tt.wantBody {
				if !strings.Contains(got.body, s) {
					t.Errorf("body lacks %q: %s", s, got.body)
				}
			}
			calls := h.Calls()
			if tt.wantCalls != nil && strings.Join(calls, "|") != strings.Join(tt.wantCalls, "|") {
				t.Errorf("hub calls = %q, want %q", calls, tt.wantCalls)
			}
			switch tt.wantCode {
			case "unauthorized", "forbidden", "invalid_body", "body_too_large", "attempt_mismatch", "invalid_query", "invalid_report", "invalid_result":
				if len(calls) != 0 {
					t.Errorf("refused request reached the hub: %q", calls)
				}
			}
		})
	}
}

func TestGitHookCallsTriggerSync(t *testing.T) {
	h := &fakeHub{}
	srv := newServer(t, h)
	for range 2 {
		if got := do(t, srv, request{method: "POST", path: "/api/v1/hooks/git"}); got.status != 202 {
			t.Fatalf("status = %d: %s", got.status, got.body)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.synced != 2 {
		t.Fatalf("TriggerSync called %d times, want 2", h.synced)
	}
}

func TestRegisterPassesTheReport(t *testing.T) {
	var got fleetwave.Report
	h := &fakeHub{register: func(r fleetwave.Report) error { got = r; return nil }}
	srv := newServer(t, h)
	body := `{"agent_version":"1.2","capabilities":["network_shuffle"],"data_addresses":{"data":"10.0.0.5:9000"},` +
		`"instances":[{"block":"web","version":"2.0","generation":4}],"sent_at":"2026-01-01T00:00:00Z","received_at":"2030-01-01T00:00:00Z"}`
	if a := do(t, srv, request{method: "POST", path: "/api/v1/agent/nodes/node-a/register", token: "token-a", body: body}); a.status != 204 {
		t.Fatalf("status = %d: %s", a.status, a.body)
	}
	if got.Node != "node-a" || got.AgentVersion != "1.2" || len(got.Instances) != 1 || got.Instances[0].Generation != 4 ||
		got.DataAddresses["data"] != "10.0.0.5:9000" {
		t.Fatalf("report reached the hub as %+v", got)
	}
	if !got.ReceivedAt.IsZero() {
		t.Fatalf("agent-sent received_at was kept: %v", got.ReceivedAt)
	}
}

func TestConsole(t *testing.T) {
	srv := newServer(t, &fakeHub{})
	a := do(t, srv, request{method: "GET", path: "/"})
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
		t.Fatalf("console: status %d, type %q", a.status, a.header.Get("Content-Type"))
	}
	for _, id := range []string{"count-total", "count-done", "count-in-progress", "count-pending", "count-failed", "count-skipped",
		"sync-commit", "sync-result", "sync-errors", "rollouts"} {
		if !strings.Contains(a.body, `id="`+id+`"`) {
			t.Errorf("console lacks element id %q", id)
		}
	}
	if !strings.Contains(a.body, "api/v1/summary") {
		t.Error("console does not poll the summary")
	}
	for _, external := range []string{"http://", "https://", "//cdn"} {
		if strings.Contains(a.body, external) {
			t.Errorf("console references an external asset (%q)", external)
		}
	}
	csp := a.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'nonce-") {
		t.Fatalf("console CSP lacks a script nonce: %q", csp)
	}
	nonce := strings.TrimSuffix(strings.SplitN(strings.SplitN(csp, "'nonce-", 2)[1], "'", 2)[0], "'")
	if !strings.Contains(a.body, `<script nonce="`+nonce+`">`) && !strings.Contains(a.body, "<script nonce=\""+strings.ReplaceAll(nonce, "=", "&#61;")+"\">") {
		t.Fatalf("script nonce in the page does not match the CSP nonce %q", nonce)
	}
	if b := do(t, srv, request{method: "GET", path: "/"}); strings.Contains(b.header.Get("Content-Security-Policy"), nonce) {
		t.Fatal("two answers share a nonce")
	}
}

func TestMetricsCountRequestsByRouteAndCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := newServer(t, &fakeHub{}, api.WithMetrics(reg, reg))
	do(t, srv, request{method: "GET", path: "/api/v1/summary"})
	do(t, srv, request{method: "GET", path: "/api/v1/rollouts/x"})
	do(t, srv, request{method: "GET", path: "/api/v1/rollouts/y"})
	a := do(t, srv, request{method: "GET", path: "/metrics"})
	if a.status != 200 {
		t.Fatalf("metrics status = %d", a.status)
	}
	for _, want := range []string{
		`fleetwave_http_requests_total{code="200",route="GET /api/v1/summary"} 1`,
		`fleetwave_http_requests_total{code="404",route="GET /api/v1/rollouts/{id}"} 2`,
	} {
		if !strings.Contains(a.body, want) {
			t.Errorf("metrics lack %q:\n%s", want, a.body)
		}
	}
	// A second handler on the same registry reuses the collectors.
	api.New(&fakeHub{}, api.WithMetrics(reg, reg))
}
