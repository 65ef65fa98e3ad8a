package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the result of a run, as written to report.json. Pointers are null when the
// quantity was not measured or not reported; they are never replaced by 0.
type Report struct {
	Workload string `json:"workload"`
	// Mode is "tools" when the requests carried tool schemas (agent --tools), else "text".
	Mode string `json:"mode"`
	// Tools is the number of tool schemas in every request; 0 in text mode.
	Tools int `json:"tools"`
	// ToolCallAnswers counts answers that ended with finish_reason "tool_calls" (tools mode;
	// the transcript uses the synthetic calls either way).
	ToolCallAnswers int `json:"tool_call_answers"`

	Target      string  `json:"target"`
	Model       string  `json:"model"`
	Endpoint    string  `json:"endpoint"`
	Seed        uint64  `json:"seed"`
	Sessions    int     `json:"sessions"`
	Turns       int     `json:"turns"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	BlockSize   int     `json:"block_size"`
	// TokensPerWord is the calibration of the word-list text against the target's tokenizer.
	TokensPerWord float64 `json:"tokens_per_word"`
	DurationS     float64 `json:"duration_s"`

	Requests    int      `json:"requests"`
	Errors      int      `json:"errors"`
	ErrorSample []string `json:"error_sample,omitempty"`

	// ServerMetrics is "reported" or "not reported" (the target has no prefix-cache counters).
	ServerMetrics string   `json:"server_metrics"`
	ServerHitRate *float64 `json:"server_hit_rate"`
	ServerQueries *float64 `json:"server_queries_delta"`
	ServerHits    *float64 `json:"server_hits_delta"`

	// ClientCached is "reported", "not reported" or "partly reported" (how many usages had
	// prompt_tokens_details.cached_tokens).
	ClientCached         string   `json:"client_cached"`
	ClientCachedRatio    *float64 `json:"client_cached_ratio"`
	ClientCachedReported int      `json:"client_cached_reported_requests"`

	PredictedHitRate *float64 `json:"predicted_hit_rate"`
	PredictionBasis  string   `json:"prediction_basis"`
	// NaiveHitRate is (T−1)/(T+1), the agent shape without blocks or prefix; null for others.
	NaiveHitRate *float64 `json:"naive_hit_rate"`

	TTFT     *Percentiles `json:"ttft_ms"`
	TPOT     *Percentiles `json:"tpot_ms"`
	E2E      *Percentiles `json:"e2e_ms"`
	TTFTCold *Percentiles `json:"ttft_cold_ms"` // first turn of each session
	TTFTWarm *Percentiles `json:"ttft_warm_ms"` // later turns
	TPOTCold *Percentiles `json:"tpot_cold_ms"` // first turn of each session
	TPOTWarm *Percentiles `json:"tpot_warm_ms"` // later turns

	// PerTier is prompt tokens by source from the server's counter deltas; null when absent.
	PerTier map[string]float64 `json:"per_tier"`
	// PerTierClient sums usage.cache; null when no usage carried it.
	PerTierClient map[string]int64 `json:"per_tier_client"`

	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	CachedTokens     *int64 `json:"cached_tokens"` // client-seen; null when not reported

	// Reused and recomputed prompt tokens per second of wall time, kept side by side.
	Throughput Throughput `json:"throughput"`

	// Cost prices the run with each row of the price table, with breakpoints (reads, writes
	// and the rest as the server reported them) and without (every prompt token uncached).
	Cost []Cost `json:"cost"`
	// CostTokens is the prompt split Cost priced.
	CostTokens CostTokens `json:"cost_tokens"`
	// CostBasis says which counters the split came from.
	CostBasis string `json:"cost_basis"`

	HitRateOverTime []TimePoint  `json:"hit_rate_over_time"`
	PerRequest      []RequestRow `json:"per_request"`

	// LongCtx is the longctx workload's measurements (per prompt length: cold and warm TTFT
	// from each tier, the cost model's decisions, memory against a linear model); absent for
	// the other workloads.
	LongCtx *LongCtxReport `json:"longctx,omitempty"`

	// Accept is the acceptance gate's verdict (--accept, accept.go); absent otherwise.
	Accept *AcceptReport `json:"accept,omitempty"`
}

// Throughput is reused vs recomputed prompt tokens per second, from each source.
type Throughput struct {
	ReusedServer     *float64 `json:"reused_tokens_per_s_server"`
	RecomputedServer *float64 `json:"recomputed_tokens_per_s_server"`
	ReusedClient     *float64 `json:"reused_tokens_per_s_client"`
	RecomputedClient *float64 `json:"recomputed_tokens_per_s_client"`
	Output           float64  `json:"output_tokens_per_s"`
}

// TimePoint is the hit rate over one window of the run.
type TimePoint struct {
	AtS    float64  `json:"t_s"`
	Server *float64 `json:"server"`
	Client *float64 `json:"client"`
}

// RequestRow is one request in report.json.
type RequestRow struct {
	Session   int      `json:"session"`
	Turn      int      `json:"turn"`
	StartS    float64  `json:"start_s"`
	TTFTMs    *float64 `json:"ttft_ms"`
	E2EMs     float64  `json:"e2e_ms"`
	Prompt    int      `json:"prompt_tokens"`
	Cached    *int     `json:"cached_tokens"`
	Predicted *int     `json:"predicted_reusable_tokens"`
	Error     string   `json:"error,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func summarizeRun(res *runResult) *Report {
	cfg, tgt := res.cfg, res.tgt
	samples := append([]Sample(nil), res.samples...)
	sort.SliceStable(samples, func(i, j int) bool { return samples[i].Start < samples[j].Start })
	r := newRunReport(res, len(samples))
	wall := res.wall.Seconds()
	t := r.tallyClient(samples, wall)
	d := counterDelta(res.before, res.after)
	r.setServerCounters(d, wall)
	pred := r.setPrediction(samples, tgt, cfg)
	r.setCost(t, d, cfg.Prices)
	if cfg.Accept {
		r.Accept = acceptScripted(cfg, samples, pred)
	}
	r.HitRateOverTime = hitRateOverTime(res, samples)
	return r
}

