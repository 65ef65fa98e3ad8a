package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The longctx workload: long prompts, one at a time, each measured cold, warm from the working
// pool and warm from every lower tier in turn.
//
// Per length, with text no other length shares (its words are drawn from the seed and the
// length, so no block is reused across lengths):
//
//  1. DELETE /v1/cache?all=1: nothing of an earlier length is left in the pool or the tiers,
//     so the memory read after this length is this length's.
//  2. cold: the prompt with max_tokens 1; its TTFT is the full prefill.
//  3. device: the same request again; the prefix comes from the working pool.
//  4. Staging: host and disk are written back only when the pool evicts, so after two
//     requests they hold nothing. A prewarm of the same prompt with a pin (POST
//     /v1/cache/prewarm, pin ttl 5m) writes its blocks, with their state checkpoints, to every
//     tier that keeps pins (host, disk, Redis) at once; the bench then waits until each lower
//     tier holds them. Nothing is timed here.
//  5. For each lower tier T the server has (GET /v1/cache's list, fastest first): DELETE
//     ?all=1&tier=device (which also unpins the pool) and ?tier=U for every lower tier U above
//     T, so T is the first that holds the prefix, then the same request: its TTFT is the
//     restore from T plus the tail's prefill. The usage says which tier the cached tokens came
//     from; the counter deltas say what the restore-or-recompute cost model decided
//     (stockpot_engine_restored_blocks_total{tier}, stockpot_kv_blocks_discarded_total{reason}:
//     slower_than_recompute is a block it chose to recompute).
//
// Memory is read from /metrics after the pool step: the pool's K/V bytes (usage + cached,
// tier device), the checkpoints held times their size, and the process RSS; the lower tiers'
// bytes from GET /v1/cache after staging. Each is set beside what a linear model predicts
// (⌊P/B⌋ blocks of K/V, ⌊⌊P/B⌋/N⌋ checkpoints for --state-checkpoint-blocks N), and the growth
// from one length to the next is the ratio of each against the ratio of the lengths: memory
// that grew faster than the length would be quadratic somewhere.

// LongCtxReport is report.json's longctx section.
type LongCtxReport struct {
	Model         string `json:"model"`
	ContextLength int    `json:"context_length"`
	BlockSize     int    `json:"block_size"`
	// CheckpointBlocks is the server's --state-checkpoint-blocks (min_reusable_tokens / block
	// size); 0 for a model without recurrent state.
	CheckpointBlocks int `json:"state_checkpoint_blocks"`
	StateBytes       int `json:"state_bytes"` // one recurrent-state checkpoint; 0 without
	// KVBytesPerToken is one pool block's bytes over the block size: for an MLA model the
	// latent (kv_lora_rank + rope dims per MLA layer), in the pool's --kv-type.
	KVBytesPerToken *float64 `json:"kv_bytes_per_token"`
	// CheckpointBytesPerToken is StateBytes / (block size × CheckpointBlocks): a checkpoint's
	// cost spread over the tokens it covers.
	CheckpointBytesPerToken *float64        `json:"checkpoint_bytes_per_token"`
	CacheBytesPerToken      *float64        `json:"cache_bytes_per_token"` // the two summed
	PoolBlocks              int             `json:"pool_blocks"`
	Tiers                   []string        `json:"tiers"` // lower tiers measured, fastest first
	Staging                 string          `json:"staging"`
	Lengths                 []LongCtxLength `json:"lengths"`
	Growth                  []LongCtxGrowth `json:"growth"`
	Notes                   []string        `json:"notes,omitempty"`
}

// LongCtxLength is one prompt length's measurements.
type LongCtxLength struct {
	Target       int    `json:"target_tokens"`
	PromptTokens int    `json:"prompt_tokens"`
	Tokenized    bool   `json:"tokenized"` // the length was measured with /tokenize (else estimated)
	Skipped      string `json:"skipped,omitempty"`
	// StagedTokens is what the pinned prewarm wrote down to the tiers (its pinned_tokens);
	// TierBlocks what each lower tier held once the writes settled.
	StagedTokens *int             `json:"staged_tokens"`
	TierBlocks   map[string]int64 `json:"tier_blocks,omitempty"`
	Steps        []LongCtxStep    `json:"steps"`
	Memory       *LongCtxMemory   `json:"memory"`
}

