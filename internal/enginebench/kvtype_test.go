package enginebench

import (
	"fmt"
	"math/rand/v2"
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

// kvRounds is the rounds per K/V type, interleaved (f32, f16, q8_0, f32, ...) so that load
// from other processes hits every type alike; each keeps its best round.
const kvRounds = 3

const (
	kvPrefill = 512  // prefill test length
	kvDepth   = 2048 // cached positions before the deep decode test
	kvDecode  = 32   // decode steps per decode test
)

type kvRow struct {
	dt              kvcache.DType
	tokenBytes      int64
	pp, tg0, tgDeep float64 // ours: prefill, decode at depth 0 and at kvDepth (tok/s)
	refPP, refTG    float64 // native llama.cpp pp512, tg32 (depth 0)
	refErr          error
}

// fillKV stores random K/V for positions [0, n) of every layer: decode speed at depth n
// depends on how much K/V there is, not on its values.
func fillKV(o *ours, n int) {
	kv := o.kv[0]
	row := kv.KVHeads * kv.HeadDim
	r := rand.New(rand.NewPCG(1, 2))
	k, v := make([]float32, row), make([]float32, row)
	for pos := range n {
		for i := range k {
			k[i], v[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		for l := range kv.Layers {
			kernels.StoreKV(kv, l, pos, k, v)
		}
	}
}

// BenchmarkKVTypes prints, for K/V in f32, f16 and q8_0 (Q8_0 weights, preset smollm-135m),
// the K/V bytes per token, prefill of 512 tokens, decode from an empty cache and after 2048
// cached positions, as tok/s and as a ratio to f16 K/V measured in the same run; and native
// llama.cpp's pp512/tg32 with f16 and q8_0 K/V (q8_0 with flash attention, which llama.cpp
// requires for it).
//
//	go test -run '^$' -bench KVTypes -benchtime 1x ./internal/enginebench
func BenchmarkKVTypes(b *testing.B) {
	path := modelFile(b, preset, gguf.TypeQ8_0)
	pool := kernels.NewPool(threads)
	defer pool.Close()
	dts := []kvcache.DType{kvcache.F32, kvcache.F16, kvcache.Q8_0}
	var rows []kvRow
	for b.Loop() {
		rows = rows[:0]
		var os []*ours
		for _, dt := range dts {
			o, l, done := loadKV(b, path, pool, kvDepth+kvDecode, dt)
			defer done()
			o.prefill(b, 64, 0) // warm up
			os = append(os, o)
			rows = append(rows, kvRow{dt: dt, tokenBytes: l.TokenBytes()})
		}
		for range kvRounds {
			for i, o := range os {
				r := &rows[i]
				r.pp = max(r.pp, o.prefill(b, kvPrefill, 0))
				r.tg0 = max(r.tg0, o.decode(b, 1, 0, kvDecode))
				fillKV(o, kvDepth)
				r.tgDeep = max(r.tgDeep, o.decode(b, 1, kvDepth, kvDecode))
			}
		}
		for i := range rows {
			r := &rows[i]
			if r.dt == kvcache.F32 { // llama-bench has no f32 K/V
				continue
			}
			ref, err := llamaref.NativeBench(path, []int{kvPrefill}, kvDecode, threads, llamaref.BenchOptions{KVType: r.dt.String(), Repetitions: 1})
			r.refErr = err
			for _, t := range ref {
				switch {
				case t.NPrompt == kvPrefill:
					r.refPP = t.TokensPerSec
				case t.NGen == kvDecode:
					r.refTG = t.TokensPerSec
				}
			}
		}
	}
	f16 := rows[1]
	fmt.Printf("\nK/V types, preset %s, Q8_0 weights, %d threads; best of %d interleaved rounds; ratios to f16 K/V in the same run.\n", preset, threads, kvRounds)
	fmt.Printf("Load average at the end: %s.\n\n", loadAvg())
	fmt.Printf("| K/V | bytes/token | pp%d tok/s | tg%d tok/s | tg%d@%d tok/s | llama.cpp pp%d | llama.cpp tg%d |\n", kvPrefill, kvDecode, kvDecode, kvDepth, kvPrefill, kvDecode)
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|\n")
	ratio := func(v, base float64) string {
		if v == 0 || base == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f (%.2f×)", v, v/base)
	}
	for _, r := range rows {
		fmt.Printf("| %v | %d (%.2f×) | %s | %s | %s | %s | %s |\n", r.dt, r.tokenBytes, float64(r.tokenBytes)/float64(f16.tokenBytes),
			ratio(r.pp, f16.pp), ratio(r.tg0, f16.tg0), ratio(r.tgDeep, f16.tgDeep), ratio(r.refPP, f16.refPP), ratio(r.refTG, f16.refTG))
		if r.refErr != nil {
			fmt.Printf("  (llama.cpp %v: %v)\n", r.dt, r.refErr)
		}
		b.ReportMetric(r.pp/f16.pp, r.dt.String()+"-prefill-vs-f16")
		b.ReportMetric(r.tgDeep/f16.tgDeep, r.dt.String()+"-decode@2048-vs-f16")
	}
	for _, r := range rows[1:] {
		if r.refPP > 0 && r.refTG > 0 {
			fmt.Printf("%v K/V, Stockpot / llama.cpp: pp%d %.2f×, tg%d %.2f×\n", r.dt, kvPrefill, r.pp/r.refPP, kvDecode, r.tg0/r.refTG)
		}
	}
}