// newRunReport is the report's header: what ran, against what, for how long.
func newRunReport(res *runResult, requests int) *Report {
	cfg, tgt := res.cfg, res.tgt
	r := &Report{
		Workload: cfg.Workload, Target: cfg.Target, Model: tgt.model, Endpoint: "/v1/completions",
		Seed: cfg.Seed, Sessions: cfg.Sessions, Turns: cfg.Turns, Concurrency: cfg.Concurrency, Rate: cfg.Rate,
		BlockSize: tgt.blockSize, TokensPerWord: res.tokensPerWord, DurationS: res.wall.Seconds(),
		Requests: requests,
	}
	if cfg.Chat {
		r.Endpoint = "/v1/chat/completions"
	}
	r.Mode, r.Tools = "text", cfg.Tools
	if cfg.Tools > 0 {
		r.Mode = "tools"
	}
	if cfg.Workload == "trace" {
		r.Endpoint = "from trace"
		r.Sessions, r.Turns = requests, 1
	}
	return r
}

// clientTally is the token counts the client saw over the successful samples, which the
// cost estimate prices.
type clientTally struct {
	prompt, completion, cached  int64
	reported                    int   // samples with usage cached_tokens
	split                       int   // samples with Anthropic's cache usage
	splitRead, split5m, split1h int64 // Anthropic's usage, from /v1/messages answers
}

