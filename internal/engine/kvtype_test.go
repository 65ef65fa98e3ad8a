package engine_test

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// TestInvarianceQ8KV is TestInvariance for q8_0 K/V (tiny-kquant: head dim 64, so the Hadamard
// rotation is on): greedy tokens and logprobs bitwise equal with the prefix cache on and off,
// across chunk sizes, for prompts that share a prefix, repeat, or share nothing.
func TestInvarianceQ8KV(t *testing.T) {
	w, err := synth.Build("tiny-kquant", synth.Options{Seed: 11})
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
	pool := kernels.NewPool(2)
	defer pool.Close()
	m, err := model.Load(f, pool)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(cache bool, chunk int) *engine.Engine {
		cfg := engine.DefaultConfig()
		cfg.Identity = []byte("test-identity-q8")
		cfg.KVMemory = 8 << 20
		cfg.KVType = kvcache.Q8_0
		cfg.PrefixCache = cache
		cfg.MaxBatchTokens = chunk
		e, err := engine.New(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := e.CheckInvariants(); err != nil {
				t.Errorf("invariants: %v", err)
			}
			e.Close()
		})
		return e
	}
	shared := seqPrompt(7, 90)
	var reqs []engine.Request
	for i := range 9 {
		var p []int32
		switch i % 3 {
		case 0:
			p = append(append([]int32(nil), shared[:20+7*i]...), seqPrompt(uint64(100+i), 2+3*i)[1:]...)
		case 1:
			p = seqPrompt(uint64(200+i), 5+9*i)
		case 2:
			p = shared
		}
		reqs = append(reqs, engine.Request{Prompt: p, MaxTokens: 6, Logprobs: 2})
	}
	off := mk(false, 512)
	want := make([]result, len(reqs))
	for i, r := range reqs {
		want[i] = collect(t, off, r)
	}
	for _, chunk := range []int{512, 7} {
		on := mk(true, chunk)
		for i, r := range reqs {
			got := collect(t, on, r)
			if fmt.Sprint(got.tokens) != fmt.Sprint(want[i].tokens) {
				t.Errorf("chunk %d req %d: tokens %v, cache off %v", chunk, i, got.tokens, want[i].tokens)
			}
			for j := range want[i].logprobs {
				if j < len(got.logprobs) && math.Float32bits(got.logprobs[j]) != math.Float32bits(want[i].logprobs[j]) {
					t.Errorf("chunk %d req %d token %d: logprob %v, cache off %v", chunk, i, j, got.logprobs[j], want[i].logprobs[j])
				}
			}
			if i%3 == 2 && i > 2 && got.usage.DeviceTokens == 0 {
				t.Errorf("chunk %d req %d: repeated prompt reused nothing (usage %+v)", chunk, i, got.usage)
			}
		}
	}
}
