package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetwave/fleetwave"
)

// TestProbeWritesEveryReadAsALine runs Probe against a real HTTP server
// whose summary fails the reads that do not accept a stale answer (the
// console's do: Cache-Control max-stale), and whose rollout page is not
// found for its first three reads (the rollout is not created yet) and
// once more later: each read is one JSON line, except the reads of the
// page before it was first found; a failed read is counted as an error
// (not as a latency) of its own path, the 404 after the page was found
// among them; the rollout's status is the one its page said last; and
// the reads counted are those from the moment countFrom gives.
func TestProbeWritesEveryReadAsALine(t *testing.T) {
	var pages atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/summary":
			if r.Header.Get("Cache-Control") != "max-stale=2" {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte(`{}`))
		case "/api/v1/rollouts/web g1":
			n := pages.Add(1)
			if n <= 3 || n == 6 {
				http.NotFound(w, r)
				return
			}
			status := "running"
			if n >= 7 {
				status = "completed"
			}
			_, _ = w.Write([]byte(`{"rollout":{"status":"` + status + `"}}`))
		case "/healthz":
			_, _ = w.Write([]byte("ok\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	var out bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Probe(ctx, srv.URL, "web g1", 5*time.Millisecond, &out) }()
	deadline := time.Now().Add(30 * time.Second)
	// the server sees the 13th page read once the 12th is written
	for pages.Load() < 13 {
		if time.Now().After(deadline) {
			t.Fatalf("probe read the page %d times in 30s", pages.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("probe ended with %v, want nil once cancelled", err)
	}

	var ps probeSamples
	ps.read(strings.NewReader(out.String() + "not json\n"))
	lines := strings.Count(out.String(), "\n")
	if ps.lines != lines+1 || ps.malformed != 1 {
		t.Fatalf("%d lines read, %d malformed; want %d and 1", ps.lines, ps.malformed, lines+1)
	}
	sum, sumPlain := ps.latency("summary"), ps.latency("summary-plain")
	page, pagePlain := ps.latency("rollout"), ps.latency("rollout-plain")
	healthz := ps.latency("healthz")
	if n := sum.N + sum.Errors + sumPlain.N + sumPlain.Errors + page.N + page.Errors + pagePlain.N + pagePlain.Errors + healthz.N + healthz.Errors; n != lines {
		t.Fatalf("%d reads counted, not the %d lines", n, lines)
	}
	if sum.Errors != 0 || sum.N < 3 || sumPlain.N != 0 || sumPlain.Errors < 3 {
		t.Fatalf("summary %+v, plain %+v: want the console's reads answered, the plain ones failed", sum, sumPlain)
	}
	// the baseline is read once a round, from the first, beside the rest
	if healthz.Errors != 0 || healthz.N < sum.N/2 || healthz.P50 <= 0 {
		t.Fatalf("healthz %+v: want a read a round (summary %+v), each answered with a latency", healthz, sum)
	}
	if page.Errors+pagePlain.Errors != 1 {
		t.Fatalf("page %+v, plain %+v: want one error, the 404 after the page was found (none before)", page, pagePlain)
	}
	for _, l := range []Latency{page, pagePlain} {
		if l.N < 3 || l.P50 <= 0 {
			t.Fatalf("page %+v: want at least 3 answered reads with a latency, as the console and plain", l)
		}
	}
	if st := ps.state(); st != fleetwave.RolloutCompleted {
		t.Fatalf("last status %q, want completed", st)
	}

	// counted from the start of the 5th line's read: the four before
	// are not, errors included
	var from ProbeSample
	if err := json.Unmarshal([]byte(strings.Split(out.String(), "\n")[4]), &from); err != nil {
		t.Fatal(err)
	}
	var later probeSamples
	later.countFrom(from.At)
	later.read(strings.NewReader(out.String()))
	counted := 0
	for _, p := range probePaths {
		l := later.latency(p)
		counted += l.N + l.Errors
	}
	if counted != lines-4 {
		t.Fatalf("%d reads counted from the 5th line's, want %d of %d", counted, lines-4, lines)
	}
}

// TestScrapeHistogramsByRoute serves a real Prometheus registry: a
// histogram is picked by its labels (a route holding spaces and braces),
// the difference of two scrapes holds only what came between, and within
// is the share at most a bucket's bound.
func TestScrapeHistogramsByRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetwave_http_request_duration_seconds",
		Buckets: []float64{0.025, 0.1, 0.5}}, []string{"route"})
	plain := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetwave_sync_seconds", Buckets: []float64{1, 2}})
	reg.MustRegister(vec, plain)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	page := vec.WithLabelValues("GET /api/v1/rollouts/{id}")
	page.Observe(0.3) // before the first scrape: not counted
	vec.WithLabelValues("GET /api/v1/summary").Observe(0.9)
	plain.Observe(1.5)

	names := append([]string{"fleetwave_sync_seconds"}, apiRoutes...)
	h0, err := scrapeHistograms(srv.URL, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []float64{0.01, 0.05, 0.08, 0.2} {
		page.Observe(d)
	}
	h1, err := scrapeHistograms(srv.URL, names...)
	if err != nil {
		t.Fatal(err)
	}
	if got := h1["fleetwave_sync_seconds"]; got.Count != 1 || got.Sum != 1.5 || got.Buckets[2] != 1 || got.Buckets[1] != 0 {
		t.Fatalf("plain histogram %+v", got)
	}
	if got := h1[apiRoutes[0]]; got.Count != 1 || got.within(0.1) != 0 {
		t.Fatalf("summary's histogram %+v (within 100 ms %v)", got, got.within(0.1))
	}
	d := h1[apiRoutes[1]].minus(h0[apiRoutes[1]])
	if d.Count != 4 || d.within(0.1) != 0.75 || d.within(0.025) != 0.25 {
		t.Fatalf("page's histogram between the scrapes %+v: within 100 ms %v, want 4 observations, 0.75", d, d.within(0.1))
	}
	if v := d.within(0.2); !math.IsNaN(v) {
		t.Fatalf("within a bound without a bucket: %v, want NaN", v)
	}
	// the largest observation's bucket bound, or (above every bucket) the
	// largest bound, which the report prints as "> bound", a miss
	if got := d.Max(); got != 500*time.Millisecond {
		t.Fatalf("max of the page's observations between the scrapes: %v, want the 500 ms bucket (0.2 s)", got)
	}
	plain.Observe(7)
	h2, err := scrapeHistograms(srv.URL, names...)
	if err != nil {
		t.Fatal(err)
	}
	slow := h2["fleetwave_sync_seconds"].Max()
	row := Row{Values: []float64{slow.Seconds()}, Unit: unitDuration, Target: 3, HasTarget: true}
	if slow != -2*time.Second || row.format(row.Values[0]) != "> 2.00 s" || row.Met(0) {
		t.Fatalf("a 7 s observation above buckets of 1 and 2 s: max %v, printed %q, met %v; want > 2.00 s, missed", slow, row.format(row.Values[0]), row.Met(0))
	}
}

// TestScrapeStepMeans: each step's mean comes from its own series of the
// step label, a step the hub never timed is left out, and another
// histogram with the same label does not mix in.
func TestScrapeStepMeans(t *testing.T) {
	reg := prometheus.NewRegistry()
	status := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetwave_status_step_seconds",
		Buckets: []float64{0.1, 1}}, []string{"step"})
	sync := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetwave_sync_step_seconds",
		Buckets: []float64{0.1, 1}}, []string{"step"})
	reg.MustRegister(status, sync)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	status.WithLabelValues("nodes").Observe(0.5)
	status.WithLabelValues("nodes").Observe(1.5)
	status.WithLabelValues("push").Observe(0.25)
	sync.WithLabelValues("push").Observe(9)

	hs, err := scrapeHistograms(srv.URL, stepKeys("fleetwave_status_step_seconds", statusStepNames)...)
	if err != nil {
		t.Fatal(err)
	}
	got := stepMeans(hs, "fleetwave_status_step_seconds", statusStepNames)
	want := map[string]time.Duration{"nodes": time.Second, "push": 250 * time.Millisecond}
	if !maps.Equal(got, want) {
		t.Fatalf("step means %v, want %v", got, want)
	}
}

