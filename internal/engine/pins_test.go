package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/kvcache"
)

// fakeClock is an engine clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// floodPool sends prompts of n tokens, one at a time, worth rounds times the pool, each
// one once, or twice with reuse (then the flood's blocks are in eviction's protected class,
// reused at least once, as a hot prefix is).
func floodPool(t testing.TB, e *engine.Engine, seed uint64, n, rounds int, reuse bool) {
	t.Helper()
	blocks := e.Stats().KVBlocksTotal
	for i := range rounds * blocks * 16 / n {
		req := engine.Request{Prompt: seqPrompt(seed+uint64(i), n), MaxTokens: 1}
		collect(t, e, req)
		if reuse {
			collect(t, e, req)
		}
	}
}

// TestPinSurvivesFlood: a pinned prefix stays in the working pool through a flood of
// unpinned traffic that evicts everything else (the same prefix unpinned is gone), each hit
// refreshes its TTL, and it expires TTL after its last use.
func TestPinSurvivesFlood(t *testing.T) {
	clock := newFakeClock()
	mk := func() *engine.Engine {
		return newEngine(t, func(c *engine.Config) { c.KVMemory = 64 * 8192; c.Now = clock.Now })
	}
	pinned, plain := mk(), mk()
	const B = 16
	sys := seqPrompt(42, 4*B+5) // 4 full blocks and a partial one
	ask := func(e *engine.Engine, pin bool) engine.Usage {
		req := engine.Request{Prompt: append(append([]int32(nil), sys...), 500, 501), MaxTokens: 1}
		if pin {
			req.Pins = []engine.PinSpec{{Tokens: len(sys), TTL: 5 * time.Minute}}
		}
		return collect(t, e, req).usage
	}
	u := ask(pinned, true)
	if len(u.Pins) != 1 || u.Pins[0].Requested != 4*B || u.Pins[0].Pinned != 4*B || u.Pins[0].Refused {
		t.Fatalf("first pin: %+v, want 64 of 64 tokens pinned", u.Pins)
	}
	ask(plain, false)
	if got := pinned.Stats().PinnedBlocks; got != 4 {
		t.Fatalf("%d blocks pinned, want 4", got)
	}
	floodPool(t, pinned, 1000, 48, 3, true)
	floodPool(t, plain, 1000, 48, 3, true)
	if got := pinned.Stats().Evictions; got == 0 {
		t.Fatalf("the flood evicted nothing: it does not exercise the pool")
	}
	if u := ask(pinned, false); u.DeviceTokens != 4*B {
		t.Errorf("after the flood, the pinned prefix reused %d tokens, want %d", u.DeviceTokens, 4*B)
	}
	if u := ask(plain, false); u.DeviceTokens != 0 {
		t.Errorf("after the flood, the unpinned prefix reused %d tokens, want 0 (evicted)", u.DeviceTokens)
	}

	// The hit above refreshed the pin: 4 minutes later, and 4 more, it still holds.
	clock.Add(4 * time.Minute)
	if u := ask(pinned, false); u.DeviceTokens != 4*B {
		t.Errorf("4m after the pin: reused %d tokens, want %d", u.DeviceTokens, 4*B)
	}
	clock.Add(4 * time.Minute)
	if n := pinned.SweepPins(); n != 0 {
		t.Errorf("4m after a hit, the sweep unpinned %d blocks, want 0", n)
	}
	pins := pinned.Pins()
	if len(pins) != 4 || !pins[0].Expires.Equal(clock.Now().Add(time.Minute)) || pins[3].PrefixTokens != 4*B {
		t.Fatalf("pins %+v: want 4 blocks expiring in 1m", pins)
	}
	clock.Add(time.Minute)
	if n := pinned.SweepPins(); n != 4 {
		t.Errorf("5m after the last hit, the sweep unpinned %d blocks, want 4", n)
	}
	if st := pinned.Stats(); st.PinnedBlocks != 0 {
		t.Errorf("%d blocks still pinned after expiry", st.PinnedBlocks)
	}
	floodPool(t, pinned, 5000, 48, 3, true)
	if u := ask(pinned, false); u.DeviceTokens != 0 {
		t.Errorf("after expiry and a flood, reused %d tokens, want 0 (evicted as any block)", u.DeviceTokens)
	}
}

