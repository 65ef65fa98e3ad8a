package engine_test

import (
	"fmt"
	"testing"

	"stockpot/internal/engine"
)

// BenchmarkHybridTTFT measures one request to a hybrid model (tiny-qwen35) over an 8K-token
// document, per --state-checkpoint-blocks N: cold (the document computed, its checkpoints
// kept as it goes; "off" is the same with the prefix cache off, the peer that shows what
// checkpointing costs), and warm (the document followed by a new question, the document's
// blocks cached: the reuse ends at the last checkpoint, a multiple of N blocks, and the rest
// is recomputed). The reported metrics are the tokens reused, the checkpoints the pool holds
// and their bytes: the memory side of the trade-off.
//
//	go test -run '^$' -bench HybridTTFT -benchtime 3x ./internal/engine
func BenchmarkHybridTTFT(b *testing.B) {
	m := hybridModel(&testing.T{})
	doc := seqPrompt(40, 8007)
	newEngine := func(every int, cache bool) *engine.Engine {
		cfg := engine.DefaultConfig()
		cfg.Identity = []byte("hybrid-bench")
		cfg.KVMemory = 256 << 20
		cfg.StateCheckpointBlocks = every
		cfg.PrefixCache, cfg.Dedup = cache, cache
		e, err := engine.New(m, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(e.Close)
		return e
	}
	b.Run("cold/off", func(b *testing.B) {
		e := newEngine(1, false)
		for b.Loop() {
			collect(b, e, engine.Request{Prompt: doc, MaxTokens: 1})
		}
	})
	for _, every := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("cold/every=%d", every), func(b *testing.B) {
			e := newEngine(every, true)
			i := 0
			for b.Loop() {
				p := append([]int32{int32(3 + i)}, doc[1:]...) // a new document each time
				i++
				collect(b, e, engine.Request{Prompt: p, MaxTokens: 1})
			}
			st := e.Stats()
			b.ReportMetric(float64(st.StateBytes), "B/checkpoint")
		})
		b.Run(fmt.Sprintf("warm/every=%d", every), func(b *testing.B) {
			e := newEngine(every, true)
			collect(b, e, engine.Request{Prompt: doc, MaxTokens: 1})
			i, reused := 0, 0
			for b.Loop() {
				q := append(append([]int32(nil), doc...), int32(5+i%900), int32(7+i%800), 9) // a new question
				i++
				reused = collect(b, e, engine.Request{Prompt: q, MaxTokens: 1}).usage.DeviceTokens
			}
			st := e.Stats()
			b.ReportMetric(float64(reused), "reused-tokens")
			b.ReportMetric(float64(st.Checkpoints), "checkpoints")
			b.ReportMetric(float64(st.Checkpoints*st.StateBytes)/(1<<20), "checkpoint-MiB")
		})
	}
}
