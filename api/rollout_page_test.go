package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// bigRollout is a fake hub with rollout big-g1 of n items, big-g1.1 ..
// big-g1.n, its counters those of the n items.
func bigRollout(n int) *fakeHub {
	items := make([]fleetwave.Item, n)
	for i := range items {
		items[i] = fleetwave.Item{ID: fmt.Sprintf("big-g1.%d", i+1), Rollout: "big-g1", Node: fmt.Sprintf("n%d", i+1), Status: fleetwave.ItemPending}
	}
	r := fleetwave.Rollout{ID: "big-g1", Status: fleetwave.RolloutActive, Counters: fleetwave.Counters{Total: int64(n), Pending: int64(n)}}
	return &fakeHub{rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
		if id != r.ID {
			return fleetwave.Rollout{}, nil, api.ErrNotFound
		}
		return r, items, nil
	}}
}

func rolloutAnswer(t *testing.T, a answer) api.RolloutAnswer {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var ra api.RolloutAnswer
	if err := json.Unmarshal([]byte(a.body), &ra); err != nil {
		t.Fatalf("decode %s: %v", a.body, err)
	}
	return ra
}

// TestRolloutPagesItems: GET /api/v1/rollouts/{id} answers a page of
// items (500 by default, limit capped at 1000) with the cursor of the
// next; following the cursors returns every item once, in order; the
// rollout's counters are the whole rollout's on every page.
func TestRolloutPagesItems(t *testing.T) {
	const n = 1203
	h := bigRollout(n)
	srv := newServer(t, h)

	first := rolloutAnswer(t, do(t, srv, request{method: "GET", path: "/api/v1/rollouts/big-g1"}))
	if len(first.Items) != api.DefaultItemPageLimit || first.Items[0].ID != "big-g1.1" || first.Next == "" {
		t.Fatalf("first page: %d items from %v, next %q; want %d from big-g1.1 and a cursor",
			len(first.Items), first.Items[:1], first.Next, api.DefaultItemPageLimit)
	}
	if first.Rollout.Counters.Total != n {
		t.Fatalf("first page counters %+v, want the whole rollout's (total %d)", first.Rollout.Counters, n)
	}
	if capped := rolloutAnswer(t, do(t, srv, request{method: "GET", path: "/api/v1/rollouts/big-g1?limit=5000"})); len(capped.Items) != api.MaxPageLimit {
		t.Fatalf("limit 5000: %d items, want the cap %d", len(capped.Items), api.MaxPageLimit)
	}

	var walked []string
	cursor, pages := "", 0
	for {
		path := "/api/v1/rollouts/big-g1?limit=400"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		a := rolloutAnswer(t, do(t, srv, request{method: "GET", path: path}))
		pages++
		if a.Rollout.Counters.Total != n || len(a.Items) > 400 {
			t.Fatalf("page %d: %d items, counters %+v", pages, len(a.Items), a.Rollout.Counters)
		}
		for _, it := range a.Items {
			walked = append(walked, it.ID)
		}
		if cursor = a.Next; cursor == "" || pages > n {
			break
		}
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("big-g1.%d", i+1)
	}
	if pages != 4 || !slices.Equal(walked, want) {
		t.Fatalf("walk of %d pages returned %d items (first %v); want 4 pages and every item once, in order", pages, len(walked), walked[:min(3, len(walked))])
	}
	// the hub is asked for the page only
	wantAsked := []string{"big-g1  500", "big-g1  1000", "big-g1  400", "big-g1 big-g1.400 400", "big-g1 big-g1.800 400", "big-g1 big-g1.1200 400"}
	if !slices.Equal(h.pages, wantAsked) {
		t.Fatalf("the hub was asked %q, want %q", h.pages, wantAsked)
	}

	// an action answers the first page, with its cursor
	act := rolloutAnswer(t, do(t, srv, request{method: "POST", path: "/api/v1/rollouts/big-g1/pause", token: "tok-op"}))
	if len(act.Items) != api.DefaultItemPageLimit || act.Next != first.Next {
		t.Fatalf("pause answered %d items, next %q; want the first page, next %q", len(act.Items), act.Next, first.Next)
	}
}

func TestRolloutPageRefusesBadQueries(t *testing.T) {
	cursorOf := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name, query, field string
	}{
		{"a limit of zero", "limit=0", "limit"},
		{"a limit that is not a number", "limit=all", "limit"},
		{"a cursor that is not base64", "cursor=%21%21", "cursor"},
		{"a cursor holding a control character", "cursor=" + cursorOf("big-g1.1\n"), "cursor"},
		{"a cursor of another rollout's item", "cursor=" + cursorOf("web-g1.1"), "cursor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := do(t, newServer(t, bigRollout(3)), request{method: "GET", path: "/api/v1/rollouts/big-g1?" + tt.query})
			e := errorOf(t, got)
			if got.status != 400 || e.Code != "invalid_query" || e.Details["field"] != tt.field {
				t.Fatalf("%d %s: want 400 invalid_query naming %s", got.status, got.body, tt.field)
			}
		})
	}
	t.Run("the last page has no cursor and an empty page is a list", func(t *testing.T) {
		srv := newServer(t, bigRollout(3))
		a := rolloutAnswer(t, do(t, srv, request{method: "GET", path: "/api/v1/rollouts/big-g1?limit=3"}))
		if len(a.Items) != 3 || a.Next != "" {
			t.Fatalf("3 of 3 items: %d items, next %q; want 3 and no cursor", len(a.Items), a.Next)
		}
		got := do(t, srv, request{method: "GET", path: "/api/v1/rollouts/big-g1?cursor=" + cursorOf("big-g1.3")})
		if a := rolloutAnswer(t, got); len(a.Items) != 0 || a.Next != "" || !json.Valid([]byte(got.body)) || !containsAll(got.body, `"items":[]`, `"next":""`) {
			t.Fatalf("after the last item: %s; want no items, no cursor", got.body)
		}
	})
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
