package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/synth"
)

// TestServeHybridMatchesLlamaCpp serves a qwen35 synthetic model over HTTP: greedy completions
// equal llama.cpp's on the same file, and a repeated prompt resumes from the state
// checkpoint of its last reusable block, says so in its usage, and answers the same.
func TestServeHybridMatchesLlamaCpp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qwen35.gguf")
	if err := synth.WriteFile("tiny-qwen35", synth.Options{Seed: 9, Type: gguf.TypeF32}, path); err != nil {
		t.Fatal(err)
	}
	_, ts := newTestInstance(t, func(o *serveOptions) { o.model = path; o.engine.MaxBatchTokens = 48 })
	texts := []string{"The quick brown fox jumps over the lazy dog.", longText(900)}
	const n = 16
	type reply struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		Usage          apiUsage
	}
	var prompts [][]int32
	var got [][]int32
	for round := 0; round < 2; round++ {
		for _, text := range texts {
			code, out := post(t, ts.URL+"/v1/completions", map[string]any{
				"prompt": text, "max_tokens": n, "temperature": 0, "ignore_eos": true, "return_token_ids": true})
			if code != 200 {
				t.Fatalf("status %d: %s", code, out)
			}
			var r reply
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Choices) != 1 || len(r.Choices[0].TokenIDs) != n || len(r.PromptTokenIDs) == 0 {
				t.Fatalf("reply %s", out)
			}
			u := r.Usage
			want := 0 // cold
			if round == 1 {
				want = (u.PromptTokens - 1) / 16 * 16 // every full block before the last token
			}
			if u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens == nil || *u.PromptTokensDetails.CachedTokens != want ||
				u.Cache["device_tokens"] != want || u.Cache["computed_tokens"] != u.PromptTokens-want || u.PromptTokens != len(r.PromptTokenIDs) {
				t.Errorf("round %d: usage %s: want %d tokens cached", round, out, want)
			}
			if round == 0 {
				prompts = append(prompts, r.PromptTokenIDs)
				got = append(got, r.Choices[0].TokenIDs)
			} else if i := slices.Index(texts, text); !slices.Equal(r.Choices[0].TokenIDs, got[i]) {
				t.Errorf("repeat of prompt %d: %v, first %v", i, r.Choices[0].TokenIDs, got[i])
			}
		}
	}
	ref, err := llamaref.Evaluate(path, prompts, n, llamaref.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if !slices.Equal(got[i], ref[i].Continuation) {
			t.Errorf("prompt %d (%d tokens): served %v, llama.cpp %v", i, len(prompts[i]), got[i], ref[i].Continuation)
		}
	}
}