// LongCtxStep is one request of a length: cold, or warm from one source.
type LongCtxStep struct {
	// Source is where the prefix was meant to come from: "cold", "device" (the working pool),
	// "host", "disk" or "remote". From is where the usage says its cached tokens came from
	// ("computed" when none were cached).
	Source       string      `json:"source"`
	From         string      `json:"from"`
	TTFTMs       *float64    `json:"ttft_ms"`        // usage.timings.ttft_ms: the server's clock
	ClientTTFTMs *float64    `json:"client_ttft_ms"` // first streamed token at the client
	E2EMs        float64     `json:"e2e_ms"`
	QueueMs      *float64    `json:"queue_ms"`
	RestoreMs    *float64    `json:"restore_ms"`
	PrefillMs    *float64    `json:"prefill_ms"`
	PromptTokens int         `json:"prompt_tokens"`
	CachedTokens *int        `json:"cached_tokens"`
	Cache        *CacheUsage `json:"cache,omitempty"`
	// Server counter deltas over this request: prompt tokens by source, blocks restored by
	// tier, blocks found but discarded by reason; nil when /metrics was not readable.
	ServerTokens  map[string]float64 `json:"server_tokens,omitempty"`
	ServerHitRate *float64           `json:"server_hit_rate"`
	Restored      map[string]float64 `json:"restored_blocks,omitempty"`
	Discarded     map[string]float64 `json:"discarded_blocks,omitempty"`
	// ServerHitClasses is the engine's requests by hit class over this request
	// (stockpot_engine_requests_total{hit}); nil when not reported.
	ServerHitClasses map[string]float64 `json:"server_hit_classes,omitempty"`
	// TPOTMs is the client's time per output token after the first: only --accept decodes
	// more than one token (Config.MaxTokens); null otherwise.
	TPOTMs *float64 `json:"tpot_ms"`
	// RemoteFailedCalls is stockpot_kv_remote_failed_calls_total's delta: a remote read that
	// failed (past --remote-call-timeout, say) leaves its blocks to be computed without
	// counting them as discarded. Nil without a remote tier.
	RemoteFailedCalls *float64 `json:"remote_failed_calls,omitempty"`
	// Decision is the cost model's restore-or-recompute choice in words; Verdict sets it
	// against what was measured.
	Decision string       `json:"decision,omitempty"`
	Verdict  string       `json:"verdict,omitempty"`
	Costs    *CostFigures `json:"cost_model,omitempty"`
	Error    string       `json:"error,omitempty"`
}

// CostFigures are the cost model's inputs as the server published them (the "costs" object
// of GET /v1/kv-events/snapshot) right after a request.
type CostFigures struct {
	PrefillTPS float64            `json:"prefill_tps"`
	BlockSize  int                `json:"block_size"`
	BlockBytes int64              `json:"block_bytes"`
	ReadBPS    map[string]float64 `json:"read_bps"`
}

// LongCtxMemory is what one length holds, measured and as a linear model predicts it.
type LongCtxMemory struct {
	FullBlocks int `json:"full_blocks"` // ⌊prompt/B⌋: the blocks a prompt leaves cached
	// Pool K/V bytes: stockpot_kv_cache_usage_bytes + _cached_bytes {tier="device"} after the
	// pool step, against FullBlocks × the block's bytes.
	PoolKVBytes      *float64 `json:"pool_kv_bytes"`
	PredictedKVBytes *int64   `json:"predicted_kv_bytes"` // null when the block's bytes are unknown (no cache API)
	// Checkpoints held in the pool (stockpot_kv_state_checkpoints{state="held"}) and their
	// bytes, against ⌊FullBlocks/N⌋ of them.
	Checkpoints              *float64 `json:"checkpoints_held"`
	CheckpointBytes          *float64 `json:"checkpoint_bytes"`
	PredictedCheckpoints     int      `json:"predicted_checkpoints"`
	PredictedCheckpointBytes int64    `json:"predicted_checkpoint_bytes"`
	RSSBytes                 *float64 `json:"rss_bytes"` // process_resident_memory_bytes after the pool step
	// CacheBytesPerToken is (pool K/V + checkpoints) / prompt tokens, measured.
	CacheBytesPerToken *float64         `json:"cache_bytes_per_token"`
	TierBytes          map[string]int64 `json:"tier_bytes,omitempty"` // GET /v1/cache after staging
	// ByCheckpointBlocks is the checkpoint memory this prompt needs at other
	// --state-checkpoint-blocks values (computed; Server marks the one measured).
	ByCheckpointBlocks []CheckpointRow `json:"checkpoints_by_n,omitempty"`
}

// CheckpointRow is the checkpoint memory of one prompt at --state-checkpoint-blocks N.
type CheckpointRow struct {
	N             int     `json:"n"`
	Checkpoints   int     `json:"checkpoints"`
	Bytes         int64   `json:"bytes"`
	BytesPerToken float64 `json:"bytes_per_token"`
	Server        bool    `json:"server"`
}

// LongCtxGrowth compares one measured length with the previous one: each quantity's ratio
// beside the ratio of the prompt lengths. A memory ratio near the length ratio is linear; near
// its square, quadratic.
type LongCtxGrowth struct {
	From        int      `json:"from_tokens"`
	To          int      `json:"to_tokens"`
	LengthRatio float64  `json:"length_ratio"`
	ColdTTFT    *float64 `json:"cold_ttft_ratio"`
	PoolKV      *float64 `json:"pool_kv_ratio"`
	Checkpoints *float64 `json:"checkpoint_bytes_ratio"`
	RSS         *float64 `json:"rss_ratio"`
}

// checkpointNs are the --state-checkpoint-blocks values the report prices every prompt at.
var checkpointNs = []int{1, 2, 4, 8, 16, 64}

// stagePinTTL is the pin the staging prewarm asks for: long enough to outlast the tier steps
// of one length at 128K on 2 cores, short enough to lapse soon after a run that was cut off.
const stagePinTTL = "1h"