// tallyClient fills the client-side half of r from samples (sorted by start): errors,
// latencies, token counts, the cached tokens the usage reported and the per-tier split.
func (r *Report) tallyClient(samples []Sample, wall float64) clientTally {
	var t clientTally
	var ttft, tpot, e2e, cold, warm, tpotCold, tpotWarm []float64
	var computed int64
	tiers := map[string]int64{}
	tiersSeen := false
	for _, s := range samples {
		if !s.OK {
			r.Errors++
			if len(r.ErrorSample) < 5 {
				r.ErrorSample = append(r.ErrorSample, s.Err)
			}
			continue
		}
		if s.FinishReason == "tool_calls" {
			r.ToolCallAnswers++
		}
		e2e = append(e2e, ms(s.End-s.Start))
		if s.FirstToken > 0 {
			first := ms(s.FirstToken - s.Start)
			ttft = append(ttft, first)
			if s.Turn == 0 {
				cold = append(cold, first)
			} else {
				warm = append(warm, first)
			}
			if v := sampleTPOT(s); v != nil {
				tpot = append(tpot, *v)
				if s.Turn == 0 {
					tpotCold = append(tpotCold, *v)
				} else {
					tpotWarm = append(tpotWarm, *v)
				}
			}
		}
		t.prompt += int64(s.PromptTokens)
		t.completion += int64(s.CompletionTokens)
		if s.CachedTokens != nil {
			t.reported++
			t.cached += int64(*s.CachedTokens)
			computed += int64(s.PromptTokens - *s.CachedTokens)
		}
		if sp := s.CacheSplit; sp != nil {
			t.split++
			t.splitRead += int64(sp.Read)
			t.split5m += int64(sp.Write5m)
			t.split1h += int64(sp.Write1h)
		}
		if c := s.Cache; c != nil {
			tiersSeen = true
			tiers["computed"] += int64(c.ComputedTokens)
			tiers["device"] += int64(c.DeviceTokens)
			tiers["host"] += int64(c.HostTokens)
			tiers["disk"] += int64(c.DiskTokens)
			tiers["remote"] += int64(c.RemoteTokens)
		}
	}
	r.TTFT, r.TPOT, r.E2E, r.TTFTCold, r.TTFTWarm = summarize(ttft), summarize(tpot), summarize(e2e), summarize(cold), summarize(warm)
	r.TPOTCold, r.TPOTWarm = summarize(tpotCold), summarize(tpotWarm)
	r.PromptTokens, r.CompletionTokens = t.prompt, t.completion
	if wall > 0 {
		r.Throughput.Output = float64(t.completion) / wall
	}
	ok := r.Requests - r.Errors
	r.ClientCachedReported = t.reported
	switch {
	case t.reported == 0:
		r.ClientCached = "not reported"
	case t.reported < ok:
		r.ClientCached = "partly reported"
	default:
		r.ClientCached = "reported"
	}
	if t.reported > 0 {
		r.CachedTokens = ptr(t.cached)
		var reportedPrompt int64
		for _, s := range samples {
			if s.OK && s.CachedTokens != nil {
				reportedPrompt += int64(s.PromptTokens)
			}
		}
		if reportedPrompt > 0 {
			r.ClientCachedRatio = ptr(float64(t.cached) / float64(reportedPrompt))
		}
		if wall > 0 {
			r.Throughput.ReusedClient = ptr(float64(t.cached) / wall)
			r.Throughput.RecomputedClient = ptr(float64(computed) / wall)
		}
	}
	if tiersSeen {
		r.PerTierClient = tiers
	}
	return t
}

// setServerCounters fills the server-side half of r from the difference d of the /metrics
// counters scraped before and after the run.
func (r *Report) setServerCounters(d counterSnapshot, wall float64) {
	r.ServerMetrics = "not reported"
	if !d.Present {
		return
	}
	r.ServerMetrics = "reported"
	r.ServerQueries, r.ServerHits = ptr(d.Queries), ptr(d.Hits)
	if d.Queries > 0 {
		r.ServerHitRate = ptr(d.Hits / d.Queries)
	}
	if d.Tiers != nil {
		r.PerTier = d.Tiers
	}
	if wall > 0 {
		r.Throughput.ReusedServer = ptr(d.Hits / wall)
		r.Throughput.RecomputedServer = ptr((d.Queries - d.Hits) / wall)
	}
}

// setPrediction fills the per-request rows with the predictor's reusable tokens, and the
// predicted (and, for the agent workload, naive) hit rates. It returns the prediction per
// sample (nil when there was nothing to predict on).
func (r *Report) setPrediction(samples []Sample, tgt *target, cfg Config) []predicted {
	rows := make([]RequestRow, len(samples))
	pred := predictSamples(samples, tgt, r)
	var predSum, predDen int64
	for i, s := range samples {
		row := RequestRow{Session: s.Session, Turn: s.Turn, StartS: s.Start.Seconds(), E2EMs: ms(s.End - s.Start),
			Prompt: s.PromptTokens, Cached: s.CachedTokens, Error: s.Err}
		if s.FirstToken > 0 {
			row.TTFTMs = ptr(ms(s.FirstToken - s.Start))
		}
		if pred != nil && s.OK {
			row.Predicted = ptr(pred[i].reuse)
			predSum += int64(pred[i].reuse)
			predDen += int64(pred[i].tokens)
		}
		rows[i] = row
	}
	r.PerRequest = rows
	if pred != nil && predDen > 0 {
		r.PredictedHitRate = ptr(float64(predSum) / float64(predDen))
	}
	if cfg.Workload == "agent" {
		r.NaiveHitRate = ptr(naiveAgentRate(cfg.Turns))
	}
	return pred
}

