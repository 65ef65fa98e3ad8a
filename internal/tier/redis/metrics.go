package redis

import "github.com/prometheus/client_golang/prometheus"

// The store is a prometheus.Collector of its breakers' counters (BreakerStats), read once per
// scrape: register it with the registry that serves /metrics (reg.Register(store)).
var _ prometheus.Collector = (*Store)(nil)

var (
	descBreakerOpen = prometheus.NewDesc("stockpot_kv_remote_breaker_open",
		"Remote-tier circuit breakers open now (the store's, and on a Redis Cluster one per master).", nil, nil)
	descBreakerOpens = prometheus.NewDesc("stockpot_kv_remote_breaker_opens_total",
		"Times a remote-tier circuit breaker opened.", nil, nil)
	descBreakerRecoveries = prometheus.NewDesc("stockpot_kv_remote_breaker_recoveries_total",
		"Times a remote-tier circuit breaker closed again after a probe succeeded.", nil, nil)
	descFailedCalls = prometheus.NewDesc("stockpot_kv_remote_failed_calls_total",
		"Remote-tier calls that failed (on a cluster, each master's share of a batch).", nil, nil)
	descSkippedKeys = prometheus.NewDesc("stockpot_kv_remote_skipped_keys_total",
		"Keys of Redis Cluster batches left unanswered because their master failed or its breaker was open.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBreakerOpen, descBreakerOpens, descBreakerRecoveries, descFailedCalls, descSkippedKeys} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	st := s.BreakerStats()
	ch <- prometheus.MustNewConstMetric(descBreakerOpen, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(descBreakerOpens, prometheus.CounterValue, float64(st.Opens))
	ch <- prometheus.MustNewConstMetric(descBreakerRecoveries, prometheus.CounterValue, float64(st.Recoveries))
	ch <- prometheus.MustNewConstMetric(descFailedCalls, prometheus.CounterValue, float64(st.FailedCalls))
	ch <- prometheus.MustNewConstMetric(descSkippedKeys, prometheus.CounterValue, float64(st.SkippedKeys))
}