// longRun is one longctx run's state.
type longRun struct {
	cfg   Config
	tgt   *target // requests (no return_token_ids: a 128K id list in the stream would be noise)
	admin *target // the cache admin API; nil without Config.AdminKey
	mkey  string  // the key sent to /metrics
	hc    *http.Client
	logf  func(string, ...any)
	epoch time.Time
	// maxTokens is each request's max_tokens: 1 (the TTFT is the measurement), or
	// Config.MaxTokens under --accept, whose verdict reports TPOT cold against warm.
	maxTokens int
	// tokensPerWord is the running calibration: from /tokenize, or from the last cold
	// request's prompt_tokens when the target cannot tokenize.
	tokensPerWord float64
	info          longInfo
}

// longInfo is what the bench learned about the server before the first length.
type longInfo struct {
	model                     string
	context, blockSize, reuse int
	stateBytes                int
	poolBlocks                int
	blockBytes                int64
	tiers                     []string // lower tiers, fastest first
	metrics                   bool     // /metrics answered with Stockpot's counters
	checkpointBlocks          int
	note                      []string
	kvPerToken, ckptPerToken  *float64
}

// runLongCtx runs the longctx workload (see the comment at the top of this file).
func runLongCtx(ctx context.Context, cfg Config) (*Report, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	tgt := &target{base: cfg.Target, apiKey: cfg.APIKey, model: cfg.Model, http: hc}
	tgt.probe(ctx, cfg.BlockSize)
	tgt.stockpot = false // no return_token_ids
	lr := &longRun{cfg: cfg, tgt: tgt, hc: hc, logf: cfg.Logf, epoch: time.Now(), mkey: cfg.APIKey, maxTokens: 1}
	if cfg.Accept {
		lr.maxTokens = max(1, cfg.MaxTokens)
	}
	if lr.logf == nil {
		lr.logf = func(string, ...any) {}
	}
	if cfg.AdminKey != "" {
		lr.admin = &target{base: cfg.Target, apiKey: cfg.AdminKey, model: tgt.model, http: hc}
		lr.mkey = cfg.AdminKey // an admin key opens /metrics
	}
	lr.tokensPerWord = tgt.calibrate(ctx, cfg.Seed)
	if err := lr.learn(ctx); err != nil {
		return nil, err
	}
	lc := &LongCtxReport{Lengths: []LongCtxLength{}, Model: tgt.model, ContextLength: lr.info.context, BlockSize: lr.info.blockSize,
		CheckpointBlocks: lr.info.checkpointBlocks, StateBytes: lr.info.stateBytes, PoolBlocks: lr.info.poolBlocks,
		KVBytesPerToken: lr.info.kvPerToken, CheckpointBytesPerToken: lr.info.ckptPerToken, Tiers: lr.info.tiers,
		Notes: lr.info.note}
	if lc.Tiers == nil {
		lc.Tiers = []string{}
	}
	if lr.info.kvPerToken != nil {
		v := *lr.info.kvPerToken
		if lr.info.ckptPerToken != nil {
			v += *lr.info.ckptPerToken
		}
		lc.CacheBytesPerToken = &v
	}
	if len(lr.info.tiers) > 0 {
		lc.Staging = "a prewarm of the prompt with a pin (ttl " + stagePinTTL + ") writes its blocks and checkpoints to every lower tier at once (host and disk are otherwise written only at eviction); not timed"
	}
	for _, n := range cfg.Lengths {
		if ctx.Err() != nil {
			break
		}
		lc.Lengths = append(lc.Lengths, lr.length(ctx, n))
	}
	lc.Growth = growth(lc.Lengths)

	r := &Report{Workload: "longctx", Mode: "text", Target: cfg.Target, Model: tgt.model, Endpoint: "/v1/completions",
		Seed: cfg.Seed, Sessions: len(cfg.Lengths), Turns: 1, Concurrency: 1, BlockSize: lr.info.blockSize,
		TokensPerWord: lr.tokensPerWord, DurationS: time.Since(lr.epoch).Seconds(), LongCtx: lc,
		ServerMetrics: "not reported", ClientCached: "not reported", PredictionBasis: "none: longctx measures, it does not predict",
		CostBasis: "not priced: longctx measures latency and memory"}
	if lr.info.metrics {
		r.ServerMetrics = "reported"
	}
	var ttft []float64
	for _, l := range lc.Lengths {
		for _, s := range l.Steps {
			r.Requests++
			if s.Error != "" {
				r.Errors++
				if len(r.ErrorSample) < 5 {
					r.ErrorSample = append(r.ErrorSample, s.Error)
				}
			}
			if s.TTFTMs != nil {
				ttft = append(ttft, *s.TTFTMs)
			}
		}
	}
	r.TTFT = summarize(ttft)
	if cfg.Accept {
		r.Accept = acceptLongCtx(cfg, lc, tgt.unit(), lr.admin != nil)
		if lr.maxTokens > 1 {
			lc.Notes = append(lc.Notes, fmt.Sprintf("--accept: every request decoded up to %d tokens (for TPOT), so the pool's K/V after the pool step holds their blocks too", lr.maxTokens))
		}
	}
	return r, nil
}

