package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// scriptHub stands in for the hub behind the real API handler (api.New),
// answering GET /api/v1/rollouts/{id} from a script: missing 404s first,
// then states in turn (the last one repeating), with outage 503s after the
// first state. It also serves the rollout list (Summary), the nodes and
// rollout requests. Any other Hub method panics (the embedded nil
// interface).
type scriptHub struct {
	api.Hub
	mu       sync.Mutex
	states   []fleetwave.Rollout
	missing  int
	outage   int
	served   int
	gets     int
	onGet    func(n int) // called with the number of GETs so far
	rollouts []fleetwave.Rollout
	nodes    []api.NodeView
	created  []api.RolloutCreate
}

func (h *scriptHub) IdentitiesConfigured() bool { return false }

func (h *scriptHub) AuthenticateUser(token string) (api.Identity, bool) {
	switch token {
	case "op-token":
		return api.Identity{Name: "olga", Role: api.RoleOperator}, true
	case "view-token":
		return api.Identity{Name: "vera", Role: api.RoleViewer}, true
	}
	return api.Identity{}, false
}

func (h *scriptHub) Rollout(_ context.Context, id string) (fleetwave.Rollout, []fleetwave.Item, error) {
	h.mu.Lock()
	h.gets++
	n, onGet := h.gets, h.onGet
	var r fleetwave.Rollout
	var err error
	switch {
	case h.missing > 0 || len(h.states) == 0:
		h.missing--
		err = &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such rollout"}
	case h.served > 0 && h.outage > 0:
		h.outage--
		err = &api.Error{Status: http.StatusServiceUnavailable, Code: "redis_unavailable", Message: "redis: connection refused"}
	default:
		r = h.states[min(h.served, len(h.states)-1)]
		r.ID = cmp.Or(r.ID, id)
		h.served++
	}
	h.mu.Unlock()
	if onGet != nil {
		onGet(n)
	}
	return r, nil, err
}

// RolloutPage answers the scripted rollout (it has no items).
func (h *scriptHub) RolloutPage(ctx context.Context, id, _ string, _ int) (fleetwave.Rollout, []fleetwave.Item, bool, error) {
	r, items, err := h.Rollout(ctx, id)
	return r, items, false, err
}

func (h *scriptHub) Summary(context.Context) (fleetwave.Summary, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fleetwave.Summary{Rollouts: slices.Clone(h.rollouts)}, nil
}

