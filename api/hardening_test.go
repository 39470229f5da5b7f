package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// errorAnswer is the documented error object.
type errorAnswer struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// errorOf decodes an error answer strictly, failing on another shape.
func errorOf(t *testing.T, a answer) errorAnswer {
	t.Helper()
	var e struct {
		Error errorAnswer `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(a.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("not an error answer (%v): %s", err, a.body)
	}
	return e.Error
}

// ownerByPrefix is an AttemptNode fake: att-b* are node-b's, att-gone*
// do not exist, the others are node-a's.
func ownerByPrefix(attempt string) (string, error) {
	switch {
	case strings.HasPrefix(attempt, "att-b"):
		return "node-b", nil
	case strings.HasPrefix(attempt, "att-gone"):
		return "", &api.Error{Status: http.StatusNotFound, Code: "unknown_attempt", Message: "no such attempt"}
	}
	return "node-a", nil
}

// Defect: an invalid class answered 500, and for another node's attempt
// 500 instead of 403, because the class was checked before ownership.
func TestResultOwnershipComesBeforeTheBody(t *testing.T) {
	long := strings.Repeat("x", api.MaxOutputLen+1)
	tests := []struct {
		name, attempt, body string
		wantStatus          int
		wantCode, wantField string
		wantComplete        bool
	}{
		{"a bogus class of the node's own attempt is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"bogus","exit_code":0}`, 400, "invalid_result", "class", false},
		{"a bogus class of another node's attempt is forbidden", "att-b1",
			`{"attempt_id":"att-b1","fence":3,"class":"bogus","exit_code":0}`, 403, "forbidden", "", false},
		{"broken JSON for another node's attempt is forbidden", "att-b1", `{"attempt_id":`, 403, "forbidden", "", false},
		{"an unknown field for another node's attempt is forbidden", "att-b1",
			`{"attempt_id":"att-b1","class":"success","evil":1}`, 403, "forbidden", "", false},
		{"a mismatched attempt_id for another node's attempt is forbidden", "att-b1",
			`{"attempt_id":"att-1","fence":3,"class":"success"}`, 403, "forbidden", "", false},
		{"a bogus class of an unknown attempt is unknown_attempt", "att-gone",
			`{"attempt_id":"att-gone","class":"bogus"}`, 404, "unknown_attempt", "", false},
		{"a missing class is invalid_result", "att-1", `{"attempt_id":"att-1","fence":3}`, 400, "invalid_result", "class", false},
		{"an unknown reason is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"permanent","reason":"made_up"}`, 400, "invalid_result", "reason", false},
		{"a reason on a success is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"success","reason":"agent_upgrade_failed"}`, 400, "invalid_result", "reason", false},
		{"a permanent result with a known reason passes", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"permanent","reason":"agent_upgrade_failed"}`, 204, "", "", true},
		{"a missing attempt_id is invalid_result", "att-1", `{"fence":3,"class":"success"}`, 400, "invalid_result", "attempt_id", false},
		{"a negative fence is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":-1,"class":"success"}`, 400, "invalid_result", "fence", false},
		{"an oversized output is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"permanent","exit_code":2,"output":"` + long + `"}`, 400, "invalid_result", "output", false},
		{"an instance with a bogus state is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"success","instance":{"block":"web","generation":2,"state":"bogus"}}`,
			400, "invalid_result", "instance.state", false},
		{"an instance with a negative generation is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"success","instance":{"block":"web","generation":-5}}`,
			400, "invalid_result", "instance.generation", false},
		{"an instance without a block name is invalid_result", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"success","instance":{"block":"../etc","generation":1}}`,
			400, "invalid_result", "instance.block", false},
		{"a valid result of another node's attempt reaches the hub, which forbids it", "att-b1",
			`{"attempt_id":"att-b1","fence":3,"class":"success"}`, 403, "forbidden", "", true},
		{"lost reaches the hub (the agent sends it after a restart)", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"lost","exit_code":-1}`, 204, "", "", true},
		{"a full valid result is applied", "att-1",
			`{"attempt_id":"att-1","fence":3,"class":"success","exit_code":0,"output":"ok\n",` +
				`"instance":{"block":"web","version":"2.0","config_hash":"ab","generation":4,"state":"running","managed_by":"ops",` +
				`"last_attempt":"att-1","updated_at":"2026-01-01T00:00:00Z"}}`, 204, "", "", true},
		{"an attempt id no attempt can have is unknown_attempt", "att%01", `{}`, 404, "unknown_attempt", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &fakeHub{owner: ownerByPrefix, complete: func(node string, res fleetwave.AttemptResult) error {
				if owner, _ := ownerByPrefix(res.AttemptID); owner != node {
					return &api.Error{Status: 403, Code: "forbidden", Message: "attempt belongs to another node"}
				}
				return nil
			}}
			srv := newServer(t, h)
			got := do(t, srv, request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/" + tt.attempt + "/result",
				token: "token-a", body: tt.body})
			if got.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantCode != "" {
				e := errorOf(t, got)
				if e.Code != tt.wantCode {
					t.Fatalf("code = %q, want %q: %s", e.Code, tt.wantCode, got.body)
				}
				if tt.wantField != "" && (e.Details["field"] != tt.wantField || !strings.HasPrefix(e.Message, tt.wantField+": ")) {
					t.Fatalf("answer does not name field %q: %s", tt.wantField, got.body)
				}
				if strings.Contains(got.body, "xxxxxxxxxx") {
					t.Fatalf("answer echoes the oversized value: %.200s", got.body)
				}
			}
			completed := false
			for _, c := range h.Calls() {
				completed = completed || strings.HasPrefix(c, "complete ")
			}
			if completed != tt.wantComplete {
				t.Fatalf("hub calls = %q; want a completion: %v", h.Calls(), tt.wantComplete)
			}
			h.mu.Lock()
			asked := h.ownerAsked
			h.mu.Unlock()
			if tt.wantComplete && asked != 0 {
				t.Fatalf("a result passing the checks cost an owner lookup")
			}
		})
	}
}

