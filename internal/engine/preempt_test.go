package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"stockpot/internal/engine"
)

// TestPreemptedOutputsUnchanged: requests preempted to free memory (a small pool, many
// concurrent streams with long decodes) finish with the tokens, count and finish reason they
// get alone in a large pool.
func TestPreemptedOutputsUnchanged(t *testing.T) {
	big := newEngine(t, nil)
	small := newEngine(t, func(c *engine.Config) { c.KVMemory = 64 * 8192 })
	shared := seqPrompt(9, 100)
	reqs := make([]engine.Request, 24)
	want := make([]result, len(reqs))
	for i := range reqs {
		p := append(append([]int32(nil), shared...), seqPrompt(uint64(100+i), 20+i%5*8)...)
		reqs[i] = engine.Request{Prompt: p, MaxTokens: 40 + i%3*20, IgnoreEOS: true}
		want[i] = collect(t, big, reqs[i])
	}
	chans := make([]<-chan engine.Output, len(reqs))
	for i := range reqs { // all queued before the first step, so they compete
		r := reqs[i]
		ch, err := small.Generate(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	got := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range chans[i] {
				for _, tk := range o.Tokens {
					got[i].tokens = append(got[i].tokens, tk.ID)
				}
				if o.Done {
					got[i].finish = string(o.FinishReason)
				}
			}
		}()
	}
	wg.Wait()
	if small.Stats().Preemptions == 0 {
		t.Fatal("no preemption: the pool is not small enough for this test")
	}
	for i := range reqs {
		if fmt.Sprint(got[i].tokens) != fmt.Sprint(want[i].tokens) || got[i].finish != want[i].finish {
			t.Errorf("request %d: %d tokens %v (%s), want %d %v (%s)", i, len(got[i].tokens), got[i].tokens, got[i].finish, len(want[i].tokens), want[i].tokens, want[i].finish)
		}
	}
	t.Logf("%d preemptions", small.Stats().Preemptions)
}

// TestPreemptedConstrainedOutputsUnchanged: the same under a grammar constraint (tool calls,
// JSON schemas): a preempted constrained request keeps its matcher's state and finishes with
// the output it gets alone.
func TestPreemptedConstrainedOutputsUnchanged(t *testing.T) {
	m, tok, vocab, g := constrainSetup(t)
	build := func(mem int64) *engine.Engine {
		cfg := engine.DefaultConfig()
		cfg.Identity = []byte("constrain-test")
		cfg.KVMemory = mem
		cfg.EOG = tok.EOGs()
		e, err := engine.New(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	}
	big, small := build(8<<20), build(64*8192)
	shared := tok.Encode(strings.Repeat("Answer in JSON: who are you? ", 12), true, false)
	// start queues request i; all of them are queued before the first step, so they compete.
	start := func(e *engine.Engine, i int) <-chan engine.Output {
		// About 559 tokens: 35 blocks (6 of them the shared prefix), so two requests fill the
		// 64-block pool at admission and their ~30-token answers need blocks it does not have.
		p := append(append([]int32(nil), shared...), tok.Encode(fmt.Sprint(" Request ", i, strings.Repeat(" more words here", 120)), false, false)...)[:559-i%3]
		ch, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 60 + i%3*30, Sampling: engine.SamplingParams{Constraint: g.NewMatcher(vocab)}})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	drain := func(ch <-chan engine.Output) result {
		var r result
		for o := range ch {
			for _, tk := range o.Tokens {
				r.tokens = append(r.tokens, tk.ID)
			}
			if o.Done {
				r.finish = string(o.FinishReason)
			}
		}
		return r
	}
	const N = 6
	want := make([]result, N)
	for i := range N {
		want[i] = drain(start(big, i))
	}
	chans := make([]<-chan engine.Output, N)
	for i := range N {
		chans[i] = start(small, i)
	}
	got := make([]result, N)
	var wg sync.WaitGroup
	for i := range N {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = drain(chans[i]) }()
	}
	wg.Wait()
	if small.Stats().Preemptions == 0 {
		t.Fatal("no preemption: the pool is not small enough for this test")
	}
	for i := range N {
		if fmt.Sprint(got[i].tokens) != fmt.Sprint(want[i].tokens) || got[i].finish != want[i].finish {
			t.Errorf("request %d: %d tokens (%s), want %d (%s)\n got %q\nwant %q", i, len(got[i].tokens), got[i].finish, len(want[i].tokens), want[i].finish, tok.Decode(got[i].tokens), tok.Decode(want[i].tokens))
		}
	}
	t.Logf("%d preemptions", small.Stats().Preemptions)
}

// TestPoolExhaustedStopSays: a lone decode that outgrows a small pool ends with length, and
// its usage says the pool stopped it; one stopped by its max_tokens says nothing.
func TestPoolExhaustedStopSays(t *testing.T) {
	e := newEngine(t, func(c *engine.Config) { c.KVMemory = 64 * 8192 })
	st := e.Stats()
	poolTokens := st.KVBlocksTotal * 16
	ctx := tinyModel(t).Config().ContextLength
	if ctx <= poolTokens {
		t.Fatalf("context %d fits the pool's %d tokens: no decode can outgrow it", ctx, poolTokens)
	}
	prompt := seqPrompt(3, 40)
	r := collect(t, e, engine.Request{Prompt: prompt, MaxTokens: ctx - len(prompt), IgnoreEOS: true})
	if r.finish != engine.FinishLength || r.usage.StoppedBy != engine.StopPoolExhausted || len(prompt)+len(r.tokens) > poolTokens+1 {
		t.Errorf("outgrew the pool (%d tokens): finish %q, stopped by %q, %d tokens", poolTokens, r.finish, r.usage.StoppedBy, len(r.tokens))
	}
	r = collect(t, e, engine.Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true})
	if r.finish != engine.FinishLength || r.usage.StoppedBy != "" {
		t.Errorf("max_tokens: finish %q, stopped by %q", r.finish, r.usage.StoppedBy)
	}
}
