package engine_test

import (
	"fmt"
	"testing"
	"time"

	"stockpot/internal/blend"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// TestBlendChunksFromTier: chunks another engine cached (its blocks written down to a lower
// tier, as after an eviction or a restart from disk) are restored from the tier by a request
// that blends them at other positions: its output is bitwise that of the same request where
// the chunks were on the device, its usage counts them as hits restored from the tier, and
// a repeat finds them on the device. Under best-effort a prefetch that has not answered at
// admission is not waited for: the chunks are computed.
func TestBlendChunksFromTier(t *testing.T) {
	m := loadPreset(t, "tiny-llama-spm")
	tier := &mapTier{blocks: map[prefix.Hash][]byte{}}
	store := func(c *engine.Config) {
		c.Hooks = blockHooks(tier.keep)
	}
	first, firstChunks := ragPrompt(true)
	prompt, chunks := ragPrompt(false)
	for _, policy := range []blend.Policy{blend.EPIC, blend.CacheBlend} {
		spec := func(c []blend.Chunk) *blend.Spec { return &blend.Spec{Chunks: c, Recompute: 0.15, Policy: policy} }
		collect(t, engineFor(t, m, store), greedy(first, spec(firstChunks)))
		// The reference: the same engine history, the chunks on the device.
		ref := engineFor(t, m, nil)
		collect(t, ref, greedy(first, spec(firstChunks)))
		want := collect(t, ref, greedy(prompt, spec(chunks)))
		if want.usage.Blend == nil || want.usage.Blend.BlendedTokens == 0 {
			t.Fatalf("%v: the reference blended nothing: %+v", policy, want.usage.Blend)
		}
		for _, pp := range []engine.PrefetchPolicy{engine.PrefetchWait, engine.PrefetchCost, engine.PrefetchBestEffort} {
			t.Run(fmt.Sprint(policy, "/prefetch=", pp), func(t *testing.T) {
				tier.delay = 20 * time.Millisecond
				var restorer engine.Restorer = tier
				if pp == engine.PrefetchBestEffort {
					// The tier answers only once the request is done: admission never waits.
					g := &gatedTier{tier: tier, open: make(chan struct{})}
					defer close(g.open)
					restorer = g
				}
				e := engineFor(t, m, func(c *engine.Config) { c.Restorer = restorer; c.Prefetch = pp; c.PrefetchMaxWait = 5 * time.Second })
				have := collect(t, e, greedy(prompt, spec(chunks)))
				u := have.usage
				if got := u.CachedTokens() + u.ComputedTokens + u.Blend.BlendedTokens; got != u.PromptTokens {
					t.Errorf("cached %d + computed %d + blended %d != prompt %d", u.CachedTokens(), u.ComputedTokens, u.Blend.BlendedTokens, u.PromptTokens)
				}
				if pp == engine.PrefetchBestEffort {
					for i, ch := range u.Blend.Chunks {
						if ch.Hit != 0 || ch.Restored != (kvtier.Counts{}) {
							t.Errorf("chunk %d: %+v, want nothing restored (admitted before the tier answered)", i, ch)
						}
					}
					return
				}
				sameOutput(t, "chunks restored from the tier", have, want)
				if u.Blend.BlendedTokens != want.usage.Blend.BlendedTokens || u.Blend.RecomputedTokens != want.usage.Blend.RecomputedTokens {
					t.Errorf("blended %d, recomputed %d; on the device %d, %d", u.Blend.BlendedTokens, u.Blend.RecomputedTokens,
						want.usage.Blend.BlendedTokens, want.usage.Blend.RecomputedTokens)
				}
				for i, ch := range u.Blend.Chunks {
					wc := want.usage.Blend.Chunks[i]
					if ch.Hit == 0 || ch.Hit != wc.Hit || ch.Restored[kvtier.Disk] != uint64(ch.Hit) || ch.Blended != wc.Blended {
						t.Errorf("chunk %d: %+v, want %d hit tokens, all restored from disk, %d blended", i, ch, wc.Hit, wc.Blended)
					}
				}
				if u.DiskTokens == 0 {
					t.Errorf("the system prompt was not restored: %+v", u)
				}
				if st := e.Stats(); st.RestoredBlocks[kvtier.Disk] == 0 {
					t.Errorf("no restored blocks counted: %+v", st.RestoredBlocks)
				}
				// Now on the device: a repeat restores nothing and blends the same.
				again := collect(t, e, greedy(prompt, spec(chunks)))
				sameOutput(t, "repeat", again, want)
				for i, ch := range again.usage.Blend.Chunks {
					if ch.Hit != want.usage.Blend.Chunks[i].Hit || ch.Restored != (kvtier.Counts{}) {
						t.Errorf("repeat: chunk %d: %+v, want its hits on the device", i, ch)
					}
				}
			})
		}
	}
}

// gatedTier is a mapTier whose prefetches answer once open is closed.
type gatedTier struct {
	tier *mapTier
	open chan struct{}
}

func (g *gatedTier) Prefetch(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, done func(engine.Prefetched)) {
	go func() {
		<-g.open
		g.tier.answer(hashes, first, time.Now(), done)
	}()
}
