package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// requirePromtool returns the promtool binary: the test is skipped without
// it, and fails without it under CI (apt-get install prometheus).
func requirePromtool(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found: apt-get install prometheus")
		}
		t.Skip("promtool not found: apt-get install prometheus to run the metrics and alerting rules tests")
	}
	return bin
}

// troubleFleet is four nodes and a db BRC whose install fails for good on
// n1, fails once (transient, then retried) on n2, succeeds on n3, which
// has a maintenance window closed all day but in the evening; n4 has no
// agent. The first failure halts the rollout (failure_threshold 1) and a
// new generation waits out quiescence_seconds.
func troubleFleet() map[string]string {
	files := map[string]string{
		"fleetwave.cue": `kind: "config"
name: "fleetwave"
quiescence_seconds: 2
maintenance_windows: {
	"evening": {cron: "0 20 * * *", duration: "1h", timezone: "UTC"}
}
`,
		"blocks/db.cue": `kind: "block"
name: "db"
actions: {
	install: command: "case $FLEETWAVE_NODE in n1) exit 3;; n2) [ -f tried ] || { touch tried; exit 75; };; esac; echo install >> runs"
	upgrade: command: "echo upgrade >> runs"
}
`,
		"brc/db.cue": `kind: "trigger"
name: "db"
block_name: "db"
target_version: "1"
max_concurrent: 3
failure_threshold: 1
`,
	}
	for _, n := range []string{"n1", "n2", "n4"} {
		files["nodes/"+n+".cue"] = "kind: \"node\"\nname: \"" + n + "\"\n"
	}
	files["nodes/n3.cue"] = "kind: \"node\"\nname: \"n3\"\nmaintenance_windows: [\"evening\"]\n"
	return files
}

// troubleClock starts tomorrow at 06:00 UTC: the evening window stays
// closed, and attempt deadlines (hub time) are in the agents' future.
func troubleClock() *clock.Fake {
	day := time.Now().UTC().AddDate(0, 0, 1)
	return clock.NewFake(time.Date(day.Year(), day.Month(), day.Day(), 6, 0, 0, 0, time.UTC))
}

func troubleConfig(c *hub.Config) {
	c.ReconcileInterval = hub.Duration(200 * time.Millisecond)
	c.LeaseTTL = hub.Duration(time.Hour) // the fake clock jumps: the lease outlives the jumps
	c.Approval = hub.ApprovalConfig{TTL: hub.Duration(time.Minute)}
	c.Identities = []hub.Identity{{Name: "bob", Role: "operator", TokenSHA256: hub.HashToken("tok-bob")}}
}

