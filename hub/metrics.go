package hub

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/internal/laps"
)

// metrics are the hub's Prometheus series, served at /metrics beside the
// API's request metrics. docs/metrics.md lists every series. Labels are
// bounded: statuses, reasons and result classes are engine codes, lanes and
// BRCs come from the repository; node, rollout and attempt ids never are
// labels.
type metrics struct {
	reg               *prometheus.Registry
	syncSeconds       prometheus.Histogram
	syncStepSecs      *prometheus.HistogramVec
	statusStepSecs    *prometheus.HistogramVec
	reconcileSecs     prometheus.Histogram
	reconcileStepSecs *prometheus.HistogramVec
	leader            prometheus.Gauge
	leaseLost         prometheus.Counter
	rejectedCommits   prometheus.Counter
	statusCommits     prometheus.Counter
	itemsCreated      prometheus.Counter
	// statusRolloutReads counts rollouts whose items a status write read
	// (finished rollouts are cached).
	statusRolloutReads prometheus.Counter

	leaseAcquired   prometheus.Counter
	fence           prometheus.Gauge
	statusSeconds   prometheus.Histogram
	dispatchSeconds prometheus.Histogram
	results         *prometheus.CounterVec
	retries         *prometheus.CounterVec
	refused         *prometheus.CounterVec
	unreceived      *prometheus.CounterVec
}

func newMetrics(h *Hub) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetwave_sync_seconds",
			Help: "Time to fetch, validate and apply a new commit.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		syncStepSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetwave_sync_step_seconds",
			Help:    "Time of each step of a sync of a new commit (wait, fetch, read, validate, generations, signers, records, approvals).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"step"}),
		statusStepSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetwave_status_step_seconds",
			Help:    "Time of each step of a status write (read, engine, rollouts, summary, nodes, fetch, edit, encode, store, push, record, ack).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"step"}),
		reconcileSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetwave_reconcile_seconds",
			Help: "Time to plan the fleet and hand rollouts to the engine.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		reconcileStepSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetwave_reconcile_step_seconds",
			Help:    "Time of each step of a reconcile (observe, drained, plan, create, requests, approvals).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"step"}),
		leader:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetwave_leader", Help: "1 while this hub holds the leader lease."}),
		leaseLost:       prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_lease_lost_total", Help: "Leader leases lost or expired."}),
		rejectedCommits: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_commits_rejected_total", Help: "Commits rejected as invalid."}),
		statusCommits:   prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_status_commits_total", Help: "Status commits pushed."}),
		itemsCreated:    prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_items_created_total", Help: "Items handed to the engine."}),
		statusRolloutReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_status_rollout_reads_total",
			Help: "Rollouts whose items a status write read (finished rollouts are cached until the outbox names them)."}),
		leaseAcquired: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_lease_acquired_total", Help: "Leader leases acquired by this hub."}),
		fence:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetwave_lease_fence", Help: "Fencing token of the lease this hub holds (0 when it does not lead)."}),
		statusSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetwave_status_commit_seconds",
			Help: "Time of a status write that landed a commit: reading the engine, building the documents, committing and pushing them.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		dispatchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetwave_dispatch_seconds",
			Help: "Time of one engine step: expire deadlines, start due retries and waves (dispatch).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetwave_attempt_results_total",
			Help: "Attempt results accepted, by result class (success, transient, permanent, lost)."}, []string{"class"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetwave_retry_results_total",
			Help: "Results of retries (an item's second or later attempt) accepted, by result class."}, []string{"class"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetwave_attempt_results_refused_total",
			Help: "Attempt results refused, by cause (stale_attempt, unknown_attempt, wrong_node, invalid_result, error)."}, []string{"cause"}),
		unreceived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetwave_attempts_unreceived_total",
			Help: "Attempts taken for a poll that did not reach the agent, closed at the next step instead of at their deadlines, by reason (client_gone, write_failed: perhaps received, the report decides; agent_said: its next poll said so, retried)."}, []string{"reason"}),
	}
	for _, c := range []fleetwave.ResultClass{fleetwave.ResultSuccess, fleetwave.ResultTransient, fleetwave.ResultPermanent, fleetwave.ResultLost} {
		m.results.WithLabelValues(string(c))
		m.retries.WithLabelValues(string(c))
	}
	for _, c := range []string{"stale_attempt", "unknown_attempt", "wrong_node", "invalid_result", "error"} {
		m.refused.WithLabelValues(c)
	}
	for _, r := range []string{"client_gone", "write_failed", "agent_said"} {
		m.unreceived.WithLabelValues(r)
	}
	// the Go defaults, and how long runnable goroutines waited for a core
	// (go_sched_latencies_seconds): what an API answer waits for when the
	// hub is busy, beside its own work
	goc := collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)}))
	reg.MustRegister(goc, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.syncSeconds, m.syncStepSecs, m.statusStepSecs, m.reconcileSecs, m.reconcileStepSecs, m.leader, m.leaseLost, m.rejectedCommits, m.statusCommits, m.itemsCreated,
		m.statusRolloutReads, &itemsCollector{h: h},
		m.leaseAcquired, m.fence, m.statusSeconds, m.dispatchSeconds, m.results, m.retries, m.refused, m.unreceived,
		&fleetCollector{h: h}, &poolCollector{h: h})
	return m
}

