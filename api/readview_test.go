package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// TestReadsThatAcceptAStaleAnswerDoNotWaitForASlowHub: a console's reads
// (Cache-Control: max-stale=N) are answered from the last read, with its
// Age, while the hub's fresh read is slow (a Redis busy with a script),
// and share that read; a client that says nothing, or accepts no
// staleness, waits for a fresh read, so it reads its own writes.
func TestReadsThatAcceptAStaleAnswerDoNotWaitForASlowHub(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	var gate chan struct{} // when set, a read waits for it to close
	h := &fakeHub{summary: func() (fleetwave.Summary, error) {
		mu.Lock()
		reads++
		n, g := reads, gate
		mu.Unlock()
		if g != nil {
			<-g
		}
		return fleetwave.Summary{Nodes: n}, nil // the read's number
	}}
	srv := newServer(t, h)
	type got struct {
		read int
		age  string
	}
	get := func(cacheControl string) got {
		var h http.Header
		if cacheControl != "" {
			h = http.Header{"Cache-Control": {cacheControl}}
		}
		a, err := doWith(srv, request{method: "GET", path: "/api/v1/summary"}, h)
		var s fleetwave.Summary
		if err != nil || a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &s) != nil {
			t.Errorf("summary: %d %v", a.status, err)
		}
		return got{s.Nodes, a.header.Get("Age")}
	}
	// answered: runs get in the background; the answer comes on the channel
	answered := func(cacheControl string) chan got {
		c := make(chan got, 1)
		go func() { c <- get(cacheControl) }()
		return c
	}
	within := func(c chan got, what string) got {
		t.Helper()
		select {
		case g := <-c:
			return g
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer while the hub's read is slow", what)
			return got{}
		}
	}
	notYet := func(c chan got, what string) {
		t.Helper()
		select {
		case g := <-c:
			t.Fatalf("%s answered %+v before the slow read ended", what, g)
		case <-time.After(200 * time.Millisecond):
		}
	}

	// a quick hub: every answer is a fresh read, with or without the header
	if g := get(""); g != (got{1, ""}) {
		t.Fatalf("plain read: %+v", g)
	}
	if g := get("max-stale=5"); g != (got{2, ""}) {
		t.Fatalf("a read accepting staleness from a quick hub: %+v, want the fresh read 2", g)
	}

	// a slow hub (let go at the end, whatever happens, so that the
	// server can close)
	mu.Lock()
	gate = make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	mu.Unlock()
	t.Cleanup(release)
	if g := within(answered("no-cache, max-stale=5"), "the console's read"); g.read != 2 || g.age == "" {
		t.Fatalf("while the hub is slow: %+v, want read 2 with its Age", g)
	}
	if g := within(answered("max-stale=5"), "a second console"); g.read != 2 || g.age == "" {
		t.Fatalf("a second console: %+v, want read 2 with its Age", g)
	}
	mu.Lock()
	if reads != 3 {
		t.Errorf("%d reads reached the hub, want 3: the consoles share the slow one", reads)
	}
	mu.Unlock()
	plain, strict, invalid := answered(""), answered("max-stale=0"), answered("max-stale=soon")
	notYet(plain, "a plain read")
	notYet(strict, "a read accepting no staleness")
	notYet(invalid, "a read with an invalid max-stale")
	mu.Lock()
	release()
	gate = nil
	mu.Unlock()
	for _, c := range []chan got{plain, strict, invalid} {
		if g := within(c, "a read that waits"); g.read < 3 || g.age != "" {
			t.Fatalf("after the slow read: %+v, want a fresh read (3 or later) without Age", g)
		}
	}
	if g := get("max-stale=5"); g.read < 4 || g.age != "" {
		t.Fatalf("a console's read once the hub is quick again: %+v, want a fresh one", g)
	}
	metrics := do(t, srv, request{method: "GET", path: "/metrics"}).body
	if !strings.Contains(metrics, `fleetwave_http_stale_answers_total{route="GET /api/v1/summary"} 2`) {
		t.Fatalf("the stale answers are not counted:\n%s", grepLines(metrics, "stale"))
	}
}

