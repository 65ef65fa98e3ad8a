package server

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
)

// promptSources are the label values of stockpot_prompt_tokens_total's source: "computed", then
// every tier's name, then "blended" (K/V taken from cached chunks and kept: a blended
// request's tokens that are neither computed nor a prefix's), so that the sources sum to the
// prompt tokens.
var promptSources = func() []string {
	out := []string{"computed"}
	for t := range kvtier.Tier(kvtier.Count) {
		out = append(out, t.String())
	}
	return append(out, sourceBlended)
}()

// sourceBlended is stockpot_prompt_tokens_total's source for blended tokens.
const sourceBlended = "blended"

// Histogram buckets in seconds. A pure-Go CPU engine is slower than a GPU one, so the ranges
// reach further up than vLLM's.
var (
	ttftBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 320}
	tpotBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10}
	e2eBuckets  = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280}
)

// metrics holds the request-level metrics. Token counters are fed from the usage objects sent
// to clients (observe), so they equal the sum of the responses' usage.
type metrics struct {
	promptTokens *prometheus.CounterVec // {source}
	queries      prometheus.Counter
	hits         *prometheus.CounterVec // {tier}
	discarded    prometheus.Counter
	generated    prometheus.Counter
	ttft         prometheus.Histogram
	tpot         prometheus.Histogram
	e2e          prometheus.Histogram
	requests     *prometheus.CounterVec // {status}
	stopped      *prometheus.CounterVec // {reason}: generations the server stopped (Usage.StoppedBy)
	keyed        prometheus.Counter     // requests carrying prompt_cache_key
	blendRecomp  prometheus.Counter     // stockpot_blend_recomputed_tokens_total
	blendChunks  *prometheus.CounterVec // stockpot_blend_chunks_total{outcome}
	window       *hitWindow
	byHit        hitHistograms
	blockSize    int
}