// learn reads the model card, the cache's tiers and the metrics the run depends on.
func (lr *longRun) learn(ctx context.Context) error {
	in := &lr.info
	in.model, in.blockSize = lr.tgt.model, lr.tgt.blockSize
	var ml struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
			Stockpot    *struct {
				ContextLength     int `json:"context_length"`
				BlockSize         int `json:"block_size"`
				MinReusableTokens int `json:"min_reusable_tokens"`
				StateBytes        int `json:"state_bytes"`
			} `json:"stockpot"`
		} `json:"data"`
	}
	if err := lr.tgt.getJSON(ctx, http.MethodGet, "/v1/models", nil, &ml); err == nil {
		for _, d := range ml.Data {
			if d.ID != lr.tgt.model {
				continue
			}
			in.context = d.MaxModelLen
			if sp := d.Stockpot; sp != nil {
				in.context = max(in.context, sp.ContextLength)
				in.reuse, in.stateBytes = sp.MinReusableTokens, sp.StateBytes
			}
		}
	}
	if in.stateBytes > 0 && in.reuse > 0 && in.reuse%in.blockSize == 0 {
		in.checkpointBlocks = in.reuse / in.blockSize
		v := float64(in.stateBytes) / float64(in.reuse)
		in.ckptPerToken = &v
	}
	if lr.admin == nil {
		in.note = append(in.note, "no --admin-key: only the cold and warm-from-pool requests were measured (the tiers cannot be dropped one at a time without the cache admin API)")
	} else {
		cr, err := lr.cacheState(ctx)
		if err != nil {
			return fmt.Errorf("longctx: GET /v1/cache with --admin-key: %w", err)
		}
		for _, t := range cr.Tiers {
			if t.Tier == "device" {
				in.poolBlocks = t.UsedBlocks + t.CachedBlocks + t.FreeBlocks
				if in.poolBlocks > 0 {
					in.blockBytes = t.CapacityBytes / int64(in.poolBlocks)
					v := float64(in.blockBytes) / float64(in.blockSize)
					in.kvPerToken = &v
				}
				continue
			}
			in.tiers = append(in.tiers, t.Tier)
		}
	}
	s, err := lr.scrape(ctx)
	if err != nil {
		return err
	}
	in.metrics = s != nil
	if !in.metrics {
		in.note = append(in.note, "/metrics not readable: no server counters (hit rate, cost-model decisions, memory)")
	}
	return nil
}

// cacheTiers is the part of GET /v1/cache the bench reads.
type cacheTiers struct {
	Tiers []struct {
		Tier          string `json:"tier"`
		Blocks        int64  `json:"blocks"`
		Bytes         int64  `json:"bytes"`
		CapacityBytes int64  `json:"capacity_bytes"`
		UsedBlocks    int    `json:"used_blocks"`
		CachedBlocks  int    `json:"cached_blocks"`
		FreeBlocks    int    `json:"free_blocks"`
	} `json:"tiers"`
}

func (lr *longRun) cacheState(ctx context.Context) (cacheTiers, error) {
	var cr cacheTiers
	err := lr.admin.getJSON(ctx, http.MethodGet, "/v1/cache?limit=1", nil, &cr)
	return cr, err
}

// drop is DELETE /v1/cache?all=1 (tier "" : the pool and every tier) or ?all=1&tier=T.
func (lr *longRun) drop(ctx context.Context, tier string) error {
	q := url.Values{"all": {"1"}}
	if tier != "" {
		q.Set("tier", tier)
	}
	var out struct {
		TierErrors []string `json:"tier_errors"`
	}
	if err := lr.admin.getJSON(ctx, http.MethodDelete, "/v1/cache?"+q.Encode(), nil, &out); err != nil {
		return fmt.Errorf("DELETE /v1/cache?%s: %w", q.Encode(), err)
	}
	if len(out.TierErrors) > 0 {
		return fmt.Errorf("DELETE /v1/cache?%s: %s", q.Encode(), strings.Join(out.TierErrors, "; "))
	}
	return nil
}

// length measures one prompt length.
func (lr *longRun) length(ctx context.Context, want int) LongCtxLength {
	in := lr.info
	l := LongCtxLength{Target: want, Steps: []LongCtxStep{}}
	if in.context > 0 && want >= in.context {
		l.Skipped = fmt.Sprintf("longer than the model's context (%d tokens)", in.context)
		lr.logf("longctx %d: skipped: %s", want, l.Skipped)
		return l
	}
	if in.poolBlocks > 0 && in.blockSize > 0 && (want+1+in.blockSize-1)/in.blockSize > in.poolBlocks {
		l.Skipped = fmt.Sprintf("does not fit the working pool (%d blocks of %d tokens): raise the server's --kv-memory", in.poolBlocks, in.blockSize)
		lr.logf("longctx %d: skipped: %s", want, l.Skipped)
		return l
	}
	text, tokens, tokenized, err := lr.prompt(ctx, want)
	if err != nil {
		l.Skipped = "building the prompt: " + err.Error()
		return l
	}
	l.PromptTokens, l.Tokenized = tokens, tokenized
	if lr.admin != nil {
		if err := lr.drop(ctx, ""); err != nil {
			l.Skipped = "clearing the cache before the length: " + err.Error()
			return l
		}
	}
	cold := lr.step(ctx, "cold", text, nil)
	l.Steps = append(l.Steps, cold)
	if cold.Error != "" {
		return l
	}
	l.PromptTokens = cold.PromptTokens
	if !tokenized && cold.PromptTokens > 0 {
		// No /tokenize: learn from the usage, so the next length comes out closer.
		lr.tokensPerWord *= float64(cold.PromptTokens) / float64(want)
	}
	pool := lr.step(ctx, "device", text, &cold)
	l.Steps = append(l.Steps, pool)
	l.Memory = lr.memory(ctx, l.PromptTokens)
	if lr.admin == nil || len(in.tiers) == 0 || pool.Error != "" {
		return l
	}
	staged, blocks, err := lr.stage(ctx, text)
	if err != nil {
		l.Steps = append(l.Steps, LongCtxStep{Source: "staging", Error: err.Error()})
		return l
	}
	l.StagedTokens, l.TierBlocks = &staged, blocks
	if cr, err := lr.cacheState(ctx); err == nil {
		l.Memory.TierBytes = map[string]int64{}
		for _, t := range cr.Tiers {
			if t.Tier != "device" && t.CapacityBytes > 0 { // a shared store (Redis) reports no bytes of its own
				l.Memory.TierBytes[t.Tier] = t.Bytes
			}
		}
	}
	for k, tier := range in.tiers {
		// Make tier the first holder: the pool and every tier above it lose the prefix (a
		// restore from a lower tier promotes its blocks to host, so this is redone each time).
		var err error
		for _, above := range append([]string{"device"}, in.tiers[:k]...) {
			if err = lr.drop(ctx, above); err != nil {
				break
			}
		}
		if err != nil {
			l.Steps = append(l.Steps, LongCtxStep{Source: tier, Error: err.Error()})
			continue
		}
		lr.quiesce(ctx)
		l.Steps = append(l.Steps, lr.step(ctx, tier, text, &cold))
	}
	return l
}

