package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/schema"
)

// identityHub is the fake hub with identities configured: every read
// needs a viewer token.
type identityHub struct{ *fakeHub }

func (identityHub) IdentitiesConfigured() bool { return true }

// serveHub is newServer for any Hub.
func serveHub(t *testing.T, h api.Hub) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(api.New(h, api.WithLogger(zerolog.New(zerolog.NewTestWriter(t)))))
	t.Cleanup(srv.Close)
	return srv
}

// readsHub answers the reads of the matrix.
func readsHub() *fakeHub {
	return &fakeHub{
		summary: func() (fleetwave.Summary, error) { return sampleSummary(), nil },
		rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
			return fleetwave.Rollout{ID: id}, nil, nil
		},
	}
}

// TestAuthorizationMatrix: {no token, viewer, operator, admin} x every
// endpoint of the API, with identities configured; and the reads without
// identities (open). A refused call never reaches the hub.
func TestAuthorizationMatrix(t *testing.T) {
	const (
		none  = ""
		view  = "tok-view"
		op    = "tok-op"
		admin = "tok-admin"
	)
	tokens := []string{none, view, op, admin}
	type endpoint struct {
		method, path, body string
		want               map[string]int // token -> status
		call               bool           // an allowed call reaches the hub (a write)
	}
	read := map[string]int{none: 401, view: 200, op: 200, admin: 200}
	write := func(ok int) map[string]int { return map[string]int{none: 401, view: 403, op: ok, admin: ok} }
	open := map[string]int{none: 200, view: 200, op: 200, admin: 200}
	endpoints := []endpoint{
		{"GET", "/api/v1/summary", "", read, false},
		{"GET", "/api/v1/rollouts", "", read, false},
		{"GET", "/api/v1/rollouts?state=active&limit=5", "", read, false},
		{"GET", "/api/v1/rollouts/web-g1", "", read, false},
		{"GET", "/api/v1/config-approvals", "", read, false},
		{"GET", "/api/v1/config-approvals/req-1", "", read, false},
		{"GET", "/api/v1/nodes", "", read, false},
		{"GET", "/api/v1/nodes?limit=1", "", read, false},
		{"GET", "/api/v1/nodes/node-a", "", read, false},
		{"HEAD", "/api/v1/nodes/node-a", "", read, false},
		{"GET", "/api/v1/no-such-thing", "", map[string]int{none: 401, view: 404, op: 404, admin: 404}, false},
		{"PUT", "/api/v1/nodes/node-a/labels", `{"labels":{"env":"prod"},"reason":"move"}`, write(200), true},
		{"POST", "/api/v1/nodes/node-a/drain", `{"reason":"disk"}`, write(200), true},
		{"POST", "/api/v1/nodes/node-a/undrain", ``, write(200), true},
		{"POST", "/api/v1/rollouts", `{"brc":"web","nodes":["node-a"],"dry_run":true}`, write(200), true},
		{"POST", "/api/v1/rollouts", `{"brc":"web","selector":{"match_labels":{"env":"prod"}}}`, write(201), true},
		{"POST", "/api/v1/rollouts/web-g1/pause", ``, write(200), true},
		{"POST", "/api/v1/config-approvals", `{"brc":"web","target_version":"2","nodes":["n1"]}`, write(201), true},
		{"POST", "/api/v1/config-approvals/req-1/approve", ``, map[string]int{none: 401, view: 403, op: 403, admin: 200}, true},
		{"GET", "/", "", open, false},
		{"GET", "/healthz", "", open, false},
		{"GET", "/readyz", "", open, false},
		{"GET", "/metrics", "", open, false},
	}
	for _, ep := range endpoints {
		for _, tok := range tokens {
			name := ep.method + " " + ep.path + " as " + map[string]string{none: "nobody", view: "viewer", op: "operator", admin: "admin"}[tok]
			t.Run(name, func(t *testing.T) {
				h := readsHub()
				srv := serveHub(t, identityHub{h})
				a := do(t, srv, request{ep.method, ep.path, tok, ep.body})
				want := ep.want[tok]
				if a.status != want {
					t.Fatalf("status %d, want %d: %s", a.status, want, a.body)
				}
				if want >= 400 && ep.method != "HEAD" {
					code := errorCode(t, a)
					if wantCode := map[int]string{401: "unauthorized", 403: "forbidden", 404: "not_found"}[want]; code != wantCode {
						t.Fatalf("code %q, want %q", code, wantCode)
					}
				}
				if want == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("401 without a Bearer challenge")
				}
				calls := h.Calls()
				if want >= 400 && len(calls) > 0 || want < 400 && ep.call && len(calls) != 1 {
					t.Fatalf("hub calls %q after %d", calls, want)
				}
			})
		}
	}
	// Without identities every read is open (first tries, the demo).
	for _, ep := range endpoints {
		if ep.method != "GET" || ep.want[none] == 200 || strings.Contains(ep.path, "no-such") {
			continue
		}
		a := do(t, newServer(t, readsHub()), request{ep.method, ep.path, none, ""})
		if a.status != 200 {
			t.Fatalf("without identities %s answered %d: %s", ep.path, a.status, a.body)
		}
	}
	// Agents keep their per-node tokens, identities or not.
	a := do(t, serveHub(t, identityHub{readsHub()}), request{"GET", "/api/v1/agent/nodes/node-a/attempts", "token-a", ""})
	if a.status != 200 {
		t.Fatalf("an agent's poll with identities configured answered %d: %s", a.status, a.body)
	}
}