func newMetrics(reg prometheus.Registerer, gen engine.Generator, cfg Config) (*metrics, error) {
	m := &metrics{
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_prompt_tokens_total",
			Help: "Prompt tokens of finished requests by where their KV came from (computed or a cache tier).",
		}, []string{"source"}),
		queries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockpot_prefix_cache_queries_total",
			Help: "Prompt tokens looked up in the prefix cache.",
		}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_prefix_cache_hits_total",
			Help: "Prompt tokens reused from the prefix cache, by tier.",
		}, []string{"tier"}),
		discarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockpot_prompt_tokens_discarded_total",
			Help: "Prompt tokens found in a cache tier but not used (and so computed).",
		}),
		generated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockpot_generation_tokens_total",
			Help: "Completion tokens of finished requests.",
		}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stockpot_time_to_first_token_seconds", Help: "Time to first token (engine side).", Buckets: ttftBuckets,
		}),
		tpot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stockpot_time_per_output_token_seconds", Help: "Decode time per output token after the first.", Buckets: tpotBuckets,
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stockpot_e2e_request_latency_seconds", Help: "Request latency from arrival to the last byte.", Buckets: e2eBuckets,
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_requests_total",
			Help: "Generation requests by HTTP status (499: the client went away).",
		}, []string{"status"}),
		stopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_requests_stopped_total",
			Help: "Generations the server stopped on its own, by reason (kv_pool_exhausted: the decode outgrew the KV pool; its finish reason is length).",
		}, []string{"reason"}),
		keyed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockpot_prompt_cache_key_requests_total",
			Help: "Generation requests that carried prompt_cache_key (the router's affinity key; per-key counts live on the router).",
		}),
		blendRecomp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockpot_blend_recomputed_tokens_total",
			Help: "Prompt tokens of blended requests that had cached chunk K/V and were recomputed anyway (the blend's recompute fraction); they are in source=\"computed\" of stockpot_prompt_tokens_total.",
		}),
		blendChunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_blend_chunks_total",
			Help: "Chunks marked by requests that asked to blend, by outcome: hit (some of its blocks were in the chunk cache), miss (none were), declined (the request was computed without blending).",
		}, []string{"outcome"}),
		window: newHitWindow(cfg.HitRateWindow, cfg.HitRateMaxAge, cfg.Now),
		byHit:  newHitHistograms(), blockSize: cfg.BlockSize,
	}
	for _, s := range promptSources {
		m.promptTokens.WithLabelValues(s)
	}
	for t := range kvtier.Tier(kvtier.Transfer) { // a transfer is not a hit: another replica computed it
		m.hits.WithLabelValues(t.String())
	}
	m.stopped.WithLabelValues(engine.StopPoolExhausted)
	hitRate := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stockpot_prefix_cache_hit_rate",
		Help: "Prefix-cache hit rate (hit tokens / queried tokens) over a sliding window of recent requests; NaN with no queries.",
	}, m.window.rate)
	for _, o := range blendChunkOutcomes {
		m.blendChunks.WithLabelValues(o)
	}
	for _, c := range []prometheus.Collector{m.promptTokens, m.queries, m.hits, m.discarded, m.generated,
		m.ttft, m.tpot, m.e2e, m.requests, m.stopped, m.keyed, hitRate, m.blendRecomp, m.blendChunks, &engineCollector{gen: gen, tiers: cfg.TierStats},
		m.byHit.ttft, m.byHit.tpot, evidenceCollector{gen}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records a finished generation whose usage u went (or would have gone) to the client.
func (m *metrics) observe(u engine.Usage, e2e time.Duration) {
	m.promptTokens.WithLabelValues("computed").Add(float64(u.ComputedTokens))
	for t := range kvtier.Tier(kvtier.Count) {
		m.promptTokens.WithLabelValues(t.String()).Add(float64(u.TierTokens(t)))
	}
	m.observeBlend(u.Blend)
	m.queries.Add(float64(u.PromptTokens))
	for t := range kvtier.Tier(kvtier.Transfer) {
		m.hits.WithLabelValues(t.String()).Add(float64(u.TierTokens(t)))
	}
	m.discarded.Add(float64(u.DiscardedTokens))
	m.generated.Add(float64(u.CompletionTokens))
	if u.StoppedBy != "" {
		m.stopped.WithLabelValues(u.StoppedBy).Inc()
	}
	m.window.add(u.PromptTokens, u.CachedTokens())
	if u.CompletionTokens > 0 {
		m.ttft.Observe(u.TTFTMs / 1000)
	}
	if u.CompletionTokens > 1 {
		m.tpot.Observe(u.DecodeMs / 1000 / float64(u.CompletionTokens-1))
	}
	m.byHit.observe(u, m.blockSize)
	m.e2e.Observe(e2e.Seconds())
}

func (m *metrics) request(status int) {
	m.requests.WithLabelValues(strconv.Itoa(status)).Inc()
}

// hitWindow keeps the last n requests' (queries, hits) for the hit-rate gauge.
type hitWindow struct {
	maxAge time.Duration
	now    func() time.Time
	mu     struct {
		sync.Mutex
		ring []hitSample // protected by mu; ring[next] is the oldest once full
		next int
	}
}

type hitSample struct {
	at            time.Time
	queries, hits int
}

func newHitWindow(n int, maxAge time.Duration, now func() time.Time) *hitWindow {
	w := &hitWindow{maxAge: maxAge, now: now}
	w.mu.ring = make([]hitSample, 0, n)
	return w
}

func (w *hitWindow) add(queries, hits int) {
	s := hitSample{at: w.now(), queries: queries, hits: hits}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mu.ring) < cap(w.mu.ring) {
		w.mu.ring = append(w.mu.ring, s)
		return
	}
	w.mu.ring[w.mu.next] = s
	w.mu.next = (w.mu.next + 1) % len(w.mu.ring)
}

// rate is hits/queries over samples younger than maxAge, NaN when there were no queries.
func (w *hitWindow) rate() float64 {
	oldest := w.now().Add(-w.maxAge)
	var q, h int
	w.mu.Lock()
	for _, s := range w.mu.ring {
		if !s.at.Before(oldest) {
			q += s.queries
			h += s.hits
		}
	}
	w.mu.Unlock()
	if q == 0 {
		return math.NaN()
	}
	return float64(h) / float64(q)
}

// engineCollector reads Generator.Stats() once per scrape.
type engineCollector struct {
	gen   engine.Generator
	tiers func() []kvtier.Stat // the lower tiers' rows; nil without tiers
}