// prompt builds about want tokens of text no other length shares. With /tokenize the word
// count is corrected until the prompt is within 0.2% (at least 8 tokens) of want; without, it
// is the running estimate, and tokens is 0 (the cold request's usage tells).
func (lr *longRun) prompt(ctx context.Context, want int) (text string, tokens int, tokenized bool, err error) {
	lt := newLongText(lr.cfg.Seed, want)
	n := max(1, int(math.Round(float64(want)/lr.tokensPerWord)))
	if !lr.tgt.tokenize {
		return lt.render(n), 0, false, nil
	}
	tol := max(8, want/500)
	for try := 0; ; try++ {
		text = lt.render(n)
		ids, err := lr.tgt.tokenizeText(ctx, text, true)
		if err != nil {
			return "", 0, false, err
		}
		tokens = len(ids)
		if d := tokens - want; (d <= tol && d >= -tol) || try == 5 {
			lr.tokensPerWord = float64(tokens) / float64(n)
			return text, tokens, true, nil
		}
		n = max(1, int(math.Round(float64(n)*float64(want)/float64(tokens))))
	}
}

// longText is one length's words, drawn lazily from a generator seeded by the run's seed and
// the length, so render(n) for a larger n extends the same text.
type longText struct {
	head  string
	g     *textGen
	words []string
}

func newLongText(seed uint64, length int) *longText {
	return &longText{head: fmt.Sprintf("Long document of %d tokens (seed %d).", length, seed),
		g: &textGen{rng: newRand(seed ^ uint64(length)*0x9e3779b97f4a7c15), tokensPerWord: 1}}
}

// render is the head and the first n words, a full stop every 12 words.
func (t *longText) render(n int) string {
	for len(t.words) < n {
		t.words = append(t.words, t.g.word())
	}
	var b strings.Builder
	b.Grow(len(t.head) + n*8)
	b.WriteString(t.head)
	for i, w := range t.words[:n] {
		if i > 0 && i%12 == 0 {
			b.WriteByte('.')
		}
		b.WriteByte(' ')
		b.WriteString(w)
	}
	b.WriteByte('.')
	return b.String()
}

// step sends the prompt once (max_tokens 1) and reads what the server did with it.
func (lr *longRun) step(ctx context.Context, source, text string, cold *LongCtxStep) LongCtxStep {
	st := LongCtxStep{Source: source, From: "computed"}
	before, _ := lr.scrape(ctx)
	var s Sample
	rctx, cancel := context.WithTimeout(ctx, lr.cfg.Timeout)
	lr.tgt.send(rctx, "/v1/completions", map[string]any{"prompt": text, "max_tokens": lr.maxTokens}, lr.epoch, &s)
	cancel()
	st.E2EMs = ms(s.End - s.Start)
	if !s.OK {
		st.Error = s.Err
		lr.logf("longctx %s: error: %s", source, s.Err)
		return st
	}
	st.PromptTokens, st.CachedTokens, st.Cache = s.PromptTokens, s.CachedTokens, s.Cache
	if s.FirstToken > 0 {
		st.ClientTTFTMs = ptr(ms(s.FirstToken - s.Start))
	}
	st.TPOTMs = sampleTPOT(s)
	if t := s.Timings; t != nil {
		st.TTFTMs, st.QueueMs, st.RestoreMs, st.PrefillMs = ptr(t.TTFTMs), ptr(t.QueueMs), ptr(t.RestoreMs), ptr(t.PrefillMs)
	}
	if c := s.Cache; c != nil {
		best := 0
		for _, f := range []struct {
			name string
			n    int
		}{{"device", c.DeviceTokens}, {"host", c.HostTokens}, {"disk", c.DiskTokens}, {"remote", c.RemoteTokens}} {
			if f.n > best {
				st.From, best = f.name, f.n
			}
		}
	}
	if before != nil {
		after := lr.settle(ctx, before, s.PromptTokens)
		st.ServerTokens = after.delta(before, "stockpot_prompt_tokens_total", "source")
		st.Restored = after.delta(before, "stockpot_engine_restored_blocks_total", "tier")
		st.Discarded = after.delta(before, "stockpot_kv_blocks_discarded_total", "reason")
		st.ServerHitClasses = after.delta(before, metricHitClasses, "hit")
		if v, ok := after.get("stockpot_kv_remote_failed_calls_total"); ok {
			st.RemoteFailedCalls = ptr(v - before["stockpot_kv_remote_failed_calls_total"])
		}
		var all, hit float64
		for k, v := range st.ServerTokens {
			all += v
			if k != "computed" {
				hit += v
			}
		}
		if all > 0 {
			st.ServerHitRate = ptr(hit / all)
		}
	}
	if source != "cold" && source != "device" && lr.admin != nil {
		st.Costs = lr.costs(ctx)
	}
	st.Decision, st.Verdict = decide(st, cold, lr.info.blockSize)
	lr.logf("longctx %d tokens, %s: TTFT %s ms (client %s), restore %s ms, %s cached from %s. %s %s",
		st.PromptTokens, source, fmtMs(st.TTFTMs), fmtMs(st.ClientTTFTMs), fmtMs(st.RestoreMs), fmtIntPtr(st.CachedTokens), st.From, st.Decision, st.Verdict)
	return st
}