// setCost prices the run's tokens: the usage the server reported. On /v1/messages its cache
// reads and writes; on the OpenAI endpoints cached_tokens as reads and no writes; without
// usage, the server's counters d; else every prompt token uncached.
func (r *Report) setCost(t clientTally, d counterSnapshot, prices []Price) {
	switch {
	case t.split > 0:
		// Answers without Anthropic's usage (a mixed trace) count their cached_tokens as reads.
		other := t.cached - t.splitRead
		r.CostTokens = costTokens(t.prompt, t.splitRead+max(other, 0), t.split5m, t.split1h, t.completion)
		r.CostBasis = "usage cache_read_input_tokens / cache_creation_input_tokens (/v1/messages)"
	case t.reported > 0:
		r.CostTokens = costTokens(t.prompt, t.cached, 0, 0, t.completion)
		r.CostBasis = "usage cached_tokens as cache reads, no cache writes"
	case d.Present:
		r.CostTokens = costTokens(int64(d.Queries), int64(d.Hits), 0, 0, t.completion)
		r.CostBasis = "server counters as cache reads, no cache writes"
	default:
		r.CostTokens = costTokens(t.prompt, 0, 0, 0, t.completion)
		r.CostBasis = "no cache reported: all prompt tokens priced as uncached"
	}
	for _, p := range prices {
		r.Cost = append(r.Cost, estimateCost(p, r.CostTokens))
	}
}

type predicted struct{ reuse, tokens int }

// predictSamples runs the block-aligned predictor on the best units available: token ids
// (from the responses or /tokenize), else runes scaled to usage.prompt_tokens. It returns nil
// when neither is available. The result is indexed like samples.
func predictSamples(samples []Sample, tgt *target, r *Report) []predicted {
	ids, outIDs, usage := true, true, true
	for _, s := range samples {
		if !s.OK {
			continue
		}
		ids = ids && s.PromptIDs != nil
		outIDs = outIDs && s.OutputIDs != nil
		usage = usage && s.UsageReported && s.PromptTokens > 0
	}
	in := make([]predictInput, len(samples))
	for i, s := range samples {
		p := predictInput{Start: s.Start, End: s.End, OK: s.OK}
		switch {
		case ids:
			p.Prompt, p.Tokens = s.PromptIDs, len(s.PromptIDs)
			if outIDs {
				p.Output = s.OutputIDs
			}
		case usage:
			p.Prompt = runes(s.PromptText)
			p.Output = runes(s.OutputText)
			p.Tokens = s.PromptTokens
		}
		in[i] = p
	}
	switch {
	case ids && outIDs:
		r.PredictionBasis = "token ids of prompts and outputs from the responses"
	case ids:
		r.PredictionBasis = "prompt token ids from /tokenize; outputs counted only through later prompts"
	case usage:
		r.PredictionBasis = "characters of the prompt text scaled to usage.prompt_tokens (no /tokenize)"
	default:
		r.PredictionBasis = "none: no token ids and no usage.prompt_tokens"
		return nil
	}
	reuse := predictReuse(in, tgt.unit())
	out := make([]predicted, len(samples))
	for i := range samples {
		out[i] = predicted{reuse[i], in[i].Tokens}
	}
	return out
}

func runes(s string) []int32 { return []int32(s) }

// hitRateOverTime gives the hit rate per window: server windows are the periodic scrapes;
// client windows group requests by when they ended, over the same boundaries (ten equal
// windows when the server reports nothing).
func hitRateOverTime(res *runResult, samples []Sample) []TimePoint {
	var bounds []time.Duration
	if len(res.scrapes) > 0 {
		for _, p := range res.scrapes {
			bounds = append(bounds, p.At)
		}
	} else {
		const windows = 10
		for i := 1; i <= windows; i++ {
			bounds = append(bounds, res.wall*time.Duration(i)/windows)
		}
	}
	out := make([]TimePoint, len(bounds))
	prev := res.before
	var lo time.Duration
	for i, hi := range bounds {
		tp := TimePoint{AtS: hi.Seconds()}
		if len(res.scrapes) > 0 {
			cur := res.scrapes[i].Snap
			if dq := cur.Queries - prev.Queries; dq > 0 {
				tp.Server = ptr((cur.Hits - prev.Hits) / dq)
			}
			prev = cur
		}
		var c, p int64
		for _, s := range samples {
			last := i == len(bounds)-1
			if s.OK && s.CachedTokens != nil && s.End > lo && (s.End <= hi || last) {
				c += int64(*s.CachedTokens)
				p += int64(s.PromptTokens)
			}
		}
		if p > 0 {
			tp.Client = ptr(float64(c) / float64(p))
		}
		out[i] = tp
		lo = hi
	}
	return out
}

