package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"stockpot/internal/blend"
	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// loadPreset builds and loads a synth preset.
func loadPreset(t *testing.T, name string) *model.Model {
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

func engineFor(t *testing.T, m *model.Model, mutate func(*engine.Config)) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("blend-test")
	cfg.KVMemory = 8 << 20
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := engine.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.CheckInvariants(); err != nil {
			t.Errorf("invariants after test: %v", err)
		}
		e.Close()
	})
	return e
}

// ragPrompt is a system prompt, two retrieved chunks and a question; the chunks' marks.
func ragPrompt(order bool) ([]int32, []blend.Chunk) {
	sys, a, b, q := seqPrompt(21, 40), seqPrompt(22, 48)[1:], seqPrompt(23, 41)[1:], seqPrompt(24, 13)[1:]
	if !order {
		a, b = b, a
	}
	p := append(append(append(append([]int32(nil), sys...), a...), b...), q...)
	return p, []blend.Chunk{{Start: len(sys), End: len(sys) + len(a)}, {Start: len(sys) + len(a), End: len(sys) + len(a) + len(b)}}
}

func greedy(prompt []int32, spec *blend.Spec) engine.Request {
	return engine.Request{Prompt: prompt, MaxTokens: 8, Sampling: engine.SamplingParams{Temperature: 0}, IgnoreEOS: true, Logprobs: 4, Blend: spec}
}

func sameOutput(t *testing.T, what string, have, want result) {
	t.Helper()
	if len(have.tokens) != len(want.tokens) {
		t.Fatalf("%s: %d tokens, want %d", what, len(have.tokens), len(want.tokens))
	}
	for i := range want.tokens {
		if have.tokens[i] != want.tokens[i] || math.Float32bits(have.logprobs[i]) != math.Float32bits(want.logprobs[i]) {
			t.Fatalf("%s: token %d is %d (logprob %v), want %d (%v) bitwise", what, i, have.tokens[i], have.logprobs[i], want.tokens[i], want.logprobs[i])
		}
	}
}

// TestBlendFullRecomputeIsPrefill is the oracle: recompute 1 gives bitwise a full prefill's
// output, cold (the chunks computed by the request itself) and warm (found cached, at other
// positions), on llama and qwen3; and a blended request commits nothing approximate.
func TestBlendFullRecomputeIsPrefill(t *testing.T) {
	for _, preset := range []string{"tiny-llama-spm", "tiny-qwen3"} {
		t.Run(preset, func(t *testing.T) {
			m := loadPreset(t, preset)
			for _, order := range []bool{true, false} {
				prompt, chunks := ragPrompt(order)
				want := collect(t, engineFor(t, m, nil), greedy(prompt, nil))
				e := engineFor(t, m, nil)
				if !order {
					// Warm: the chunks were cached by a request that placed them elsewhere.
					p, c := ragPrompt(true)
					collect(t, e, greedy(p, &blend.Spec{Chunks: c, Recompute: 1}))
				}
				have := collect(t, e, greedy(prompt, &blend.Spec{Chunks: chunks, Recompute: 1}))
				sameOutput(t, "recompute 1", have, want)
				u := have.usage
				if u.Blend == nil || u.Blend.BlendedTokens != 0 || u.Blend.RecomputedTokens == 0 {
					t.Fatalf("usage.Blend = %+v, want recomputed tokens and none blended", u.Blend)
				}
				if !order && (u.Blend.Chunks[0].Hit == 0 || u.Blend.Chunks[1].Hit == 0) {
					t.Errorf("warm chunks not found cached: %+v", u.Blend.Chunks)
				}
				if got := u.CachedTokens() + u.ComputedTokens + u.Blend.BlendedTokens; got != u.PromptTokens {
					t.Errorf("cached %d + computed %d + blended %d != prompt %d", u.CachedTokens(), u.ComputedTokens, u.Blend.BlendedTokens, u.PromptTokens)
				}
			}
		})
	}
}