// Refusing a result may need the attempt's owner; a hub that cannot say
// (its store is down) is answered as the hub says, not as 500.
func TestResultRefusalWhileTheStoreIsDown(t *testing.T) {
	h := &fakeHub{owner: func(string) (string, error) {
		return "", &api.Error{Status: 503, Code: "redis_unavailable", Message: "redis is unreachable; retry later"}
	}}
	srv := newServer(t, h)
	got := do(t, srv, request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/att-1/result", token: "token-a",
		body: `{"attempt_id":"att-1","class":"bogus"}`})
	if got.status != 503 || errorOf(t, got).Code != "redis_unavailable" || !strings.Contains(got.body, "redis") {
		t.Fatalf("answer = %d %s, want 503 redis_unavailable", got.status, got.body)
	}
}

// Defect: a report with "state":"bogus","generation":-5 was accepted (204).
func TestReportFieldsAreChecked(t *testing.T) {
	inst := func(fields string) string {
		return `{"node":"node-a","sent_at":"2026-01-01T00:00:00Z","instances":[` + fields + `]}`
	}
	many := func(n int, item func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = item(i)
		}
		return strings.Join(parts, ",")
	}
	tests := []struct {
		name, body, wantField string
	}{
		{"a bogus state", inst(`{"block":"web","generation":1,"state":"bogus"}`), "instances[0].state"},
		{"a negative generation", inst(`{"block":"web","generation":-5,"state":"running"}`), "instances[0].generation"},
		{"both: the first is named", inst(`{"block":"web","generation":-5,"state":"bogus"}`), "instances[0].generation"},
		{"a block that is not a name", inst(`{"block":"Web_1","generation":1}`), "instances[0].block"},
		{"a block with a path", inst(`{"block":"../../etc","generation":1}`), "instances[0].block"},
		{"a block too long for a label", inst(`{"block":"` + strings.Repeat("a", 64) + `","generation":1}`), "instances[0].block"},
		{"a missing block", inst(`{"generation":1}`), "instances[0].block"},
		{"a block reported twice", inst(`{"block":"web","generation":1},{"block":"web","generation":2}`), "instances[1].block"},
		{"an oversized version", inst(`{"block":"web","generation":1,"version":"` + strings.Repeat("1", 300) + `"}`), "instances[0].version"},
		{"a control character in a hash", inst(`{"block":"web","generation":1,"config_hash":"a\u0000b"}`), "instances[0].config_hash"},
		{"too many instances", inst(many(api.MaxReportInstances+1, func(i int) string {
			return fmt.Sprintf(`{"block":"b%d","generation":1}`, i)
		})), "instances"},
		{"another node in the body", `{"node":"node-b","instances":[]}`, "node"},
		{"an oversized agent version", `{"agent_version":"` + strings.Repeat("v", 300) + `","instances":[]}`, "agent_version"},
		{"too many capabilities", `{"capabilities":[` + many(api.MaxReportCapabilities+1, func(int) string { return `"c"` }) + `],"instances":[]}`, "capabilities"},
		{"an empty capability", `{"capabilities":["gpu",""],"instances":[]}`, "capabilities[1]"},
		{"a data address name with a newline", `{"data_addresses":{"a\nb":"10.0.0.1:1"},"instances":[]}`, "data_addresses"},
		{"an oversized data address", `{"data_addresses":{"data":"` + strings.Repeat("1", 300) + `"},"instances":[]}`, `data_addresses["data"]`},
		{"too many attempts", `{"attempts":[` + many(api.MaxReportAttempts+1, func(i int) string { return fmt.Sprintf(`"a%d"`, i) }) + `],"instances":[]}`, "attempts"},
		{"an empty attempt id", `{"attempts":["a.1",""],"instances":[]}`, "attempts[1]"},
	}
	for _, endpoint := range []string{"report", "register"} {
		for _, tt := range tests {
			t.Run(endpoint+": "+tt.name, func(t *testing.T) {
				h := &fakeHub{}
				srv := newServer(t, h)
				got := do(t, srv, request{method: "POST", path: "/api/v1/agent/nodes/node-a/" + endpoint, token: "token-a", body: tt.body})
				if got.status != 400 {
					t.Fatalf("status = %d, want 400: %s", got.status, got.body)
				}
				e := errorOf(t, got)
				if e.Code != "invalid_report" || e.Details["field"] != tt.wantField || !strings.HasPrefix(e.Message, tt.wantField+": ") {
					t.Fatalf("answer = %s, want invalid_report naming %s", got.body, tt.wantField)
				}
				if len(h.Calls()) != 0 {
					t.Fatalf("refused report reached the hub: %q", h.Calls())
				}
			})
		}
	}
}

