package engine_test

import (
	"fmt"
	"math"
	"testing"

	"stockpot/internal/engine"
)

// TestFirstToken: a request given its first token (a decode replica's, sampled by the prefill
// replica) outputs exactly what one engine outputs alone, greedy and seeded, logprobs
// included; and greedy decoding after a forced first token x continues as the prompt
// followed by x does.
func TestFirstToken(t *testing.T) {
	alone := newEngine(t, nil)
	decode := newEngine(t, nil)
	for i, sp := range []engine.SamplingParams{
		{},
		{Temperature: 0.8, TopP: 0.9, TopK: 40, Seed: 5, HasSeed: true},
		{Temperature: 1.2, Seed: 99, HasSeed: true},
	} {
		req := engine.Request{Prompt: seqPrompt(uint64(40+i), 37), MaxTokens: 9, Logprobs: 2, Sampling: sp, IgnoreEOS: true}
		want := collect(t, alone, req)
		first := want.tokens[0]
		req.FirstToken = &first
		got := collect(t, decode, req)
		if fmt.Sprint(got.tokens) != fmt.Sprint(want.tokens) {
			t.Errorf("sampling %+v: tokens %v, alone %v", sp, got.tokens, want.tokens)
		}
		for j := range want.logprobs {
			if math.Float32bits(got.logprobs[j]) != math.Float32bits(want.logprobs[j]) {
				t.Errorf("sampling %+v token %d: logprob %v, alone %v", sp, j, got.logprobs[j], want.logprobs[j])
			}
		}
	}
	// A forced token the engine would not have chosen: the rest follows it.
	prompt := seqPrompt(77, 21)
	own := collect(t, alone, engine.Request{Prompt: prompt, MaxTokens: 1, IgnoreEOS: true}).tokens[0]
	x := (own + 1) % 900
	got := collect(t, decode, engine.Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true, FirstToken: &x})
	cont := collect(t, alone, engine.Request{Prompt: append(append([]int32(nil), prompt...), x), MaxTokens: 5, IgnoreEOS: true})
	if got.tokens[0] != x || fmt.Sprint(got.tokens[1:]) != fmt.Sprint(cont.tokens) {
		t.Errorf("forced %d: %v, want %d then %v", x, got.tokens, x, cont.tokens)
	}
	if got.usage.CompletionTokens != 6 {
		t.Errorf("completion tokens %d, want 6 (the forced one counts)", got.usage.CompletionTokens)
	}
	bad := int32(1 << 30)
	if _, err := decode.Generate(t.Context(), &engine.Request{Prompt: prompt, MaxTokens: 2, FirstToken: &bad}); err == nil {
		t.Error("a first token outside the vocabulary was accepted")
	}
}