// TestBlendDeviation: recompute 0 with a system prompt before the chunks deviates (finite,
// nonzero) from a full prefill; a chunk at position 0 with nothing before it reuses exactly;
// and neither leaves approximate K/V for a plain request to reuse.
func TestBlendDeviation(t *testing.T) {
	m := tinyModel(t)
	prompt, chunks := ragPrompt(true)
	want := collect(t, engineFor(t, m, nil), greedy(prompt, nil))
	e := engineFor(t, m, nil)
	have := collect(t, e, greedy(prompt, &blend.Spec{Chunks: chunks, Recompute: 0}))
	if u := have.usage.Blend; u == nil || u.BlendedTokens != 32+32 || u.RecomputedTokens != 0 {
		t.Fatalf("usage.Blend = %+v, want the chunks' 4 full blocks blended", u)
	}
	d := math.Abs(float64(have.logprobs[0] - want.logprobs[0]))
	if math.IsNaN(d) || math.IsInf(d, 0) || (d == 0 && have.tokens[0] == want.tokens[0]) {
		t.Errorf("first token %d logprob %v against the prefill's %d %v: want a finite, nonzero deviation", have.tokens[0], have.logprobs[0], want.tokens[0], want.logprobs[0])
	}
	t.Logf("recompute 0: first-token logprob %v, prefill %v", have.logprobs[0], want.logprobs[0])
	// The same prompt plain: the blended request committed only its exact prefix (the
	// system prompt's 2 full blocks), so the answer is the prefill's, bitwise.
	plain := collect(t, e, greedy(prompt, nil))
	sameOutput(t, "plain after blend", plain, want)
	if plain.usage.DeviceTokens != 32 {
		t.Errorf("plain request reused %d device tokens, want the 32 of the system prompt", plain.usage.DeviceTokens)
	}

	// A chunk at position 0 with nothing before it: its cached K/V is the prefill's.
	p0 := prompt[40 : 40+47+20]
	want0 := collect(t, engineFor(t, m, nil), greedy(p0, nil))
	have0 := collect(t, e, greedy(p0, &blend.Spec{Chunks: []blend.Chunk{{Start: 0, End: 47}}}))
	sameOutput(t, "chunk at 0, recompute 0", have0, want0)
	if u := have0.usage.Blend; u == nil || u.BlendedTokens != 32 {
		t.Fatalf("usage.Blend = %+v, want 32 blended tokens", u)
	}
}

// TestBlendRefused: bad marks and models that cannot blend are refused before anything
// runs, with ErrBlend (a 400 at the API).
func TestBlendRefused(t *testing.T) {
	e := newEngine(t, nil)
	prompt, _ := ragPrompt(true)
	for _, spec := range []blend.Spec{
		{Chunks: []blend.Chunk{{Start: 10, End: 10}}},
		{Chunks: []blend.Chunk{{Start: 10, End: 30}, {Start: 20, End: 40}}},
		{Chunks: []blend.Chunk{{Start: 10, End: len(prompt) + 1}}},
		{Chunks: []blend.Chunk{{Start: 0, End: 10}}, Recompute: 1.01},
	} {
		req := greedy(prompt, &spec)
		if _, err := e.Generate(context.Background(), &req); !errors.Is(err, engine.ErrBlend) {
			t.Errorf("%+v: have %v, want ErrBlend", spec, err)
		}
	}
	h := hybridEngine(t, hybridModel(t), nil)
	req := greedy(prompt, &blend.Spec{Chunks: []blend.Chunk{{Start: 0, End: 10}}})
	if _, err := h.Generate(context.Background(), &req); !errors.Is(err, engine.ErrBlend) || !errors.Is(err, engine.ErrHybrid) {
		t.Errorf("qwen35: have %v, want ErrBlend and ErrHybrid", err)
	}
}

