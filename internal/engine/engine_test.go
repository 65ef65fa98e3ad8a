package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
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
	modelOnce sync.Once
	testModel *model.Model
	modelErr  error
)

// tinyModel loads the tiny-llama-spm preset once per test binary.
func tinyModel(t testing.TB) *model.Model {
	t.Helper()
	modelOnce.Do(func() {
		w, err := synth.Build("tiny-llama-spm", synth.Options{Seed: 11})
		if err != nil {
			modelErr = err
			return
		}
		var buf bytes.Buffer
		if _, err = w.WriteTo(&buf); err != nil {
			modelErr = err
			return
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			modelErr = err
			return
		}
		testModel, modelErr = model.Load(f, kernels.NewPool(2))
	})
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return testModel
}

func newEngine(t testing.TB, mutate func(*engine.Config)) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("test-identity")
	cfg.KVMemory = 8 << 20
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := engine.New(tinyModel(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.CheckInvariants(); err != nil {
			t.Errorf("invariants after test: %v", err)
		}
		e.Close()
	})
	return e
}

type result struct {
	tokens   []int32
	logprobs []float32
	usage    engine.Usage
	finish   string
}

func collect(t testing.TB, e *engine.Engine, req engine.Request) result {
	t.Helper()
	ch, err := e.Generate(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	var r result
	for o := range ch {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		for _, tok := range o.Tokens {
			r.tokens = append(r.tokens, tok.ID)
			r.logprobs = append(r.logprobs, tok.Logprob)
		}
		if o.Done {
			r.usage, r.finish = *o.Usage, o.FinishReason
		}
	}
	return r
}

func seqPrompt(seed uint64, n int) []int32 {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]int32, n)
	p[0] = 1 // BOS
	for i := 1; i < n; i++ {
		p[i] = int32(3 + r.IntN(900))
	}
	return p
}

// TestCachedTokensFormula checks cached_tokens = min(⌊Q/B⌋·B, ⌊(P−1)/B⌋·B) for a prompt of P
// tokens sharing its first Q tokens with a cached prompt.
func TestCachedTokensFormula(t *testing.T) {
	const B = 16
	base := seqPrompt(1, 100)
	cases := []struct {
		name string
		p, q int // q = shared tokens; the token at q differs
	}{
		{"equal prompts", 100, 100},
		{"partial tail block", 100, 37},
		{"diff at 0", 100, 0},
		{"diff at 15", 100, 15},
		{"diff at 16", 100, 16},
		{"diff at 17", 100, 17},
		{"diff at 64", 100, 64},
		{"shorter, exact blocks", 48, 48},
		{"shorter by one", 49, 49},
		{"one token", 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, nil)
			first := collect(t, e, engine.Request{Prompt: base, MaxTokens: 1})
			if first.usage.CachedTokens() != 0 {
				t.Fatalf("cold request reused %d tokens", first.usage.CachedTokens())
			}
			p := append([]int32(nil), base[:tc.p]...)
			if tc.q < tc.p {
				p[tc.q] = 999
			}
			r := collect(t, e, engine.Request{Prompt: p, MaxTokens: 1})
			q := min(tc.q, tc.p)
			want := min(q/B*B, (tc.p-1)/B*B)
			if got := r.usage.CachedTokens(); got != want {
				t.Errorf("P=%d Q=%d: cached %d, want %d", tc.p, tc.q, got, want)
			}
			if r.usage.CachedTokens()+r.usage.ComputedTokens != r.usage.PromptTokens {
				t.Errorf("cached %d + computed %d != prompt %d", r.usage.CachedTokens(), r.usage.ComputedTokens, r.usage.PromptTokens)
			}
		})
	}
}