// poolCollector reads the hub's Redis connection pool at scrape time: a
// pool whose calls wait for a connection holds back every Redis call of
// the hub, the leader's included.
type poolCollector struct{ h *Hub }

var (
	poolConnsDesc = prometheus.NewDesc("fleetwave_redis_pool_connections",
		"The hub's pooled Redis connections by state (idle, in_use).", []string{"state"}, nil)
	poolWaitsDesc = prometheus.NewDesc("fleetwave_redis_pool_waits_total",
		"Redis calls of the hub that waited for a free connection of its pool.", nil, nil)
	poolWaitDesc = prometheus.NewDesc("fleetwave_redis_pool_wait_seconds_total",
		"Time the hub's Redis calls waited for a free connection of its pool, summed.", nil, nil)
	poolTimeoutsDesc = prometheus.NewDesc("fleetwave_redis_pool_timeouts_total",
		"Redis calls of the hub that gave up waiting for a connection of its pool.", nil, nil)
	agentWaitsDesc = prometheus.NewDesc("fleetwave_redis_agent_call_waits_total",
		"Redis calls made for agents that waited for one of their share of the pool's connections.", nil, nil)
	agentWaitDesc = prometheus.NewDesc("fleetwave_redis_agent_call_wait_seconds_total",
		"Time the Redis calls made for agents waited for their share of the pool, summed.", nil, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConnsDesc
	ch <- poolWaitsDesc
	ch <- poolWaitDesc
	ch <- poolTimeoutsDesc
	ch <- agentWaitsDesc
	ch <- agentWaitDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.h.eng != nil {
		n, d := c.h.eng.AgentCallWaits()
		ch <- prometheus.MustNewConstMetric(agentWaitsDesc, prometheus.CounterValue, float64(n))
		ch <- prometheus.MustNewConstMetric(agentWaitDesc, prometheus.CounterValue, d.Seconds())
	}
	if c.h.redis == nil {
		return
	}
	pc, ok := c.h.redis.client.(interface{ PoolStats() *redis.PoolStats })
	if !ok {
		return
	}
	st := pc.PoolStats()
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(st.IdleConns), "idle")
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(st.TotalConns-min(st.IdleConns, st.TotalConns)), "in_use")
	ch <- prometheus.MustNewConstMetric(poolWaitsDesc, prometheus.CounterValue, float64(st.WaitCount))
	ch <- prometheus.MustNewConstMetric(poolWaitDesc, prometheus.CounterValue, time.Duration(st.WaitDurationNs).Seconds())
	ch <- prometheus.MustNewConstMetric(poolTimeoutsDesc, prometheus.CounterValue, float64(st.Timeouts))
}

// notReceived counts n attempts that did not reach their agent, for reason.
func (m *metrics) notReceived(reason string, n int) {
	if m != nil {
		m.unreceived.WithLabelValues(reason).Add(float64(n))
	}
}

// syncSteps records the steps of one sync.
func (m *metrics) syncSteps(l *laps.Laps) {
	if m != nil {
		observeSteps(m.syncStepSecs, l)
	}
}

// statusSteps records the steps of one status write.
func (m *metrics) statusSteps(l *laps.Laps) {
	if m != nil {
		observeSteps(m.statusStepSecs, l)
	}
}

