package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// mapTier is an in-memory lower tier for engine tests: block hash → K/V bytes.
type mapTier struct {
	mu     sync.Mutex
	blocks map[prefix.Hash][]byte
	delay  time.Duration
	calls  int
}

func (m *mapTier) Prefetch(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, done func(engine.Prefetched)) {
	go func() {
		start := time.Now()
		time.Sleep(m.delay)
		m.answer(hashes, first, start, done)
	}()
}

// keep is a block hook (blockHooks) that stores the K/V of every committed block in m, as a
// write-through tier would.
func (m *mapTier) keep(evs []prefix.Event, kv, _ [][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, ev := range evs {
		if ev.Kind == prefix.Stored {
			m.blocks[ev.Hash] = append([]byte(nil), kv[i]...)
		}
	}
}

// answer calls done with the blocks of hashes from first that m holds.
func (m *mapTier) answer(hashes []prefix.Hash, first int, start time.Time, done func(engine.Prefetched)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	p := engine.Prefetched{First: first}
	for i := first; i < len(hashes); i++ {
		d, ok := m.blocks[hashes[i]]
		if !ok {
			break
		}
		p.Blocks = append(p.Blocks, engine.RestoredBlock{Tier: kvtier.Disk, Data: d})
	}
	p.Elapsed = time.Since(start)
	done(p)
}

// TestRestoreFromTier: blocks stored by one engine and restored into a fresh one (as after a
// restart from disk) are reused, counted by tier, and change no output bit.
func TestRestoreFromTier(t *testing.T) {
	tier := &mapTier{blocks: map[prefix.Hash][]byte{}}
	a := newEngine(t, func(c *engine.Config) {
		c.Hooks = blockHooks(tier.keep)
	})
	p := seqPrompt(77, 150)
	req := engine.Request{Prompt: p, MaxTokens: 8, Logprobs: 1}
	cold := collect(t, a, req)
	if len(tier.blocks) == 0 {
		t.Fatal("no blocks stored")
	}
	for _, policy := range []engine.PrefetchPolicy{engine.PrefetchWait, engine.PrefetchTimeout, engine.PrefetchBestEffort, engine.PrefetchCost} {
		t.Run(fmt.Sprint("policy=", policy), func(t *testing.T) {
			tier.delay = 20 * time.Millisecond
			b := newEngine(t, func(c *engine.Config) { c.Restorer = tier; c.Prefetch = policy; c.PrefetchMaxWait = time.Second })
			warm := collect(t, b, req)
			want := (len(p) - 1) / 16 * 16
			if policy == engine.PrefetchBestEffort {
				want = 0 // admitted before the (delayed) prefetch arrived
			}
			if warm.usage.DiskTokens != want || warm.usage.CachedTokens() != want {
				t.Errorf("restored %d disk tokens (cached %d), want %d", warm.usage.DiskTokens, warm.usage.CachedTokens(), want)
			}
			if fmt.Sprint(warm.tokens) != fmt.Sprint(cold.tokens) || fmt.Sprint(warm.logprobs) != fmt.Sprint(cold.logprobs) {
				t.Errorf("restored output differs:\n%v %v\n%v %v", warm.tokens, warm.logprobs, cold.tokens, cold.logprobs)
			}
			// The restored blocks are now in the working pool: a repeat hits the device tier.
			again := collect(t, b, req)
			if policy != engine.PrefetchBestEffort && again.usage.DeviceTokens != (len(p)-1)/16*16 {
				t.Errorf("repeat: device tokens %d", again.usage.DeviceTokens)
			}
		})
	}
}

func TestPrefetchPolicyNames(t *testing.T) {
	for _, p := range []engine.PrefetchPolicy{engine.PrefetchWait, engine.PrefetchTimeout, engine.PrefetchBestEffort, engine.PrefetchCost} {
		got, err := engine.ParsePrefetchPolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePrefetchPolicy(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	if _, err := engine.ParsePrefetchPolicy("sometimes"); err == nil {
		t.Error("ParsePrefetchPolicy(sometimes): no error")
	}
	if d := engine.DefaultConfig(); d.Prefetch != engine.PrefetchCost || d.PrefetchMaxWait != 500*time.Millisecond {
		t.Errorf("DefaultConfig: prefetch %v, max wait %v; want cost, 500ms (serve's documented defaults)", d.Prefetch, d.PrefetchMaxWait)
	}
}

// progressTier is a mapTier that reports its progress (engine.ProgressRestorer): a plan of
// every block it holds, far cheaper to read than to recompute by its estimates, then the
// blocks one by one, every step apart. Its plain Prefetch (no progress) answers after the
// mapTier's delay.
type progressTier struct {
	*mapTier
	step time.Duration
}

func (m progressTier) PrefetchProgress(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, dst [][]byte, progress *engine.PrefetchProgress, done func(engine.Prefetched)) {
	m.mu.Lock()
	n := 0
	for i := first; i < len(hashes) && m.blocks[hashes[i]] != nil; i++ {
		n++
	}
	m.mu.Unlock()
	progress.Plan(n, time.Hour, 10*time.Hour)
	go func() {
		start := time.Now()
		for range n {
			time.Sleep(m.step)
			progress.Arrive(1)
		}
		m.answer(hashes, first, start, done)
	}()
}

// TestPrefetchCostWaitsPastMaxWait: under PrefetchCost (the default) a request waits for a
// restore that takes far longer than PrefetchMaxWait while its progress says it is cheaper
// than recomputing, where PrefetchTimeout gives up on it. No timing is asserted: the
// restore's estimate (an hour) is far beyond the test, and its blocks arrive 5 ms apart,
// each a hundred times past the 50 µs max wait.
func TestPrefetchCostWaitsPastMaxWait(t *testing.T) {
	tier := &mapTier{blocks: map[prefix.Hash][]byte{}}
	a := newEngine(t, func(c *engine.Config) {
		c.Hooks = blockHooks(tier.keep)
	})
	p := seqPrompt(78, 100)
	req := engine.Request{Prompt: p, MaxTokens: 2}
	collect(t, a, req)
	tier.delay = 30 * time.Millisecond // the plain Prefetch: as long as the reported one
	for _, policy := range []engine.PrefetchPolicy{engine.PrefetchCost, engine.PrefetchTimeout} {
		t.Run(fmt.Sprint("policy=", policy), func(t *testing.T) {
			b := newEngine(t, func(c *engine.Config) {
				c.Restorer = progressTier{tier, 5 * time.Millisecond}
				c.Prefetch, c.PrefetchMaxWait = policy, 50*time.Microsecond
			})
			want := (len(p) - 1) / 16 * 16
			if policy == engine.PrefetchTimeout {
				want = 0 // gave up after 50 µs
			}
			if u := collect(t, b, req).usage; u.DiskTokens != want {
				t.Errorf("restored %d disk tokens, want %d (usage %+v)", u.DiskTokens, want, u)
			}
		})
	}
}

func TestUsageTierTokens(t *testing.T) {
	u := engine.Usage{DeviceTokens: 1, HostTokens: 2, DiskTokens: 3, RemoteTokens: 4}
	for tr, want := range map[kvtier.Tier]int{kvtier.Device: 1, kvtier.Host: 2, kvtier.Disk: 3, kvtier.Remote: 4, kvtier.Tier(kvtier.Count): 0} {
		if got := u.TierTokens(tr); got != want {
			t.Errorf("TierTokens(%v) = %d, want %d", tr, got, want)
		}
	}
}

// TestRestoredBlockEventsCarryRestoredBytes: a block restored from a tier (copied in before
// the forward pass, not verified in place) is committed at admission, so its Stored event is
// flushed before the copy lands. The event must carry the restored bytes, not the arena's old
// ones: the remote tier's write-through and the tier pins store the event's bytes under the
// block's hash, with a checksum that verifies, so stale bytes there are wrong answers on every
// replica that restores them (found by `stockpot soak`).
func TestRestoredBlockEventsCarryRestoredBytes(t *testing.T) {
	tier := &mapTier{blocks: map[prefix.Hash][]byte{}}
	a := newEngine(t, func(c *engine.Config) {
		c.Hooks = blockHooks(tier.keep)
	})
	req := engine.Request{Prompt: seqPrompt(91, 150), MaxTokens: 4}
	cold := collect(t, a, req)
	var mu sync.Mutex
	stored := map[prefix.Hash][]byte{}
	b := newEngine(t, func(c *engine.Config) {
		c.Restorer = tier
		c.Prefetch = engine.PrefetchWait
		c.Hooks = blockHooks(func(evs []prefix.Event, kv, _ [][]byte) {
			mu.Lock()
			defer mu.Unlock()
			for i, ev := range evs {
				if ev.Kind == prefix.Stored {
					stored[ev.Hash] = append([]byte(nil), kv[i]...)
				}
			}
		})
	})
	warm := collect(t, b, req)
	if warm.usage.DiskTokens == 0 || fmt.Sprint(warm.tokens) != fmt.Sprint(cold.tokens) {
		t.Fatalf("restore: %d disk tokens, tokens %v, want > 0 and %v", warm.usage.DiskTokens, warm.tokens, cold.tokens)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for h, want := range tier.blocks {
		got, ok := stored[h]
		if !ok {
			continue
		}
		n++
		if string(got) != string(want) {
			t.Errorf("block %s: its Stored event in the restoring engine carries other bytes than the ones restored into it", h.Short())
		}
	}
	if n < warm.usage.DiskTokens/16 {
		t.Errorf("%d restored blocks seen as Stored, want %d", n, warm.usage.DiskTokens/16)
	}
}
