package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"stockpot/internal/engine"
)

// BenchmarkEngineDecodeAllocs estimates the engine's heap allocations per decoded token
// (scheduler, runner, sampler, delivery, the forward pass) at 1 and 4 streams on the
// default model: the difference between requests of long and short generation, divided by
// the extra tokens, so that per-request costs (admission, prefill, the final output) cancel.
// A decode step itself allocates nothing, new blocks included (TestDecodeStepsAllocateNothing);
// what this can still count is noise: a stream queue that grows when its reader lags.
func BenchmarkEngineDecodeAllocs(b *testing.B) {
	e := servedEngine(b, func(c *engine.Config) { c.PrefixCache = false; c.Dedup = false })
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("streams%d", streams), func(b *testing.B) {
			run := func(seed uint64, gen int) (allocs uint64) {
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				var wg sync.WaitGroup
				for s := range streams {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ch, err := e.Generate(context.Background(), &engine.Request{Prompt: seqPrompt(seed*8+uint64(s), 32), MaxTokens: gen, IgnoreEOS: true, Logprobs: -1})
						if err != nil {
							b.Error(err)
							return
						}
						for o := range ch {
							if o.Err != nil {
								b.Error(o.Err)
							}
						}
					}()
				}
				wg.Wait()
				runtime.ReadMemStats(&ms1)
				return ms1.Mallocs - ms0.Mallocs
			}
			const short, long = 8, 72
			run(0, short)
			var da float64
			i := uint64(1)
			for b.Loop() {
				da += float64(int64(run(i+1, long)) - int64(run(i, short)))
				i += 2
			}
			// Allocations only: bytes by the same difference were noise (negative in some runs).
			b.ReportMetric(da/(float64(b.N)*float64(streams*(long-short))), "allocs/token")
		})
	}
}