// decide puts the cost model's choice for a warm step into words, and sets it against the
// cold request: restoring was right if it beat the full prefill.
func decide(st LongCtxStep, cold *LongCtxStep, blockSize int) (decision, verdict string) {
	switch st.Source {
	case "cold":
		return "", ""
	case "device":
		if st.CachedTokens != nil && blockSize > 0 {
			return fmt.Sprintf("%d blocks reused in the working pool (no restore, nothing to decide)", *st.CachedTokens/blockSize), ""
		}
		return "", ""
	}
	if st.Restored == nil && st.Discarded == nil {
		return "not reported (no /metrics)", ""
	}
	restored := st.Restored[st.Source]
	slower := st.Discarded["slower_than_recompute"]
	incomplete := st.Discarded["incomplete_state"]
	bad := st.Discarded["checksum"] + st.Discarded["identity"]
	afterBreak := st.Discarded["after_break"] // sound, but after a block that failed
	var other float64
	for t, v := range st.Restored {
		if t != st.Source {
			other += v
		}
	}
	found := restored + other + slower + incomplete + bad + afterBreak
	if found == 0 {
		// The prefix was staged there, so nothing found means the read failed or the blocks
		// were lost: either way it is computed, with no discard counted.
		decision = fmt.Sprintf("nothing restored from %s (no block found, or its read failed): everything was computed", st.Source)
		if f := st.RemoteFailedCalls; f != nil && *f > 0 {
			decision += fmt.Sprintf("; %.0f remote calls failed (a batched read past --remote-call-timeout fails whole)", *f)
		}
		if cold != nil && cold.TTFTMs != nil && st.TTFTMs != nil {
			verdict = fmt.Sprintf("missed: TTFT %.0f ms against %.0f ms cold, the prefix was in %s but not used", *st.TTFTMs, *cold.TTFTMs, st.Source)
		}
		return decision, verdict
	}
	parts := []string{fmt.Sprintf("restored %.0f of %.0f blocks found from %s", restored, found, st.Source)}
	if other > 0 {
		parts = append(parts, fmt.Sprintf("%.0f from other tiers", other))
	}
	if slower > 0 {
		parts = append(parts, fmt.Sprintf("recomputed %.0f: the cost model predicted their restore slower than recompute (slower_than_recompute)", slower))
	} else {
		parts = append(parts, "the cost model chose restore for every block")
	}
	if incomplete > 0 {
		parts = append(parts, fmt.Sprintf("%.0f past the last complete state checkpoint recomputed (incomplete_state)", incomplete))
	}
	if bad > 0 {
		parts = append(parts, fmt.Sprintf("%.0f failed verification", bad))
	}
	if afterBreak > 0 {
		parts = append(parts, fmt.Sprintf("%.0f sound but after a broken link of the chain (after_break)", afterBreak))
	}
	decision = strings.Join(parts, "; ")
	if cold == nil || cold.TTFTMs == nil || st.TTFTMs == nil {
		return decision, ""
	}
	c, w := *cold.TTFTMs, *st.TTFTMs
	switch {
	case restored > 0 && w < c:
		verdict = fmt.Sprintf("right: restoring gave TTFT %.0f ms against %.0f ms cold (%.1f× faster)", w, c, c/w)
	case restored > 0:
		verdict = fmt.Sprintf("wrong: restoring gave TTFT %.0f ms, not faster than %.0f ms cold", w, c)
	case slower > 0:
		verdict = fmt.Sprintf("recomputed: TTFT %.0f ms against %.0f ms cold", w, c)
		if cf := st.Costs; cf != nil && cf.ReadBPS[st.Source] > 0 && cf.BlockBytes > 0 {
			est := slower * float64(cf.BlockBytes) / cf.ReadBPS[st.Source] * 1000
			if est < c {
				verdict += fmt.Sprintf("; questionable: at the measured %s read rate the restore would take about %.0f ms", st.Source, est)
			} else {
				verdict += fmt.Sprintf("; consistent: at the measured %s read rate the restore would take about %.0f ms", st.Source, est)
			}
		}
	}
	return decision, verdict
}

