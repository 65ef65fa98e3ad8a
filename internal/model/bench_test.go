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

// BenchmarkForward measures prefill (512-token chunks) and decode on the default preset, the
// model `stockpot serve` embeds. BenchmarkVsLlamaCpp in internal/enginebench compares the 135M
// preset against llama.cpp.
func BenchmarkForward(b *testing.B) {
	path := filepath.Join(b.TempDir(), "m.gguf")
	if err := synth.WriteFile("default", synth.Options{}, path); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	pool := kernels.NewPool(2)
	defer pool.Close()
	m, err := model.Load(f, pool)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{512, 2048} {
		b.Run(fmt.Sprintf("prefill%d", n), func(b *testing.B) {
			r := newRunner(b, m, n, kvcache.F32)
			prompt := make([]int32, n)
			for i := range prompt {
				prompt[i] = int32(3 + i%1000)
			}
			b.ReportAllocs()
			for b.Loop() {
				r.prefill(b, prompt, 512)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
	b.Run("decode", func(b *testing.B) {
		r := newRunner(b, m, 4096, kvcache.F32)
		logits := make([]float32, m.Config().Vocab)
		b.ReportAllocs()
		pos := 0
		for b.Loop() {
			if err := m.Forward([]model.Sequence{{Tokens: []int32{5}, Pos: pos % 4096, KV: r.kv, Logits: logits}}); err != nil {
				b.Fatal(err)
			}
			pos++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
}