// TestNodeEndpoints: the shapes and refusals of the node endpoints.
func TestNodeEndpoints(t *testing.T) {
	tests := []struct {
		name       string
		req        request
		wantStatus int
		wantCode   string
		wantCall   string
		wantBody   []string
	}{
		{"a node", request{"GET", "/api/v1/nodes/node-b", "", ""}, 200, "", "", []string{`"id":"node-b"`, `"labels":{}`}},
		{"an unknown node", request{"GET", "/api/v1/nodes/nope", "", ""}, 404, "not_found", "", nil},
		{"the first page", request{"GET", "/api/v1/nodes?limit=2", "", ""}, 200, "", "", []string{`"id":"node-a"`, `"id":"node-b"`, `"next":"bm9kZS1i"`}},
		{"the next page", request{"GET", "/api/v1/nodes?limit=2&cursor=bm9kZS1i", "", ""}, 200, "", "", []string{`{"nodes":[{"id":"node-c"`, `"next":""`}},
		{"a zero limit", request{"GET", "/api/v1/nodes?limit=0", "", ""}, 400, "invalid_query", "", nil},
		{"a limit over the max is capped", request{"GET", "/api/v1/nodes?limit=5000", "", ""}, 200, "", "", []string{`"next":""`}},
		{"a broken cursor", request{"GET", "/api/v1/nodes?cursor=%21%21", "", ""}, 400, "invalid_query", "", nil},
		{"labels replaced", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{"env":"prod","example.com/role":"db"},"reason":"new rack"}`},
			200, "", `labels node-a by otto: 2 "new rack"`, []string{`"commit":"c0ffee"`, `"node":{"id":"node-a"`}},
		{"every label removed", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{}}`}, 200, "", `labels node-a by otto: 0 ""`, nil},
		{"labels are required", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"reason":"x"}`}, 400, "invalid_body", "", []string{`"field":"labels"`}},
		{"null labels are missing labels", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":null}`}, 400, "invalid_body", "", nil},
		{"invalid labels, each named", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{"-bad":"x","ok":"a b","fine":"yes"}}`},
			400, "invalid_labels", "", []string{`"key":"-bad"`, `"key":"ok"`, `invalid label value \"a b\"`, `"max_labels":16`}},
		{"too many labels", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1","h":"1","i":"1","j":"1","k":"1","l":"1","m":"1","n":"1","o":"1","p":"1","q":"1"}}`},
			400, "invalid_labels", "", []string{"found 17 labels, expected at most 16"}},
		{"a label value of the wrong type", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{"a":1}}`}, 400, "invalid_body", "", nil},
		{"an unknown field", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{},"actor":"mallory"}`}, 400, "invalid_body", "", []string{`"field":"actor"`}},
		{"a reason with a newline", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{},"reason":"a\nb"}`}, 400, "invalid_body", "", []string{`"field":"reason"`}},
		{"a reason too long", request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{},"reason":"` + strings.Repeat("r", api.MaxReasonLen+1) + `"}`}, 400, "invalid_body", "", nil},
		{"labels of an unknown node", request{"PUT", "/api/v1/nodes/nope/labels", "tok-op", `{"labels":{}}`}, 404, "not_found", `labels nope by otto: 0 ""`, nil},
		{"labels by POST", request{"POST", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{}}`}, 404, "not_found", "", nil},
		{"drain without a body", request{"POST", "/api/v1/nodes/node-b/drain", "tok-op", ""}, 200, "", `drain node-b by otto ""`, []string{`"drain":true`}},
		{"drain with a reason", request{"POST", "/api/v1/nodes/node-b/drain", "tok-admin", `{"reason":"disk"}`}, 200, "", `drain node-b by ada "disk"`, nil},
		{"undrain with an empty object", request{"POST", "/api/v1/nodes/node-b/undrain", "tok-op", `{}`}, 200, "", `undrain node-b by otto ""`, []string{`"drain":false`}},
		{"drain with an unknown field", request{"POST", "/api/v1/nodes/node-b/drain", "tok-op", `{"force":true}`}, 400, "invalid_body", "", nil},
		{"drain with a list", request{"POST", "/api/v1/nodes/node-b/drain", "tok-op", `[]`}, 400, "invalid_body", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &fakeHub{}
			a := do(t, newServer(t, h), tt.req)
			checkOne(t, a, h, tt.wantStatus, tt.wantCode, tt.wantCall, tt.wantBody)
		})
	}
	// A body over the cap is 413 and reaches nobody.
	h := &fakeHub{}
	a := do(t, newServer(t, h, api.WithMaxBody(64)), request{"PUT", "/api/v1/nodes/node-a/labels", "tok-op", `{"labels":{"a":"` + strings.Repeat("b", 100) + `"}}`})
	checkOne(t, a, h, 413, "body_too_large", "", nil)
}

func checkOne(t *testing.T, a answer, h *fakeHub, status int, code, call string, body []string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	if code != "" {
		if got := errorCode(t, a); got != code {
			t.Fatalf("code %q, want %q: %s", got, code, a.body)
		}
	}
	if calls := strings.Join(h.Calls(), "; "); calls != call {
		t.Fatalf("hub calls %q, want %q", calls, call)
	}
	for _, b := range body {
		if !strings.Contains(a.body, b) {
			t.Fatalf("body lacks %s: %s", b, a.body)
		}
	}
}

// TestRolloutCreateEndpoint: the shapes and refusals of POST
// /api/v1/rollouts.
func TestRolloutCreateEndpoint(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
		wantCall   string
		wantBody   []string
		notInBody  []string
	}{
		{"a dry run", `{"brc":"web","nodes":["node-a","node-b"],"dry_run":true}`, 200, "", "request web by otto dry_run=true",
			[]string{`"name":"req-1"`, `"rollout":"manual-req-1"`, `"targets":["node-a","node-b"]`, `"items":[{"node":"node-a","block":"web","action":"upgrade","target_version":"2"}`, `"approval_required":false`},
			[]string{`"commit"`}},
		{"a dry run the policy gates", `{"brc":"gated","nodes":["node-a"],"dry_run":true}`, 200, "", "request gated by otto dry_run=true", []string{`"approval_required":true`}, nil},
		{"a request", `{"name":"hotfix-1","brc":"web","action_name":"restart","selector":{"match_labels":{"env":"prod"}},"batch_size":2,"reason":"incident 42"}`, 201, "", "request web by otto dry_run=false",
			[]string{`"name":"hotfix-1"`, `"commit":"c0ffee"`, `"rollout":"manual-hotfix-1"`, `"targets":["node-a"]`}, []string{`"items"`, `"approval_required"`}},
		{"a request the policy gates", `{"brc":"gated","nodes":["node-a"]}`, 409, "approval_required", "request gated by otto dry_run=false", nil, nil},
		{"an unknown brc", `{"brc":"unknown","nodes":["node-a"]}`, 422, "unknown_brc", "request unknown by otto dry_run=false", nil, nil},
		{"no brc", `{"nodes":["node-a"]}`, 400, "invalid_body", "", []string{`"field":"brc"`}, nil},
		{"no targets", `{"brc":"web"}`, 400, "invalid_body", "", []string{`"field":"nodes"`}, nil},
		{"nodes and a selector", `{"brc":"web","nodes":["a"],"selector":{}}`, 400, "invalid_body", "", []string{`"field":"selector"`}, nil},
		{"a bad name", `{"name":"Hot_Fix","brc":"web","nodes":["a"]}`, 400, "invalid_body", "", []string{`"field":"name"`}, nil},
		{"a negative batch size", `{"brc":"web","nodes":["a"],"batch_size":-1}`, 400, "invalid_body", "", nil, nil},
		{"an empty node id", `{"brc":"web","nodes":[""]}`, 400, "invalid_body", "", []string{`"field":"nodes[0]"`}, nil},
		{"an unknown field", `{"brc":"web","nodes":["a"],"force":true}`, 400, "invalid_body", "", nil, nil},
		{"a string batch size", `{"brc":"web","nodes":["a"],"batch_size":"2"}`, 400, "invalid_body", "", nil, nil},
		{"two objects", `{"brc":"web","nodes":["a"]}{}`, 400, "invalid_body", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &fakeHub{}
			a := do(t, newServer(t, h), request{"POST", "/api/v1/rollouts", "tok-op", tt.body})
			checkOne(t, a, h, tt.wantStatus, tt.wantCode, tt.wantCall, tt.wantBody)
			for _, b := range tt.notInBody {
				if strings.Contains(a.body, b) {
					t.Fatalf("body holds %s: %s", b, a.body)
				}
			}
		})
	}
}

// TestRolloutListPages: without a query the list is the bare array the
// CLI and the console read; with one it is a page.
func TestRolloutListPages(t *testing.T) {
	h := &fakeHub{summary: func() (fleetwave.Summary, error) {
		return fleetwave.Summary{Rollouts: []fleetwave.Rollout{
			{ID: "web-g3", Status: fleetwave.RolloutActive, Source: fleetwave.RolloutSource{Object: "trigger/web"}},
			{ID: "db-g1", Status: fleetwave.RolloutCompleted, Source: fleetwave.RolloutSource{Object: "trigger/db"}},
			{ID: "web-g2", Status: fleetwave.RolloutSuperseded, Source: fleetwave.RolloutSource{Object: "trigger/web"}},
			{ID: "web-g1", Status: fleetwave.RolloutCompleted, Source: fleetwave.RolloutSource{Object: "trigger/web"}},
		}}, nil
	}}
	srv := newServer(t, h)
	ids := func(list []fleetwave.Rollout) string {
		var out []string
		for _, r := range list {
			out = append(out, r.ID)
		}
		return strings.Join(out, ",")
	}
	a := do(t, srv, request{"GET", "/api/v1/rollouts", "", ""})
	var bare []fleetwave.Rollout
	if err := json.Unmarshal([]byte(a.body), &bare); err != nil || ids(bare) != "web-g3,db-g1,web-g2,web-g1" {
		t.Fatalf("the bare list: %v %s", err, a.body)
	}
	var pages []string
	cursor := ""
	for range 5 {
		a := do(t, srv, request{"GET", "/api/v1/rollouts?brc=web&limit=2&cursor=" + cursor, "", ""})
		var p api.RolloutsPage
		if err := json.Unmarshal([]byte(a.body), &p); err != nil || a.status != 200 {
			t.Fatalf("page: %d %v %s", a.status, err, a.body)
		}
		pages = append(pages, ids(p.Rollouts))
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if got := strings.Join(pages, " | "); got != "web-g3,web-g2 | web-g1" {
		t.Fatalf("pages of brc web: %s", got)
	}
	a = do(t, srv, request{"GET", "/api/v1/rollouts?state=completed", "", ""})
	if !strings.Contains(a.body, `{"rollouts":[{"id":"db-g1"`) || !strings.Contains(a.body, `"next":""`) || strings.Contains(a.body, "web-g3") {
		t.Fatalf("state=completed: %s", a.body)
	}
	a = do(t, srv, request{"GET", "/api/v1/rollouts?state=nope", "", ""})
	a = do(t, srv, request{"GET", "/api/v1/rollouts?lane=db", "", ""})
	if a.status != 200 || !strings.Contains(a.body, `"db-g1"`) || strings.Contains(a.body, "web-g") {
		t.Fatalf("lane=db: %d %s", a.status, a.body)
	}
	for _, bad := range []string{"state=nope", "lane=%00", "limit=-1", "cursor=%24%24", "cursor=" + "bm8tc3VjaA"} {
		a = do(t, srv, request{"GET", "/api/v1/rollouts?" + bad, "", ""})
		if a.status != 400 || errorCode(t, a) != "invalid_query" {
			t.Fatalf("%s answered %d: %s", bad, a.status, a.body)
		}
	}
}

// writeCapture records what a write endpoint passed to the hub.
type writeCapture struct {
	*fakeHub
	mu      sync.Mutex
	labels  map[string]string
	reasons []string
	creates []api.RolloutCreate
}

func (c *writeCapture) SetNodeLabels(ctx context.Context, actor api.Identity, id string, labels map[string]string, reason string) (api.NodeWrite, error) {
	c.mu.Lock()
	c.labels, c.reasons = labels, append(c.reasons, reason)
	c.mu.Unlock()
	return c.fakeHub.SetNodeLabels(ctx, actor, id, labels, reason)
}

func (c *writeCapture) SetNodeDrain(ctx context.Context, actor api.Identity, id string, drain bool, reason string) (api.NodeWrite, error) {
	c.mu.Lock()
	c.reasons = append(c.reasons, reason)
	c.mu.Unlock()
	return c.fakeHub.SetNodeDrain(ctx, actor, id, drain, reason)
}

func (c *writeCapture) RequestRollout(ctx context.Context, actor api.Identity, req api.RolloutCreate) (api.RolloutPlan, error) {
	c.mu.Lock()
	c.creates, c.reasons = append(c.creates, req), append(c.reasons, req.Reason)
	c.mu.Unlock()
	return c.fakeHub.RequestRollout(ctx, actor, req)
}

// serveWrite runs one write through a fresh API, as an operator.
func serveWrite(t *testing.T, h api.Hub, method, path string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := api.New(h, api.WithMetrics(reg, reg), api.WithMaxBody(fuzzMaxBody))
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok-op")
	req.RemoteAddr = "192.0.2.7:40000"
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

// reasonsOK checks that every reason that reached the hub is within the
// documented limits.
func reasonsOK(t *testing.T, c *writeCapture) {
	t.Helper()
	for _, r := range c.reasons {
		if len(r) > api.MaxReasonLen || strings.ContainsFunc(r, unicode.IsControl) {
			t.Fatalf("a reason out of its limits reached the hub: %q", r)
		}
	}
}

// FuzzNodeLabels sends bodies to PUT /api/v1/nodes/{id}/labels: no 500,
// JSON errors, and only label sets the schema accepts reach the hub.
func FuzzNodeLabels(f *testing.F) {
	for _, s := range []string{`{"labels":{"env":"prod"}}`, `{"labels":{}}`, `{"labels":{"example.com/role":"db"},"reason":"rack 4"}`,
		`{"labels":{"-x":"y"}}`, `{"labels":null}`, `{"labels":{"a":1}}`, `{"labels":{"a":"b"},"x":1}`, `{}`, ``, `[]`, `{"labels":{"a":"b"}} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := &writeCapture{fakeHub: &fakeHub{}}
		rec := serveWrite(t, c, "PUT", "/api/v1/nodes/node-a/labels", body)
		code := checkAnswer(t, rec, 200, 400, 413)
		if rec.Code == 200 {
			if c.labels == nil || schema.CheckLabels(c.labels) != nil {
				t.Fatalf("labels %v reached the hub", c.labels)
			}
		} else if len(c.Calls()) > 0 {
			t.Fatalf("a refused body (%s) reached the hub: %v", code, c.Calls())
		}
		reasonsOK(t, c)
	})
}

// FuzzNodeDrain sends bodies to the drain endpoint: none, {} or a reason
// are accepted.
func FuzzNodeDrain(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"reason":"disk"}`, ` {"reason":""} `, `{"reason":1}`, `{"force":true}`, `null`, `{"reason":"a` + "\x00" + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := &writeCapture{fakeHub: &fakeHub{}}
		rec := serveWrite(t, c, "POST", "/api/v1/nodes/node-a/drain", body)
		checkAnswer(t, rec, 200, 400, 413)
		if rec.Code != 200 && len(c.Calls()) > 0 {
			t.Fatalf("a refused body reached the hub: %v", c.Calls())
		}
		if len(bytes.Trim(body, " \t\r\n")) == 0 && rec.Code != 200 {
			t.Fatalf("no body answered %d", rec.Code)
		}
		reasonsOK(t, c)
	})
}