// stage writes the prompt's blocks down to every lower tier with a pinned prewarm and waits
// until each tier that counts its blocks holds them (or stops gaining blocks) and the offload
// queues are empty. A shared store without a budget of its own (Redis: capacity_bytes 0 in
// GET /v1/cache) does not count what it holds for this server, so it is waited on through the
// queues only and left out of the returned counts (not reported, rather than 0). It returns
// the pinned tokens and the blocks each counting tier held.
func (lr *longRun) stage(ctx context.Context, text string) (int, map[string]int64, error) {
	var pw struct {
		PinnedTokens int `json:"pinned_tokens"`
	}
	body := map[string]any{"model": lr.tgt.model, "prompt": text, "pin": map[string]any{"ttl": stagePinTTL}}
	if err := lr.admin.getJSON(ctx, http.MethodPost, "/v1/cache/prewarm", body, &pw); err != nil {
		return 0, nil, fmt.Errorf("staging prewarm: %w", err)
	}
	want := int64(pw.PinnedTokens / lr.info.blockSize)
	const poll, still, limit = 200 * time.Millisecond, 5 * time.Second, 10 * time.Minute
	start, lastGain := time.Now(), time.Now()
	var prev map[string]int64
	for {
		cr, err := lr.cacheState(ctx)
		if err != nil {
			return pw.PinnedTokens, nil, err
		}
		held, done := map[string]int64{}, true
		for _, t := range cr.Tiers {
			if t.Tier == "device" || t.CapacityBytes == 0 {
				continue
			}
			held[t.Tier] = t.Blocks
			done = done && t.Blocks >= want
			if t.Blocks > prev[t.Tier] {
				lastGain = time.Now()
			}
		}
		if s, _ := lr.scrape(ctx); s != nil {
			for _, q := range s.delta(nil, "stockpot_kv_offload_queue_depth", "tier") {
				if q > 0 {
					done, lastGain = false, time.Now() // still writing
				}
			}
		}
		prev = held
		switch {
		case done:
			lr.logf("longctx: staged %d tokens (%d blocks) in %v: %v", pw.PinnedTokens, want, time.Since(start).Round(time.Millisecond), held)
			return pw.PinnedTokens, held, nil
		case time.Since(lastGain) > still || time.Since(start) > limit || ctx.Err() != nil:
			lr.logf("longctx: staging stopped short of %d blocks: %v", want, held)
			return pw.PinnedTokens, held, nil
		}
		time.Sleep(poll)
	}
}

// quiesce lets the server settle after a drop before a timed request: the drop's unpins and
// the last promotions reach the tiers off the request path, and on a machine of two cores that
// work would otherwise be timed as the next request's queue wait. It waits until the offload
// queues are empty (at most 30 s), then quietPause.
func (lr *longRun) quiesce(ctx context.Context) {
	const limit, poll = 30 * time.Second, 100 * time.Millisecond
	for deadline := time.Now().Add(limit); time.Now().Before(deadline) && ctx.Err() == nil; {
		s, _ := lr.scrape(ctx)
		busy := false
		for _, q := range s.delta(nil, "stockpot_kv_offload_queue_depth", "tier") {
			busy = busy || q > 0
		}
		if !busy {
			break
		}
		time.Sleep(poll)
	}
	select {
	case <-ctx.Done():
	case <-time.After(quietPause):
	}
}

// quietPause is how long quiesce waits once the queues are empty: the pin worker's queue has
// no gauge, and a second covers its unpin of a 128K-token prefix (8,192 keys) on 2 cores.
var quietPause = time.Second

// memory reads what the pool holds now, beside the linear prediction.
func (lr *longRun) memory(ctx context.Context, prompt int) *LongCtxMemory {
	in := lr.info
	m := &LongCtxMemory{}
	if in.blockSize > 0 {
		m.FullBlocks = prompt / in.blockSize
	}
	if in.blockBytes > 0 {
		m.PredictedKVBytes = ptr(int64(m.FullBlocks) * in.blockBytes)
	}
	if in.checkpointBlocks > 0 {
		m.PredictedCheckpoints = m.FullBlocks / in.checkpointBlocks
		m.PredictedCheckpointBytes = int64(m.PredictedCheckpoints) * int64(in.stateBytes)
		for _, n := range checkpointNs {
			m.ByCheckpointBlocks = append(m.ByCheckpointBlocks, checkpointRow(n, m.FullBlocks, in.stateBytes, prompt, n == in.checkpointBlocks))
		}
		if !slices.Contains(checkpointNs, in.checkpointBlocks) {
			m.ByCheckpointBlocks = append(m.ByCheckpointBlocks, checkpointRow(in.checkpointBlocks, m.FullBlocks, in.stateBytes, prompt, true))
		}
	}
	s, _ := lr.scrape(ctx)
	if s == nil {
		return m
	}
	if u, ok := s.get(`stockpot_kv_cache_usage_bytes{tier="device"}`); ok {
		c, _ := s.get(`stockpot_kv_cache_cached_bytes{tier="device"}`)
		m.PoolKVBytes = ptr(u + c)
	}
	if h, ok := s.get(`stockpot_kv_state_checkpoints{state="held"}`); ok {
		m.Checkpoints = &h
		sb, _ := s.get("stockpot_kv_state_checkpoint_bytes")
		m.CheckpointBytes = ptr(h * sb)
	}
	if r, ok := s.get("process_resident_memory_bytes"); ok {
		m.RSSBytes = &r
	}
	if m.PoolKVBytes != nil && prompt > 0 {
		v := *m.PoolKVBytes
		if m.CheckpointBytes != nil {
			v += *m.CheckpointBytes
		}
		m.CacheBytesPerToken = ptr(v / float64(prompt))
	}
	return m
}