// TestSlowestStatusIsTheHubsLoggedWrite reads a hub log: the slowest
// status write is the largest took_ms of its "status committed" lines,
// whatever their level; other lines (another message with a took_ms, a
// line that is not JSON) are not counted. A log without such a line
// gives none, and the report falls back to the histogram's bound.
func TestSlowestStatusIsTheHubsLoggedWrite(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "hub.log")
	lines := []string{
		`{"level":"warn","component":"hub","took_ms":9000,"message":"push planned"}`,
		`{"level":"warn","component":"hub","commit":"abc","took_ms":2849,"message":"status committed"}`,
		`not json "message":"status committed" "took_ms":99999`,
		`{"level":"info","component":"hub","commit":"def","took_ms":412,"message":"status committed"}`,
		`{"level":"warn","component":"hub","commit":"123","took_ms":1253,"message":"status committed"}`,
	}
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, ok, err := slowestStatus(log)
	if err != nil || !ok || got != 2849*time.Millisecond {
		t.Fatalf("slowest status write %v (found %v, %v), want 2.849s", got, ok, err)
	}
	r := Result{StatusMax: 5120 * time.Millisecond, StatusSlowest: got}
	if r.slowestStatus() != got {
		t.Errorf("report's max %v, want the logged %v", r.slowestStatus(), got)
	}

	if err := os.WriteFile(log, []byte(lines[0]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := slowestStatus(log); err != nil || ok || got != 0 {
		t.Fatalf("log without a status write: %v (found %v, %v), want none", got, ok, err)
	}
	if r := (Result{StatusMax: 640 * time.Millisecond}); r.slowestStatus() != 640*time.Millisecond {
		t.Errorf("report's max without a logged write %v, want the bucket bound 640ms", r.slowestStatus())
	}
}

// TestScrapeSumsAddsASeriesLabels serves a real Prometheus registry: a
// counter is read as the sum of its series whatever their labels, a
// series asked for and not served is 0, and others are left out.
func TestScrapeSumsAddsASeriesLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	waits := prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_redis_pool_waits_total"})
	conns := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleetwave_redis_pool_connections"}, []string{"state"})
	reg.MustRegister(waits, conns)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	waits.Add(7)
	conns.WithLabelValues("idle").Set(3)
	conns.WithLabelValues("in_use").Set(2)

	got, err := scrapeSums(srv.URL, "fleetwave_redis_pool_waits_total", "fleetwave_redis_pool_connections", "fleetwave_redis_agent_call_waits_total")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"fleetwave_redis_pool_waits_total": 7, "fleetwave_redis_pool_connections": 5}
	if !maps.Equal(got, want) {
		t.Fatalf("sums %v, want %v", got, want)
	}
}