// advance moves the fake clock by d in steps, letting the hub's loops run.
func advance(clk *clock.Fake, d time.Duration) {
	for step := 2 * time.Second; d > 0; d -= step {
		clk.Advance(min(step, d))
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape is one /metrics page: series (name and labels as printed) to value.
type scrape map[string]float64

func parseScrape(t *testing.T, page string) scrape {
	t.Helper()
	s := scrape{}
	for _, line := range strings.Split(page, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s[line[:i]] = v
	}
	return s
}

// sum adds the series of family name whose labels include every one of
// labels (`status="blocked"`); absent series count 0.
func (s scrape) sum(name string, labels ...string) float64 {
	total := 0.0
	for k, v := range s {
		fam, rest, _ := strings.Cut(k, "{")
		if fam != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(","+strings.TrimSuffix(rest, "}")+",", ","+l+",") {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// waitMetric scrapes until the sum of name{labels} satisfies ok, and
// returns that scrape.
func waitMetric(t *testing.T, addr, what string, ok func(float64) bool, name string, labels ...string) scrape {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := parseScrape(t, httpGet(t, "http://"+addr+"/metrics"))
		if ok(s.sum(name, labels...)) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s{%s} = %v", what, name, strings.Join(labels, ","), s.sum(name, labels...))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func positive(v float64) bool { return v > 0 }
func is(want float64) func(float64) bool {
	return func(v float64) bool { return v == want }
}

// checkMetrics runs `promtool check metrics` on a /metrics page.
func checkMetrics(t *testing.T, promtool, page string) {
	t.Helper()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestMetricsOfATroubledRollout scrapes /metrics of a real hub (real
// redis-server, real git remote, real agents) while a rollout waits out
// its BRC's quiescence, retries an item, holds one for its maintenance
// window, blocks one and halts; then an approval request waits and expires
// and an invalid commit is rejected. Each series of docs/metrics.md this
// touches moves, and every page passes `promtool check metrics`.
func TestMetricsOfATroubledRollout(t *testing.T) {
	promtool := requirePromtool(t)
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	remote := gittest.NewRemote(t, troubleFleet())
	clk := troubleClock()
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3"}, clk, troubleConfig)
	addr, ctx := f.hub.Addr(), context.Background()
	pages := []string{}
	get := func() scrape {
		page := httpGet(t, "http://"+addr+"/metrics")
		pages = append(pages, page)
		return parseScrape(t, page)
	}
	before := get()
	// how long ready goroutines waited for a core (the Go runtime's own
	// histogram, served beside the hub's series)
	if before.sum("go_sched_latencies_seconds_count") <= 0 {
		t.Fatal("go_sched_latencies_seconds is not served")
	}

	// the lease: acquired, its fence, the epoch
	s := waitMetric(t, addr, "the hub leads", is(1), "fleetwave_lease_held")
	for _, name := range []string{"fleetwave_lease_acquired_total", "fleetwave_lease_fence", "fleetwave_lease_epoch", "fleetwave_leader"} {
		if s.sum(name) < 1 {
			t.Fatalf("%s = %v, want >= 1", name, s.sum(name))
		}
	}
	// the Redis pool the hub's calls go through: connections open, and
	// nothing waited for one of them in this small fleet
	if s.sum("fleetwave_redis_pool_connections") < 1 || s.sum("fleetwave_redis_pool_timeouts_total") != 0 {
		t.Fatalf("redis pool: %v connections, %v timeouts; want some and none", s.sum("fleetwave_redis_pool_connections"), s.sum("fleetwave_redis_pool_timeouts_total"))
	}
	// three agents report; n4 has none
	waitMetric(t, addr, "three agents connected", is(3), "fleetwave_agents", `state="connected"`)
	waitMetric(t, addr, "n4 stale", is(1), "fleetwave_agents", `state="stale"`)
	// the first generation waits out quiescence (on the fake clock)
	waitMetric(t, addr, "db waits out its quiescence", is(1), "fleetwave_brcs_waiting", `reason="quiescence"`)
	advance(clk, 3*time.Second)
	waitMetric(t, addr, "the quiescence is over", is(0), "fleetwave_brcs_waiting", `reason="quiescence"`)

	// n1 blocked, n2 retrying (backoff), n3 waiting for its window
	s = waitMetric(t, addr, "n2 retries", is(1), "fleetwave_open_items", `status="retrying"`, `reason="backoff"`)
	s = waitMetric(t, addr, "n3 waits for its window", is(1), "fleetwave_open_items", `status="pending"`, `reason="maintenance_window"`)
	for _, want := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"fleetwave_open_items", []string{`status="blocked"`, `reason="permanent_failure"`}, 1},
		{"fleetwave_open_rollouts", []string{`status="active"`}, 1},
		{"fleetwave_brc_in_flight", []string{`brc="db"`}, 1}, // the retrying item
		{"fleetwave_brc_max_concurrent", []string{`brc="db"`}, 3},
		{"fleetwave_attempt_results_total", []string{`class="permanent"`}, 1},
		{"fleetwave_attempt_results_total", []string{`class="transient"`}, 1},
		{"fleetwave_open_items_truncated", nil, 0},
		{"fleetwave_engine_read_failed", nil, 0},
	} {
		if got := s.sum(want.name, want.labels...); got != want.value {
			t.Fatalf("%s{%s} = %v, want %v", want.name, strings.Join(want.labels, ","), got, want.value)
		}
	}
	get()

	// the backoff passes: n2's retry succeeds, the wave ends, the failure
	// threshold halts the rollout with n3 still waiting
	advance(clk, 11*time.Second)
	f.waitRollout(t, "db-g1", fleetwave.RolloutBlocked)
	s = waitMetric(t, addr, "the rollout is blocked", is(1), "fleetwave_open_rollouts", `status="blocked"`, `reason="failure_threshold"`)
	for _, want := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"fleetwave_retry_results_total", []string{`class="success"`}, 1},
		{"fleetwave_attempt_results_total", []string{`class="success"`}, 1},
		{"fleetwave_open_items", []string{`status="completed"`}, 1},
		{"fleetwave_open_items", []string{`status="pending"`, `reason="maintenance_window"`}, 1},
		{"fleetwave_open_items", []string{`status="retrying"`}, 0},
		{"fleetwave_brc_in_flight", []string{`brc="db"`}, 0},
	} {
		if got := s.sum(want.name, want.labels...); got != want.value {
			t.Fatalf("%s{%s} = %v, want %v", want.name, strings.Join(want.labels, ","), got, want.value)
		}
	}

	// an approval request waits, then expires past its TTL
	if _, err := f.hub.SubmitApproval(ctx, api.Identity{Name: "bob", Role: "operator"},
		hub.ApprovalSubmission{ID: "slow", BRC: "db", TargetVersion: "1", Nodes: []string{"n2"}}); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, addr, "the request waits", is(1), "fleetwave_approvals", `state="pending"`)
	get()
	advance(clk, 61*time.Second)
	waitMetric(t, addr, "the request expired", is(1), "fleetwave_approvals", `state="expired"`)

	// an invalid commit is rejected
	gittest.Push(t, remote, map[string]string{"nodes/n5.cue": "kind: \"node\"\nname: \"n5\"\ncriticality: \"urgent\"\n"}, nil, "Add n5")
	s = waitMetric(t, addr, "the commit is rejected", is(1), "fleetwave_sync_result", `result="rejected"`)
	if s.sum("fleetwave_commits_rejected_total") != 1 || s.sum("fleetwave_sync_result", `result="ok"`) != 0 {
		t.Fatalf("rejected commits %v, sync ok %v", s.sum("fleetwave_commits_rejected_total"), s.sum("fleetwave_sync_result", `result="ok"`))
	}
	waitMetric(t, addr, "a status commit was timed", positive, "fleetwave_status_commit_seconds_count")
	after := get()

	// every counter and histogram moved (the lease's series were checked
	// above: the lease may be taken before the first scrape)
	for _, name := range []string{"fleetwave_dispatch_seconds_count", "fleetwave_status_commit_seconds_count",
		"fleetwave_reconcile_seconds_count", "fleetwave_sync_seconds_count",
		"fleetwave_attempt_results_total", "fleetwave_retry_results_total",
		"fleetwave_status_commits_total", "fleetwave_commits_rejected_total"} {
		if after.sum(name) <= before.sum(name) {
			t.Errorf("%s did not grow: %v -> %v", name, before.sum(name), after.sum(name))
		}
	}
	// each step of a sync that applied a commit was timed (wait only when
	// the watcher, not the poll, saw the commit first: not asserted)
	for _, step := range []string{"fetch", "read", "validate", "generations", "signers", "records", "approvals"} {
		if after.sum("fleetwave_sync_step_seconds_count", `step="`+step+`"`) <= before.sum("fleetwave_sync_step_seconds_count", `step="`+step+`"`) {
			t.Errorf("sync step %s was not timed", step)
		}
	}
	// each step of a status write that landed a commit was timed
	for _, step := range []string{"read", "engine", "rollouts", "summary", "nodes", "fetch", "edit", "encode", "store", "push", "record", "ack"} {
		if after.sum("fleetwave_status_step_seconds_count", `step="`+step+`"`) <= before.sum("fleetwave_status_step_seconds_count", `step="`+step+`"`) {
			t.Errorf("status step %s was not timed", step)
		}
	}
	// each step of a reconcile was timed
	for _, step := range []string{"observe", "drained", "plan", "create", "requests", "approvals"} {
		if after.sum("fleetwave_reconcile_step_seconds_count", `step="`+step+`"`) <= before.sum("fleetwave_reconcile_step_seconds_count", `step="`+step+`"`) {
			t.Errorf("reconcile step %s was not timed", step)
		}
	}
	// no node, rollout, item or attempt id is a label value
	for k := range after {
		for _, id := range []string{`"n1"`, `"n2"`, `"n3"`, `"n4"`, `"db-g1"`, `"db-g1.`, `"slow"`} {
			if strings.Contains(k, id) {
				t.Errorf("series %s has an id as a label value", k)
			}
		}
	}
	for _, page := range pages {
		checkMetrics(t, promtool, page)
	}
	checkDocumented(t, after)
}

// seriesName matches a fleetwave series name in a document or expression.
var seriesName = regexp.MustCompile(`\bfleetwave_[a-z0-9_]+`)

// documented returns the series docs/metrics.md lists (its `fleetwave_...`
// names in backquotes).
func documented(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("`(fleetwave_[a-z0-9_]+)").FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = true
	}
	return out
}

// baseName is a series' family: a histogram's _bucket, _sum and _count are
// its own name.
func baseName(name string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suf); ok && (strings.HasSuffix(b, "_seconds") || strings.HasSuffix(b, "_bytes")) {
			return b
		}
	}
	return name
}