func checkpointRow(n, blocks, stateBytes, prompt int, server bool) CheckpointRow {
	c := blocks / n
	r := CheckpointRow{N: n, Checkpoints: c, Bytes: int64(c) * int64(stateBytes), Server: server}
	if prompt > 0 {
		r.BytesPerToken = float64(r.Bytes) / float64(prompt)
	}
	return r
}

// growth compares each measured length with the previous measured one.
func growth(ls []LongCtxLength) []LongCtxGrowth {
	out := []LongCtxGrowth{}
	var prev *LongCtxLength
	for i := range ls {
		l := &ls[i]
		if l.Skipped != "" || l.PromptTokens == 0 || len(l.Steps) == 0 || l.Steps[0].Error != "" {
			continue
		}
		if prev != nil {
			g := LongCtxGrowth{From: prev.PromptTokens, To: l.PromptTokens, LengthRatio: float64(l.PromptTokens) / float64(prev.PromptTokens)}
			g.ColdTTFT = ratio(l.Steps[0].TTFTMs, prev.Steps[0].TTFTMs)
			if l.Memory != nil && prev.Memory != nil {
				g.PoolKV = ratio(l.Memory.PoolKVBytes, prev.Memory.PoolKVBytes)
				g.Checkpoints = ratio(l.Memory.CheckpointBytes, prev.Memory.CheckpointBytes)
				g.RSS = ratio(l.Memory.RSSBytes, prev.Memory.RSSBytes)
			}
			out = append(out, g)
		}
		prev = l
	}
	return out
}

func ratio(a, b *float64) *float64 {
	if a == nil || b == nil || *b == 0 {
		return nil
	}
	return ptr(*a / *b)
}

// costs reads the cost model's published figures (GET /v1/kv-events/snapshot); nil when the
// server does not publish them.
func (lr *longRun) costs(ctx context.Context) *CostFigures {
	var snap struct {
		Costs *CostFigures `json:"costs"`
	}
	if err := lr.admin.getJSON(ctx, http.MethodGet, "/v1/kv-events/snapshot", nil, &snap); err != nil {
		return nil
	}
	return snap.Costs
}

// getJSON sends a JSON body (nil: none) and decodes a 200 answer into out; any other status
// is an error quoting the answer.
func (t *target) getJSON(ctx context.Context, method, path string, body, out any) error {
	resp, err := t.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// series is one /metrics scrape: every counter, gauge and untyped sample by its name and
// labels as the text format writes them (`name` or `name{label="value",...}`, labels sorted);
// histograms and summaries are left out.
type series map[string]float64

func (s series) get(key string) (float64, bool) {
	v, ok := s[key]
	return v, ok
}

// delta is after − before of one labelled counter, by that label's value; nil when the
// counter is absent.
func (s series) delta(before series, name, label string) map[string]float64 {
	var out map[string]float64
	prefix := name + "{" + label + `="`
	for k, v := range s {
		val, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		val, ok = strings.CutSuffix(val, `"}`)
		if !ok || strings.Contains(val, `"`) {
			continue
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[val] = v - before[k]
	}
	return out
}

// scrape reads the target's /metrics; nil (and no error) when it has none or refuses.
func (lr *longRun) scrape(ctx context.Context) (series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, lr.cfg.Target+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if lr.mkey != "" {
		req.Header.Set("Authorization", "Bearer "+lr.mkey)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: lr.hc.Transport}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s/metrics: %w", lr.cfg.Target, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, nil
	}
	s, err := parseSeries(resp.Body)
	if err != nil || len(s) == 0 {
		return nil, nil
	}
	if _, ok := s[metricQueries]; !ok {
		return nil, nil // not Stockpot's counters
	}
	return s, nil
}

// settle waits (up to 3 s) until the counters have counted a request of prompt tokens: a
// server bumps them just after the response's last byte.
func (lr *longRun) settle(ctx context.Context, before series, prompt int) series {
	const limit, poll = 3 * time.Second, 50 * time.Millisecond
	deadline := time.Now().Add(limit)
	for {
		cur, err := lr.scrape(ctx)
		if err != nil || cur == nil {
			return before
		}
		var n float64
		for _, v := range cur.delta(before, "stockpot_prompt_tokens_total", "source") {
			n += v
		}
		if n >= float64(prompt) || time.Now().After(deadline) {
			return cur
		}
		time.Sleep(poll)
	}
}

func fmtMs(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", *p)
}

func fmtIntPtr(p *int) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprint(*p)
}