// WriteFiles writes dir/report.json and dir/report.html.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	html, err := r.HTML()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), html, 0o644)
}

func fmtRate(p *float64) string {
	if p == nil {
		return "not reported"
	}
	return fmt.Sprintf("%.1f%%", *p*100)
}

func fmtPct(p *Percentiles) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f", p.P50, p.P95, p.P99)
}

func fmtTPS(p *float64) string {
	if p == nil {
		return "not reported"
	}
	return fmt.Sprintf("%.0f", *p)
}

// WriteTable prints the summary as an aligned table.
func (r *Report) WriteTable(w io.Writer) error {
	if r.LongCtx != nil {
		return r.writeLongCtxTable(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range r.summaryRows() {
		fmt.Fprintf(tw, "%s\t%s\n", row.Key, row.Value)
	}
	return tw.Flush()
}

// summaryRows is the table shared by the terminal and the HTML page.
func (r *Report) summaryRows() []htmlRow {
	var rows []htmlRow
	row := func(k, v string) { rows = append(rows, htmlRow{k, v}) }
	row("workload", fmt.Sprintf("%s (%d sessions × %d turns, %s, block %d)", r.Workload, r.Sessions, r.Turns, r.Endpoint, r.BlockSize))
	if r.Mode == "tools" {
		row("mode", fmt.Sprintf("tools: %d tool schemas every request, synthetic tool calls in the transcript; %d answers were tool calls", r.Tools, r.ToolCallAnswers))
	} else {
		row("mode", "text")
	}
	row("requests / errors", fmt.Sprintf("%d / %d in %.1fs", r.Requests, r.Errors, r.DurationS))
	row("server hit rate (/metrics)", fmtRate(r.ServerHitRate))
	row("client cached ratio (usage)", fmtRate(r.ClientCachedRatio)+" ("+r.ClientCached+")")
	pred := fmtRate(r.PredictedHitRate)
	if r.PredictedHitRate == nil {
		pred = "n/a"
	}
	row("predicted hit rate (block-aligned)", pred)
	if r.NaiveHitRate != nil {
		row("naive (T−1)/(T+1)", fmtRate(r.NaiveHitRate))
	}
	row("TTFT ms p50/p95/p99", fmtPct(r.TTFT))
	row("  cold (turn 0) / warm p50", fmt.Sprintf("%s / %s", p50(r.TTFTCold), p50(r.TTFTWarm)))
	row("TPOT ms p50/p95/p99", fmtPct(r.TPOT))
	row("  cold (turn 0) / warm p50", fmt.Sprintf("%s / %s", p50(r.TPOTCold), p50(r.TPOTWarm)))
	row("e2e ms p50/p95/p99", fmtPct(r.E2E))
	if r.PerTier != nil {
		var parts []string
		for _, t := range tierNames {
			parts = append(parts, fmt.Sprintf("%s %.0f", t, r.PerTier[t]))
		}
		row("prompt tokens by tier (server)", strings.Join(parts, ", "))
	} else {
		row("prompt tokens by tier (server)", "not reported")
	}
	row("reused tok/s server | client", fmtTPS(r.Throughput.ReusedServer)+" | "+fmtTPS(r.Throughput.ReusedClient))
	row("recomputed tok/s server | client", fmtTPS(r.Throughput.RecomputedServer)+" | "+fmtTPS(r.Throughput.RecomputedClient))
	if len(r.Cost) > 0 {
		t := r.CostTokens
		row("priced prompt tokens", fmt.Sprintf("%d cache reads, %d writes (5m), %d writes (1h), %d uncached; %d output",
			t.CacheRead, t.CacheWrite5m, t.CacheWrite1h, t.Uncached, t.Output))
	}
	for _, c := range r.Cost {
		row("cost "+c.Name+" ("+c.AsOf+")", fmt.Sprintf("$%.4f with breakpoints, $%.4f without (%.0f%% saved)", c.WithBreakpoints, c.WithoutBreakpoints, c.Saving*100))
	}
	return rows
}

func p50(p *Percentiles) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", p.P50)
}
