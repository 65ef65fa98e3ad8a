package offload

import "github.com/prometheus/client_golang/prometheus"

// The queues' sizes beside their depths (stockpot_kv_offload_queue_depth, metrics.go), so a
// dashboard or an alert reads how full each is, and the promotion and prefetch queues.
var (
	descQueueCapacity = prometheus.NewDesc("stockpot_kv_offload_queue_capacity",
		"Write-backs a tier's queue holds (--tier-queue-blocks); past it later writes are dropped, counted as queue_full.", []string{"tier"}, nil)
	descPromotionDepth = prometheus.NewDesc("stockpot_kv_offload_promotion_queue_depth",
		"Blocks restored from disk or remote waiting to be promoted to the host tier (bounded by the host tier's capacity in bytes).", nil, nil)
	descPrefetchDepth = prometheus.NewDesc("stockpot_kv_prefetch_queue_depth",
		"Prefetches of queued requests waiting for a tier reader (--tier-readers run at once).", nil, nil)
	descPrefetchCapacity = prometheus.NewDesc("stockpot_kv_prefetch_queue_capacity",
		"Prefetches that may wait for a tier reader; past it a prefetch finds nothing and the request computes its prefix.", nil, nil)
)

// queueLimits reports the queues' capacities and the promotion and prefetch queue depths once
// per scrape.
type queueLimits struct {
	w *Writer
	r *restorer
}

func (c queueLimits) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueCapacity, descPromotionDepth, descPrefetchDepth, descPrefetchCapacity} {
		ch <- d
	}
}

func (c queueLimits) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.w.queues {
		ch <- prometheus.MustNewConstMetric(descQueueCapacity, prometheus.GaugeValue, float64(cap(q.ch)), q.t.Tier.String())
	}
	if c.w.promoter != nil {
		n, _ := c.w.promoter.depth()
		ch <- prometheus.MustNewConstMetric(descPromotionDepth, prometheus.GaugeValue, float64(n))
	}
	ch <- prometheus.MustNewConstMetric(descPrefetchDepth, prometheus.GaugeValue, float64(len(c.r.jobs)))
	ch <- prometheus.MustNewConstMetric(descPrefetchCapacity, prometheus.GaugeValue, float64(cap(c.r.jobs)))
}