// TestRolloutPagesAreReadByCursorAndLimit: a rollout's pages read through
// the view are kept apart by cursor and limit, and a page the hub refuses
// is refused, never answered from another page.
func TestRolloutPagesAreReadByCursorAndLimit(t *testing.T) {
	items := []fleetwave.Item{{ID: "r.a"}, {ID: "r.b"}, {ID: "r.c"}}
	h := &fakeHub{rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
		return fleetwave.Rollout{ID: id}, items, nil
	}}
	srv := newServer(t, h)
	page := func(query string) (int, api.RolloutAnswer) {
		a, err := doWith(srv, request{method: "GET", path: "/api/v1/rollouts/r" + query}, http.Header{"Cache-Control": {"max-stale=2"}})
		if err != nil {
			t.Fatal(err)
		}
		var ra api.RolloutAnswer
		_ = json.Unmarshal([]byte(a.body), &ra)
		return a.status, ra
	}
	ids := func(a api.RolloutAnswer) string {
		var s []string
		for _, it := range a.Items {
			s = append(s, it.ID)
		}
		return strings.Join(s, ",")
	}
	if st, a := page("?limit=2"); st != 200 || ids(a) != "r.a,r.b" || a.Next == "" {
		t.Fatalf("first page of 2: %d %s next %q", st, ids(a), a.Next)
	}
	if st, a := page("?limit=1"); st != 200 || ids(a) != "r.a" {
		t.Fatalf("first page of 1: %d %s", st, ids(a))
	}
	_, first := page("?limit=2")
	if st, a := page("?limit=2&cursor=" + first.Next); st != 200 || ids(a) != "r.c" || a.Next != "" {
		t.Fatalf("second page: %d %s next %q", st, ids(a), a.Next)
	}
	if st, _ := page("?limit=2&cursor=" + strings.Repeat("x", 8)); st != http.StatusBadRequest {
		t.Fatalf("a cursor that is no item: %d, want 400", st)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestARolloutActionAnswersWhatItWrote: the answer of a pause is read after
// the pause even from a client that accepts stale reads, while a GET of
// the same page may be answered from the last read.
func TestARolloutActionAnswersWhatItWrote(t *testing.T) {
	var mu sync.Mutex
	status, slow := fleetwave.RolloutActive, false
	h := &fakeHub{rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
		mu.Lock()
		st, s := status, slow
		mu.Unlock()
		if s {
			time.Sleep(300 * time.Millisecond) // a Redis busy with a script
		}
		return fleetwave.Rollout{ID: id, Status: st}, nil, nil
	}}
	srv := newServer(t, h)
	send := func(method, path string) (api.RolloutAnswer, string) {
		a, err := doWith(srv, request{method: method, path: path, token: "tok-op"}, http.Header{"Cache-Control": {"max-stale=60"}})
		var ra api.RolloutAnswer
		if err != nil || a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &ra) != nil {
			t.Fatalf("%s %s: %d %v", method, path, a.status, err)
		}
		return ra, a.header.Get("Age")
	}
	if a, _ := send("GET", "/api/v1/rollouts/r1"); a.Rollout.Status != fleetwave.RolloutActive {
		t.Fatalf("first read: %s", a.Rollout.Status)
	}
	mu.Lock()
	status, slow = fleetwave.RolloutPaused, true // what the pause below writes
	mu.Unlock()
	if a, age := send("POST", "/api/v1/rollouts/r1/pause"); a.Rollout.Status != fleetwave.RolloutPaused || age != "" {
		t.Fatalf("the pause answered %s (Age %q), want the paused rollout read after it", a.Rollout.Status, age)
	}
	if a, age := send("GET", "/api/v1/rollouts/r1"); a.Rollout.Status != fleetwave.RolloutActive || age == "" {
		t.Fatalf("a GET while the read is slow: %s (Age %q), want the last read's active", a.Rollout.Status, age)
	}
}
