package router

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's own series (see doc.go for the list).
type metrics struct {
	requests  *prometheus.CounterVec   // backend, code
	decisions *prometheus.CounterVec   // policy, backend, reason
	load      prometheus.Histogram     // chosen backend's in-flight count at decision
	predicted *prometheus.CounterVec   // backend
	cached    *prometheus.CounterVec   // backend
	prompt    *prometheus.CounterVec   // backend
	predHist  prometheus.Histogram     // predicted matched tokens per request
	cacheHist prometheus.Histogram     // actual cached tokens per request
	retries   *prometheus.CounterVec   // reason
	failed    prometheus.Counter       // requests that failed on every backend
	overhead  prometheus.Histogram     // router time before the upstream request went out
	tokenize  *prometheus.HistogramVec // outcome

	streamFailures *prometheus.CounterVec // backend, reason: streams cut after their first byte
	unauthorized   *prometheus.CounterVec // scope: client, admin, metrics
	connections    prometheus.Gauge       // open client connections
	connWaits      prometheus.Counter     // accepts that waited for a free connection slot
	ejections      *prometheus.CounterVec // backend: passive-health ejections (outlier.go)
}

var tokenBuckets = prometheus.ExponentialBuckets(16, 2, 14) // 16 .. 131072 tokens

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_requests_total",
			Help: "Proxied requests by backend and final HTTP status."}, []string{"backend", "code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_decisions_total",
			Help: "Routing decisions by policy, chosen backend and reason."}, []string{"policy", "backend", "reason"}),
		load: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stockpot_router_decision_backend_load",
			Help: "In-flight requests on the chosen backend when it was chosen.", Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128}}),
		predicted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_predicted_tokens_total",
			Help: "Prompt tokens the policy predicted the chosen backend holds (kv-aware)."}, []string{"backend"}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_cached_tokens_total",
			Help: "usage.prompt_tokens_details.cached_tokens reported by backends."}, []string{"backend"}),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_prompt_tokens_total",
			Help: "usage.prompt_tokens reported by backends."}, []string{"backend"}),
		predHist: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stockpot_router_predicted_matched_tokens",
			Help: "Predicted matched prompt tokens per decision.", Buckets: tokenBuckets}),
		cacheHist: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stockpot_router_actual_cached_tokens",
			Help: "Actual cached prompt tokens per request, from the backend's usage.", Buckets: tokenBuckets}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_retries_total",
			Help: "Attempts retried on another backend, by reason (connect, 5xx)."}, []string{"reason"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "stockpot_router_failed_requests_total",
			Help: "Requests that failed on every backend tried."}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stockpot_router_overhead_seconds",
			Help:    "Time from receiving a request to sending it upstream (body read, tokenize, decision).",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 16)}),
		tokenize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stockpot_router_tokenize_seconds",
			Help: "Time spent tokenizing prompts on a backend for the policy.", Buckets: prometheus.ExponentialBuckets(5e-5, 2, 14)}, []string{"outcome"}),
		streamFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_stream_failures_total",
			Help: "Streams cut after their first byte reached the client (cannot be retried), by backend and reason (cut, incomplete)."},
			[]string{"backend", "reason"}),
		unauthorized: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_unauthorized_total",
			Help: "Requests refused for a missing or wrong key, by scope (client, admin, metrics)."}, []string{"scope"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stockpot_router_connections",
			Help: "Client connections open on the router (see --max-connections)."}),
		connWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "stockpot_router_connection_waits_total",
			Help: "Times the router stopped accepting because --max-connections were open."}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_backend_ejections_total",
			Help: "Backends ejected by passive health (--outlier-failures failed requests in a row, or a failed probe), by backend."},
			[]string{"backend"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.decisions, m.load, m.predicted, m.cached, m.prompt, m.predHist, m.cacheHist,
			m.retries, m.failed, m.overhead, m.tokenize, m.streamFailures, m.unauthorized, m.connections, m.connWaits, m.ejections)
	}
	return m
}

// backendCollector reports per-backend state at scrape time (no goroutine,
// no per-request cost).
type backendCollector struct {
	r                                                      *Router
	up, inflight, blocks, lag, resyncs, gaps, restarts, ev *prometheus.Desc
	garbage, remote, ejected                               *prometheus.Desc
}

func newBackendCollector(r *Router) *backendCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"backend", "url"}, nil)
	}
	return &backendCollector{r: r,
		up:       d("stockpot_router_backend_up", "1 when the backend passes health checks."),
		inflight: d("stockpot_router_backend_inflight", "Requests in flight on the backend through this router."),
		blocks:   d("stockpot_router_index_blocks", "Blocks in the router's index for the backend."),
		lag:      d("stockpot_router_event_lag_seconds", "Age of the last applied block event when it was applied."),
		resyncs:  d("stockpot_router_resyncs_total", "Snapshots loaded from the backend (initial one included)."),
		gaps:     d("stockpot_router_event_gaps_total", "Sequence gaps detected in the backend's event stream."),
		restarts: d("stockpot_router_replica_restarts_total", "Epoch changes (backend restarts) seen on the event stream."),
		ev:       d("stockpot_router_events_total", "Block events applied from the backend."),
		garbage:  d("stockpot_router_event_garbage_total", "Streams or snapshots from the backend that did not parse; each dropped its index until a clean resync."),
		ejected: prometheus.NewDesc("stockpot_router_backends_ejected",
			"Backends out by passive health now (ejected, half-open or probing).", nil, nil),
		remote: prometheus.NewDesc("stockpot_router_remote_index_blocks",
			"Blocks of the shared remote tier the router knows of, from every replica's announcements (kept after their writer is gone).", nil, nil),
	}
}

func (c *backendCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.inflight, c.blocks, c.lag, c.resyncs, c.gaps, c.restarts, c.ev, c.garbage, c.remote, c.ejected} {
		ch <- d
	}
}

func (c *backendCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.r.backends() {
		l := []string{b.ID, b.URL.String()}
		up := 0.0
		if b.Healthy() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, l...)
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(b.Load()), l...)
		ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(b.index.Len()), l...)
		if b.events != nil {
			s := b.events.Stats()
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, s.Lag.Seconds(), l...)
			ch <- prometheus.MustNewConstMetric(c.resyncs, prometheus.CounterValue, float64(s.Resyncs), l...)
			ch <- prometheus.MustNewConstMetric(c.gaps, prometheus.CounterValue, float64(s.Gaps), l...)
			ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(s.Restarts), l...)
			ch <- prometheus.MustNewConstMetric(c.ev, prometheus.CounterValue, float64(s.Events), l...)
			ch <- prometheus.MustNewConstMetric(c.garbage, prometheus.CounterValue, float64(s.Garbage), l...)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.remote, prometheus.GaugeValue, float64(c.r.remote.Len()))
	ch <- prometheus.MustNewConstMetric(c.ejected, prometheus.GaugeValue, float64(c.r.outliers.ejectedCount()))
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }
