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