// FuzzRolloutCreate sends bodies to POST /api/v1/rollouts: what reaches
// the hub has a brc and exactly one kind of targets.
func FuzzRolloutCreate(f *testing.F) {
	for _, s := range []string{`{"brc":"web","nodes":["node-a"],"dry_run":true}`, `{"brc":"web","selector":{"match_labels":{"env":"prod"}}}`,
		`{"name":"fix-1","brc":"web","action_name":"restart","target_version":"2","nodes":["a","b"],"batch_size":1,"reason":"x"}`,
		`{"brc":"unknown","nodes":["a"]}`, `{"brc":"gated","nodes":["a"]}`, `{"brc":"web"}`, `{"brc":"web","nodes":[],"selector":null}`,
		`{"brc":"web","nodes":["a"],"batch_size":-3}`, `{"name":"A","brc":"web","nodes":["a"]}`, `{"brc":"web","nodes":["a"],"selector":{}}`, ``, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := &writeCapture{fakeHub: &fakeHub{}}
		rec := serveWrite(t, c, "POST", "/api/v1/rollouts", body)
		checkAnswer(t, rec, 200, 201, 400, 409, 413, 422)
		for _, req := range c.creates {
			if req.BRC == "" || (len(req.Nodes) == 0) == (req.Selector == nil) || req.BatchSize < 0 {
				t.Fatalf("request %+v reached the hub", req)
			}
		}
		if rec.Code == 400 && len(c.creates) > 0 {
			t.Fatalf("a refused body reached the hub: %+v", c.creates)
		}
		reasonsOK(t, c)
	})
}
