package enginebench

import (
	"fmt"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/llamaref"
	"stockpot/internal/model"
)

// loadKV is load with one sequence in an arena of K/V type dt.
func loadKV(b *testing.B, path string, pool *kernels.Pool, maxTokens int, dt kvcache.DType) (*ours, kvcache.Layout, func()) {
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
	per := (maxTokens + bs - 1) / bs
	l := kvcache.Layout{BlockSize: bs, Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: dt}
	a, err := kvcache.NewArena(l, per)
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, per)
	for i := range table {
		table[i] = int32(i)
	}
	o := &ours{m: m, arena: a, kv: []*kernels.PagedKV{{F32: a.F32(), F16: a.F16(), Q8: a.Q8(), BlockSize: bs,
		Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Table: table}}}
	return o, l, func() { f.Close() }
}

// kvRounds is the rounds per K/V type; 1 keeps `-benchtime 1x` to a few minutes on 2 cores.
const kvRounds = 1

type kvRow struct {
	dt                kvcache.DType
	tokenBytes        int64
	pp, tg0, tgDeep   float64 // ours: prefill of depth tokens, decode at depth 0 and at depth
	refPP512, refTG64 float64 // native llama.cpp
	refErr            error
}

// measureKV measures one K/V type: best of kvRounds rounds of decode from empty, prefill of
// depth tokens, decode after them.
func measureKV(b *testing.B, path string, pool *kernels.Pool, dt kvcache.DType, depth int) kvRow {
	o, l, done := loadKV(b, path, pool, depth+decodeTokens, dt)
	defer done()
	o.prefill(b, 64, 0) // warm up
	r := kvRow{dt: dt, tokenBytes: l.TokenBytes()}
	for range kvRounds {
		r.tg0 = max(r.tg0, o.decode(b, 1, 0, decodeTokens))
		r.pp = max(r.pp, o.prefill(b, depth, 0))
		r.tgDeep = max(r.tgDeep, o.decode(b, 1, depth, decodeTokens))
	}
	return r
}

// BenchmarkKVTypes prints, for K/V in f32, f16 and q8_0 (Q8_0 weights, preset smollm-135m),
// the K/V bytes per token, prefill of 2048 tokens, decode of 64 tokens from an empty cache
// (tg64) and after 2048 cached positions (tg64@2048), each as tok/s and as a ratio to f16
// K/V measured in the same run; and native llama.cpp's pp512/tg64 with f16 and q8_0 K/V
// (q8_0 with flash attention, which llama.cpp requires for it), when it is built.
//
//	go test -run '^$' -bench KVTypes -benchtime 1x ./internal/enginebench
func BenchmarkKVTypes(b *testing.B) {
	path := modelFile(b, preset, gguf.TypeQ8_0)
	pool := kernels.NewPool(threads)
	defer pool.Close()
	const depth = 2048
	var rows []kvRow
	for b.Loop() {
		rows = rows[:0]
		for _, dt := range []kvcache.DType{kvcache.F32, kvcache.F16, kvcache.Q8_0} {
			rows = append(rows, measureKV(b, path, pool, dt, depth))
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.dt != kvcache.F32 { // llama-bench has no f32 K/V
			ref, err := llamaref.NativeBench(path, []int{512}, decodeTokens, threads, llamaref.BenchOptions{KVType: r.dt.String(), Repetitions: 1})
			r.refErr = err
			for _, t := range ref {
				switch {
				case t.NPrompt == 512:
					r.refPP512 = t.TokensPerSec
				case t.NGen == decodeTokens:
					r.refTG64 = t.TokensPerSec
				}
			}
		}
	}
	f16 := rows[1]
	fmt.Printf("\nK/V types, preset %s, Q8_0 weights, %d threads. Ratios are to f16 K/V in the same run.\n\n", preset, threads)
	fmt.Printf("| K/V | bytes/token | prefill %d tok/s | tg%d tok/s | tg%d@%d tok/s | llama.cpp pp512 | llama.cpp tg%d |\n", depth, decodeTokens, decodeTokens, depth, decodeTokens)
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|\n")
	ratio := func(v, base float64) string {
		if v == 0 || base == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f (%.2f×)", v, v/base)
	}
	for _, r := range rows {
		fmt.Printf("| %v | %d (%.2f×) | %s | %s | %s | %s | %s |\n", r.dt, r.tokenBytes, float64(r.tokenBytes)/float64(f16.tokenBytes),
			ratio(r.pp, f16.pp), ratio(r.tg0, f16.tg0), ratio(r.tgDeep, f16.tgDeep), ratio(r.refPP512, f16.refPP512), ratio(r.refTG64, f16.refTG64))
		if r.refErr != nil {
			fmt.Printf("  (llama.cpp %v: %v)\n", r.dt, r.refErr)
		}
		b.ReportMetric(r.pp/f16.pp, r.dt.String()+"-prefill-vs-f16")
		b.ReportMetric(r.tgDeep/f16.tgDeep, r.dt.String()+"-decode@2048-vs-f16")
	}
	if q8 := rows[2]; q8.refTG64 > 0 {
		fmt.Printf("\nq8_0 K/V, Stockpot vs llama.cpp (flash attention on): tg%d %.2f× (llama.cpp at depth 0; ours %.1f tok/s)\n", decodeTokens, q8.tg0/q8.refTG64, q8.tg0)
	}
}