// TestInvariance: greedy outputs and logprobs are bitwise equal with the prefix cache on and off,
// across chunk sizes and concurrent mixes of shared and unshared prompts.
func TestInvariance(t *testing.T) {
	off := newEngine(t, func(c *engine.Config) { c.PrefixCache = false })
	want := map[int]result{}
	shared := seqPrompt(7, 80)
	var reqs []engine.Request
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 24; i++ {
		var p []int32
		switch i % 3 {
		case 0: // shared prefix + own suffix
			p = append(append([]int32(nil), shared[:16+r.IntN(64)]...), seqPrompt(uint64(100+i), 1+r.IntN(40))[1:]...)
		case 1: // unrelated
			p = seqPrompt(uint64(200+i), 2+r.IntN(90))
		case 2: // exact repeat of the shared prompt
			p = shared
		}
		req := engine.Request{Prompt: p, MaxTokens: 4 + r.IntN(12), Logprobs: 2}
		if i%4 == 3 {
			req.Sampling = engine.SamplingParams{Temperature: 0.8, TopP: 0.9, TopK: 40, Seed: uint64(i), HasSeed: true}
		}
		reqs = append(reqs, req)
		want[i] = collect(t, off, req)
	}
	for _, chunk := range []int{512, 7, 33} {
		on := newEngine(t, func(c *engine.Config) { c.MaxBatchTokens = chunk })
		// Sequential first (maximal reuse), then all at once (concurrent prefill of shared prefixes).
		for pass := 0; pass < 2; pass++ {
			got := make([]result, len(reqs))
			var wg sync.WaitGroup
			for i := range reqs {
				if pass == 0 {
					got[i] = collect(t, on, reqs[i])
					continue
				}
				wg.Add(1)
				go func() { defer wg.Done(); got[i] = collect(t, on, reqs[i]) }()
			}
			wg.Wait()
			for i := range reqs {
				w := want[i]
				if fmt.Sprint(got[i].tokens) != fmt.Sprint(w.tokens) {
					t.Errorf("chunk %d pass %d req %d: tokens %v, cache off %v", chunk, pass, i, got[i].tokens, w.tokens)
				}
				for j := range w.logprobs {
					if j < len(got[i].logprobs) && math.Float32bits(got[i].logprobs[j]) != math.Float32bits(w.logprobs[j]) {
						t.Errorf("chunk %d pass %d req %d token %d: logprob %v, cache off %v", chunk, pass, i, j, got[i].logprobs[j], w.logprobs[j])
					}
				}
			}
		}
	}
}

func TestIsolationBySalt(t *testing.T) {
	e := newEngine(t, nil)
	p := seqPrompt(5, 64)
	collect(t, e, engine.Request{Prompt: p, MaxTokens: 1, CacheSalt: "tenant-a"})
	if r := collect(t, e, engine.Request{Prompt: p, MaxTokens: 1, CacheSalt: "tenant-b"}); r.usage.CachedTokens() != 0 {
		t.Errorf("other salt reused %d tokens", r.usage.CachedTokens())
	}
	if r := collect(t, e, engine.Request{Prompt: p, MaxTokens: 1, CacheSalt: "tenant-a"}); r.usage.CachedTokens() != 48 {
		t.Errorf("same salt reused %d tokens, want 48", r.usage.CachedTokens())
	}
}

// TestConcurrentSharedPrefix: 64 concurrent streams sharing one prefix finish, within a small
// pool (forcing preemption), and ref counts return to zero (checked in cleanup).
func TestConcurrentSharedPrefix(t *testing.T) {
	e := newEngine(t, func(c *engine.Config) { c.KVMemory = 80 * 8192 })
	shared := seqPrompt(9, 40)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := append(append([]int32(nil), shared...), int32(10+i))
			ch, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 24})
			if err != nil {
				errs <- err
				return
			}
			n := 0
			for o := range ch {
				n += len(o.Tokens)
				if o.Done && o.FinishReason == engine.FinishCancelled {
					errs <- fmt.Errorf("request %d cancelled", i)
				}
			}
			if n == 0 {
				errs <- fmt.Errorf("request %d produced nothing", i)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatal("deadlock: 64 streams did not finish in 120 s")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := e.Stats()
	if st.KVBlocksUsed != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after all streams: %+v", st)
	}
}

