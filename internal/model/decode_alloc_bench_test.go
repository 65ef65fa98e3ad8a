package model_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// BenchmarkDecodeStep measures one steady-state decode step (one new token per stream) on the
// default preset, at 1 and 4 streams, for F32 and quantized weights. allocs/op is per step.
func BenchmarkDecodeStep(b *testing.B) {
	for _, wt := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_K} {
		decodeSteps(b, "default", wt, wt.String())
	}
}

// BenchmarkDecodeStepArch is BenchmarkDecodeStep on the other architectures' tiny presets
// (F32 weights), for their own layer code (qwen35's DeltaNet, kimi-linear's KDA, MLA, MoE).
func BenchmarkDecodeStepArch(b *testing.B) {
	for _, p := range []string{"tiny-qwen2", "tiny-qwen3", "tiny-qwen35", "tiny-kimi-linear", "tiny-kimi-k3"} {
		decodeSteps(b, p, gguf.TypeF32, p)
	}
}

func decodeSteps(b *testing.B, preset string, wt gguf.Type, name string) {
	{
		m := loadSynth(b, preset, wt)
		for _, streams := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/streams%d", name, streams), func(b *testing.B) {
				step := newDecodeBatch(b, m, streams)
				b.ReportAllocs()
				for b.Loop() {
					if err := step(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(streams)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// newDecodeBatch prefills streams sequences of 64 tokens each on m and returns a step that
// decodes one more token for each of them, in one Forward: the steady state of decoding (the
// first two steps, which may size scratch, are taken here). Positions wrap within a 256-token
// context, so a step can be repeated any number of times.
func newDecodeBatch(tb testing.TB, m *model.Model, streams int) func() error {
	const ctx, prompt = 256, 64
	seqs := make([]model.Sequence, streams)
	for i := range seqs {
		r := newRunner(tb, m, ctx, kvcache.F32)
		p := make([]int32, prompt)
		for j := range p {
			p[j] = int32(3 + (i*7+j)%1000)
		}
		r.prefill(tb, p, prompt)
		seqs[i] = model.Sequence{Tokens: []int32{int32(5 + i)}, Pos: prompt, KV: r.kv, State: r.state, Logits: make([]float32, m.Config().Vocab)}
	}
	n := 0
	step := func() error {
		pos := prompt + n%(ctx-prompt)
		for i := range seqs {
			seqs[i].Pos = pos
			if st := seqs[i].State; st != nil {
				st.Pos = pos // hybrid models: rewind the recurrent state's position with the KV's
			}
		}
		n++
		return m.Forward(seqs)
	}
	for range 2 {
		if err := step(); err != nil {
			tb.Fatal(err)
		}
	}
	return step
}

// loadSynth writes preset with weights of type wt and loads it on a pool of 2 threads; both
// are closed when tb ends.
func loadSynth(tb testing.TB, preset string, wt gguf.Type) *model.Model {
	f := synthFile(tb, preset, synth.Options{Type: wt})
	pool := kernels.NewPool(2)
	tb.Cleanup(pool.Close)
	m, err := model.Load(f, pool)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// synthFile writes preset with o to a temporary file and maps it (closed when tb ends).
func synthFile(tb testing.TB, preset string, o synth.Options) *gguf.File {
	path := filepath.Join(tb.TempDir(), "m.gguf")
	if err := synth.WriteFile(preset, o, path); err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}