// reconcileSteps records the steps of one reconcile.
func (m *metrics) reconcileSteps(l *laps.Laps) {
	if m != nil {
		observeSteps(m.reconcileStepSecs, l)
	}
}

func observeSteps(vec *prometheus.HistogramVec, l *laps.Laps) {
	for _, s := range l.Steps {
		vec.WithLabelValues(s.Name).Observe(s.Took.Seconds())
	}
}

// leaseHeld records that this hub acquired the lease at fence.
func (m *metrics) leaseHeld(fence int64) {
	if m == nil {
		return
	}
	m.leader.Set(1)
	m.leaseAcquired.Inc()
	m.fence.Set(float64(fence))
}

// leaseGone records that this hub lost or gave up its lease.
func (m *metrics) leaseGone() {
	if m == nil {
		return
	}
	m.leader.Set(0)
	m.leaseLost.Inc()
	m.fence.Set(0)
}

// statusCommitted records a status commit that landed, started at start.
func (m *metrics) statusCommitted(start time.Time) {
	if m == nil {
		return
	}
	m.statusCommits.Inc()
	m.statusSeconds.Observe(time.Since(start).Seconds())
}

// dispatchTimer starts timing one engine step; the returned func ends it
// (engineStep defers it).
func (m *metrics) dispatchTimer() func() {
	start := time.Now()
	return func() {
		if m != nil {
			m.dispatchSeconds.Observe(time.Since(start).Seconds())
		}
	}
}

// countResult counts an attempt result by class as the engine answered it
// (err), and returns err: CompleteAttempt wraps its engine call in it.
func (m *metrics) countResult(res fleetwave.AttemptResult, err error) error {
	if m == nil {
		return err
	}
	if err != nil {
		cause := "error"
		switch {
		case errors.Is(err, engine.ErrStaleAttempt):
			cause = "stale_attempt"
		case errors.Is(err, engine.ErrUnknownAttempt):
			cause = "unknown_attempt"
		case errors.Is(err, engine.ErrWrongNode):
			cause = "wrong_node"
		case errors.Is(err, engine.ErrInvalidResult):
			cause = "invalid_result"
		}
		m.refused.WithLabelValues(cause).Inc()
		return err
	}
	class := string(res.Class)
	m.results.WithLabelValues(class).Inc()
	// an attempt id is "<item>.<n>": n > 1 is a retry
	if i := strings.LastIndexByte(res.AttemptID, '.'); i >= 0 {
		if n, perr := strconv.Atoi(res.AttemptID[i+1:]); perr == nil && n > 1 {
			m.retries.WithLabelValues(class).Inc()
		}
	}
	return nil
}

// itemsCollector reads the engine's O(1) counters at scrape time.
type itemsCollector struct{ h *Hub }

var (
	itemsDesc = prometheus.NewDesc("fleetwave_items", "Items by dashboard bucket (done, in_progress, pending, failed, skipped, total).", []string{"bucket"}, nil)
	laneDesc  = prometheus.NewDesc("fleetwave_lane_items", "Queue depth per lane (owner): items pending and in flight.", []string{"lane", "state"}, nil)
	laneCount = prometheus.NewDesc("fleetwave_lane_counters", "Items per lane (owner) by dashboard bucket, over all rollouts.", []string{"lane", "bucket"}, nil)
	outboxLen = prometheus.NewDesc("fleetwave_outbox_events", "Transitions recorded for Git status and not yet delivered.", nil, nil)
	waiting   = prometheus.NewDesc("fleetwave_polls_waiting", "Agents' long polls waiting on this hub for an attempt (they hold no Redis connection).", nil, nil)
)

func (c *itemsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- itemsDesc
	ch <- laneDesc
	ch <- laneCount
	ch <- outboxLen
	ch <- waiting
}

