package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of a Gauges read: it looks at the newest GaugeRollouts rollouts
// and the GaugeRollouts oldest active ones (a paused or blocked rollout
// older than the newest GaugeRollouts is not seen), and at most GaugeItems
// items of rollouts an older build created (it did not count them), so a
// scrape stays cheap however long the history grows.
// Gauges.Truncated says when the active rollouts or the items exceeded
// their bound.
const (
	GaugeRollouts = 1000
	GaugeItems    = 100_000
)

// StatusReason is a status and the reason that goes with it ("" when none).
type StatusReason struct{ Status, Reason string }

// BudgetGauge is a budget (a BRC) at one point in time: the items in flight
// per lane over every rollout sharing it, and its cap (budget_cap, per lane).
type BudgetGauge struct {
	Cap      int
	InFlight map[string]int
}

// Gauges is a point-in-time read of what dashboards and alerts need from
// the engine, made of a few pipelined reads (no script, nothing written).
type Gauges struct {
	// Rollouts counts the open rollouts (active, paused, blocked) by
	// status and reason.
	Rollouts map[StatusReason]int
	// Items counts the items of the open rollouts by status and reason
	// (pending items say why they wait: wave_gate, lane_full,
	// maintenance_window, node_draining, instance_busy; retrying ones
	// backoff; blocked ones why they stopped).
	Items map[StatusReason]int
	// Budgets are the budgets of the open rollouts and those asked for,
	// by name.
	Budgets map[string]BudgetGauge
	// Epoch is the fencing counter; LeaseFence the fence of the lease when
	// one is held and not expired (0 otherwise).
	Epoch, LeaseFence int64
	// Reports is when each observed node's last full report arrived (the
	// hub's receive time, else the agent's send time).
	Reports map[string]time.Time
	// Truncated: a bound (GaugeRollouts, GaugeItems) cut the read.
	Truncated bool
}

// openStatus are the rollout statuses with work left.
var openStatus = map[string]bool{"active": true, "paused": true, "blocked": true}

