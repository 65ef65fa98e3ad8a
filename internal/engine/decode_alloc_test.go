//go:build !race

package engine_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"stockpot/internal/engine"
)

// TestDecodeStepsAllocateNothing: a running engine's decode steps (requests already running,
// no admission, no completion) allocate nothing at 1 and 4 streams, counting everything from
// the scheduler to the caller's receive: Schedule's plan, the forward pass, sampling (greedy,
// with top logprobs, and drawn with temperature and top-p), the outputs and their tokens,
// their delivery through the stream and the published stats. The runner is held after each
// step (StepGate) and the caller takes each step's outputs before the next, so every
// measured window is the same work: a count, not a time.
//
// The blocks are 16 tokens, so each window of 24 steps fills and commits blocks and starts
// new ones (prefix.Cache.AppendAllocate, into the sequence's block table).
//
// Not under -race: the race detector's instrumentation allocates.
func TestDecodeStepsAllocateNothing(t *testing.T) {
	sampling := map[string]func(*engine.Request){
		"greedy":   func(r *engine.Request) { r.Logprobs = -1 },
		"logprobs": func(r *engine.Request) { r.Logprobs = 3 },
		"sampled": func(r *engine.Request) {
			r.Sampling = engine.SamplingParams{Temperature: 0.8, TopP: 0.9, Seed: 7, HasSeed: true}
		},
	}
	for _, name := range []string{"greedy", "logprobs", "sampled"} {
		for _, streams := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/streams%d", name, streams), func(t *testing.T) {
				e := newEngine(t, func(c *engine.Config) { c.BlockSize = 16 })
				// 1 + warm-up + 3·2 windows (AllocsPerRun runs each twice) < maxTokens.
				const window, maxTokens = 24, 200
				wait, release, stop := e.StepGate()
				defer stop()
				resume := e.Pause() // every request joins the same first step
				chs := make([]<-chan engine.Output, streams)
				for s := range chs {
					req := &engine.Request{Prompt: seqPrompt(uint64(s), 8), MaxTokens: maxTokens, IgnoreEOS: true}
					sampling[name](req)
					ch, err := e.Generate(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					chs[s] = ch
				}
				resume() // Generate queued them before it returned
				// step runs one decode step and takes its outputs: one token for each stream.
				failed := false
				take := func() {
					for _, ch := range chs {
						if o := <-ch; len(o.Tokens) != 1 || o.Done || o.Err != nil {
							failed = true
						}
					}
				}
				step := func() { release(); wait(); take() }
				wait() // admission and prefill: the first tokens
				take()
				for range 8 { // the first decode steps grow the reused buffers
					step()
				}
				// The fewest of three windows: an allocation of the step's own shows in each;
				// the runtime's rare ones of its own (a sudog for a blocked channel operation
				// when a GC has just emptied their cache) do not.
				allocs := math.Inf(1)
				for range 3 {
					allocs = min(allocs, testing.AllocsPerRun(1, func() {
						for range window {
							step()
						}
					}))
				}
				if failed {
					t.Fatal("a step did not give one token to each stream")
				}
				if allocs != 0 {
					t.Errorf("%v allocations in %d decode steps of %d streams, want 0", allocs, window, streams)
				}
				stop()
				for _, ch := range chs {
					for range ch {
					}
				}
			})
		}
	}
}