func TestReportsTheAgentSendsAreAccepted(t *testing.T) {
	var got []fleetwave.Report
	h := &fakeHub{report: func(r fleetwave.Report) error { got = append(got, r); return nil }}
	srv := newServer(t, h)
	insts := make([]string, api.MaxReportInstances)
	for i := range insts {
		insts[i] = fmt.Sprintf(`{"block":"b-%d","generation":%d,"state":"%s"}`, i,
			i, []string{"", "installed", "running", "stopped", "absent"}[i%5])
	}
	body := `{"node":"node-a","agent_version":"0.1.0-dev","capabilities":["gpu"],"data_addresses":{"data":"10.0.0.5:9000"},` +
		`"instances":[` + strings.Join(insts, ",") + `],"attempts":["web-g1.1.1"],"sent_at":"2026-01-01T00:00:00Z"}`
	if a := do(t, srv, request{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a", body: body}); a.status != 204 {
		t.Fatalf("status = %d: %.300s", a.status, a.body)
	}
	if len(got) != 1 || len(got[0].Instances) != api.MaxReportInstances {
		t.Fatalf("reports reaching the hub: %d", len(got))
	}
}

// dribble opens a connection, sends a request's head and then its body a
// byte every tick until the server closes the connection. It returns the
// status line and headers of the answer and when the connection closed.
func dribble(t *testing.T, addr, head string, tick time.Duration) (status string, header http.Header, closes bool, closedAt time.Time) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return "", nil, false, time.Now()
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Error(err)
		return "", nil, false, time.Now()
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // the test's own bound
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		status, header, closes = resp.Status, resp.Header, resp.Close
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	_, _ = io.Copy(io.Discard, br) // until the server closes the connection
	return status, header, closes, time.Now()
}

