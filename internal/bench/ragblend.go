package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The rag workload with chunk blending (bench --workload rag --blend F,...): the same
// requests sent once per variant, one at a time, each variant under a cache_salt of its own
// so that it starts cold: the full prefill (a fresh salt for every request: nothing reused),
// prefix caching only (the chunks unmarked), and blending at each fraction (each retrieved
// chunk a content part marked "blend": true, blend.recompute F). Every variant's prompts are
// the same text. The server's counters (stockpot_prompt_tokens_total by source,
// stockpot_blend_recomputed_tokens_total) are read around each variant.
//
// A request: a system prompt, then one user message whose content parts are k retrieved
// chunks (drawn by Zipf popularity, s = 1.1, from a corpus of 32, in the order drawn: a
// retriever's rank order, so a chunk's position varies) and the question.

// RAGBlendResult is one variant's numbers.
type RAGBlendResult struct {
	Variant  string  `json:"variant"`
	Fraction float64 `json:"fraction"` // blend's recompute; -1 for the variants that do not blend
	Requests int     `json:"requests"`
	Failed   int     `json:"failed"`
	// TTFTp50Ms and TTFTp95Ms are client-side: the request sent to its first streamed token.
	TTFTp50Ms float64 `json:"ttft_p50_ms"`
	TTFTp95Ms float64 `json:"ttft_p95_ms"`
	// From the server's counters over the variant: prompt tokens, reused as a cached prefix
	// (any tier), blended (cached chunk K/V kept), computed, and of those the ones recomputed
	// for the blend.
	PromptTokens    float64 `json:"prompt_tokens"`
	PrefixTokens    float64 `json:"prefix_tokens"`
	BlendedTokens   float64 `json:"blended_tokens"`
	ComputedTokens  float64 `json:"computed_tokens"`
	RecomputedBlend float64 `json:"blend_recomputed_tokens"`
}

// HitRate is the share of prompt tokens whose K/V was reused: a prefix's or a chunk's.
func (r RAGBlendResult) HitRate() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return (r.PrefixTokens + r.BlendedTokens) / r.PromptTokens
}

// ragBlendRequest is one request's parts.
type ragBlendRequest struct {
	chunks   []string
	question string
}

// ragBlendRequests builds Sessions × Turns requests of k chunks of chunkTokens each.
func ragBlendRequests(cfg Config, tokensPerWord float64, k, chunkTokens int) []ragBlendRequest {
	g := &textGen{rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed_b1e0)), tokensPerWord: tokensPerWord}
	const corpus = 32
	docs := make([]string, corpus)
	for i := range docs {
		docs[i] = fmt.Sprintf("[chunk %d] %s", i, g.words(chunkTokens))
	}
	zipf := rand.NewZipf(g.rng, 1.1, 1, corpus-1)
	var out []ragBlendRequest
	for s := 0; s < cfg.Sessions; s++ {
		for q := 0; q < cfg.Turns; q++ {
			var picked []int
			for len(picked) < k {
				if i := int(zipf.Uint64()); !slices.Contains(picked, i) {
					picked = append(picked, i)
				}
			}
			r := ragBlendRequest{question: fmt.Sprintf("Question %d.%d: %s", s, q, g.words(cfg.QuestionTokens))}
			for _, i := range picked {
				r.chunks = append(r.chunks, docs[i])
			}
			out = append(out, r)
		}
	}
	return out
}

// body is r as a chat request: marked selects "blend": true on the chunks, fraction the
// blend object's recompute (ignored unless marked).
func (r ragBlendRequest) body(maxTokens int, salt string, marked bool, fraction float64) map[string]any {
	var parts []map[string]any
	for _, c := range r.chunks {
		p := map[string]any{"type": "text", "text": c}
		if marked {
			p["blend"] = true
		}
		parts = append(parts, p)
	}
	parts = append(parts, map[string]any{"type": "text", "text": r.question})
	b := map[string]any{"max_tokens": maxTokens, "cache_salt": salt, "temperature": 0, "messages": []map[string]any{
		{"role": "system", "content": "Use the retrieved context to answer the question."},
		{"role": "user", "content": parts},
	}}
	if marked {
		b["blend"] = map[string]any{"recompute": fraction}
	}
	return b
}

