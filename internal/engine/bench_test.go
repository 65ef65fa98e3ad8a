package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

var (
	defaultOnce  sync.Once
	defaultModel *model.Model
)

// servedModel is the model `stockpot serve` embeds (preset "default", seed 0).
func servedModel(b *testing.B) *model.Model {
	defaultOnce.Do(func() {
		w, err := synth.Build("default", synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		if defaultModel, err = model.Load(f, kernels.NewPool(0)); err != nil {
			b.Fatal(err)
		}
	})
	return defaultModel
}

func servedEngine(b *testing.B, mutate func(*engine.Config)) *engine.Engine {
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("bench")
	cfg.KVMemory = 512 << 20
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := engine.New(servedModel(b), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	return e
}

func ttft(b *testing.B, e *engine.Engine, p []int32) (ms float64, cached int) {
	ch, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 1})
	if err != nil {
		b.Fatal(err)
	}
	for o := range ch {
		if o.Done {
			return o.Usage.TTFTMs, o.Usage.CachedTokens()
		}
	}
	b.Fatal("no final output")
	return 0, 0
}

// BenchmarkTTFT: time to first token for a prompt whose whole prefix is cached (warm) vs not
// (cold), at 2K and 8K tokens, on the default model. Reported as ms and as the warm/cold ratio.
func BenchmarkTTFT(b *testing.B) {
	for _, n := range []int{2048, 8000} {
		b.Run(fmt.Sprintf("%dtok", n), func(b *testing.B) {
			var cold, warm float64
			for i := 0; b.Loop(); i++ {
				e := servedEngine(b, nil)
				p := seqPrompt(uint64(1000+i), n)
				c, _ := ttft(b, e, p)
				w, cached := ttft(b, e, p)
				if cached != (n-1)/16*16 {
					b.Fatalf("warm request reused %d tokens, want %d", cached, (n-1)/16*16)
				}
				cold += c
				warm += w
			}
			b.ReportMetric(cold/float64(b.N), "cold-ms")
			b.ReportMetric(warm/float64(b.N), "warm-ms")
			b.ReportMetric(warm/cold, "warm/cold")
		})
	}
}

// BenchmarkNoSharing: throughput of a workload with nothing shared, prefix cache on vs off,
// the two engines taking turns within each iteration so drift and noise hit both alike. The
// difference is the cache's overhead (hashing, lookups, commits, eviction). Reported as
// tokens/s for each and on/off.
func BenchmarkNoSharing(b *testing.B) {
	engines := map[bool]*engine.Engine{}
	for _, on := range []bool{false, true} {
		engines[on] = servedEngine(b, func(c *engine.Config) { c.PrefixCache = on; c.KVMemory = 64 << 20 })
	}
	elapsed := map[bool]time.Duration{}
	tokens := 0
	seed := uint64(1)
	batch := func(e *engine.Engine) {
		var wg sync.WaitGroup
		for j := 0; j < 4; j++ {
			wg.Add(1)
			p := seqPrompt(seed, 300) // every prompt distinct: nothing to share
			seed++
			go func() {
				defer wg.Done()
				ch, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 16, IgnoreEOS: true})
				if err != nil {
					b.Error(err)
					return
				}
				for range ch {
				}
			}()
		}
		wg.Wait()
	}
	for i := 0; b.Loop(); i++ {
		for _, on := range []bool{i%2 == 0, i%2 != 0} { // alternate which goes first
			t0 := time.Now()
			batch(engines[on])
			elapsed[on] += time.Since(t0)
		}
		tokens += 4 * 316
	}
	onRate := float64(tokens) / elapsed[true].Seconds()
	offRate := float64(tokens) / elapsed[false].Seconds()
	b.ReportMetric(onRate, "cache-on-tok/s")
	b.ReportMetric(offRate, "cache-off-tok/s")
	b.ReportMetric(onRate/offRate, "on/off")
}

// BenchmarkEngineDecode: one stream's greedy decode through the engine (scheduler, runner,
// sampler, delivery) on the 135M preset in Q8_0 (SmolLM's 49152-token vocabulary), with the
// chosen token's logprob (Logprobs 0) and without (Logprobs -1: argmax only), against the
// bare forward pass decoding the same tokens, taking turns in every iteration. The ratios
// are the engine's decode speed as a share of the forward pass's.
func BenchmarkEngineDecode(b *testing.B) {
	w, err := synth.Build("smollm-135m", synth.Options{Seed: 1, Type: gguf.TypeQ8_0})
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	pool := kernels.NewPool(0)
	defer pool.Close()
	m, err := model.Load(f, pool)
	if err != nil {
		b.Fatal(err)
	}
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("bench")
	cfg.KVMemory = 256 << 20
	e, err := engine.New(m, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const prompt, gen = 64, 64
	c := m.Config()
	arena, err := kvcache.NewArena(kvcache.Layout{BlockSize: 16, Layers: c.KVLayers(), KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: kvcache.F16}, (prompt+gen)/16+1)
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, (prompt+gen)/16+1)
	for i := range table {
		table[i] = int32(i)
	}
	kv := &kernels.PagedKV{F16: arena.F16(), BlockSize: 16, Layers: c.KVLayers(), KVHeads: c.KVHeads, HeadDim: c.HeadDim, Table: table}
	logits := make([]float32, c.Vocab)
	// bare decodes gen tokens after the prompt with the forward pass and an argmax.
	bare := func(p []int32) time.Duration {
		if err := m.Forward([]model.Sequence{{Tokens: p, KV: kv, Logits: logits}}); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		tok := int32(kernels.Argmax(logits))
		for i := range gen - 1 {
			if err := m.Forward([]model.Sequence{{Tokens: []int32{tok}, Pos: prompt + i, KV: kv, Logits: logits}}); err != nil {
				b.Fatal(err)
			}
			tok = int32(kernels.Argmax(logits))
		}
		return time.Since(t0)
	}
	// viaEngine times the engine from the first generated token to the last.
	viaEngine := func(p []int32, logprobs int) time.Duration {
		ch, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: gen, IgnoreEOS: true, Logprobs: logprobs})
		if err != nil {
			b.Fatal(err)
		}
		var t0 time.Time
		n := 0
		for o := range ch {
			if o.Err != nil {
				b.Fatal(o.Err)
			}
			if n == 0 && len(o.Tokens) > 0 {
				t0 = time.Now()
			}
			n += len(o.Tokens)
		}
		if n != gen {
			b.Fatalf("engine generated %d tokens, want %d", n, gen)
		}
		return time.Since(t0)
	}
	var tBare, tLP, tNone time.Duration
	for i := 0; b.Loop(); i++ {
		// Distinct prompts (nothing reused), and each side first in turn.
		for k := range 3 {
			p := seqPrompt(uint64(3*i+k), prompt)
			switch (i + k) % 3 {
			case 0:
				tBare += bare(p)
			case 1:
				tLP += viaEngine(p, 0)
			default:
				tNone += viaEngine(p, -1)
			}
		}
	}
	rate := func(d time.Duration) float64 { return float64(b.N*(gen-1)) / d.Seconds() }
	b.ReportMetric(rate(tBare), "forward-tok/s")
	b.ReportMetric(rate(tLP)/rate(tBare), "logprobs/forward")
	b.ReportMetric(rate(tNone)/rate(tBare), "nologprobs/forward")
}