// Defect: 300 connections sending a byte a second to the webhook stayed
// open 40 s and more.
func TestSlowBodiesAreCutOff(t *testing.T) {
	const (
		bodyTimeout = time.Second
		limit       = 4
		conns       = 60
	)
	h := &fakeHub{}
	srv := newServer(t, h, api.WithBodyTimeout(bodyTimeout), api.WithClientLimit(limit))
	addr := strings.TrimPrefix(srv.URL, "http://")
	head := "POST /api/v1/hooks/git HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"

	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]int{}
	var last time.Duration
	for range conns {
		wg.Go(func() {
			status, header, closes, closedAt := dribble(t, addr, head, 100*time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			last = max(last, closedAt.Sub(start))
			if strings.HasPrefix(status, "429") && header.Get("Retry-After") != "1" {
				t.Errorf("429 without Retry-After 1: %v", header)
			}
			if status != "" && !closes {
				t.Errorf("%s answered without closing the connection", status)
			}
		})
	}
	wg.Wait()
	if last > 2*bodyTimeout {
		t.Fatalf("the last slow connection closed after %s, want within %s", last, 2*bodyTimeout)
	}
	timedOut, refused := statuses["408 Request Timeout"], statuses["429 Too Many Requests"]
	if timedOut < 1 || timedOut > limit || timedOut+refused != conns {
		t.Fatalf("answers = %v, want at most %d of 408 and the rest 429", statuses, limit)
	}
	if h.synced != 0 {
		t.Fatalf("a slow hook triggered a sync")
	}
	// The slots are free again.
	if a := do(t, srv, request{method: "POST", path: "/api/v1/hooks/git", body: `{}`}); a.status != 202 {
		t.Fatalf("after the slow clients: status %d %s", a.status, a.body)
	}
}

// An answer given before the body is read (here 401) goes out at once and
// closes the connection, instead of waiting for the body to drain.
func TestEarlyAnswersDoNotWaitForTheBody(t *testing.T) {
	srv := newServer(t, &fakeHub{}, api.WithBodyTimeout(10*time.Second))
	addr := strings.TrimPrefix(srv.URL, "http://")
	head := "POST /api/v1/agent/nodes/node-a/report HTTP/1.1\r\nHost: hub\r\nContent-Length: 100000\r\n\r\n{"
	start := time.Now()
	status, _, _, closedAt := dribble(t, addr, head, 100*time.Millisecond)
	if !strings.HasPrefix(status, "401") || closedAt.Sub(start) > 2*time.Second {
		t.Fatalf("answer %q, connection closed after %s; want 401 at once", status, closedAt.Sub(start))
	}
}

// The body deadline applies to agent endpoints too, and its answer is
// 408 body_timeout.
func TestSlowAgentBodyIsBodyTimeout(t *testing.T) {
	srv := newServer(t, &fakeHub{}, api.WithBodyTimeout(500*time.Millisecond))
	addr := strings.TrimPrefix(srv.URL, "http://")
	head := "POST /api/v1/agent/nodes/node-a/report HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer token-a\r\nContent-Length: 100000\r\n\r\n{"
	start := time.Now()
	status, _, _, closedAt := dribble(t, addr, head, 50*time.Millisecond)
	if !strings.HasPrefix(status, "408") || closedAt.Sub(start) > time.Second {
		t.Fatalf("answer %q, connection closed after %s; want 408 within 1s", status, closedAt.Sub(start))
	}
}

