package offload

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// TierStore is one store below the device, and which tier it is (one of
// kvtier.Below; its String is the {tier} label of the metrics).
type TierStore struct {
	Tier  kvtier.Tier
	Store tier.Store
}

// TierStats returns the rows the server's collector adds to
// stockpot_kv_cache_usage_bytes, _capacity_bytes and _evictions_total
// (beside its own tier="device" row). See the package doc.
func TierStats(tiers []TierStore) []kvtier.Stat {
	out := make([]kvtier.Stat, len(tiers))
	for i, t := range tiers {
		st := t.Store.Stats()
		out[i] = kvtier.Stat{Tier: t.Tier, UsedBytes: st.UsedBytes, CapacityBytes: st.CapacityBytes, Evictions: st.Evictions, Items: st.Items}
	}
	return out
}

// Metrics holds the offload metrics. A nil *Metrics records nothing, so
// components work without one.
type Metrics struct {
	read      *prometheus.HistogramVec
	write     *prometheus.HistogramVec
	discarded *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	failures  *prometheus.CounterVec
	readBytes *prometheus.CounterVec
	stall     prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg:
// stockpot_kv_offload_read_seconds{tier}, stockpot_kv_offload_write_seconds{tier},
// stockpot_kv_blocks_discarded_total{reason}, stockpot_kv_offload_dropped_writes_total{tier},
// stockpot_kv_tier_write_failures_total{tier,reason}, stockpot_kv_tier_read_bytes_total{tier},
// stockpot_kv_restore_stall_seconds_total.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	// 50 µs (a host-RAM batch) to ~3 s (a remote read that timed out).
	buckets := prometheus.ExponentialBuckets(50e-6, 4, 9)
	m := &Metrics{
		read: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockpot_kv_offload_read_seconds", Help: "Time of one batched read from an offload tier.", Buckets: buckets,
		}, []string{"tier"}),
		write: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockpot_kv_offload_write_seconds", Help: "Time of one batched write-back to an offload tier.", Buckets: buckets,
		}, []string{"tier"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_kv_blocks_discarded_total", Help: "Blocks found in a tier but not used, by reason.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_kv_offload_dropped_writes_total", Help: "Write-backs dropped because a tier's queue was full.",
		}, []string{"tier"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_kv_tier_write_failures_total",
			Help: "Write-backs that did not reach a tier, by tier and reason (queue_full, no_space, too_large, timeout, unavailable, io_error).",
		}, []string{"tier", "reason"}),
		readBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_kv_tier_read_bytes_total",
			Help: "Bytes of records read from an offload tier by restores (the values its batched reads returned, before verification).",
		}, []string{"tier"}),
		stall: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockpot_kv_restore_stall_seconds_total", Help: "Time requests waited on restores.",
		}),
	}
	for _, c := range []prometheus.Collector{m.read, m.write, m.discarded, m.dropped, m.failures, m.readBytes, m.stall} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every reason reads 0 from the start, so a dashboard's rate() has a series.
	for _, r := range []string{tier.ReasonChecksum, tier.ReasonIdentity, tier.ReasonIncompleteState, tier.ReasonSlowerThanRecompute, tier.ReasonForged, ReasonAfterBreak} {
		m.discarded.WithLabelValues(r)
	}
	return m, nil
}

// ObserveRead records one batched read from tier.
func (m *Metrics) ObserveRead(tier string, d time.Duration) {
	if m != nil {
		m.read.WithLabelValues(tier).Observe(d.Seconds())
	}
}

// ReadBytes counts n bytes read from tier (stockpot_kv_tier_read_bytes_total). n 0 makes the
// tier's series read 0 (NewFetcher does it for every tier it reads).
func (m *Metrics) ReadBytes(tier string, n int64) {
	if m != nil && n >= 0 {
		m.readBytes.WithLabelValues(tier).Add(float64(n))
	}
}

// ObserveWrite records one batched write to tier.
func (m *Metrics) ObserveWrite(tier string, d time.Duration) {
	if m != nil {
		m.write.WithLabelValues(tier).Observe(d.Seconds())
	}
}

// Discarded counts n discarded blocks for reason (tier.Reason*).
func (m *Metrics) Discarded(reason string, n int) {
	if m != nil && n > 0 {
		m.discarded.WithLabelValues(reason).Add(float64(n))
	}
}

// DiscardHooks are the engine hooks of a replica without tiers: the engine's own discards (a
// hybrid's hits past its last checkpoint) are counted all the same; the rest does nothing.
func (m *Metrics) DiscardHooks() engine.Hooks { return discardHooks{m: m} }

type discardHooks struct {
	engine.NopHooks
	m *Metrics
}

func (h discardHooks) Discarded(reason string, n int) { h.m.Discarded(reason, n) }

// WantsBlockData implements engine.BlockDataHooks: nothing here reads a block's bytes.
func (discardHooks) WantsBlockData(prefix.Event) bool { return false }

// initWriteFailures makes every reason of tier, and its dropped writes, read 0 from the
// start (an alert on their rate sees the series before the first drop).
func (m *Metrics) initWriteFailures(tier string) {
	if m != nil {
		for _, r := range writeFailureReasons {
			m.failures.WithLabelValues(tier, r)
		}
		m.dropped.WithLabelValues(tier)
	}
}

// WriteFailed counts n blocks that did not reach tier, for reason (Fail*).
func (m *Metrics) WriteFailed(tier, reason string, n int) {
	if m != nil && n > 0 {
		m.failures.WithLabelValues(tier, reason).Add(float64(n))
	}
}

// Dropped counts one dropped write to tier (stockpot_kv_offload_dropped_writes_total, kept
// beside the queue_full reason of stockpot_kv_tier_write_failures_total).
func (m *Metrics) Dropped(tier string) {
	if m != nil {
		m.dropped.WithLabelValues(tier).Inc()
	}
}

// RestoreStall adds the time a request waited on its restore (the engine
// calls it when a queued request is held for its prefetch).
func (m *Metrics) RestoreStall(d time.Duration) {
	if m != nil && d > 0 {
		m.stall.Add(d.Seconds())
	}
}

var descQueueDepth = prometheus.NewDesc("stockpot_kv_offload_queue_depth",
	"Write-backs waiting in a tier's queue (full at WriterConfig.QueueLen: later writes are dropped).", []string{"tier"}, nil)

// queueCollector reports the write-back queue depth per tier once per scrape.
type queueCollector struct{ w *Writer }

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descQueueDepth }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.w.queues {
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(len(q.ch)), q.t.Tier.String())
	}
}