// checkDocumented: docs/metrics.md lists every fleetwave series the hub
// serves, and the dashboard and the alerting rules use documented series
// only.
func checkDocumented(t *testing.T, s scrape) {
	t.Helper()
	doc := documented(t)
	var missing []string
	for k := range s {
		name, _, _ := strings.Cut(k, "{")
		if strings.HasPrefix(name, "fleetwave_") && !doc[baseName(name)] {
			missing = append(missing, baseName(name))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/metrics.md does not list %v", slicesCompact(missing))
	}
	for _, file := range []string{"grafana-dashboard.json", "alerts.yml", "alerts_test.yml"} {
		data, err := os.ReadFile(filepath.Join("..", "docs", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range seriesName.FindAllString(string(data), -1) {
			if !doc[baseName(name)] {
				t.Errorf("docs/%s uses %s, which docs/metrics.md does not list", file, name)
			}
		}
	}
}

func slicesCompact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// TestAlertRules checks docs/alerts.yml with promtool and runs its unit
// tests (docs/alerts_test.yml): each alert fires in its test.
func TestAlertRules(t *testing.T) {
	promtool := requirePromtool(t)
	docs := filepath.Join("..", "docs")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = docs
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// every alert has a unit test
	rules, err := os.ReadFile(filepath.Join(docs, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(docs, "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) == 0 {
		t.Fatal("docs/alerts.yml has no alert")
	}
	for _, a := range alerts {
		if !regexp.MustCompile(`alertname:\s*` + regexp.QuoteMeta(a[1]) + `\b`).Match(tests) {
			t.Errorf("alert %s has no test in docs/alerts_test.yml", a[1])
		}
	}
}

// TestMetricsDashboard: docs/grafana-dashboard.json is a dashboard whose
// panels each query a documented series.
func TestMetricsDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard without title, uid or panels: %+v", dash)
	}
	doc := documented(t)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			rules = append(rules, rule{fmt.Sprintf("dashboard:query%d", len(rules)), strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m")})
			names := seriesName.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q queries no fleetwave series: %s", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !doc[baseName(n)] {
					t.Errorf("panel %q uses %s, which docs/metrics.md does not list", p.Title, n)
				}
			}
		}
	}
	// every query parses: promtool checks them as recording rules (JSON is YAML)
	promtool := requirePromtool(t)
	file := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	b, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}