func TestCancelFreesBlocks(t *testing.T) {
	e := newEngine(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Generate(ctx, &engine.Request{Prompt: seqPrompt(4, 50), MaxTokens: 10000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ch // first token
	cancel()
	var last engine.Output
	for o := range ch {
		last = o
	}
	if last.FinishReason != engine.FinishCancelled {
		t.Errorf("finish %q, want cancelled", last.FinishReason)
	}
	if st := e.Stats(); st.KVBlocksUsed != 0 {
		t.Errorf("%d blocks still referenced after cancel", st.KVBlocksUsed)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEngine(t, nil)
	vocab := tinyModel(t).Config().Vocab
	for name, req := range map[string]engine.Request{
		"empty":       {MaxTokens: 1},
		"zero max":    {Prompt: []int32{1}, MaxTokens: 0},
		"bad token":   {Prompt: []int32{1, int32(vocab)}, MaxTokens: 1},
		"neg token":   {Prompt: []int32{-1}, MaxTokens: 1},
		"over length": {Prompt: make([]int32, tinyModel(t).Config().ContextLength), MaxTokens: 1},
	} {
		if _, err := e.Generate(context.Background(), &req); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The engine still serves.
	if r := collect(t, e, engine.Request{Prompt: seqPrompt(2, 10), MaxTokens: 2}); len(r.tokens) == 0 {
		t.Errorf("no output after bad requests: %+v", r)
	}
}

// TestDedupBurst: a burst of identical long prompts computes the shared prefix once when dedup
// is on; with it off, concurrent requests compute it again.
func TestDedupBurst(t *testing.T) {
	p := seqPrompt(21, 400)
	run := func(dedup bool) (computed int) {
		e := newEngine(t, func(c *engine.Config) { c.Dedup = dedup; c.MaxBatchTokens = 64 })
		var mu sync.Mutex
		var wg sync.WaitGroup
		resume := e.Pause() // the whole burst is queued before the first prefill step
		var chans []<-chan engine.Output
		for i := 0; i < 6; i++ {
			ch, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
		resume()
		for _, ch := range chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for o := range ch {
					if o.Done {
						mu.Lock()
						computed += o.Usage.ComputedTokens
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return computed
	}
	on, off := run(true), run(false)
	t.Logf("prompt tokens computed for 6×400-token burst: dedup on %d, off %d", on, off)
	if on >= off {
		t.Errorf("dedup on computed %d tokens, off %d: dedup saved nothing", on, off)
	}
	if on > 400+5*16 {
		t.Errorf("dedup on computed %d tokens, want about one prompt (400) plus tails", on)
	}
}

func BenchmarkDedupBurst(b *testing.B) {
	p := seqPrompt(21, 1024)
	for _, dedup := range []bool{false, true} {
		b.Run(fmt.Sprintf("dedup=%v", dedup), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				e := newEngine(b, func(c *engine.Config) { c.Dedup = dedup; c.KVMemory = 64 << 20 })
				b.StartTimer()
				resume := e.Pause()
				var chans []<-chan engine.Output
				for i := 0; i < 8; i++ {
					ch, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 1})
					if err != nil {
						b.Fatal(err)
					}
					chans = append(chans, ch)
				}
				resume()
				for _, ch := range chans {
					for range ch {
					}
				}
			}
		})
	}
}

// TestDuplicateBlocksShared: without dedup, a burst of identical prompts computes the same
// blocks side by side, and each later commit switches its request to the block committed
// first. The outputs stay bit-identical to a run without the cache, and every block comes back.
func TestDuplicateBlocksShared(t *testing.T) {
	off := newEngine(t, func(c *engine.Config) { c.PrefixCache = false })
	req := engine.Request{Prompt: seqPrompt(31, 70), MaxTokens: 20, Logprobs: 2}
	want := collect(t, off, req)
	e := newEngine(t, func(c *engine.Config) { c.Dedup = false; c.MaxBatchTokens = 512 })
	resume := e.Pause() // the burst prefills in one step, so each block is computed 6 times
	got := make([]result, 6)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = collect(t, e, req) }()
	}
	for e.QueuedRequests() < len(got) {
		time.Sleep(time.Millisecond) // until every request is queued (not a timed assertion)
	}
	resume()
	wg.Wait()
	for i, g := range got {
		if fmt.Sprint(g.tokens) != fmt.Sprint(want.tokens) || fmt.Sprint(g.logprobs) != fmt.Sprint(want.logprobs) {
			t.Errorf("request %d: tokens %v logprobs %v, cache off %v %v", i, g.tokens, g.logprobs, want.tokens, want.logprobs)
		}
	}
	if err := e.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.KVBlocksUsed != 0 {
		t.Fatalf("%d blocks still used after the burst", st.KVBlocksUsed)
	}
}
