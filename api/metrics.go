package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	stale    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fleetwave",
			Subsystem: "http",
			Name:      "requests_total",
			Help:      "HTTP requests served by the API, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "fleetwave",
			Subsystem: "http",
			Name:      "request_duration_seconds",
			Help:      "Time to answer HTTP requests, by route pattern (long polls included).",
			Buckets:   []float64{0.005, 0.025, 0.1, 0.5, 1, 5, 15, 35},
		}, []string{"route"}),
	}
	m.stale = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fleetwave",
		Subsystem: "http",
		Name:      "stale_answers_total",
		Help:      "Reads answered from the last read because the fresh one was slow (the client accepted it: Cache-Control max-stale), by route pattern.",
	}, []string{"route"})
	m.requests = register(reg, m.requests)
	m.stale = register(reg, m.stale)
	m.duration = register(reg, m.duration)
	return m
}

// register registers c, or reuses the collector already registered under the
// same description (New called twice on one registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic("api: register metrics: " + err.Error())
	}
	return c
}

// metricsHandler serves the gatherer's series. A collector that fails is
// logged and left out: the other series are still served, so one broken
// read never blanks a dashboard (the hub's fleetwave_engine_read_failed
// says when its engine read failed).
func (s *server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      scrapeLog{s},
	})
}

// scrapeLog logs the errors of a scrape.
type scrapeLog struct{ s *server }

func (l scrapeLog) Println(v ...any) {
	l.s.log.Warn().Str("error", fmt.Sprint(v...)).Msg("metrics scrape")
}