func (c *itemsCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(waiting, prometheus.GaugeValue, float64(c.h.eng.WaitingPolls()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cnt, err := c.h.eng.Counters(ctx)
	if err != nil {
		return
	}
	for bucket, v := range map[string]int64{"total": cnt.Total, "done": cnt.Done, "in_progress": cnt.InProgress,
		"pending": cnt.Pending, "failed": cnt.Failed, "skipped": cnt.Skipped} {
		ch <- prometheus.MustNewConstMetric(itemsDesc, prometheus.GaugeValue, float64(v), bucket)
	}
	if lanes, err := c.h.eng.LaneDepths(ctx); err == nil {
		for lane, d := range lanes {
			ch <- prometheus.MustNewConstMetric(laneDesc, prometheus.GaugeValue, float64(d.Pending), lane, "pending")
			ch <- prometheus.MustNewConstMetric(laneDesc, prometheus.GaugeValue, float64(d.InFlight), lane, "in_flight")
		}
	}
	if lanes, err := c.h.eng.LaneCounters(ctx); err == nil {
		for lane, cnt := range lanes {
			for bucket, v := range map[string]int64{"total": cnt.Total, "done": cnt.Done, "in_progress": cnt.InProgress,
				"pending": cnt.Pending, "failed": cnt.Failed, "skipped": cnt.Skipped} {
				ch <- prometheus.MustNewConstMetric(laneCount, prometheus.GaugeValue, float64(v), lane, bucket)
			}
		}
	}
	if n, err := c.h.eng.OutboxLen(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(outboxLen, prometheus.GaugeValue, float64(n))
	}
}

var (
	openRolloutsDesc = prometheus.NewDesc("fleetwave_open_rollouts",
		"Rollouts with work left (active, paused, blocked) by status and reason (none, failure_threshold, paused, claim, ...).", []string{"status", "reason"}, nil)
	openItemsDesc = prometheus.NewDesc("fleetwave_open_items",
		"Items of the open rollouts by status and reason (pending: wave_gate, lane_full, maintenance_window, node_draining, instance_busy; retrying: backoff; ambiguous: awaiting_report; blocked: why).",
		[]string{"status", "reason"}, nil)
	truncatedDesc = prometheus.NewDesc("fleetwave_open_items_truncated",
		"1 when the open rollouts or their items exceeded the read's bound: fleetwave_open_items is partial.", nil, nil)
	brcInFlightDesc = prometheus.NewDesc("fleetwave_brc_in_flight",
		"Items in flight (in progress, retrying, ambiguous) per BRC and lane over all its rollouts.", []string{"brc", "lane"}, nil)
	brcCapDesc = prometheus.NewDesc("fleetwave_brc_max_concurrent",
		"The BRC's cap of items in flight per lane (its max_concurrent over all its rollouts).", []string{"brc"}, nil)
	epochDesc = prometheus.NewDesc("fleetwave_lease_epoch",
		"The fencing epoch in Redis: the newest fence handed out by any hub.", nil, nil)
	leaseHeldDesc = prometheus.NewDesc("fleetwave_lease_held",
		"1 while some hub holds an unexpired leader lease in Redis.", nil, nil)
	agentsDesc = prometheus.NewDesc("fleetwave_agents",
		"Nodes by agent state: connected (a full report within stale_after) or stale (older, or never reported).", []string{"state"}, nil)
	approvalsDesc = prometheus.NewDesc("fleetwave_approvals",
		"Approval requests by state (pending, approved, consumed, rejected, expired, stale, refused).", []string{"state"}, nil)
	brcsWaitingDesc = prometheus.NewDesc("fleetwave_brcs_waiting",
		"BRCs whose new generation waits outside the engine, by reason (approval_required, quiescence); the leader's view.", []string{"reason"}, nil)
	syncDesc = prometheus.NewDesc("fleetwave_sync_result",
		"1 for the result of the last sync (ok, rejected: the newest commit is invalid, error: fetch failed, none: not synced).", []string{"result"}, nil)
	scrapeErrDesc = prometheus.NewDesc("fleetwave_engine_read_failed",
		"1 when the engine read behind the fleet gauges failed at this scrape (the gauges it feeds are missing).", nil, nil)
)

// fleetCollector reads the engine's gauges (engine.Gauges: open rollouts
// and their items, budgets, lease, reports) and the approvals at scrape
// time, at most once per fleetCacheFor, and the leader's in-memory waits.
type fleetCollector struct {
	h *Hub

	mu   sync.Mutex
	at   time.Time
	g    engine.Gauges
	appr []fleetwave.Approval
	err  error
}

// fleetCacheFor is how long one engine read serves scrapes: several
// Prometheus servers scraping together cost one read.
const fleetCacheFor = 2 * time.Second

var approvalStates = []fleetwave.ApprovalState{fleetwave.ApprovalPending, fleetwave.ApprovalApproved, fleetwave.ApprovalConsumed,
	fleetwave.ApprovalRejected, fleetwave.ApprovalExpired, fleetwave.ApprovalStale, fleetwave.ApprovalRefused}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{openRolloutsDesc, openItemsDesc, truncatedDesc, brcInFlightDesc, brcCapDesc, epochDesc,
		leaseHeldDesc, agentsDesc, approvalsDesc, brcsWaitingDesc, syncDesc, scrapeErrDesc} {
		ch <- d
	}
}

// read returns the cached engine read, renewed when older than fleetCacheFor.
func (c *fleetCollector) read(snap *fleetwave.Snapshot) (engine.Gauges, []fleetwave.Approval, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < fleetCacheFor {
		return c.g, c.appr, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var brcs []string
	if snap != nil {
		for name := range snap.Triggers {
			brcs = append(brcs, name)
		}
	}
	c.g, c.err = c.h.eng.Gauges(ctx, brcs...)
	if c.err == nil {
		c.appr, c.err = c.h.eng.Approvals(ctx)
	}
	c.at = time.Now()
	return c.g, c.appr, c.err
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	h := c.h
	st := h.SyncState()
	result := st.Result
	if result == "" {
		result = "none"
	}
	for _, r := range []string{"ok", "rejected", "error", "none"} {
		gauge(syncDesc, b2f(r == result), r)
	}
	h.mu.Lock()
	waits := map[string]int{fleetwave.ReasonApprovalRequired: 0, fleetwave.ReasonQuiescence: 0}
	for _, w := range mergeWaits(h.quiet, h.gated) {
		waits[reasonLabel(w.Reason)]++
	}
	h.mu.Unlock()
	for r, n := range waits {
		gauge(brcsWaitingDesc, float64(n), r)
	}

	snap := h.Snapshot()
	g, appr, err := c.read(snap)
	gauge(scrapeErrDesc, b2f(err != nil))
	if err != nil {
		return
	}
	for k, n := range merged(g.Rollouts) {
		gauge(openRolloutsDesc, float64(n), k.Status, k.Reason)
	}
	for k, n := range merged(g.Items) {
		gauge(openItemsDesc, float64(n), k.Status, k.Reason)
	}
	gauge(truncatedDesc, b2f(g.Truncated))
	for brc, b := range g.Budgets {
		for lane, n := range b.InFlight {
			gauge(brcInFlightDesc, float64(n), brc, lane)
		}
		if b.Cap > 0 {
			gauge(brcCapDesc, float64(b.Cap), brc)
		}
	}
	gauge(epochDesc, float64(g.Epoch))
	gauge(leaseHeldDesc, b2f(g.LeaseFence > 0))

	now, staleAfter := h.clock.Now(), h.cfg.StaleAfter.D()
	agents := map[string]int{"connected": 0, "stale": 0}
	nodes := map[string]bool{}
	if snap != nil {
		for n := range snap.Nodes {
			nodes[n] = true
		}
	}
	for n := range g.Reports {
		nodes[n] = true
	}
	for n := range nodes {
		if at, ok := g.Reports[n]; ok && now.Sub(at) <= staleAfter {
			agents["connected"]++
		} else {
			agents["stale"]++
		}
	}
	for s, n := range agents {
		gauge(agentsDesc, float64(n), s)
	}
	counts := map[fleetwave.ApprovalState]int{}
	for _, a := range appr {
		counts[a.State]++
	}
	for _, s := range approvalStates {
		gauge(approvalsDesc, float64(counts[s]), string(s))
	}
}

// merged sanitizes the labels of status/reason counts, merging what
// becomes the same label pair.
func merged(in map[engine.StatusReason]int) map[engine.StatusReason]int {
	out := make(map[engine.StatusReason]int, len(in))
	for k, n := range in {
		out[engine.StatusReason{Status: reasonLabel(k.Status), Reason: reasonLabel(k.Reason)}] += n
	}
	return out
}

// labelCode is what a status or reason label may hold: an engine code.
var labelCode = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// reasonLabel bounds a status or reason label: an engine code as is, ""
// as "none", anything else (free text) as "other".
func reasonLabel(s string) string {
	switch {
	case s == "":
		return "none"
	case labelCode.MatchString(s):
		return s
	}
	return "other"
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
