package engine_test

import (
	"bytes"
	"sync"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// TestReuseEventsAndOffloadCap: with ReuseEvents, a request that reuses cached blocks yields one
// Reused event per block, with the block's bytes (as its Stored event had them) and its new
// hit count; without it, none. A request's MaxOffloadTokens marks the blocks it computes past
// the cap NoOffload on their events.
func TestReuseEventsAndOffloadCap(t *testing.T) {
	const B = 16
	for _, on := range []bool{true, false} {
		var mu sync.Mutex
		stored := map[prefix.Hash][]byte{}
		var reused []prefix.Event
		noOffload := map[int32]bool{}
		e := newEngine(t, func(c *engine.Config) {
			c.ReuseEvents = on
			c.Hooks = blockHooks(func(evs []prefix.Event, kv, _ [][]byte) {
				mu.Lock()
				defer mu.Unlock()
				for i, ev := range evs {
					switch ev.Kind {
					case prefix.Stored:
						stored[ev.Hash] = append([]byte(nil), kv[i]...)
						noOffload[ev.Depth] = ev.NoOffload
					case prefix.Reused:
						if !bytes.Equal(kv[i], stored[ev.Hash]) {
							t.Errorf("Reused event of depth %d: bytes differ from its Stored event's", ev.Depth)
						}
						reused = append(reused, ev)
					}
				}
			})
		})
		p := seqPrompt(3, 4*B+5) // 4 full blocks
		capTokens := 2 * B
		collect(t, e, engine.Request{Prompt: p, MaxTokens: 1, MaxOffloadTokens: &capTokens})
		collect(t, e, engine.Request{Prompt: p, MaxTokens: 1})
		mu.Lock()
		for d := int32(0); d < 4; d++ {
			if want := d >= 2; noOffload[d] != want {
				t.Errorf("block at depth %d: NoOffload %v, want %v (cap %d tokens)", d, noOffload[d], want, capTokens)
			}
		}
		switch {
		case !on && len(reused) != 0:
			t.Errorf("without ReuseEvents: %d Reused events", len(reused))
		case on && len(reused) != 4:
			t.Errorf("with ReuseEvents: %d Reused events, want 4", len(reused))
		case on:
			for _, ev := range reused {
				if ev.Hits != 1 || ev.NoOffload {
					t.Errorf("Reused event of depth %d: hits %d, NoOffload %v; want 1, false (the uncapped reuse allows it)", ev.Depth, ev.Hits, ev.NoOffload)
				}
			}
		}
		mu.Unlock()
	}
}

// TestMaxOffloadTokensNegative: a negative cap is refused as invalid.
func TestMaxOffloadTokensNegative(t *testing.T) {
	e := newEngine(t, nil)
	n := -1
	if _, err := e.Generate(t.Context(), &engine.Request{Prompt: seqPrompt(1, 8), MaxTokens: 1, MaxOffloadTokens: &n}); err == nil {
		t.Fatal("a negative max_offload_tokens was accepted")
	}
}
