package model_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

func loadPreset(t *testing.T, preset string, pool *kernels.Pool) *model.Model {
	t.Helper()
	w, err := synth.Build(preset, synth.Options{Seed: 3})
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
	m, err := model.Load(f, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// arenaBits is the arena's contents as bits (f32 or f16), to compare two runners' K/V.
func arenaBits(r *runner) []uint32 {
	if f := r.arena.F16(); f != nil {
		out := make([]uint32, len(f))
		for i, v := range f {
			out[i] = uint32(v)
		}
		return out
	}
	out := make([]uint32, len(r.arena.F32()))
	for i, v := range r.arena.F32() {
		out[i] = math.Float32bits(v)
	}
	return out
}

// TestScatteredPositions: a step over non-consecutive positions (Sequence.Positions), whose
// skipped positions hold the prefill's K/V, writes bitwise the prefill's K/V at its
// positions and gives the prefill's logits; positions that are consecutive give what Pos
// alone gives. ForwardKV(layer) stores bitwise the prefill's K/V for layers 0..layer.
func TestScatteredPositions(t *testing.T) {
	pool := kernels.NewPool(2)
	defer pool.Close()
	for _, preset := range []string{"tiny-llama-spm", "tiny-qwen2", "tiny-qwen3"} {
		for _, dt := range []kvcache.DType{kvcache.F32, kvcache.F16} {
			m := loadPreset(t, preset, pool)
			c := m.Config()
			const n = 150
			prompt := make([]int32, n)
			for i := range prompt {
				prompt[i] = int32((i*7919 + 13) % c.Vocab)
			}
			ref := newRunner(t, m, n, dt)
			want := ref.prefill(t, prompt, 64)
			wantKV := arenaBits(ref)

			// Scattered: the prefill's K/V everywhere, then the positions picked
			// recomputed over a garbage copy of theirs, in two steps.
			picked := []int{3, 4, 17, 40, 41, 42, 90, 120, 121, 149}
			r := newRunner(t, m, n, dt)
			copy(r.arena.F32(), ref.arena.F32())
			copy(r.arena.F16(), ref.arena.F16())
			junk := make([]float32, c.KVDim())
			for i := range junk {
				junk[i] = float32(i) - 7
			}
			for _, p := range picked {
				for l := range c.KVLayers() {
					kernels.StoreKV(r.kv, l, p, junk, junk)
				}
			}
			logits := make([]float32, c.Vocab)
			for _, part := range [][]int{picked[:4], picked[4:]} {
				toks := make([]int32, len(part))
				for j, p := range part {
					toks[j] = prompt[p]
				}
				s := model.Sequence{Tokens: toks, Pos: part[0], Positions: part, KV: r.kv}
				if part[len(part)-1] == n-1 {
					s.Logits = logits
				}
				if err := m.Forward([]model.Sequence{s}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range want {
				if math.Float32bits(logits[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %s: logit %d scattered %v, prefill %v (bitwise)", preset, dt, i, logits[i], want[i])
				}
			}
			if !slices.Equal(arenaBits(r), wantKV) {
				t.Fatalf("%s %s: scattered K/V differ from the prefill's", preset, dt)
			}

			// Consecutive positions given explicitly: the contiguous path's numbers.
			r2 := newRunner(t, m, n, dt)
			pos := make([]int, n)
			for i := range pos {
				pos[i] = i
			}
			logits2 := make([]float32, c.Vocab)
			if err := m.Forward([]model.Sequence{{Tokens: prompt, Pos: 0, Positions: pos, KV: r2.kv, Logits: logits2}}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(logits2, want) || !slices.Equal(arenaBits(r2), wantKV) {
				t.Fatalf("%s %s: explicit consecutive positions differ from Pos", preset, dt)
			}

			// ForwardKV through layer 1: layers 0 and 1 bitwise the prefill's, in two steps.
			r3 := newRunner(t, m, n, dt)
			for _, span := range [][2]int{{0, 70}, {70, n}} {
				if err := m.ForwardKV([]model.Sequence{{Tokens: prompt[span[0]:span[1]], Pos: span[0], KV: r3.kv}}, 1); err != nil {
					t.Fatal(err)
				}
			}
			k, v, wk, wv := make([]float32, c.KVDim()), make([]float32, c.KVDim()), make([]float32, c.KVDim()), make([]float32, c.KVDim())
			for p := range n {
				for l := range 2 {
					kernels.LoadKV(r3.kv, l, p, k, v)
					kernels.LoadKV(ref.kv, l, p, wk, wv)
					if !slices.Equal(k, wk) || !slices.Equal(v, wv) {
						t.Fatalf("%s %s: ForwardKV layer %d position %d differs from the prefill's", preset, dt, l, p)
					}
				}
			}
		}
	}
}

// TestPositionsRefused: bad positions are errors, not panics; hybrids refuse them.
func TestPositionsRefused(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	m := loadPreset(t, "tiny-llama-spm", pool)
	r := newRunner(t, m, 64, kvcache.F32)
	toks := []int32{5, 6, 7}
	for _, pos := range [][]int{{1, 2}, {1, 1, 2}, {2, 1, 3}, {0, 2, 3}} {
		if err := m.Forward([]model.Sequence{{Tokens: toks, Pos: 1, Positions: pos, KV: r.kv}}); err == nil {
			t.Errorf("positions %v: no error", pos)
		}
	}
	if err := m.ForwardKV([]model.Sequence{{Tokens: toks, KV: r.kv, Logits: make([]float32, m.Config().Vocab)}}, 1); err == nil {
		t.Error("ForwardKV with logits: no error")
	}
	if err := m.ForwardKV([]model.Sequence{{Tokens: toks, KV: r.kv}}, m.Config().Layers); err == nil {
		t.Error("ForwardKV past the last layer: no error")
	}
	h := loadPreset(t, "tiny-qwen35", pool)
	hr := newRunner(t, h, 64, kvcache.F32)
	err := h.Forward([]model.Sequence{{Tokens: toks, Pos: 0, Positions: []int{0, 2, 3}, KV: hr.kv, State: hr.state}})
	if !errors.Is(err, model.ErrUnsupported) {
		t.Errorf("qwen35 positions: have %v, want ErrUnsupported", err)
	}
	if err := h.ForwardKV([]model.Sequence{{Tokens: toks, KV: hr.kv, State: hr.state}}, 1); !errors.Is(err, model.ErrUnsupported) {
		t.Errorf("qwen35 ForwardKV: have %v, want ErrUnsupported", err)
	}
}
