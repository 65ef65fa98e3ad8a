package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
)

// The engine's own counters (engine.Stats().Evidence and the scheduler's counters), read once
// per scrape. They are counted inside the engine where each decision is taken, while
// stockpot_prompt_tokens_total and stockpot_prefix_cache_hits_total add up the usage objects
// sent to clients: two independent accounts of the same work, which must agree (a request
// whose client went away is in the engine's, not in the usage sums).
var (
	descEnginePrompt = prometheus.NewDesc("stockpot_engine_prompt_tokens_total",
		"Prompt tokens by where the engine got their KV (computed, a cache tier, or blended from a cached chunk), counted in the scheduler; abandoned requests included.", []string{"source"}, nil)
	descEngineDiscarded = prometheus.NewDesc("stockpot_engine_prompt_tokens_discarded_total",
		"Prompt tokens a prefetch found in a lower tier but the engine did not use, counted in the scheduler.", nil, nil)
	descEngineRequests = prometheus.NewDesc("stockpot_engine_requests_total",
		"Requests the engine admitted (or ended unadmitted), by hit class: cold reused nothing, warm every reusable block, partial in between.", []string{"hit"}, nil)
	descEngineCancelled = prometheus.NewDesc("stockpot_engine_requests_cancelled_total",
		"Requests the engine ended because their caller went away (or at shutdown).", nil, nil)
	descEngineRestored = prometheus.NewDesc("stockpot_engine_restored_blocks_total",
		"KV blocks the engine restored from a lower tier into the working pool.", []string{"tier"}, nil)
	descEngineDedup = prometheus.NewDesc("stockpot_engine_dedup_waits_total",
		"Admissions deferred to wait for prefix blocks another request was computing.", nil, nil)
	descEnginePreempt = prometheus.NewDesc("stockpot_engine_preemptions_total",
		"Running requests preempted to free KV blocks for a decode.", nil, nil)
	descEnginePrefetch = prometheus.NewDesc("stockpot_engine_prefetches_total",
		"Prefetches that did not help: late (the request was admitted before its answer) or dropped (the answer came after admission or after the request ended).", []string{"outcome"}, nil)
	descEnginePinned = prometheus.NewDesc("stockpot_engine_pinned_blocks",
		"Working-pool blocks held by pins.", nil, nil)
	descEnginePinBudget = prometheus.NewDesc("stockpot_engine_pin_budget_blocks",
		"The most working-pool blocks pins may hold.", nil, nil)
)

// evidenceCollector exports the engine's evidence counters.
type evidenceCollector struct{ gen engine.Generator }

func (c evidenceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEnginePrompt, descEngineDiscarded, descEngineRequests, descEngineCancelled,
		descEngineRestored, descEngineDedup, descEnginePreempt, descEnginePrefetch, descEnginePinned, descEnginePinBudget} {
		ch <- d
	}
}

func (c evidenceCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.gen.Stats()
	ev := st.Evidence
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descEnginePrompt, ev.ComputedTokens, "computed")
	counter(descEnginePrompt, ev.BlendedTokens, "blended")
	for t := range kvtier.Tier(kvtier.Count) {
		counter(descEnginePrompt, ev.SourceTokens[t], t.String())
	}
	counter(descEngineDiscarded, ev.DiscardedTokens)
	for h := range engine.HitClass(engine.HitClasses) {
		counter(descEngineRequests, ev.Hits[h], h.String())
	}
	counter(descEngineCancelled, ev.Cancelled)
	for t := kvtier.Tier(1); t < kvtier.Tier(kvtier.Count); t++ { // nothing is restored from the device
		counter(descEngineRestored, st.RestoredBlocks[t], t.String())
	}
	counter(descEngineDedup, st.DedupWaits)
	counter(descEnginePreempt, st.Preemptions)
	counter(descEnginePrefetch, ev.PrefetchLate, "late")
	counter(descEnginePrefetch, ev.PrefetchDropped, "dropped")
	ch <- prometheus.MustNewConstMetric(descEnginePinned, prometheus.GaugeValue, float64(st.PinnedBlocks))
	ch <- prometheus.MustNewConstMetric(descEnginePinBudget, prometheus.GaugeValue, float64(st.PinBudgetBlocks))
}

// hitHistograms are TTFT and TPOT split by hit class (label hit), beside the unsplit
// stockpot_time_to_first_token_seconds and stockpot_time_per_output_token_seconds.
type hitHistograms struct {
	ttft, tpot *prometheus.HistogramVec
}

func newHitHistograms() hitHistograms {
	h := hitHistograms{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockpot_time_to_first_token_by_hit_seconds", Help: "Time to first token (engine side), by hit class (cold, partial, warm).", Buckets: ttftBuckets,
		}, []string{"hit"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockpot_time_per_output_token_by_hit_seconds", Help: "Decode time per output token after the first, by hit class.", Buckets: tpotBuckets,
		}, []string{"hit"}),
	}
	for c := range engine.HitClass(engine.HitClasses) {
		h.ttft.WithLabelValues(c.String())
		h.tpot.WithLabelValues(c.String())
	}
	return h
}

func (h hitHistograms) observe(u engine.Usage, blockSize int) {
	class := u.HitClass(blockSize).String()
	if u.CompletionTokens > 0 {
		h.ttft.WithLabelValues(class).Observe(u.TTFTMs / 1000)
	}
	if u.CompletionTokens > 1 {
		h.tpot.WithLabelValues(class).Observe(u.DecodeMs / 1000 / float64(u.CompletionTokens-1))
	}
}
