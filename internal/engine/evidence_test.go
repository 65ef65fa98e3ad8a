package engine_test

import (
	"context"
	"sync"
	"testing"

	"stockpot/internal/blend"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// usageSum adds up what the Usage objects say, in the shape of engine.Evidence.
type usageSum struct {
	ev engine.Evidence
}

func (s *usageSum) add(u engine.Usage, finish string, blockSize int) {
	s.ev.Finished++
	if finish == engine.FinishCancelled {
		s.ev.Cancelled++
	}
	s.ev.Hits[u.HitClass(blockSize)]++
	s.ev.PromptTokens += uint64(u.PromptTokens)
	for t := range kvtier.Tier(kvtier.Count) {
		s.ev.SourceTokens[t] += uint64(u.TierTokens(t))
	}
	s.ev.ComputedTokens += uint64(u.ComputedTokens)
	if u.Blend != nil {
		s.ev.BlendedTokens += uint64(u.Blend.BlendedTokens)
	}
	s.ev.DiscardedTokens += uint64(u.DiscardedTokens)
}

// TestEvidenceAgreesWithUsage: the engine's own counters (Stats().Evidence, counted where the
// scheduler decides) equal the sums of the Usage objects it delivered, over cold, partial and
// warm requests, restores from a lower tier, blended requests (chunk K/V kept: their own
// source), and requests whose caller went away — the abandoned ones are counted too, though
// no client ever read their usage.
func TestEvidenceAgreesWithUsage(t *testing.T) {
	const B = 16
	tier := &mapTier{blocks: map[prefix.Hash][]byte{}}
	var mu sync.Mutex
	e := newEngine(t, func(c *engine.Config) {
		c.Restorer, c.Prefetch = tier, engine.PrefetchWait
		c.MaxBatchTokens = 32 // many steps per prompt: there is time to abandon one mid-prefill
		c.Hooks = blockHooks(func(evs []prefix.Event, kv, _ [][]byte) {
			mu.Lock()
			defer mu.Unlock()
			for i, ev := range evs {
				if ev.Kind == prefix.Stored && ev.Hash[0]%2 == 0 { // the tier keeps about half
					tier.mu.Lock()
					tier.blocks[ev.Hash] = append([]byte(nil), kv[i]...)
					tier.mu.Unlock()
				}
			}
		})
	})
	var sum usageSum
	run := func(p []int32) engine.Usage {
		r := collect(t, e, engine.Request{Prompt: p, MaxTokens: 3})
		sum.add(r.usage, r.finish, B)
		return r.usage
	}
	sys := seqPrompt(5, 160)
	if u := run(sys); u.CachedTokens() != 0 {
		t.Fatalf("first request reused %d tokens", u.CachedTokens())
	}
	if u := run(sys); u.HitClass(B) != engine.HitWarm {
		t.Fatalf("repeat: class %v, cached %d", u.HitClass(B), u.CachedTokens())
	}
	branch := append(append([]int32(nil), sys[:100]...), seqPrompt(6, 80)...)
	if u := run(branch); u.HitClass(B) != engine.HitPartial {
		t.Fatalf("branch: class %v, cached %d", u.HitClass(B), u.CachedTokens())
	}
	run(seqPrompt(7, 5)) // below one block: cold
	// Blended: the chunks cached by the first, found by the second in the other order.
	for _, order := range []bool{true, false} {
		p, chunks := ragPrompt(order)
		r := collect(t, e, engine.Request{Prompt: p, MaxTokens: 3, Blend: &blend.Spec{Chunks: chunks, Recompute: 0.2}})
		sum.add(r.usage, r.finish, B)
	}

	// Abandoned: the caller's context ends mid-generation (its first token read, 999 to go);
	// only the engine's final output, which the caller never reads, carries its usage.
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Generate(ctx, &engine.Request{Prompt: seqPrompt(8, 600), MaxTokens: 1000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if o := <-ch; o.Done {
		t.Fatalf("the abandoned request ended at once: %+v", o)
	}
	cancel()
	for o := range ch {
		if o.Done {
			sum.add(*o.Usage, o.FinishReason, B)
		}
	}
	// Stats are published before the final output goes out (deliver): wait until the runner
	// is idle, then until it has finished the loop that published it (a no-op run on the
	// runner: every step before it, and its publishing, is done).
	waitFor(t, "the engine to go idle", func() bool { st := e.Stats(); return st.Running == 0 && st.Waiting == 0 })
	e.Pause()()
	got := e.Stats().Evidence
	want := sum.ev
	got.PrefetchLate, got.PrefetchDropped = 0, 0 // not in the usage
	if got != want {
		t.Errorf("engine evidence != usage sums\n got %+v\nwant %+v", got, want)
	}
	if want.Cancelled != 1 || want.Hits[engine.HitPartial] == 0 || want.SourceTokens[kvtier.Device] == 0 || want.BlendedTokens == 0 {
		t.Errorf("the scenario did not cover what it should: %+v", want)
	}
}

// TestHitClass is the class boundaries: cold reused nothing, warm all of ⌊(P−1)/B⌋ blocks.
func TestHitClass(t *testing.T) {
	for _, c := range []struct {
		prompt, cached int
		want           engine.HitClass
	}{
		{5, 0, engine.HitCold}, {17, 0, engine.HitCold}, {17, 16, engine.HitWarm},
		{16, 0, engine.HitCold}, {33, 16, engine.HitPartial}, {33, 32, engine.HitWarm}, {160, 144, engine.HitWarm},
		{161, 144, engine.HitPartial},
	} {
		u := engine.Usage{PromptTokens: c.prompt, DeviceTokens: c.cached, ComputedTokens: c.prompt - c.cached}
		if got := u.HitClass(16); got != c.want {
			t.Errorf("prompt %d cached %d: class %v, want %v", c.prompt, c.cached, got, c.want)
		}
	}
	// A hybrid model reuses in units of its checkpoint interval: warm is the deepest unit
	// before the last token. The seeds' 480,158-token prompt (30,009 blocks of 16) with a
	// checkpoint every 16 blocks reuses at most 1,875 units, 480,000 tokens.
	for _, c := range []struct {
		prompt, cached, unit int
		want                 engine.HitClass
	}{
		{480158, 480000, 16, engine.HitWarm}, {480158, 480000, 1, engine.HitPartial},
		{480158, 479744, 16, engine.HitPartial}, {480158, 0, 16, engine.HitCold},
		{161, 144, 3, engine.HitWarm}, {161, 96, 3, engine.HitPartial}, {161, 144, 0, engine.HitPartial},
		{40, 0, 4, engine.HitCold}, // shorter than one unit: nothing to reuse, cold
	} {
		u := engine.Usage{PromptTokens: c.prompt, DeviceTokens: c.cached, ComputedTokens: c.prompt - c.cached, ReuseUnitBlocks: c.unit}
		if got := u.HitClass(16); got != c.want {
			t.Errorf("prompt %d cached %d unit %d blocks: class %v, want %v", c.prompt, c.cached, c.unit, got, c.want)
		}
	}
}
