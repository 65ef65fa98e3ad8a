package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// stalledTier is a lower tier whose prefetches never finish (until the test ends): requests
// stay in the restoring phase, held back by PrefetchWait.
type stalledTier struct {
	release chan struct{}
}

func (s *stalledTier) Prefetch(_ prefix.Hash, _ []prefix.Hash, _ []int32, first int, done func(engine.Prefetched)) {
	go func() {
		<-s.release
		done(engine.Prefetched{First: first})
	}()
}

// watchdog bounds a wait on a state that must come: it only turns a hang into a failure with
// a message, and is far beyond what the slowest machine needs (no outcome depends on it).
const watchdog = 3 * time.Minute

// waitFor polls cond until it holds or the watchdog fires.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCancelBurstEveryPhase cancels a burst of requests at once, in every phase a request can
// be in, while the runner is paused between steps; on resume every one of them must end
// cancelled before the runner takes another step (so none generates a token it did not have),
// and every block must be free.
//
// This is the engine half of issue 17's "streams whose clients disconnect together keep
// running": a cancellation could be received before the request it names (the runner's select
// picks at random between the request and cancel channels), found no such request, and was
// dropped, so the request ran to its end.
func TestCancelBurstEveryPhase(t *testing.T) {
	const n = 24
	shared := seqPrompt(31, 600)
	distinct := func(i int) []int32 { return seqPrompt(uint64(100+i), 600) }
	// Prefill runs 16 tokens a step, so a 600-token prompt is many steps from its first token:
	// the few steps between seeing a phase and pausing cannot take a request past it.
	small := func(c *engine.Config) { c.MaxBatchTokens = 16 }
	cases := []struct {
		name   string
		cfg    func(*engine.Config, *stalledTier)
		prompt func(i int) []int32
		// reached says the burst is in the phase under test (nil: cancel before the runner
		// saw the burst at all).
		reached func(st engine.Stats, firstTokens int) bool
		// tokens says whether requests may have generated tokens before the cancellation.
		tokens bool
	}{
		{name: "before admission, distinct", prompt: distinct},
		{name: "before admission, shared", prompt: func(int) []int32 { return shared }},
		{
			name:   "queued for a slot",
			cfg:    func(c *engine.Config, _ *stalledTier) { small(c); c.MaxRunning = 2 },
			prompt: distinct, reached: func(st engine.Stats, _ int) bool { return st.Running == 2 && st.Waiting == n-2 },
		},
		{
			name:   "queued for memory",
			cfg:    func(c *engine.Config, _ *stalledTier) { small(c); c.KVMemory = 1 << 20 },
			prompt: distinct, reached: func(st engine.Stats, _ int) bool { return st.Running > 0 && st.Waiting > 0 },
		},
		{
			name:    "restoring",
			cfg:     func(c *engine.Config, st *stalledTier) { c.Restorer, c.Prefetch = st, engine.PrefetchWait },
			prompt:  distinct,
			reached: func(st engine.Stats, _ int) bool { return st.Waiting == n },
		},
		{
			name:    "prefilling",
			cfg:     func(c *engine.Config, _ *stalledTier) { small(c) },
			prompt:  distinct,
			reached: func(st engine.Stats, _ int) bool { return st.Running == n },
		},
		{
			name:   "dedup-waiting",
			cfg:    func(c *engine.Config, _ *stalledTier) { small(c) },
			prompt: func(int) []int32 { return shared },
			reached: func(st engine.Stats, _ int) bool {
				return st.Running >= 1 && st.Waiting >= 1 && st.DedupWaits > 0
			},
		},
		{
			name: "decoding", prompt: func(i int) []int32 { return distinct(i)[:20] }, tokens: true,
			reached: func(_ engine.Stats, firstTokens int) bool { return firstTokens == n },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var firstTokens atomic.Int32
			tier := &stalledTier{release: make(chan struct{})}
			releaseTier := sync.OnceFunc(func() { close(tier.release) })
			defer releaseTier()
			e := newEngine(t, func(c *engine.Config) {
				c.KVMemory = 32 << 20
				if tc.cfg != nil {
					tc.cfg(c, tier)
				}
			})
			// The runner stops itself at the first step that reaches the phase: polling Stats
			// and pausing after would let it take any number of steps in between on a busy
			// machine (running requests then got past their prefill and generated tokens).
			var (
				reached  <-chan struct{}
				resumeAt func()
			)
			if tc.reached != nil {
				reached, resumeAt = e.PauseWhen(func(st engine.Stats) bool { return tc.reached(st, int(firstTokens.Load())) })
				defer resumeAt()
			}
			resume := e.Pause() // the whole burst arrives between two steps
			cancels := make([]context.CancelFunc, n)
			type end struct {
				finish string
				usage  engine.Usage
			}
			ends := make([]end, n)
			var wg sync.WaitGroup
			for i := range n {
				ctx, cancel := context.WithCancel(context.Background())
				cancels[i] = cancel
				ch, err := e.Generate(ctx, &engine.Request{Prompt: tc.prompt(i), MaxTokens: 1500, IgnoreEOS: true})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					first := true
					for o := range ch {
						if len(o.Tokens) > 0 && first {
							first = false
							firstTokens.Add(1)
						}
						if o.Done {
							ends[i].finish, ends[i].usage = o.FinishReason, *o.Usage
						}
					}
				}()
			}
			if tc.reached != nil {
				resume()
				select {
				case <-reached:
				case <-time.After(watchdog):
					t.Fatalf("the burst never reached the phase: %+v", e.Stats())
				}
				resume = resumeAt
			}
			before := e.Stats()
			for _, cancel := range cancels {
				cancel()
			}
			waitFor(t, fmt.Sprintf("%d queued cancellations", n), func() bool { return e.QueuedCancels() == n })
			resume()
			allDone := make(chan struct{})
			go func() { wg.Wait(); close(allDone) }()
			select {
			case <-allDone:
			case <-time.After(watchdog):
				t.Fatalf("streams still open %v after their cancellation: %+v", watchdog, e.Stats())
			}
			for i, en := range ends {
				if en.finish != engine.FinishCancelled {
					t.Errorf("request %d finished %q (%d tokens), want cancelled", i, en.finish, en.usage.CompletionTokens)
				}
				if !tc.tokens && en.usage.CompletionTokens != 0 {
					t.Errorf("request %d generated %d tokens, want 0: it was cancelled before its first", i, en.usage.CompletionTokens)
				}
			}
			if st := e.Stats(); st.Running != 0 || st.Waiting != 0 || st.KVBlocksUsed != 0 {
				t.Errorf("after the burst was cancelled (before: running %d, waiting %d, blocks %d): running %d, waiting %d, blocks in use %d",
					before.Running, before.Waiting, before.KVBlocksUsed, st.Running, st.Waiting, st.KVBlocksUsed)
			}
			releaseTier()
			// The engine still serves.
			if r := collect(t, e, engine.Request{Prompt: seqPrompt(9, 40), MaxTokens: 2}); r.finish != engine.FinishLength {
				t.Errorf("after the burst: finish %q", r.finish)
			}
		})
	}
}

// TestCloseEndsEveryStream: requests racing Close either are refused (ErrShutdown) or get a
// stream that ends; none is left open (one registered just before Close but queued after the
// runner's last drain used to be).
func TestCloseEndsEveryStream(t *testing.T) {
	for iter := range 20 {
		e, err := engine.New(tinyModel(t), engine.Config{Identity: []byte("close"), KVMemory: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		chans := make(chan (<-chan engine.Output), 16)
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch, err := e.Generate(context.Background(), &engine.Request{Prompt: seqPrompt(uint64(i), 30), MaxTokens: 50})
				if err == nil {
					chans <- ch
				}
			}()
		}
		e.Close()
		wg.Wait()
		close(chans)
		for ch := range chans {
			select {
			case <-drained(ch):
			case <-time.After(watchdog):
				t.Fatalf("iteration %d: a stream still open %v after Close", iter, watchdog)
			}
		}
	}
}

// drained reads ch to its end and then closes the returned channel.
func drained(ch <-chan engine.Output) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	return done
}