// Gauges reads the open rollouts and their items, the budgets (those of the
// open rollouts and budgets), the lease and when each node last reported.
// It costs O(open rollouts + nodes), within the bounds above, in five
// pipelined round trips (the scripts count each rollout's items by status
// and reason as they write them), and the nodes' reports of
// ObservationsShared (read again only where they changed).
func (e *Engine) Gauges(ctx context.Context, budgets ...string) (Gauges, error) {
	g := Gauges{Rollouts: map[StatusReason]int{}, Items: map[StatusReason]int{}, Budgets: map[string]BudgetGauge{}, Reports: map[string]time.Time{}}

	pipe := e.rdb.Pipeline()
	active := pipe.ZRange(ctx, e.key("active"), 0, GaugeRollouts-1)
	recent := pipe.ZRevRange(ctx, e.key("rollouts"), 0, GaugeRollouts-1)
	nActive := pipe.ZCard(ctx, e.key("active"))
	epoch := pipe.Get(ctx, e.keys[0])
	lease := pipe.HMGet(ctx, e.keys[1], "fence", "expires_at")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return g, fmt.Errorf("read gauges: %w", err)
	}
	g.Epoch, _ = epoch.Int64()
	if v := lease.Val(); len(v) == 2 && atoi(asString(v[1])) > e.nowMS() {
		g.LeaseFence = atoi(asString(v[0]))
	}
	// the reports the Engine keeps, read again only where they changed: at
	// 100,000 nodes, reading and decoding every one for each scrape (one
	// HGETALL of tens of MB, which holds Redis meanwhile) took seconds
	obs, err := e.ObservationsShared(ctx)
	if err != nil {
		return g, fmt.Errorf("read gauges: %w", err)
	}
	for node, r := range obs {
		at := r.ReceivedAt
		if at.IsZero() {
			at = r.SentAt
		}
		g.Reports[node] = at
	}
	g.Truncated = nActive.Val() > GaugeRollouts
	ids := recent.Val()
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		seen[id] = true
	}
	for _, id := range active.Val() {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}

	// the rollout records: which are open, and their budgets
	pipe = e.rdb.Pipeline()
	recs := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		recs[i] = pipe.HMGet(ctx, e.key("r", id), "status", "reason", "budget", "budget_cap", "isr")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return g, fmt.Errorf("read rollouts: %w", err)
	}
	var counted, uncounted []string // open rollouts, with and without the scripts' counts
	names := map[string]bool{}
	for _, b := range budgets {
		if b != "" {
			names[b] = true
		}
	}
	for i, c := range recs {
		v := c.Val()
		if len(v) != 5 || !openStatus[asString(v[0])] {
			continue
		}
		if asString(v[4]) == "1" {
			counted = append(counted, ids[i])
		} else {
			uncounted = append(uncounted, ids[i])
		}
		g.Rollouts[StatusReason{asString(v[0]), asString(v[1])}]++
		if b := asString(v[2]); b != "" {
			names[b] = true
		}
	}

	// their items (counted by the scripts, or read one by one for a
	// rollout an older build created), and the rollouts sharing each budget
	pipe = e.rdb.Pipeline()
	sums := make([]*redis.MapStringStringCmd, len(counted))
	for i, id := range counted {
		sums[i] = pipe.HGetAll(ctx, e.key("isr", id))
	}
	lists := make([]*redis.StringSliceCmd, len(uncounted))
	for i, id := range uncounted {
		lists[i] = pipe.LRange(ctx, e.key("r", id)+":items", 0, GaugeItems)
	}
	bnames := make([]string, 0, len(names))
	for b := range names {
		bnames = append(bnames, b)
	}
	sort.Strings(bnames)
	members := make([]*redis.StringSliceCmd, len(bnames))
	for i, b := range bnames {
		members[i] = pipe.SMembers(ctx, e.key("bud", b))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return g, fmt.Errorf("read items: %w", err)
	}
	for _, c := range sums {
		for k, n := range c.Val() {
			status, reason, _ := strings.Cut(k, "\n")
			if n := int(atoi(n)); n != 0 {
				g.Items[StatusReason{status, reason}] += n
			}
		}
	}

	pipe = e.rdb.Pipeline()
	var items []*redis.SliceCmd
	for _, l := range lists {
		for _, id := range l.Val() {
			if len(items) == GaugeItems {
				g.Truncated = true
				break
			}
			items = append(items, pipe.HMGet(ctx, e.key("i", id), "status", "reason"))
		}
	}
	type member struct {
		budget, rollout string
		lanes           *redis.StringSliceCmd
		cap             *redis.StringCmd
	}
	var mem []member
	for i, b := range bnames {
		for _, rid := range members[i].Val() {
			mem = append(mem, member{budget: b, rollout: rid,
				lanes: pipe.HKeys(ctx, e.key("r", rid, "lanes")), cap: pipe.HGet(ctx, e.key("r", rid), "budget_cap")})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return g, fmt.Errorf("read item states: %w", err)
	}
	for _, c := range items {
		v := c.Val()
		if len(v) != 2 || v[0] == nil {
			continue
		}
		g.Items[StatusReason{asString(v[0]), asString(v[1])}]++
	}

	// the items in flight of each budget's rollouts, per lane
	pipe = e.rdb.Pipeline()
	type flight struct {
		budget, lane string
		n            *redis.IntCmd
	}
	var fl []flight
	for _, b := range bnames {
		g.Budgets[b] = BudgetGauge{InFlight: map[string]int{}}
	}
	for _, m := range mem {
		bg := g.Budgets[m.budget]
		bg.Cap = max(bg.Cap, int(atoi(m.cap.Val())))
		g.Budgets[m.budget] = bg
		for _, lane := range m.lanes.Val() {
			bg.InFlight[lane] += 0 // a lane of the budget shows, even idle
			fl = append(fl, flight{m.budget, lane, pipe.SCard(ctx, e.key("r", m.rollout, "f", lane))})
		}
	}
	if len(fl) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return g, fmt.Errorf("read budgets: %w", err)
		}
	}
	for _, f := range fl {
		g.Budgets[f.budget].InFlight[f.lane] += int(f.n.Val())
	}
	return g, nil
}