// TestBlendPrefixIntoChunk: above 0 a blended request commits its exact prefix through its
// first chunk's recomputed head, so a later request with the same first chunk matches it
// partway into the chunk. That chunk is still blended: its part past the prefix is copied
// from the cached chunk and the rest of its head recomputed, which is bitwise the blend with
// only the system prompt matched (EPIC), and at recompute 1 bitwise the full prefill (EPIC
// and CacheBlend).
func TestBlendPrefixIntoChunk(t *testing.T) {
	m := tinyModel(t)
	sys, a, b, c, q := seqPrompt(21, 40), seqPrompt(22, 48)[1:], seqPrompt(23, 41)[1:], seqPrompt(26, 41)[1:], seqPrompt(24, 13)[1:]
	build := func(parts ...[]int32) ([]int32, []blend.Chunk) {
		var p []int32
		var marks []blend.Chunk
		for i, part := range parts {
			if i > 0 && i < len(parts)-1 {
				marks = append(marks, blend.Chunk{Start: len(p), End: len(p) + len(part)})
			}
			p = append(p, part...)
		}
		return p, marks
	}
	p1, c1 := build(sys, a, b, q)
	p2, c2 := build(sys, a, c, q)
	const f = 0.2 // chunk a's head: ⌈0.2·47⌉ = 10 tokens, so p1 commits [0, 48): 8 into a

	e := engineFor(t, m, nil)
	collect(t, e, greedy(p1, &blend.Spec{Chunks: c1, Recompute: f}))
	have := collect(t, e, greedy(p2, &blend.Spec{Chunks: c2, Recompute: f}))
	u := have.usage
	if u.DeviceTokens != 48 {
		t.Fatalf("second request matched %d device tokens, want 48 (8 into its first chunk)", u.DeviceTokens)
	}
	// Chunk a: 2 cached blocks, [8, 32) of it copied, [8, 10) of its head recomputed.
	if ch := u.Blend.Chunks[0]; ch.Hit != 32 || ch.Blended != 22 {
		t.Errorf("first chunk %+v, want 32 hit and 22 blended", ch)
	}
	if got := u.CachedTokens() + u.ComputedTokens + u.Blend.BlendedTokens; got != u.PromptTokens {
		t.Errorf("cached %d + computed %d + blended %d != prompt %d", u.CachedTokens(), u.ComputedTokens, u.Blend.BlendedTokens, u.PromptTokens)
	}
	t.Logf("second request: device %d, blend %+v", u.DeviceTokens, *u.Blend)

	// The oracle: the same blend on an engine where the chunks were cached elsewhere and
	// nothing of p2's prefix was (the whole head recomputed over exact K/V).
	o := engineFor(t, m, nil)
	p0, c0 := build(seqPrompt(27, 20), c, a, q)
	collect(t, o, greedy(p0, &blend.Spec{Chunks: c0}))
	want := collect(t, o, greedy(p2, &blend.Spec{Chunks: c2, Recompute: f}))
	if want.usage.DeviceTokens != 0 || want.usage.Blend.Chunks[0].Blended != 32-10 {
		t.Fatalf("oracle: device %d, blend %+v; want 0 and the first chunk's 22 tokens blended", want.usage.DeviceTokens, *want.usage.Blend)
	}
	sameOutput(t, "prefix into the chunk, against the blend without it", have, want)

	full := collect(t, engineFor(t, m, nil), greedy(p2, nil))
	for _, pol := range []blend.Policy{blend.EPIC, blend.CacheBlend} {
		e := engineFor(t, m, nil)
		collect(t, e, greedy(p1, &blend.Spec{Chunks: c1, Recompute: f}))
		one := collect(t, e, greedy(p2, &blend.Spec{Chunks: c2, Recompute: 1, Policy: pol}))
		sameOutput(t, fmt.Sprintf("%v at 1, prefix into the chunk", pol), one, full)
		if u := one.usage; u.DeviceTokens != 48 || u.Blend.RecomputedTokens == 0 || u.Blend.BlendedTokens != 0 {
			t.Errorf("%v at 1: device %d, blend %+v; want 48, recomputed tokens and none blended", pol, u.DeviceTokens, *u.Blend)
		}
		if pol == blend.CacheBlend {
			e := engineFor(t, m, nil)
			collect(t, e, greedy(p1, &blend.Spec{Chunks: c1, Recompute: f}))
			below := collect(t, e, greedy(p2, &blend.Spec{Chunks: c2, Recompute: f, Policy: pol}))
			if ch := below.usage.Blend.Chunks[0]; below.usage.DeviceTokens != 48 || ch.Blended == 0 {
				t.Errorf("cacheblend at %v: device %d, first chunk %+v; want 48 and tokens blended", f, below.usage.DeviceTokens, ch)
			}
		}
	}
}
