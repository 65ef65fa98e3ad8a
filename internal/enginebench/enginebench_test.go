package enginebench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/llamaref"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

const threads = 2

// modelFile writes (once) the preset in type t under the repo's .cache.
func modelFile(b *testing.B, preset string, t gguf.Type) string {
	b.Helper()
	dir := filepath.Join("..", "..", ".cache", "bench-models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s.gguf", preset, strings.ToLower(t.String())))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := synth.WriteFile(preset, synth.Options{Seed: 1, Type: t}, path); err != nil {
		b.Fatal(err)
	}
	return path
}

type ours struct {
	m     *model.Model
	arena *kvcache.Arena
	kv    *kernels.PagedKV
}

func load(b *testing.B, path string, pool *kernels.Pool, maxTokens int) (*ours, func()) {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(f, pool)
	if err != nil {
		b.Fatal(err)
	}
	c := m.Config()
	const bs = 16
	n := (maxTokens + bs - 1) / bs
	a, err := kvcache.NewArena(kvcache.Layout{BlockSize: bs, Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: kvcache.F16}, n)
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, n)
	for i := range table {
		table[i] = int32(i)
	}
	kv := &kernels.PagedKV{F16: a.F16(), BlockSize: bs, Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Table: table}
	return &ours{m: m, arena: a, kv: kv}, func() { f.Close() }
}

// prefill runs n tokens in 512-token chunks (llama.cpp's default batch) and returns tokens/s.
func (o *ours) prefill(b *testing.B, n int) float64 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(3 + i*31%(o.m.Config().Vocab-3))
	}
	logits := make([]float32, o.m.Config().Vocab)
	start := time.Now()
	for pos := 0; pos < n; pos += 512 {
		end := min(pos+512, n)
		s := model.Sequence{Tokens: toks[pos:end], Pos: pos, KV: o.kv}
		if end == n {
			s.Logits = logits
		}
		if err := o.m.Forward([]model.Sequence{s}); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// decode generates n tokens one at a time from an empty context (llama-bench's tg test).
func (o *ours) decode(b *testing.B, n int) float64 {
	logits := make([]float32, o.m.Config().Vocab)
	tok := int32(1)
	start := time.Now()
	for pos := 0; pos < n; pos++ {
		if err := o.m.Forward([]model.Sequence{{Tokens: []int32{tok}, Pos: pos, KV: o.kv, Logits: logits}}); err != nil {
			b.Fatal(err)
		}
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		tok = int32(best)
	}
	return float64(n) / time.Since(start).Seconds()
}

func BenchmarkVsLlamaCpp(b *testing.B) {
	for _, t := range []gguf.Type{gguf.TypeF32, gguf.TypeQ8_0} {
		b.Run("smollm-135m/"+t.String(), func(b *testing.B) {
			path := modelFile(b, "smollm-135m", t)
			ref, err := llamaref.NativeBench(path, []int{512, 2048}, 64, threads, llamaref.BenchOptions{KVType: "f16", Repetitions: 2})
			if err != nil {
				b.Fatal(err)
			}
			refTS := map[string]float64{}
			for _, r := range ref {
				refTS[r.Test] = r.TokensPerSec
			}
			pool := kernels.NewPool(threads)
			defer pool.Close()
			o, done := load(b, path, pool, 2048+64)
			defer done()
			o.prefill(b, 64) // warm up
			var got map[string]float64
			for b.Loop() {
				got = map[string]float64{"pp512": o.prefill(b, 512), "pp2048": o.prefill(b, 2048), "tg64": o.decode(b, 64)}
			}
			for _, k := range []string{"pp512", "pp2048", "tg64"} {
				ratio := got[k] / refTS[k]
				b.ReportMetric(got[k], k+"-tok/s")
				b.ReportMetric(ratio, k+"-ratio")
				fmt.Printf("%-22s %-7s stockpot %8.1f tok/s   llama.cpp (native) %8.1f tok/s   ratio %.2f×\n", "smollm-135m/"+t.String(), k, got[k], refTS[k], ratio)
			}
		})
	}
}
