package hub

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the hub's Prometheus series, served at /metrics beside the
// API's request metrics.
type metrics struct {
	reg             *prometheus.Registry
	syncSeconds     prometheus.Histogram
	reconcileSecs   prometheus.Histogram
	leader          prometheus.Gauge
	leaseLost       prometheus.Counter
	rejectedCommits prometheus.Counter
	statusCommits   prometheus.Counter
	itemsCreated    prometheus.Counter
	// statusRolloutReads counts rollouts whose items a status write read
	// (finished rollouts are cached).
	statusRolloutReads prometheus.Counter
}

func newMetrics(h *Hub) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetwave_sync_seconds",
			Help: "Time to fetch, validate and apply a new commit.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		reconcileSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetwave_reconcile_seconds",
			Help: "Time to plan the fleet and hand rollouts to the engine.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		leader:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetwave_leader", Help: "1 while this hub holds the leader lease."}),
		leaseLost:       prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_lease_lost_total", Help: "Leader leases lost or expired."}),
		rejectedCommits: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_commits_rejected_total", Help: "Commits rejected as invalid."}),
		statusCommits:   prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_status_commits_total", Help: "Status commits pushed."}),
		itemsCreated:    prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_items_created_total", Help: "Items handed to the engine."}),
		statusRolloutReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetwave_status_rollout_reads_total",
			Help: "Rollouts whose items a status write read (finished rollouts are cached until the outbox names them)."}),
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.syncSeconds, m.reconcileSecs, m.leader, m.leaseLost, m.rejectedCommits, m.statusCommits, m.itemsCreated,
		m.statusRolloutReads, &itemsCollector{h: h})
	return m
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
