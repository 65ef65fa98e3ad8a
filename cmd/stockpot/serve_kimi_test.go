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

// TestServeKimiLinearMatchesLlamaCpp serves a kimi-linear synthetic model (KDA + MLA with its
// latent K/V in the engine's blocks + MoE) over HTTP: greedy completions, batched together and
// repeated, equal llama.cpp's on the same file.
func TestServeKimiLinearMatchesLlamaCpp(t *testing.T) {
	serveMatchesLlamaCpp(t, "tiny-kimi-linear", []string{"The quick brown fox jumps over the lazy dog.", longText(900)}, 0)
}

// TestServeKimiK3MatchesLlamaCpp is the same for Kimi-K3, with a prompt of about 5,000 tokens
// that crosses 79 state checkpoints (one every 4 blocks of 16): the second round resumes it
// from the deepest checkpoint, and both rounds equal llama.cpp.
func TestServeKimiK3MatchesLlamaCpp(t *testing.T) {
	serveMatchesLlamaCpp(t, "tiny-kimi-k3", []string{"The quick brown fox jumps over the lazy dog.", longText(13200)}, 4)
}

func serveMatchesLlamaCpp(t *testing.T, preset string, texts []string, every int) {
	path := filepath.Join(t.TempDir(), preset+".gguf")
	if err := synth.WriteFile(preset, synth.Options{Seed: 9, Type: gguf.TypeF32}, path); err != nil {
		t.Fatal(err)
	}
	_, ts := newTestInstance(t, func(o *serveOptions) {
		o.model = path
		o.engine.MaxBatchTokens = 48
		o.engine.StateCheckpointBlocks = every
		o.engine.KVMemory = 64 << 20
	})
	const n = 16
	type reply struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		Usage          struct {
			Cache struct {
				Device int `json:"device_tokens"`
			}
		}
	}
	var prompts, got [][]int32
	for round := 0; round < 2; round++ {
		for _, text := range texts {
			code, out := post(t, ts.URL+"/v1/completions", map[string]any{
				"prompt": text, "max_tokens": n, "temperature": 0, "ignore_eos": true, "return_token_ids": true, "cache_report": true})
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
			if round == 0 {
				prompts = append(prompts, r.PromptTokenIDs)
				got = append(got, r.Choices[0].TokenIDs)
			} else if i := slices.Index(texts, text); !slices.Equal(r.Choices[0].TokenIDs, got[i]) {
				t.Errorf("repeat of prompt %d: %v, first %v", i, r.Choices[0].TokenIDs, got[i])
			} else if unit := 16 * max(every, 1); len(r.PromptTokenIDs) > unit && r.Usage.Cache.Device < (len(r.PromptTokenIDs)-1)/unit*unit {
				t.Errorf("repeat of prompt %d (%d tokens) reused %d from the pool, want its checkpointed prefix", i, len(r.PromptTokenIDs), r.Usage.Cache.Device)
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