func (h *scriptHub) Nodes(_ context.Context, after string, limit int) ([]api.NodeView, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []api.NodeView
	for _, n := range h.nodes {
		if n.ID > after {
			out = append(out, n)
		}
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

func (h *scriptHub) RequestRollout(_ context.Context, _ api.Identity, req api.RolloutCreate) (api.RolloutPlan, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.created = append(h.created, req)
	name := cmp.Or(req.Name, "app-restart-a1b2c3")
	plan := api.RolloutPlan{Name: name, Rollout: "manual-" + name, Targets: []string{"n1", "n2"},
		Items: []api.RolloutPlanItem{{Node: "n2", Block: "app", Action: "restart"}, {Node: "n1", Block: "app", Action: "restart", Skipped: "not_installed"}}}
	if !req.DryRun {
		plan.Commit = "0123456789abcdef0123456789abcdef01234567"
	}
	return plan, nil
}

// scriptFixture serves a scriptHub and records the bodies of the writes.
type scriptFixture struct {
	hub    *scriptHub
	URL    string
	mu     sync.Mutex
	writes []string
}

func newScriptFixture(t *testing.T, h *scriptHub) *scriptFixture {
	t.Helper()
	t.Setenv("FLEETWAVE_TOKEN", "")
	t.Setenv("FLEETWAVE_HUB", "")
	fx := &scriptFixture{hub: h}
	handler := api.New(h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			fx.mu.Lock()
			fx.writes = append(fx.writes, r.Method+" "+r.URL.Path+" "+string(body))
			fx.mu.Unlock()
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	fx.URL = srv.URL
	return fx
}

func (fx *scriptFixture) cli(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(ctx, append(args, "--hub", fx.URL), &out, &errb)
	return out.String(), errb.String(), code
}

func (fx *scriptFixture) takeWrites() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	w := fx.writes
	fx.writes = nil
	return w
}

func state(status fleetwave.RolloutStatus, wave int, done, inProgress, failed, total int64) fleetwave.Rollout {
	return fleetwave.Rollout{Status: status, Wave: wave, Counters: fleetwave.Counters{Total: total, Done: done, InProgress: inProgress,
		Failed: failed, Pending: total - done - inProgress - failed}}
}

// jsonEvents decodes watch -o json output: exactly one object per line.
func jsonEvents(t *testing.T, out string) []watchEvent {
	t.Helper()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end with a newline: %q", out)
	}
	var evs []watchEvent
	for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if dec.More() {
			t.Fatalf("line %q holds more than one object", line)
		}
		var keys map[string]json.RawMessage
		_ = json.Unmarshal([]byte(line), &keys)
		for _, k := range []string{"rollout", "status", "wave", "counters", "time"} {
			if _, ok := keys[k]; !ok {
				t.Fatalf("line %q lacks %q", line, k)
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestRolloutWatchJSONFollowsToTheEnd(t *testing.T) {
	cases := []struct {
		name     string
		states   []fleetwave.Rollout
		code     int
		statuses []fleetwave.RolloutStatus // one event per change
		stderr   string
	}{
		{"completed", []fleetwave.Rollout{
			state(fleetwave.RolloutActive, 1, 0, 2, 0, 4), state(fleetwave.RolloutActive, 1, 0, 2, 0, 4), // no change: no line
			state(fleetwave.RolloutActive, 1, 1, 1, 0, 4), state(fleetwave.RolloutActive, 2, 2, 2, 0, 4),
			state(fleetwave.RolloutPaused, 2, 3, 0, 0, 4), state(fleetwave.RolloutActive, 2, 3, 1, 0, 4),
			state(fleetwave.RolloutCompleted, 2, 4, 0, 0, 4)},
			0, []fleetwave.RolloutStatus{"active", "active", "active", "paused", "active", "completed"}, ""},
		{"cancelled", []fleetwave.Rollout{state(fleetwave.RolloutActive, 1, 0, 1, 0, 2),
			{Status: fleetwave.RolloutCancelled, Reason: "cancelled by olga", Wave: 1, Counters: fleetwave.Counters{Total: 2, Done: 1, Pending: 1}}},
			1, []fleetwave.RolloutStatus{"active", "cancelled"}, "rollout app-g1 was cancelled: cancelled by olga\n"},
		{"superseded", []fleetwave.Rollout{state(fleetwave.RolloutBlocked, 1, 0, 0, 2, 2), {Status: fleetwave.RolloutSuperseded, Wave: 1}},
			1, []fleetwave.RolloutStatus{"blocked", "superseded"}, "rollout app-g1 was superseded\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newScriptFixture(t, &scriptHub{states: tc.states})
			before := time.Now().UTC()
			out, errb, code := fx.cli(context.Background(), "rollout", "watch", "app-g1", "-o", "json", "--interval", "1ms")
			if code != tc.code || errb != tc.stderr {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr %q, want %q", code, tc.code, out, errb, tc.stderr)
			}
			evs := jsonEvents(t, out)
			var got []fleetwave.RolloutStatus
			for i, ev := range evs {
				got = append(got, ev.Status)
				if ev.Rollout != "app-g1" || ev.Time.Before(before.Add(-time.Second)) || (i > 0 && ev.Time.Before(evs[i-1].Time)) {
					t.Fatalf("event %d: %+v", i, ev)
				}
			}
			if !slices.Equal(got, tc.statuses) {
				t.Fatalf("statuses %v, want %v\n%s", got, tc.statuses, out)
			}
			if tc.name == "completed" {
				if last := evs[len(evs)-1]; last.Counters != (fleetwave.Counters{Total: 4, Done: 4}) || last.Wave != 2 {
					t.Fatalf("last event %+v", last)
				}
				if evs[1].Counters.Done != 1 || evs[2].Wave != 2 {
					t.Fatalf("changes: %+v", evs)
				}
			}
		})
	}
}

func TestRolloutWatchPlainLinesAndErrors(t *testing.T) {
	fx := newScriptFixture(t, &scriptHub{states: []fleetwave.Rollout{
		state(fleetwave.RolloutActive, 1, 0, 1, 0, 2), state(fleetwave.RolloutActive, 1, 1, 1, 0, 2), state(fleetwave.RolloutCompleted, 1, 2, 0, 0, 2)}})
	out, errb, code := fx.cli(context.Background(), "rollout", "watch", "app-g1", "--interval", "1ms")
	mustOK(t, "watch", out, errb, code)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "app-g1 active wave 1  total=2 done=0 in_progress=1 pending=1 failed=0 skipped=0") ||
		!strings.HasSuffix(lines[2], "app-g1 completed wave 1  total=2 done=2 in_progress=0 pending=0 failed=0 skipped=0") {
		t.Fatalf("lines:\n%s", out)
	}
	if strings.Contains(out, "\r") || strings.Contains(out, "\x1b") {
		t.Fatalf("a progress bar went to a buffer: %q", out)
	}

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-o", "yaml"}, `--output "yaml": watch prints a table (the default) or json lines`},
		{[]string{"--interval", "0s"}, "--interval 0s: want a positive duration"},
	} {
		out, errb, code := fx.cli(context.Background(), append([]string{"rollout", "watch", "app-g1"}, tc.args...)...)
		if code != 2 || out != "" || !strings.HasPrefix(errb, "fleetwave: "+tc.msg+"\n") {
			t.Fatalf("%v: exit %d\nstdout %q\nstderr %q", tc.args, code, out, errb)
		}
	}
}

func TestRolloutWatchWaitsForTheRolloutAndRidesOutAnOutage(t *testing.T) {
	defer func(a, o time.Duration) { watchAppearWait, watchOutage = a, o }(watchAppearWait, watchOutage)
	watchAppearWait, watchOutage = time.Minute, time.Minute
	h := &scriptHub{missing: 3, outage: 4, states: []fleetwave.Rollout{state(fleetwave.RolloutActive, 1, 0, 1, 0, 1), state(fleetwave.RolloutCompleted, 1, 1, 0, 0, 1)}}
	fx := newScriptFixture(t, h)
	out, errb, code := fx.cli(context.Background(), "rollout", "watch", "manual-r1", "-o", "json", "--interval", "1ms")
	mustOK(t, "watch", out, errb, code)
	if evs := jsonEvents(t, out); len(evs) != 2 || evs[1].Status != fleetwave.RolloutCompleted {
		t.Fatalf("events:\n%s", out)
	}
	if strings.Count(errb, "rollout manual-r1 not found yet: waiting up to 1m0s for the hub to create it\n") != 1 ||
		strings.Count(errb, "cannot ask the hub (redis_unavailable: redis: connection refused): retrying for up to 1m0s\n") != 1 {
		t.Fatalf("stderr:\n%s", errb)
	}
	h.mu.Lock()
	gets := h.gets
	h.mu.Unlock()
	if gets != 3+1+4+1 {
		t.Fatalf("%d GETs, want 9", gets)
	}

	// A rollout that never shows, an outage that lasts: the error, exit 1.
	watchAppearWait, watchOutage = 20*time.Millisecond, 20*time.Millisecond
	fx = newScriptFixture(t, &scriptHub{missing: 1 << 30})
	out, errb, code = fx.cli(context.Background(), "rollout", "watch", "nope", "--interval", "1ms")
	if code != 1 || out != "" || !strings.HasSuffix(errb, "error: no such rollout (not_found)\nhint: fleetwave rollout list shows the rollouts\n") {
		t.Fatalf("never there: exit %d\nstdout %q\nstderr %q", code, out, errb)
	}
	fx = newScriptFixture(t, &scriptHub{outage: 1 << 30, states: []fleetwave.Rollout{state(fleetwave.RolloutActive, 1, 0, 1, 0, 1)}})
	out, errb, code = fx.cli(context.Background(), "rollout", "watch", "app-g1", "--interval", "1ms")
	if code != 1 || strings.Count(out, "\n") != 1 || !strings.Contains(errb, "error: redis: connection refused (redis_unavailable)\n") {
		t.Fatalf("long outage: exit %d\nstdout %q\nstderr %q", code, out, errb)
	}
}

func TestRolloutWatchInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &scriptHub{states: []fleetwave.Rollout{state(fleetwave.RolloutActive, 1, 0, 1, 0, 3)}}
	h.onGet = func(n int) {
		if n == 3 {
			cancel() // Ctrl-C while the rollout is still active
		}
	}
	fx := newScriptFixture(t, h)
	out, errb, code := fx.cli(ctx, "rollout", "watch", "app-g1", "--interval", "1ms", "-o", "json")
	if code != 130 || len(jsonEvents(t, out)) != 1 || errb != "interrupted: rollout app-g1 is active\n" {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errb)
	}
}

