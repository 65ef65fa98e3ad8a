package engine_test

import (
	"context"
	"fmt"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// intoTier is mapTier as an IntoRestorer: it copies each found block into the block the
// engine reserved for it. damaged names blocks whose record "fails verification": garbage is
// written into their reserved block (as a fused checksum-and-copy leaves it), and the prefix
// stops there. gate, when set, holds every prefetch until it is closed.
type intoTier struct {
	mapTier
	damaged map[prefix.Hash]bool
	gate    chan struct{}
	wrote   chan int // blocks written, sent after the last write of each prefetch
}

func (m *intoTier) PrefetchInto(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, dst [][]byte, done func(engine.Prefetched)) {
	go func() {
		if m.gate != nil {
			<-m.gate
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.calls++
		p := engine.Prefetched{First: first, Discarded: map[string]int{}}
		broken := false
		n := 0
		for i := range dst {
			d, ok := m.blocks[hashes[first+i]]
			if !ok {
				break
			}
			n++
			if broken || m.damaged[hashes[first+i]] {
				for j := range dst[i] {
					dst[i][j] = 0xff
				}
				broken = true
				p.Discarded[tier.ReasonChecksum]++
				continue
			}
			copy(dst[i], d)
			p.Blocks = append(p.Blocks, engine.RestoredBlock{Tier: kvtier.Disk, InPlace: true})
		}
		if m.wrote != nil {
			m.wrote <- n
		}
		done(p)
	}()
}

// storingEngine runs req on a fresh engine that stores every committed block in a new
// intoTier, and returns the output and the tier.
func storingEngine(t *testing.T, req engine.Request) (result, *intoTier) {
	tier := &intoTier{mapTier: mapTier{blocks: map[prefix.Hash][]byte{}}, damaged: map[prefix.Hash]bool{}}
	a := newEngine(t, func(c *engine.Config) {
		c.Hooks = blockHooks(tier.keep)
	})
	cold := collect(t, a, req)
	if len(tier.blocks) == 0 {
		t.Fatal("no blocks stored")
	}
	return cold, tier
}

// TestRestoreIntoReserved: with an IntoRestorer the engine reserves the prompt's blocks at
// enqueue, the restorer verifies straight into them, and admission uses them in place: the
// output is bit for bit the cold one, and every block is free or cached afterwards. A damaged
// block (and the chain after it) is discarded, counted, and recomputed into its reserved
// block over the garbage the failed verification left there.
func TestRestoreIntoReserved(t *testing.T) {
	p := seqPrompt(78, 150)
	req := engine.Request{Prompt: p, MaxTokens: 8, Logprobs: 1}
	cold, tier := storingEngine(t, req)
	full := (len(p) - 1) / 16 // restorable blocks
	for _, damagedAt := range []int{-1, 0, 3} {
		t.Run(fmt.Sprint("damaged=", damagedAt), func(t *testing.T) {
			var hashes []prefix.Hash
			for i, parent := 0, prefix.Root([]byte("test-identity"), ""); i < full; i++ {
				parent = prefix.Chain(parent, p[i*16:(i+1)*16], nil)
				hashes = append(hashes, parent)
			}
			clear(tier.damaged)
			if damagedAt >= 0 {
				tier.damaged[hashes[damagedAt]] = true
			}
			b := newEngine(t, func(c *engine.Config) { c.Restorer = tier; c.Prefetch = engine.PrefetchWait })
			warm := collect(t, b, req)
			want := full
			if damagedAt >= 0 {
				want = damagedAt
			}
			if warm.usage.DiskTokens != want*16 || warm.usage.DiscardedTokens != (full-want)*16 {
				t.Errorf("disk tokens %d, discarded %d; want %d, %d", warm.usage.DiskTokens, warm.usage.DiscardedTokens, want*16, (full-want)*16)
			}
			if fmt.Sprint(warm.tokens) != fmt.Sprint(cold.tokens) || fmt.Sprint(warm.logprobs) != fmt.Sprint(cold.logprobs) {
				t.Errorf("restored output differs:\n%v %v\n%v %v", warm.tokens, warm.logprobs, cold.tokens, cold.logprobs)
			}
			if st := b.Stats(); st.KVBlocksUsed != 0 {
				t.Errorf("%d blocks still referenced after the request", st.KVBlocksUsed)
			}
		})
	}
}

// TestReservationReleasedOnCancel: a request cancelled while its prefetch writes into its
// reserved blocks ends at once, but the blocks stay out of the pool until the prefetch has
// ended (its last write), then are freed; a later request is unaffected by those writes.
func TestReservationReleasedOnCancel(t *testing.T) {
	p := seqPrompt(79, 150)
	req := engine.Request{Prompt: p, MaxTokens: 8, Logprobs: 1}
	cold, tier := storingEngine(t, req)
	tier.gate, tier.wrote = make(chan struct{}), make(chan int, 1)
	b := newEngine(t, func(c *engine.Config) { c.Restorer = tier; c.Prefetch = engine.PrefetchWait })
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := b.Generate(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	full := (len(p) - 1) / 16
	waitFor(t, "the reservation", func() bool { return b.Stats().KVBlocksUsed == full })
	cancel()
	var last engine.Output
	for o := range ch {
		last = o
	}
	if last.FinishReason != engine.FinishCancelled {
		t.Fatalf("finish %q, want cancelled", last.FinishReason)
	}
	// Ended, but the prefetch may still write: the reservation is held.
	if used := b.Stats().KVBlocksUsed; used != full {
		t.Fatalf("%d blocks referenced after the cancel, want the %d reserved", used, full)
	}
	close(tier.gate)
	if n := <-tier.wrote; n != full {
		t.Fatalf("prefetch wrote %d blocks, want %d", n, full)
	}
	waitFor(t, "the reservation's release", func() bool { return b.Stats().KVBlocksUsed == 0 })
	// The same prompt again: restored into a new reservation, same output.
	tier.gate, tier.wrote = nil, nil
	warm := collect(t, b, req)
	if fmt.Sprint(warm.tokens) != fmt.Sprint(cold.tokens) || warm.usage.DiskTokens != full*16 {
		t.Errorf("after the cancel: tokens %v disk %d, want %v disk %d", warm.tokens, warm.usage.DiskTokens, cold.tokens, full*16)
	}
}