// RunRAGBlend runs the rag workload's blending comparison (see the comment above): k chunks
// of cfg.DocTokens/k tokens each, at each of fractions.
func RunRAGBlend(ctx context.Context, cfg Config, fractions []float64, k int) ([]RAGBlendResult, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	tgt := &target{base: cfg.Target, apiKey: cfg.APIKey, model: cfg.Model, http: &http.Client{Transport: tr}}
	tgt.probe(ctx, cfg.BlockSize)
	if !tgt.stockpot {
		return nil, fmt.Errorf("bench: --blend needs a Stockpot target (chunk blending is its extension)")
	}
	reqs := ragBlendRequests(cfg, tgt.calibrate(ctx, cfg.Seed), k, cfg.DocTokens/k)
	type variant struct {
		name     string
		fraction float64
		marked   bool
		fresh    bool // a new salt per request
	}
	vs := []variant{{"full prefill", -1, false, true}, {"prefix caching only", -1, false, false}}
	for _, f := range fractions {
		vs = append(vs, variant{fmt.Sprintf("blend %g", f), f, true, false})
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	var out []RAGBlendResult
	for vi, v := range vs {
		before, err := scrapeServers(ctx, hc, cfg)
		if err != nil {
			return nil, err
		}
		recBefore := blendRecomputed(ctx, hc, cfg)
		res := RAGBlendResult{Variant: v.name, Fraction: v.fraction}
		var ttft []float64
		var samples []Sample
		epoch := time.Now()
		for i, r := range reqs {
			salt := fmt.Sprintf("ragblend-%d-%d", cfg.Seed, vi)
			if v.fresh {
				salt = fmt.Sprintf("%s-%d", salt, i)
			}
			var s Sample
			rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			tgt.send(rctx, "/v1/chat/completions", r.body(cfg.MaxTokens, salt, v.marked, v.fraction), epoch, &s)
			cancel()
			res.Requests++
			if !s.OK || s.FirstToken <= 0 {
				res.Failed++
				if res.Failed == 1 && s.Err != "" {
					return nil, fmt.Errorf("bench: %s: %s", v.name, s.Err)
				}
				continue
			}
			ttft = append(ttft, float64(s.FirstToken-s.Start)/float64(time.Millisecond))
			samples = append(samples, s)
			if cfg.Progress != nil {
				cfg.Progress()
			}
		}
		after, err := settledScrape(ctx, hc, cfg, before, samples)
		if err != nil {
			return nil, err
		}
		d := counterDelta(before, after)
		res.PromptTokens = d.Queries
		for src, n := range d.Tiers {
			switch src {
			case "computed":
				res.ComputedTokens = n
			case "blended":
				res.BlendedTokens = n
			default:
				res.PrefixTokens += n
			}
		}
		res.RecomputedBlend = blendRecomputed(ctx, hc, cfg) - recBefore
		if len(ttft) > 0 {
			slices.Sort(ttft)
			res.TTFTp50Ms, res.TTFTp95Ms = percentile(ttft, 0.5), percentile(ttft, 0.95)
		}
		out = append(out, res)
	}
	return out, nil
}

var blendRecomputedLine = regexp.MustCompile(`(?m)^stockpot_blend_recomputed_tokens_total (\S+)$`)

// blendRecomputed is the target's stockpot_blend_recomputed_tokens_total (0 when absent).
func blendRecomputed(ctx context.Context, hc *http.Client, cfg Config) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(cfg.Target, "/")+"/metrics", nil)
	if err != nil {
		return 0
	}
	if k := cfg.metricsKey(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := blendRecomputedLine.FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// WriteRAGBlend prints the comparison as a table.
func WriteRAGBlend(w io.Writer, rs []RAGBlendResult) {
	fmt.Fprintf(w, "%-22s %9s %9s %8s %9s %9s %9s %9s %9s\n", "variant", "TTFT p50", "TTFT p95", "hit rate", "prompt", "prefix", "blended", "computed", "recomp.")
	for _, r := range rs {
		fmt.Fprintf(w, "%-22s %9.1f %9.1f %7.1f%% %9.0f %9.0f %9.0f %9.0f %9.0f\n", r.Variant, r.TTFTp50Ms, r.TTFTp95Ms,
			100*r.HitRate(), r.PromptTokens, r.PrefixTokens, r.BlendedTokens, r.ComputedTokens, r.RecomputedBlend)
	}
}
