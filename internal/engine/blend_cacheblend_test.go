package engine_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"stockpot/internal/blend"
	"stockpot/internal/engine"
	"stockpot/internal/kvcache"
)

// TestCacheBlendBitwise holds CacheBlend to its two oracles, cold and warm, on llama and
// qwen3, with f32 and f16 caches and a step budget small enough to split the measuring pass
// and the recompute list (items over non-consecutive positions included): at fraction 1
// the output is bitwise a full prefill's; at 0 bitwise plain blending's (EPIC at 0), so
// nothing the measuring pass wrote survives.
func TestCacheBlendBitwise(t *testing.T) {
	for _, preset := range []string{"tiny-llama-spm", "tiny-qwen3"} {
		m := loadPreset(t, preset)
		for _, kv := range []kvcache.DType{kvcache.F32, kvcache.F16} {
			for _, batch := range []int{512, 20} {
				t.Run(fmt.Sprintf("%s/%s/batch%d", preset, kv, batch), func(t *testing.T) {
					cfg := func(c *engine.Config) { c.KVType, c.MaxBatchTokens = kv, batch }
					for _, order := range []bool{true, false} {
						prompt, chunks := ragPrompt(order)
						for _, f := range []float64{1, 0} {
							oracle := "full prefill"
							var wantSpec *blend.Spec
							if f == 0 {
								oracle, wantSpec = "plain blending", &blend.Spec{Chunks: chunks, Recompute: 0}
							}
							want := collect(t, engineFor(t, m, cfg), greedy(prompt, wantSpec))
							e := engineFor(t, m, cfg)
							if !order {
								p, c := ragPrompt(true) // warm: cached by a request that placed them elsewhere
								collect(t, e, greedy(p, &blend.Spec{Chunks: c, Recompute: 0.5, Policy: blend.CacheBlend}))
							}
							have := collect(t, e, greedy(prompt, &blend.Spec{Chunks: chunks, Recompute: f, Policy: blend.CacheBlend}))
							sameOutput(t, fmt.Sprintf("cacheblend %v (order %v) against %s", f, order, oracle), have, want)
							u := have.usage
							if u.Blend == nil || u.Blend.BlendedTokens+u.Blend.RecomputedTokens != 64 || (f == 1) != (u.Blend.BlendedTokens == 0) {
								t.Fatalf("f %v: usage.Blend = %+v, want the chunks' 64 full-block tokens, all recomputed at 1 and none at 0", f, u.Blend)
							}
							if got := u.CachedTokens() + u.ComputedTokens + u.Blend.BlendedTokens; got != u.PromptTokens {
								t.Errorf("cached %d + computed %d + blended %d != prompt %d", u.CachedTokens(), u.ComputedTokens, u.Blend.BlendedTokens, u.PromptTokens)
							}
						}
					}
				})
			}
		}
	}
}

// TestCacheBlendSelects: at fraction f CacheBlend recomputes ⌈f·n⌉ of the n copied tokens,
// whatever the step budget, and its answer (the pick included) is a function of the
// request: cold, warm and under another budget alike, bitwise.
func TestCacheBlendSelects(t *testing.T) {
	m := loadPreset(t, "tiny-qwen3")
	cfg := engine.DefaultConfig()
	cfg.BlendCheckLayer = -1
	if _, err := engine.New(m, cfg); err == nil {
		t.Error("check layer -1: no error")
	}
	prompt, chunks := ragPrompt(true)
	for _, f := range []float64{0.05, 0.15, 0.5} {
		spec := &blend.Spec{Chunks: chunks, Recompute: f, Policy: blend.CacheBlend}
		want := blend.CacheBlendCount(64, f)
		var first result
		for i, batch := range []int{512, 512, 13} {
			e := engineFor(t, m, func(c *engine.Config) { c.MaxBatchTokens = batch })
			if i == 1 {
				collect(t, e, greedy(prompt, spec)) // warm the chunks
			}
			have := collect(t, e, greedy(prompt, spec))
			u := have.usage.Blend
			if u == nil || u.RecomputedTokens != want || u.BlendedTokens != 64-want {
				t.Fatalf("f %v: usage.Blend = %+v, want %d recomputed of 64", f, u, want)
			}
			if b := u.Chunks[0].Blended + u.Chunks[1].Blended; b != 64-want {
				t.Errorf("f %v: chunks' blended %d + %d, want %d", f, u.Chunks[0].Blended, u.Chunks[1].Blended, 64-want)
			}
			if i == 0 {
				first = have
				continue
			}
			sameOutput(t, fmt.Sprintf("f %v run %d", f, i), have, first)
			for c, ch := range u.Chunks {
				if w := first.usage.Blend.Chunks[c].Blended; ch.Blended != w {
					t.Errorf("f %v run %d: chunk %d blended %d, first run %d", f, i, c, ch.Blended, w)
				}
			}
		}
	}
}

