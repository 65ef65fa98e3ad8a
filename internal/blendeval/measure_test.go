package blendeval

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"stockpot/internal/blend"
	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

func loadPreset(t testing.TB, name string) *model.Model {
	t.Helper()
	w, err := synth.Build(name, synth.Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f, kernels.NewPool(2))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ragPrompt is a RAG-shaped prompt of random tokens: a system prompt of sys tokens, k chunks
// of chunk tokens each, a question of q tokens; and the chunks' marks.
func ragPrompt(seed uint64, vocab, sys, k, chunk, q int) ([]int32, []blend.Chunk) {
	rng := rand.New(rand.NewPCG(seed, 38))
	tok := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(3 + rng.IntN(vocab-3))
		}
		return out
	}
	p := tok(sys)
	var cs []blend.Chunk
	for range k {
		cs = append(cs, blend.Chunk{Start: len(p), End: len(p) + chunk})
		p = append(p, tok(chunk)...)
	}
	return append(p, tok(q)...), cs
}

// TestMeasureBitwiseAtOne is the gate's anchor: at fraction 1 the blended K/V, the logits of
// every step and the greedy tokens are bitwise the full prefill's, under EPIC and CacheBlend;
// below it the deviation is finite, zero at layer 0's values (a value carries no position)
// and not zero deeper; CacheBlend at 0 is EPIC at 0 (every copy kept).
func TestMeasureBitwiseAtOne(t *testing.T) {
	for _, preset := range []string{"tiny-llama-spm", "tiny-qwen3"} {
		t.Run(preset, func(t *testing.T) {
			m := loadPreset(t, preset)
			prompt, chunks := ragPrompt(1, m.Config().Vocab, 24, 3, 40, 9)
			rep, err := Measure(m, prompt, chunks, Config{Fractions: []float64{1, 0.15, 0}, Steps: 8})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Results) != 6 {
				t.Fatalf("%d results, want 3 fractions × 2 policies", len(rep.Results))
			}
			for _, one := range rep.Results[:2] {
				if !one.Bitwise || one.KL != 0 || one.Top1 != 1 || one.GreedyPrefix != 8 || one.Blended != 0 {
					t.Fatalf("%s at fraction 1: %+v, want bitwise the full prefill", one.Policy, one)
				}
			}
			if e, c := rep.Results[4], rep.Results[5]; e.Policy != "epic" || c.Policy != "cacheblend" ||
				c.KL != e.KL || c.Blended != e.Blended || !slices.Equal(c.KDev, e.KDev) || !slices.Equal(c.Greedy, e.Greedy) {
				t.Errorf("at 0: cacheblend %+v, want epic's %+v", c, e)
			}
			for _, r := range rep.Results[2:] {
				if r.Bitwise || r.Blended == 0 {
					t.Errorf("fraction %v: bitwise %v with %d blended, want a deviation", r.Fraction, r.Bitwise, r.Blended)
				}
				for l := range r.KDev {
					for _, d := range []float64{r.KDev[l], r.VDev[l]} {
						if math.IsNaN(d) || math.IsInf(d, 0) || d < 0 {
							t.Errorf("fraction %v layer %d: deviation %v", r.Fraction, l, d)
						}
					}
				}
				if r.VDev[0] != 0 || r.KDev[len(r.KDev)-1] == 0 || math.IsNaN(r.KL) || math.IsInf(r.KL, 0) {
					t.Errorf("fraction %v: V deviation at layer 0 %v (want 0), K at the last %v (want > 0), KL %v",
						r.Fraction, r.VDev[0], r.KDev[len(r.KDev)-1], r.KL)
				}
				t.Logf("%s at %v: blended %d recomputed %d, KL %.4g, top-1 %.2f, K dev by layer %.3g", r.Policy, r.Fraction, r.Blended, r.Recomputed, r.KL, r.Top1, r.KDev)
			}
		})
	}
}

// TestMeasureIsTheEngine: the replay measures what the engine serves: for the same prompt,
// chunks, fraction and policy, the engine's greedy tokens and blended counts are the replay's.
func TestMeasureIsTheEngine(t *testing.T) {
	m := loadPreset(t, "tiny-qwen3")
	prompt, chunks := ragPrompt(2, m.Config().Vocab, 24, 3, 40, 9)
	const steps = 8
	rep, err := Measure(m, prompt, chunks, Config{Fractions: []float64{0.3, 0}, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		pol, err := blend.ParsePolicy(r.Policy)
		if err != nil {
			t.Fatal(err)
		}
		cfg := engine.DefaultConfig()
		cfg.Identity, cfg.KVMemory = []byte("blendeval"), 8<<20
		e, err := engine.New(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		req := engine.Request{Prompt: prompt, MaxTokens: steps, IgnoreEOS: true, Sampling: engine.SamplingParams{Temperature: 0},
			Blend: &blend.Spec{Chunks: chunks, Recompute: r.Fraction, Policy: pol}}
		out, err := e.Generate(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		var toks []int32
		var u *engine.Usage
		for o := range out {
			for _, tk := range o.Tokens {
				toks = append(toks, tk.ID)
			}
			if o.Done {
				u = o.Usage
			}
		}
		e.Close()
		if u == nil || u.Blend == nil || u.Blend.BlendedTokens != r.Blended || u.Blend.RecomputedTokens != r.Recomputed {
			t.Fatalf("%s at %v: engine usage %+v, the replay blended %d and recomputed %d", r.Policy, r.Fraction, u, r.Blended, r.Recomputed)
		}
		for i := range steps {
			if toks[i] != r.Greedy[i] {
				t.Fatalf("%s at %v: engine tokens %v, the replay's %v", r.Policy, r.Fraction, toks, r.Greedy)
			}
		}
	}
}