// TestPinBudget: past the budget a pin is partial (reported), and a strict one is refused by
// Generate with ErrPinBudget before anything runs.
func TestPinBudget(t *testing.T) {
	e := newEngine(t, func(c *engine.Config) { c.KVMemory = 64 * 8192 })
	st := e.Stats()
	c := e.Stats().KVBlockBytes
	e2 := newEngine(t, func(cfg *engine.Config) { cfg.KVMemory = 64 * 8192; cfg.PinBudget = 3 * c })
	if got := e2.Stats().PinBudgetBlocks; got != 3 {
		t.Fatalf("budget of 3 blocks' bytes is %d blocks", got)
	}
	if st.PinBudgetBlocks != st.KVBlocksTotal/2 {
		t.Errorf("default budget %d blocks, want half the pool (%d)", st.PinBudgetBlocks, st.KVBlocksTotal/2)
	}
	p := seqPrompt(9, 5*16+1)
	u := collect(t, e2, engine.Request{Prompt: p, MaxTokens: 1, Pins: []engine.PinSpec{{Tokens: len(p), TTL: time.Hour}}}).usage
	if r := u.Pins[0]; r.Requested != 80 || r.Pinned != 48 || r.Refused {
		t.Errorf("partial pin %+v: want 48 of 80 tokens", r)
	}
	q := seqPrompt(10, 33)
	_, err := e2.Generate(context.Background(), &engine.Request{Prompt: q, MaxTokens: 1, PinStrict: true,
		Pins: []engine.PinSpec{{Tokens: 32, TTL: time.Hour}}})
	if !errors.Is(err, engine.ErrPinBudget) {
		t.Errorf("strict pin over budget: err %v, want ErrPinBudget", err)
	}
	if _, err := e2.Generate(context.Background(), &engine.Request{Prompt: q, MaxTokens: 1,
		Pins: []engine.PinSpec{{Tokens: 32, TTL: 0}}}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("pin with no TTL: err %v, want ErrInvalid", err)
	}
	off := newEngine(t, func(cfg *engine.Config) { cfg.KVMemory = 64 * 8192; cfg.PinBudget = -1 })
	u = collect(t, off, engine.Request{Prompt: q, MaxTokens: 1, Pins: []engine.PinSpec{{Tokens: 32, TTL: time.Hour}}}).usage
	if r := u.Pins[0]; r.Pinned != 0 || !r.Refused {
		t.Errorf("pins off: %+v, want refused", r)
	}
	if n := e2.Unpin(func(p engine.PinInfo) bool { return p.Root == e2.Root("other tenant") }); n != 0 {
		t.Errorf("Unpin of another tenant's root: %d blocks", n)
	}
	if n := e2.Unpin(func(p engine.PinInfo) bool { return p.Root == e2.Root("") }); n != 3 {
		t.Errorf("Unpin everything: %d blocks, want 3", n)
	}
}

// BenchmarkPinnedPrefixFlood measures the pinned prefix's hit rate and TTFT while other
// prompts flood the pool, against the same prefix unpinned (sub-benchmarks pinned and
// unpinned, same run). Each iteration floods the 64-block pool with 12 prompts of 6 blocks,
// each sent twice (reused, so in eviction's protected class as the prefix is), then sends
// the 12-block prefix with a new question. Metrics: hit% (of the prefix's tokens reused) and
// ttft-ms (the prefix request's, from the engine's usage). The tiny test model; the Served
// variant runs the model `stockpot serve` embeds.
func BenchmarkPinnedPrefixFlood(b *testing.B) {
	benchPinFlood(b, func(c *engine.Config) { c.KVMemory = 64 * 8192 }, newEngine)
}

func BenchmarkPinnedPrefixFloodServed(b *testing.B) {
	benchPinFlood(b, nil, func(b testing.TB, mutate func(*engine.Config)) *engine.Engine {
		mc := servedModel(b.(*testing.B)).Config()
		lay := kvcache.Layout{BlockSize: 16, Layers: mc.Layers, KVHeads: mc.KVHeads, HeadDim: mc.HeadDim, DType: kvcache.F32}
		return servedEngine(b.(*testing.B), func(c *engine.Config) { c.KVMemory = 64 * lay.BlockBytes() })
	})
}

func benchPinFlood(b *testing.B, mutate func(*engine.Config), mk func(testing.TB, func(*engine.Config)) *engine.Engine) {
	for _, pin := range []bool{true, false} {
		name := "unpinned"
		if pin {
			name = "pinned"
		}
		b.Run(name, func(b *testing.B) {
			e := mk(b, mutate)
			sys := seqPrompt(77, 12*16)
			var spec []engine.PinSpec
			if pin {
				spec = []engine.PinSpec{{Tokens: len(sys), TTL: time.Hour}}
			}
			collect(b, e, engine.Request{Prompt: sys, MaxTokens: 1, Pins: spec})
			var hit, total int
			var ttft float64
			b.ResetTimer()
			for i := range b.N {
				for j := range 12 {
					req := engine.Request{Prompt: seqPrompt(uint64(10_000+i*12+j), 96), MaxTokens: 1}
					collect(b, e, req)
					collect(b, e, req)
				}
				p := append(append([]int32(nil), sys...), seqPrompt(uint64(90_000+i), 9)[1:]...)
				u := collect(b, e, engine.Request{Prompt: p, MaxTokens: 1, Pins: spec}).usage
				hit += u.CachedTokens()
				total += len(sys)
				ttft += u.TTFTMs
			}
			b.ReportMetric(100*float64(hit)/float64(total), "hit%")
			b.ReportMetric(ttft/float64(b.N), "ttft-ms")
		})
	}
}
