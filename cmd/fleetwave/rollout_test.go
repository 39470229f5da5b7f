package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// pagedHub holds one rollout of many items behind the real API handler,
// which pages them; it records the pages asked. Any other Hub method
// panics (the embedded nil interface).
type pagedHub struct {
	api.Hub
	rollout fleetwave.Rollout
	items   []fleetwave.Item
	mu      sync.Mutex
	asked   []string // "after limit"
	paused  bool
}

func newPagedHub(n int) *pagedHub {
	h := &pagedHub{rollout: fleetwave.Rollout{ID: "big-g1", Status: fleetwave.RolloutActive, Wave: 1,
		Counters: fleetwave.Counters{Total: int64(n), Pending: int64(n)}}}
	for i := range n {
		h.items = append(h.items, fleetwave.Item{ID: fmt.Sprintf("big-g1.%d", i+1), Rollout: "big-g1",
			Node: fmt.Sprintf("n%04d", i+1), Block: "app", Action: "install", Status: fleetwave.ItemPending, Reason: "wave_gate"})
	}
	return h
}

func (h *pagedHub) IdentitiesConfigured() bool { return false }

func (h *pagedHub) AuthenticateUser(token string) (api.Identity, bool) {
	return api.Identity{Name: "olga", Role: api.RoleOperator}, token == "op-token"
}

func (h *pagedHub) SetRolloutState(_ context.Context, id, action string, _ api.Identity) error {
	if id != h.rollout.ID || action != "pause" {
		return fmt.Errorf("unexpected %s of %s", action, id)
	}
	h.mu.Lock()
	h.paused = true
	h.mu.Unlock()
	return nil
}

func (h *pagedHub) RolloutPage(_ context.Context, id, after string, limit int) (fleetwave.Rollout, []fleetwave.Item, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = append(h.asked, fmt.Sprintf("%s %d", after, limit))
	if id != h.rollout.ID {
		return fleetwave.Rollout{}, nil, false, api.ErrNotFound
	}
	start := 0
	if after != "" {
		start = slices.IndexFunc(h.items, func(it fleetwave.Item) bool { return it.ID == after }) + 1
	}
	end := min(start+limit, len(h.items))
	r := h.rollout
	if h.paused {
		r.Status = fleetwave.RolloutPaused
	}
	return r, h.items[start:end], end < len(h.items), nil
}

func (h *pagedHub) takeAsked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.asked
	h.asked = nil
	return a
}

// itemRow is an item's row of the rollout table.
var itemRow = regexp.MustCompile(`(?m)^n\d{4} +app +install +`)

// TestRolloutGetFollowsCursors: rollout get, and the answer of a rollout
// action, show every item of a rollout larger than a page, once and in
// order, reading the largest pages the API gives.
func TestRolloutGetFollowsCursors(t *testing.T) {
	t.Setenv("FLEETWAVE_TOKEN", "")
	t.Setenv("FLEETWAVE_HUB", "")
	const n = 2345
	h := newPagedHub(n)
	srv := httptest.NewServer(api.New(h))
	t.Cleanup(srv.Close)
	cli := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append(args, "--hub", srv.URL), &out, &errb)
		return out.String(), errb.String(), code
	}
	wantAsked := []string{" 1000", "big-g1.1000 1000", "big-g1.2000 1000"}

	out, errb, code := cli("rollout", "get", "big-g1", "-o", "json")
	if code != 0 {
		t.Fatalf("rollout get: exit %d: %s", code, errb)
	}
	var a api.RolloutAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("decode %q: %v", out[:min(len(out), 200)], err)
	}
	var got []string
	for _, it := range a.Items {
		got = append(got, it.ID)
	}
	var want []string
	for _, it := range h.items {
		want = append(want, it.ID)
	}
	if !slices.Equal(got, want) || a.Next != "" || a.Rollout.Counters.Total != n {
		t.Fatalf("rollout get -o json: %d items (next %q, total %d), want all %d once, in order", len(got), a.Next, a.Rollout.Counters.Total, n)
	}
	if asked := h.takeAsked(); !slices.Equal(asked, wantAsked) {
		t.Fatalf("pages asked %q, want %q", asked, wantAsked)
	}

	rows := func(out string) int { return len(itemRow.FindAllString(out, -1)) }
	out, errb, code = cli("rollout", "get", "big-g1")
	if code != 0 || rows(out) != n || !strings.Contains(out, "n0001 ") || !strings.Contains(out, "n2345 ") {
		t.Fatalf("rollout get (table): exit %d, %d item rows, want %d: %s", code, rows(out), n, errb)
	}
	h.takeAsked()

	// an action answers the first page; the CLI reads the rest
	out, errb, code = cli("rollout", "pause", "big-g1", "--token", "op-token")
	if code != 0 || rows(out) != n || !strings.Contains(out, "paused") {
		t.Fatalf("rollout pause: exit %d, %d item rows, want %d and paused: %s", code, rows(out), n, errb)
	}
	wantAction := []string{fmt.Sprintf(" %d", api.DefaultItemPageLimit), "big-g1.500 1000", "big-g1.1500 1000"}
	if asked := h.takeAsked(); !slices.Equal(asked, wantAction) {
		t.Fatalf("pages asked after pause %q, want %q", asked, wantAction)
	}

	if _, errb, code := cli("rollout", "get", "nope"); code != 1 || !strings.Contains(errb, "not_found") {
		t.Fatalf("rollout get of an unknown rollout: exit %d: %s", code, errb)
	}
}
