package model_test

import (
	"fmt"
	"math"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// TestFusedDecodeMatchesForward checks the fused decode step (one sequence's token, its
// layers as one parallel region) against the loop per product: after the same prefill, each
// decode step's logits and the K/V it stores are bitwise the same, for llama (float and
// quantized weights, the Q4_K_M mix), qwen2's biases and qwen3's QK-norm, f16 and f32 K/V,
// two and three threads (three: shares of heads and rows that do not split evenly), at
// positions that cross blocks. A step that cannot take the fused path (two sequences) takes
// the loops and agrees too.
func TestFusedDecodeMatchesForward(t *testing.T) {
	cases := []struct {
		preset string
		typ    gguf.Type
	}{
		{"tiny-smollm", gguf.TypeF32}, {"tiny-smollm", gguf.TypeF16}, {"tiny-smollm", gguf.TypeQ8_0},
		{"tiny-kquant", gguf.TypeQ4_K}, {"tiny-kquant", gguf.TypeQ6_K},
		{"tiny-qwen2", gguf.TypeQ8_0}, {"tiny-qwen3", gguf.TypeBF16}, {"tiny-llama3", gguf.TypeQ5_0},
	}
	for _, tc := range cases {
		t.Run(tc.preset+"/"+tc.typ.String(), func(t *testing.T) {
			f := synthFile(t, tc.preset, synth.Options{Seed: 11, Type: tc.typ})
			for _, threads := range []int{2, 3} {
				for _, dt := range []kvcache.DType{kvcache.F16, kvcache.F32} {
					t.Run(fmt.Sprintf("threads=%d/%v", threads, dt), func(t *testing.T) {
						fusedVsLoops(t, f, threads, dt)
					})
				}
			}
		})
	}
}

func fusedVsLoops(t *testing.T, f *gguf.File, threads int, dt kvcache.DType) {
	pool := kernels.NewPool(threads)
	defer pool.Close()
	fused, err := model.Load(f, pool)
	if err != nil {
		t.Fatal(err)
	}
	loops, err := model.Load(f, pool)
	if err != nil {
		t.Fatal(err)
	}
	loops.SetFusedDecode(false)
	vocab := fused.Config().Vocab
	const n, steps = 27, 24 // the steps cross two 16-token blocks
	toks := make([]int32, n+steps)
	for i := range toks {
		toks[i] = int32((i*7919 + 13) % vocab)
	}
	rf := newRunner(t, fused, n+steps, dt)
	rl := newRunner(t, loops, n+steps, dt)
	rf.prefill(t, toks[:n], 16)
	rl.prefill(t, toks[:n], 16)
	for k := range steps {
		pos := n + k
		lf, ll := make([]float32, vocab), make([]float32, vocab)
		before := pool.Stats().Loops
		if err := fused.Forward([]model.Sequence{{Tokens: toks[pos : pos+1], Pos: pos, KV: rf.kv, Logits: lf}}); err != nil {
			t.Fatal(err)
		}
		// The fused step is one parallel region and the output head's loop.
		if loops := pool.Stats().Loops - before; loops > 2 {
			t.Fatalf("step %d: %d parallel loops, want the fused step's 2", k, loops)
		}
		if err := loops.Forward([]model.Sequence{{Tokens: toks[pos : pos+1], Pos: pos, KV: rl.kv, Logits: ll}}); err != nil {
			t.Fatal(err)
		}
		for i := range lf {
			if math.Float32bits(lf[i]) != math.Float32bits(ll[i]) {
				t.Fatalf("step %d (pos %d) logit %d: fused %v, loops %v", k, pos, i, lf[i], ll[i])
			}
		}
	}
	a, b := arenaBits(rf), arenaBits(rl)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("K/V arena element %d: fused %#x, loops %#x", i, a[i], b[i])
		}
	}
	// Two sequences in one step take the loops on the fused model: the same logits as the
	// loops model's for each.
	rf2 := newRunner(t, fused, n+1, dt)
	rf2.prefill(t, toks[:n], 16)
	l1, l2 := make([]float32, vocab), make([]float32, vocab)
	pos := n + steps - 1
	rf3 := newRunner(t, fused, n+steps, dt)
	rf3.prefill(t, toks[:pos], 32)
	if err := fused.Forward([]model.Sequence{
		{Tokens: toks[n : n+1], Pos: n, KV: rf2.kv, Logits: l1},
		{Tokens: toks[pos : pos+1], Pos: pos, KV: rf3.kv, Logits: l2},
	}); err != nil {
		t.Fatal(err)
	}
	rl2 := newRunner(t, loops, n+steps, dt)
	rl2.prefill(t, toks[:pos], 32)
	want := make([]float32, vocab)
	if err := loops.Forward([]model.Sequence{{Tokens: toks[pos : pos+1], Pos: pos, KV: rl2.kv, Logits: want}}); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(l2[i]) != math.Float32bits(want[i]) {
			t.Fatalf("two-sequence step logit %d: %v, alone on the loops %v", i, l2[i], want[i])
		}
	}
}