var (
	descRunning = prometheus.NewDesc("stockpot_requests_running", "Requests being generated.", nil, nil)
	descWaiting = prometheus.NewDesc("stockpot_requests_waiting", "Requests queued for the engine.", nil, nil)
	// descQueuedPrefill is the replica's prefill backlog (part of the load routers read on the
	// event stream, kvevents.Load).
	descQueuedPrefill = prometheus.NewDesc("stockpot_queued_prefill_tokens",
		"Prompt tokens queued and running requests have yet to prefill (a waiting request's whole prompt).", nil, nil)
	descKVUsage = prometheus.NewDesc("stockpot_kv_cache_usage_bytes",
		"KV cache bytes referenced by running requests.", []string{"tier"}, nil)
	descKVCached = prometheus.NewDesc("stockpot_kv_cache_cached_bytes",
		"KV cache bytes unreferenced but holding reusable prefix blocks.", []string{"tier"}, nil)
	descKVCapacity = prometheus.NewDesc("stockpot_kv_cache_capacity_bytes", "KV cache capacity.", []string{"tier"}, nil)
	// descKVRatio is the inference gateway's KV signal (the Gateway API Inference Extension's
	// endpoint picker reads a usage ratio in [0, 1], vLLM's kv_cache_usage_perc): the working
	// pool's blocks held by running requests and pins, over all its blocks. Blocks that only
	// cache a prefix are free to take, as in vLLM.
	descKVRatio = prometheus.NewDesc("stockpot_kv_cache_usage_ratio",
		"Share of the working pool's KV blocks held by running requests and pins (0 to 1); cached prefix blocks nobody holds count as free.", nil, nil)
	descEvictions = prometheus.NewDesc("stockpot_kv_cache_evictions_total", "KV blocks evicted.", []string{"tier"}, nil)
	descKVBlocks  = prometheus.NewDesc("stockpot_kv_cache_blocks",
		"KV blocks a tier holds: device, in use or cached; a lower tier, its items (Redis: measured from Redis, see internal/tier/redis).", []string{"tier"}, nil)
	descMinReuse = prometheus.NewDesc("stockpot_prefix_cache_min_reusable_tokens",
		"Shortest prompt prefix a later request can reuse: the block size, or for a hybrid model the state checkpoint granularity (block size x --state-checkpoint-blocks).", nil, nil)
	descStateBytes = prometheus.NewDesc("stockpot_kv_state_checkpoint_bytes",
		"Bytes of one recurrent-state checkpoint (a hybrid model's state at a block end).", nil, nil)
	descCheckpoints = prometheus.NewDesc("stockpot_kv_state_checkpoints",
		"Recurrent-state checkpoints the working pool holds (state=held) and the most it keeps (state=budget).", []string{"state"}, nil)
	descCheckpointsDropped = prometheus.NewDesc("stockpot_kv_state_checkpoints_dropped_total",
		"Checkpoints dropped to stay within their budget while their blocks stayed cached.", nil, nil)
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descQueuedPrefill, descKVUsage, descKVCached, descKVCapacity, descKVRatio, descEvictions,
		descKVBlocks, descMinReuse, descStateBytes, descCheckpoints, descCheckpointsDropped} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.gen.Stats()
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(st.Running))
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(descQueuedPrefill, prometheus.GaugeValue, float64(st.QueuedPrefillTokens))
	ch <- prometheus.MustNewConstMetric(descKVUsage, prometheus.GaugeValue, float64(int64(st.KVBlocksUsed)*st.KVBlockBytes), kvtier.Device.String())
	ch <- prometheus.MustNewConstMetric(descKVCached, prometheus.GaugeValue, float64(int64(st.KVBlocksCached)*st.KVBlockBytes), kvtier.Device.String())
	ch <- prometheus.MustNewConstMetric(descKVCapacity, prometheus.GaugeValue, float64(int64(st.KVBlocksTotal)*st.KVBlockBytes), kvtier.Device.String())
	ratio := 0.0
	if st.KVBlocksTotal > 0 {
		ratio = min(1, float64(st.KVBlocksUsed)/float64(st.KVBlocksTotal))
	}
	ch <- prometheus.MustNewConstMetric(descKVRatio, prometheus.GaugeValue, ratio)
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(st.Evictions), kvtier.Device.String())
	ch <- prometheus.MustNewConstMetric(descKVBlocks, prometheus.GaugeValue, float64(st.KVBlocksUsed+st.KVBlocksCached), kvtier.Device.String())
	if st.MinReusableTokens > 0 {
		ch <- prometheus.MustNewConstMetric(descMinReuse, prometheus.GaugeValue, float64(st.MinReusableTokens))
	}
	if st.StateBytes > 0 {
		ch <- prometheus.MustNewConstMetric(descStateBytes, prometheus.GaugeValue, float64(st.StateBytes))
		ch <- prometheus.MustNewConstMetric(descCheckpoints, prometheus.GaugeValue, float64(st.Checkpoints), "held")
		ch <- prometheus.MustNewConstMetric(descCheckpoints, prometheus.GaugeValue, float64(st.CheckpointBudget), "budget")
		ch <- prometheus.MustNewConstMetric(descCheckpointsDropped, prometheus.CounterValue, float64(st.CheckpointsDropped))
	}
	if c.tiers == nil {
		return
	}
	for _, t := range c.tiers() {
		ch <- prometheus.MustNewConstMetric(descKVUsage, prometheus.GaugeValue, float64(t.UsedBytes), t.Tier.String())
		ch <- prometheus.MustNewConstMetric(descKVCapacity, prometheus.GaugeValue, float64(t.CapacityBytes), t.Tier.String())
		ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(t.Evictions), t.Tier.String())
		ch <- prometheus.MustNewConstMetric(descKVBlocks, prometheus.GaugeValue, float64(t.Items), t.Tier.String())
	}
}