func TestProgressBar(t *testing.T) {
	ev := watchEvent{Rollout: "app-g1", Status: fleetwave.RolloutActive, Wave: 2, Counters: fleetwave.Counters{Total: 8, Done: 3, Failed: 1, InProgress: 2, Pending: 2}}
	if got, want := progressBar(ev, 8), "app-g1 [####----] 3/8 done, 1 failed, 2 in progress, wave 2, active"; got != want {
		t.Fatalf("\n got %q\nwant %q", got, want)
	}
	ev.Status, ev.Reason, ev.Counters = fleetwave.RolloutBlocked, "failure threshold", fleetwave.Counters{Total: 8, Done: 6, Skipped: 2}
	if got, want := progressBar(ev, 8), "app-g1 [########] 6/8 done, 2 skipped, 0 failed, 0 in progress, wave 2, blocked (failure threshold)"; got != want {
		t.Fatalf("\n got %q\nwant %q", got, want)
	}
	if got := progressBar(watchEvent{Rollout: "x", Status: fleetwave.RolloutActive}, 4); got != "x [----] 0/0 done, 0 failed, 0 in progress, wave 0, active" {
		t.Fatalf("empty rollout: %q", got)
	}
}

func TestRolloutCreateSendsTheRequest(t *testing.T) {
	fx := newScriptFixture(t, &scriptHub{})
	out, errb, code := fx.cli(context.Background(), "rollout", "create", "--brc", "app", "--action", "restart", "--selector", "tier in (web, api)",
		"--label", "env=prod", "--batch-size", "2", "--name", "r1", "--reason", "stuck workers", "--token", "op-token")
	mustOK(t, "create", out, errb, code)
	want := `POST /api/v1/rollouts {"name":"r1","brc":"app","action_name":"restart","selector":{"match_labels":{"env":"prod"},` +
		`"match_expressions":[{"key":"tier","operator":"in","values":["web","api"]}]},"batch_size":2,"reason":"stuck workers"}`
	if w := fx.takeWrites(); len(w) != 1 || w[0] != want {
		t.Fatalf("writes\n got %q\nwant %q", w, want)
	}
	if fieldAfter(out, "request") != "r1" || fieldAfter(out, "commit") != "0123456789abcdef0123456789abcdef01234567" ||
		fieldAfter(out, "rollout") != "manual-r1" || !hasRow(out, "nodes", "2", "n1,n2") ||
		!strings.Contains(out, "fleetwave rollout watch manual-r1\n") {
		t.Fatalf("output:\n%s", out)
	}

	out, errb, code = fx.cli(context.Background(), "rollout", "create", "--brc", "app", "--nodes", "n2,n1", "--nodes", "n3", "--dry-run", "--token", "op-token")
	mustOK(t, "dry run", out, errb, code)
	if w := fx.takeWrites(); len(w) != 1 || w[0] != `POST /api/v1/rollouts {"brc":"app","nodes":["n2","n1","n3"],"dry_run":true}` {
		t.Fatalf("writes %q", w)
	}
	if !strings.HasPrefix(out, "dry run: nothing was written\n") || !strings.Contains(out, "made up for this dry run") ||
		!hasRow(out, "nodes", "2") || !hasRow(out, "n1") || !hasRow(out, "n2", "app", "restart", "-", "-") ||
		!hasRow(out, "n1", "app", "restart", "-", "skipped:", "not_installed") || strings.Contains(out, "commit") {
		t.Fatalf("dry run output:\n%s", out)
	}
	out, errb, code = fx.cli(context.Background(), "rollout", "create", "--brc", "app", "--label", "tier=web", "--dry-run", "--token", "op-token", "-o", "json")
	mustOK(t, "dry run -o json", out, errb, code)
	var plan api.RolloutPlan
	if err := json.Unmarshal([]byte(out), &plan); err != nil || plan.Rollout != "manual-app-restart-a1b2c3" || len(plan.Items) != 2 || plan.Commit != "" {
		t.Fatalf("plan %v %+v\n%s", err, plan, out)
	}
	fx.takeWrites()

	// Refused before the hub is asked.
	base := []string{"rollout", "create", "--brc", "app"}
	for _, tc := range []struct {
		args     []string
		msg, try string
	}{
		{[]string{"rollout", "create", "--nodes", "n1"}, "create needs --brc", rolloutCreateExample},
		{slices.Clone(base), "create needs --nodes, --selector or --label to say which nodes", rolloutCreateExample},
		{append(slices.Clone(base), "--nodes", "n1", "--label", "a=b"), "give --nodes or --selector/--label, not both", rolloutCreateExample},
		{append(slices.Clone(base), "--nodes", "n1,,n2"), "--nodes holds an empty node id (two commas, or one at an end)", rolloutCreateExample},
		{append(slices.Clone(base), "--label", "tier"), `--label "tier": want key=value (one label; --selector takes expressions)`, "--label tier=web"},
		{append(slices.Clone(base), "--label", "tier=a b"), `--label "tier=a b": invalid label value "a b": want 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit`, "--label tier=web"},
		{append(slices.Clone(base), "--label", "env=prod", "--selector", "env=qa"), "--label: label env given twice (qa and prod): a node has one value per key; want env in (qa,prod)", "--label tier=web"},
		{append(slices.Clone(base), "--selector", "tier in web"), `--selector "tier in web": "tier in web": the values of in go in parentheses: want tier in (web)`, selectorExample},
		{append(slices.Clone(base), "--nodes", "n1", "--batch-size", "-2"), "--batch-size -2: want a positive number of nodes", "--batch-size 5"},
		{append(slices.Clone(base), "--nodes", "n1", "extra"), `fleetwave rollout create takes no arguments, got "extra"`, rolloutCreateExample},
	} {
		out, errb, code := fx.cli(context.Background(), tc.args...)
		if want := "fleetwave: " + tc.msg + "\nTry: " + tc.try + "\n"; code != 2 || out != "" || errb != want {
			t.Fatalf("%q: exit %d\nstdout %q\nstderr\n got %q\nwant %q", tc.args, code, out, errb, want)
		}
	}
	fx.hub.mu.Lock()
	created := len(fx.hub.created)
	fx.hub.mu.Unlock()
	if w := fx.takeWrites(); len(w) != 0 || created != 3 {
		t.Fatalf("a refused create reached the hub: %q (%d created)", w, created)
	}
}