// firstDist is the first generated token's full distribution (log-probabilities by id).
func firstDist(t *testing.T, e *engine.Engine, prompt []int32, spec *blend.Spec, vocab int) ([]float64, engine.Usage) {
	t.Helper()
	req := greedy(prompt, spec)
	req.MaxTokens, req.Logprobs = 1, vocab
	ch, err := e.Generate(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	lp := make([]float64, vocab)
	for i := range lp {
		lp[i] = math.Inf(-1)
	}
	var u engine.Usage
	for o := range ch {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		for _, tok := range o.Tokens {
			for _, alt := range tok.Top {
				lp[alt.ID] = float64(alt.Logprob)
			}
		}
		if o.Done {
			u = *o.Usage
		}
	}
	return lp, u
}

// klMax is KL(p‖q) of two distributions given as log-probabilities, and the largest
// log-probability difference.
func klMax(p, q []float64) (kl, maxAbs float64) {
	for i := range p {
		if math.IsInf(p[i], -1) {
			continue
		}
		kl += math.Exp(p[i]) * (p[i] - q[i])
		maxAbs = max(maxAbs, math.Abs(p[i]-q[i]))
	}
	return kl, maxAbs
}

// ragPrompt3 is a system prompt, three retrieved chunks in the given order and a question;
// the chunks' marks.
func ragPrompt3(order []int) ([]int32, []blend.Chunk) {
	sys, q := seqPrompt(31, 37), seqPrompt(35, 15)[1:]
	docs := [][]int32{seqPrompt(32, 53)[1:], seqPrompt(33, 41)[1:], seqPrompt(34, 66)[1:]}
	p := append([]int32(nil), sys...)
	var marks []blend.Chunk
	for _, i := range order {
		marks = append(marks, blend.Chunk{Start: len(p), End: len(p) + len(docs[i])})
		p = append(p, docs[i]...)
	}
	return append(p, q...), marks
}

// TestCacheBlendDeviation measures CacheBlend against EPIC at the same fraction on a RAG
// prompt (a system prompt, three chunks cached by a request that placed them in another
// order, a question): the first token's KL divergence from the full prefill's distribution
// and its largest log-probability difference. The weights are random, so the numbers say
// nothing about quality on a trained model, and only the invariants are asserted: finite,
// recompute 1 exact, and a nonzero deviation below 1. The measured numbers are logged.
func TestCacheBlendDeviation(t *testing.T) {
	for _, preset := range []string{"tiny-llama-spm", "tiny-qwen3"} {
		t.Run(preset, func(t *testing.T) {
			m := loadPreset(t, preset)
			vocab := m.Config().Vocab
			prompt, chunks := ragPrompt3([]int{2, 0, 1})
			want, _ := firstDist(t, engineFor(t, m, nil), prompt, nil, vocab)
			for _, f := range []float64{0, 0.15, 0.3, 1} {
				line := fmt.Sprintf("f %.2f:", f)
				for _, pol := range []blend.Policy{blend.EPIC, blend.CacheBlend} {
					e := engineFor(t, m, nil)
					p0, c0 := ragPrompt3([]int{0, 1, 2})
					collect(t, e, greedy(p0, &blend.Spec{Chunks: c0})) // the chunks, cached elsewhere
					have, u := firstDist(t, e, prompt, &blend.Spec{Chunks: chunks, Recompute: f, Policy: pol}, vocab)
					kl, mx := klMax(want, have)
					if math.IsNaN(kl) || math.IsInf(kl, 0) || kl < -1e-9 {
						t.Fatalf("%v at %v: KL %v", pol, f, kl)
					}
					if f == 1 && mx != 0 {
						t.Errorf("%v at 1: log-probabilities differ from the prefill's by %v", pol, mx)
					}
					if f < 1 && mx == 0 {
						t.Errorf("%v at %v: no deviation at all from the prefill", pol, f)
					}
					line += fmt.Sprintf("  %v (%d of %d recomputed) KL %.3g max|Δlogp| %.3g", pol, u.Blend.RecomputedTokens,
						u.Blend.RecomputedTokens+u.Blend.BlendedTokens, kl, mx)
				}
				t.Log(line)
			}
		})
	}
}