// The long poll outlasts the body and write timeouts and the server's own
// ReadTimeout: its handler extends the deadlines by its wait.
func TestLongPollOutlivesTheTimeouts(t *testing.T) {
	cancelled := make(chan bool, 1)
	h := &fakeHub{pollCtx: func(ctx context.Context, _ string, wait time.Duration) ([]fleetwave.Attempt, error) {
		select {
		case <-ctx.Done():
			cancelled <- true
			return nil, ctx.Err()
		case <-time.After(wait):
			cancelled <- false
			return nil, nil
		}
	}}
	srv := httptest.NewUnstartedServer(api.New(h, api.WithBodyTimeout(200*time.Millisecond), api.WithWriteTimeout(200*time.Millisecond)))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	start := time.Now()
	got := do(t, srv, request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=1s", token: "token-a"})
	if got.status != 200 || <-cancelled || time.Since(start) < time.Second {
		t.Fatalf("poll answered %d %s after %s; want 200 after the whole wait", got.status, got.body, time.Since(start))
	}
}

// The body deadline ends with the body: a hub call lasting longer keeps
// its context.
func TestBodyDeadlineDoesNotEndTheHandler(t *testing.T) {
	h := &fakeHub{reportCtx: func(ctx context.Context, _ fleetwave.Report) error {
		select {
		case <-ctx.Done():
			return &api.Error{Status: 500, Code: "cancelled_early", Message: "request context ended during the hub call"}
		case <-time.After(600 * time.Millisecond):
			return nil
		}
	}}
	srv := newServer(t, h, api.WithBodyTimeout(200*time.Millisecond))
	got := do(t, srv, request{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a", body: `{"instances":[]}`})
	if got.status != 204 {
		t.Fatalf("status = %d: %s", got.status, got.body)
	}
}

// Defect: /readyz said "hub not ready" during a Redis outage without
// naming Redis.
func TestReadyzNamesTheFailingDependency(t *testing.T) {
	type readyBody struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
		Error  *errorAnswer      `json:"error"`
	}
	read := func(t *testing.T, a answer) readyBody {
		t.Helper()
		var b readyBody
		dec := json.NewDecoder(strings.NewReader(a.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			t.Fatalf("readyz body: %v: %s", err, a.body)
		}
		return b
	}
	t.Run("redis down is not ready and named", func(t *testing.T) {
		cause := "error: dial unix <data dir>/redis.sock: connect: connection refused"
		h := &fakeHub{readiness: func() api.Readiness {
			return api.Readiness{Checks: map[string]string{"redis": cause, "snapshot": "ok", "git": "ok", "leader": "follower"},
				Failing: []string{"redis"}}
		}}
		a := do(t, newServer(t, h), request{method: "GET", path: "/readyz"})
		b := read(t, a)
		if a.status != 503 || b.Ready || b.Checks["redis"] != cause || b.Checks["leader"] != "follower" {
			t.Fatalf("readyz = %d %s", a.status, a.body)
		}
		if b.Error == nil || b.Error.Code != "not_ready" || !strings.Contains(b.Error.Message, "redis: dial unix") {
			t.Fatalf("readyz error does not name redis: %s", a.body)
		}
		if f, _ := b.Error.Details["failing"].([]any); len(f) != 1 || f[0] != "redis" {
			t.Fatalf("details.failing = %v", b.Error.Details)
		}
	})
	t.Run("git down alone is reported but ready", func(t *testing.T) {
		h := &fakeHub{readiness: func() api.Readiness {
			return api.Readiness{Checks: map[string]string{"redis": "ok", "snapshot": "ok", "git": "error: remote unreachable", "leader": "leader"}}
		}}
		a := do(t, newServer(t, h), request{method: "GET", path: "/readyz"})
		b := read(t, a)
		if a.status != 200 || !b.Ready || b.Checks["git"] != "error: remote unreachable" || b.Error != nil {
			t.Fatalf("readyz = %d %s", a.status, a.body)
		}
	})
}

// Defect: API errors during a Redis outage said "internal error". The hub
// maps them to redis_unavailable; the API answers that as is.
func TestRedisOutageIsAnsweredAsRedisUnavailable(t *testing.T) {
	down := &api.Error{Status: 503, Code: "redis_unavailable", Message: "redis is unreachable; retry later"}
	h := &fakeHub{
		summary: func() (fleetwave.Summary, error) { return fleetwave.Summary{}, fmt.Errorf("counters: %w", down) },
		report:  func(fleetwave.Report) error { return down },
		poll:    func(string, time.Duration) ([]fleetwave.Attempt, error) { return nil, down },
	}
	srv := newServer(t, h)
	for _, r := range []request{
		{method: "GET", path: "/api/v1/summary"},
		{method: "POST", path: "/api/v1/agent/nodes/node-a/report", token: "token-a", body: `{"instances":[]}`},
		{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts", token: "token-a"},
	} {
		a := do(t, srv, r)
		if e := errorOf(t, a); a.status != 503 || e.Code != "redis_unavailable" || !strings.Contains(e.Message, "redis") {
			t.Errorf("%s %s = %d %s", r.method, r.path, a.status, a.body)
		}
	}
}

// Every JSON body is capped, refuses unknown fields (naming them) and
// trailing data.
func TestBodiesAreStrict(t *testing.T) {
	result := `{"attempt_id":"att-1","fence":3,"class":"success"}`
	tests := []struct {
		name       string
		opts       []api.Option
		req        request
		wantStatus int
		wantCode   string
		wantField  string
	}{
		{name: "an unknown result field is named", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/att-1/result",
			token: "token-a", body: `{"attempt_id":"att-1","class":"success","retry":true}`}, wantStatus: 400, wantCode: "invalid_body", wantField: "retry"},
		{name: "a nested unknown field is named", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/report",
			token: "token-a", body: `{"instances":[{"block":"web","owner":"x"}]}`}, wantStatus: 400, wantCode: "invalid_body", wantField: "owner"},
		{name: "a wrong type names the field path", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/report",
			token: "token-a", body: `{"instances":[{"block":"web","generation":"7"}]}`}, wantStatus: 400, wantCode: "invalid_body", wantField: "instances.generation"},
		{name: "trailing garbage after a result", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/att-1/result",
			token: "token-a", body: result + "garbage"}, wantStatus: 400, wantCode: "invalid_body"},
		{name: "a second object after a report", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/report",
			token: "token-a", body: `{"instances":[]}{"instances":[]}`}, wantStatus: 400, wantCode: "invalid_body"},
		{name: "a JSON array instead of an object", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/report",
			token: "token-a", body: `[]`}, wantStatus: 400, wantCode: "invalid_body"},
		{name: "null instead of an object", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/attempts/att-1/result",
			token: "token-a", body: `null`}, wantStatus: 400, wantCode: "invalid_body"},
		{name: "a bad time", req: request{method: "POST", path: "/api/v1/agent/nodes/node-a/report",
			token: "token-a", body: `{"sent_at":"yesterday"}`}, wantStatus: 400, wantCode: "invalid_body"},
		{name: "an oversized result", opts: []api.Option{api.WithMaxBody(64)}, req: request{method: "POST",
			path: "/api/v1/agent/nodes/node-a/attempts/att-1/result", token: "token-a",
			body: `{"attempt_id":"att-1","class":"success","output":"` + strings.Repeat("x", 100) + `"}`}, wantStatus: 413, wantCode: "body_too_large"},
		{name: "an oversized rollout action", opts: []api.Option{api.WithMaxBody(16)}, req: request{method: "POST",
			path: "/api/v1/rollouts/r1/pause", token: "tok-op", body: `{"` + strings.Repeat("x", 100) + `":1}`}, wantStatus: 413, wantCode: "body_too_large"},
		{name: "a rollout action with a field", req: request{method: "POST", path: "/api/v1/rollouts/r1/pause", token: "tok-op",
			body: `{"force":true}`}, wantStatus: 400, wantCode: "invalid_body", wantField: "force"},
		{name: "a rollout action with trailing data", req: request{method: "POST", path: "/api/v1/rollouts/r1/pause", token: "tok-op",
			body: `{} {}`}, wantStatus: 400, wantCode: "invalid_body"},
		{name: "a rollout action with an empty object", req: request{method: "POST", path: "/api/v1/rollouts/r1/pause", token: "tok-op",
			body: ` {} `}, wantStatus: 200},
		{name: "a rollout action without a body", req: request{method: "POST", path: "/api/v1/rollouts/r1/resume", token: "tok-op"},
			wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &fakeHub{rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
				return fleetwave.Rollout{ID: id}, nil, nil
			}}
			got := do(t, newServer(t, h, tt.opts...), tt.req)
			if got.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantCode == "" {
				return
			}
			e := errorOf(t, got)
			if e.Code != tt.wantCode {
				t.Fatalf("code = %q, want %q: %s", e.Code, tt.wantCode, got.body)
			}
			if tt.wantField != "" && (e.Details["field"] != tt.wantField || !strings.Contains(e.Message, tt.wantField)) {
				t.Fatalf("answer does not name field %q: %s", tt.wantField, got.body)
			}
			if len(h.Calls()) != 0 {
				t.Fatalf("refused body reached the hub: %q", h.Calls())
			}
		})
	}
}

