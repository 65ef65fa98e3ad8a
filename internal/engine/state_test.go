package engine_test

import (
	"bytes"
	"slices"
	"sync"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

func hybridModel(t *testing.T) *model.Model {
	t.Helper()
	w, err := synth.Build("tiny-qwen35", synth.Options{Seed: 3})
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

// greedyDirect runs one sequence through the model alone (whole prompt, then token by token).
func greedyDirect(t *testing.T, m *model.Model, prompt []int32, n int) []int32 {
	t.Helper()
	c := m.Config()
	const bs = 16
	blocks := kvcache.BlocksForTokens(len(prompt)+n, bs)
	a, err := kvcache.NewArena(kvcache.Layout{BlockSize: bs, Layers: c.KVLayers(), KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: kvcache.F32}, blocks)
	if err != nil {
		t.Fatal(err)
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	kv := &kernels.PagedKV{F32: a.F32(), F16: a.F16(), BlockSize: bs, Layers: c.KVLayers(), KVHeads: c.KVHeads, HeadDim: c.HeadDim, Table: table}
	st := m.NewState()
	logits := make([]float32, c.Vocab)
	toks, pos := prompt, 0
	var out []int32
	for len(out) < n {
		if err := m.Forward([]model.Sequence{{Tokens: toks, Pos: pos, KV: kv, Logits: logits, State: st}}); err != nil {
			t.Fatal(err)
		}
		pos += len(toks)
		next := int32(kernels.Argmax(logits))
		out = append(out, next)
		toks = []int32{next}
	}
	return out
}

// TestHybridEngine serves a qwen35 model: several requests batched together, prompts prefilled
// in chunks over several steps, repeats of one prompt. Every greedy output equals the model run
// alone, and with no recurrent state at block boundaries nothing is reused: every prompt token
// is computed, the repeat too.
func TestHybridEngine(t *testing.T) {
	m := hybridModel(t)
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("hybrid")
	cfg.KVMemory = 8 << 20
	cfg.MaxBatchTokens = 23 // prefill chunks that end mid-block, sequences sharing steps
	e, err := engine.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompts := [][]int32{seqPrompt(1, 70), seqPrompt(2, 41), seqPrompt(1, 70), seqPrompt(3, 9)}
	const n = 12
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i] = greedyDirect(t, m, p, n)
	}
	for round := 0; round < 2; round++ {
		got := make([]result, len(prompts))
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = collect(t, e, engine.Request{Prompt: p, MaxTokens: n, IgnoreEOS: true})
			}()
		}
		wg.Wait()
		for i, r := range got {
			if !slices.Equal(r.tokens, want[i]) {
				t.Errorf("round %d, prompt %d: engine %v, model alone %v", round, i, r.tokens, want[i])
			}
			u := r.usage
			if u.ComputedTokens != len(prompts[i]) || u.DeviceTokens != 0 || u.PromptTokens != len(prompts[i]) {
				t.Errorf("round %d, prompt %d: usage %+v, want every prompt token computed", round, i, u)
			}
		}
	}
	if err := e.CheckInvariants(); err != nil {
		t.Error(err)
	}
}