func TestRolloutAndNodeIDCompletion(t *testing.T) {
	h := &scriptHub{
		rollouts: []fleetwave.Rollout{
			{ID: "app-g2", Status: fleetwave.RolloutActive, Wave: 1, Counters: fleetwave.Counters{Total: 4, Done: 1}},
			{ID: "app-g1", Status: fleetwave.RolloutCompleted, Wave: 2, Counters: fleetwave.Counters{Total: 4, Done: 4}},
			{ID: "db-g1", Status: fleetwave.RolloutPaused, Wave: 1, Counters: fleetwave.Counters{Total: 2}},
		},
	}
	for i := range 1500 { // two pages
		n := api.NodeView{ID: fmt.Sprintf("n%04d", i), Labels: map[string]string{"tier": "web"}}
		n.Drain = i%500 == 7
		h.nodes = append(h.nodes, n)
	}
	fx := newScriptFixture(t, h)
	complete := func(hub string, args ...string) string {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"__complete", "--hub", hub}, args...), &out, &errb); code != 0 {
			t.Fatalf("complete %q: exit %d %s", args, code, errb.String())
		}
		return out.String()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "get", ""}, "app-g2\tactive, wave 1, 1/4 done\napp-g1\tcompleted, wave 2, 4/4 done\ndb-g1\tpaused, wave 1, 0/2 done\n:4\n"},
		{[]string{"rollout", "watch", "app"}, "app-g2\tactive, wave 1, 1/4 done\napp-g1\tcompleted, wave 2, 4/4 done\n:4\n"},
		{[]string{"rollout", "pause", ""}, "app-g2\tactive, wave 1, 1/4 done\n:4\n"},
		{[]string{"rollout", "resume", ""}, "db-g1\tpaused, wave 1, 0/2 done\n:4\n"},
		{[]string{"rollout", "cancel", ""}, "app-g2\tactive, wave 1, 1/4 done\ndb-g1\tpaused, wave 1, 0/2 done\n:4\n"},
		{[]string{"rollout", "get", "app-g1", ""}, ":4\n"},
		{[]string{"node", "undrain", ""}, "n0007\tdrained, tier=web\nn0507\tdrained, tier=web\nn1007\tdrained, tier=web\n:4\n"},
		{[]string{"node", "get", "n149"}, "n1490\ttier=web\nn1491\ttier=web\nn1492\ttier=web\nn1493\ttier=web\nn1494\ttier=web\n" +
			"n1495\ttier=web\nn1496\ttier=web\nn1497\ttier=web\nn1498\ttier=web\nn1499\ttier=web\n:4\n"},
		{[]string{"node", "drain", "n100"}, "n1000\ttier=web\nn1001\ttier=web\nn1002\ttier=web\nn1003\ttier=web\nn1004\ttier=web\nn1005\ttier=web\nn1006\ttier=web\nn1008\ttier=web\nn1009\ttier=web\n:4\n"},
		{[]string{"node", "labels", "set", "n0001", ""}, ":4\n"},
		{[]string{"rollout", "create", "--brc", "app", "--nodes", "n0001,n149"}, "n0001,n1490\ttier=web\nn0001,n1491\ttier=web\nn0001,n1492\ttier=web\nn0001,n1493\ttier=web\nn0001,n1494\ttier=web\n" +
			"n0001,n1495\ttier=web\nn0001,n1496\ttier=web\nn0001,n1497\ttier=web\nn0001,n1498\ttier=web\nn0001,n1499\ttier=web\n:4\n"},
	} {
		if got := complete(fx.URL, tc.args...); !strings.HasPrefix(got, tc.want) {
			t.Fatalf("complete %q\n got %q\nwant prefix %q", tc.args, got, tc.want)
		}
	}
	// An unreachable hub completes nothing, quietly.
	srv := httptest.NewServer(http.NotFoundHandler())
	dead := srv.URL
	srv.Close()
	for _, args := range [][]string{{"rollout", "watch", ""}, {"node", "get", ""}} {
		if got := complete(dead, args...); !strings.HasPrefix(got, ":4\n") {
			t.Fatalf("complete %q against a dead hub: %q", args, got)
		}
	}
}