// A probe polling a hub that stays not ready (a first sync of a large
// repository takes a while) logs the cause once at warn, not per request;
// a new cause, or not ready again after ready, is logged again.
func TestReadyzLogsEachCauseOnce(t *testing.T) {
	var logs bytes.Buffer
	failing := []string{"snapshot"}
	h := &fakeHub{readiness: func() api.Readiness {
		checks := map[string]string{"redis": "ok", "snapshot": "ok"}
		for _, f := range failing {
			checks[f] = "error: no snapshot yet"
		}
		return api.Readiness{Checks: checks, Failing: failing}
	}}
	srv := newServer(t, h, api.WithLogger(zerolog.New(&logs).Level(zerolog.WarnLevel)))
	probe := func(n int) {
		for range n {
			do(t, srv, request{method: "GET", path: "/readyz"})
		}
	}
	probe(5)
	failing = []string{"redis", "snapshot"}
	probe(3)
	failing = nil
	probe(1)
	failing = []string{"snapshot"}
	probe(2)
	if got := strings.Count(logs.String(), "hub not ready"); got != 3 {
		t.Fatalf("%d warnings for 3 causes in a row:\n%s", got, logs.String())
	}
}

// Attempts taken for a poll whose client hung up are told to the hub as
// never sent (it closes them at once instead of at their deadlines), and
// nothing is written; attempts answered to a client that is there are
// not. It fails when the API writes into the dead request, or reports an
// attempt it did hand out.
func TestAttemptsOfAPollWhoseClientLeftAreNotHanded(t *testing.T) {
	taken := make(chan struct{}, 1)
	h := &fakeHub{pollCtx: func(ctx context.Context, node string, wait time.Duration) ([]fleetwave.Attempt, error) {
		if wait == 0 { // the second poll: answered at once
			return []fleetwave.Attempt{{ID: "web-g1.2.1", Node: node}}, nil
		}
		<-ctx.Done() // the client hangs up; the engine popped one meanwhile
		taken <- struct{}{}
		return []fleetwave.Attempt{{ID: "web-g1.1.1", Node: node}}, nil
	}}
	srv := newServer(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/agent/nodes/node-a/attempts?wait=20s", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer token-a")
	go func() {
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the poll was answered (%d) after its client left", resp.StatusCode)
	}
	<-taken
	want := "not handed node-a web-g1.1.1 written=false"
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(h.Calls(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("calls %q: want %q", h.Calls(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := do(t, srv, request{method: "GET", path: "/api/v1/agent/nodes/node-a/attempts?wait=0s", token: "token-a"})
	if got.status != 200 || !strings.Contains(got.body, "web-g1.2.1") {
		t.Fatalf("second poll: %d %s", got.status, got.body)
	}
	for _, c := range h.Calls() {
		if strings.Contains(c, "web-g1.2.1") && strings.HasPrefix(c, "not handed") {
			t.Fatalf("an attempt handed out was reported not handed: %q", h.Calls())
		}
	}
}
