package tiertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"stockpot/internal/tier"
)

// Clock is a test clock for pin expiry, safe for concurrent use: pass Now as a store's
// Config.Now and move it with Advance.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock { return &Clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// PinStore makes a fresh store for the Pinner cases: one with a byte budget gets capacity
// bytes (stores without a budget ignore it) and reads its pin clock from now.
type PinStore func(t *testing.T, capacity int64, now func() time.Time) tier.Store

func runPins(t *testing.T, newStore PinStore, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options)
	}{
		{"Missing", testPinMissing},
		{"PutPinned", testPutPinned},
		{"Unpin", testUnpin},
		{"GetRefreshes", testPinGetRefreshes},
		{"Expiry", testPinExpiry},
		{"Delete", testPinDelete},
		{"CanceledContext", testPinCanceled},
		{"Concurrent", testPinConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewClock()
			s := newStore(t, 64<<20, c.Now)
			closeAtEnd(t, s)
			tt.fn(t, s, s.(tier.Pinner), c, opts)
		})
	}
	t.Run("Pressure", func(t *testing.T) {
		c := NewClock()
		v := Items(Chain(identityA, rootA, SmallLayout, 1, 40))[0].Value
		s := newStore(t, pressureSlots*int64(len(v)+256), c.Now)
		closeAtEnd(t, s)
		if s.Stats().CapacityBytes == 0 {
			return // no budget of its own (memstore, Redis): nothing to evict
		}
		testPinPressure(t, s, s.(tier.Pinner), c)
	})
}

// pressureSlots is how many small records the Pressure case's budget holds, about (the
// stores' per-item overheads differ, up to 256 bytes).
const pressureSlots = 16

// pinsOf returns the unexpired pins among keys, by key.
func pinsOf(p tier.Pinner, keys []tier.Key) map[tier.Key]tier.PinInfo {
	out := map[tier.Key]tier.PinInfo{}
	for _, pi := range p.Pins() {
		if slices.Contains(keys, pi.Key) {
			out[pi.Key] = pi
		}
	}
	return out
}

func mustPin(t *testing.T, p tier.Pinner, keys []tier.Key, ttl time.Duration) []bool {
	t.Helper()
	held, err := p.Pin(context.Background(), keys, ttl)
	if err != nil {
		t.Fatalf("Pin(%d keys, %v): %v", len(keys), ttl, err)
	}
	if len(held) != len(keys) {
		t.Fatalf("Pin(%d keys) returned %d answers", len(keys), len(held))
	}
	return held
}

// clockSlack is how much later than now + TTL a store may set an expiry: the disk tier
// stamps each use strictly after the last (a nanosecond on a clock that stands still).
const clockSlack = time.Millisecond

func checkPinned(t *testing.T, p tier.Pinner, keys []tier.Key, ttl time.Duration, expires time.Time) {
	t.Helper()
	got := pinsOf(p, keys)
	for i, k := range keys {
		pi, ok := got[k]
		switch {
		case !ok:
			t.Fatalf("key %d not in Pins(); pins %v", i, p.Pins())
		case pi.TTL != ttl || pi.Expires.Before(expires) || pi.Expires.After(expires.Add(clockSlack)):
			t.Fatalf("key %d: pin TTL %v expires %v, want %v and %v (+ up to %v)", i, pi.TTL, pi.Expires, ttl, expires, clockSlack)
		}
	}
}

func checkUnpinned(t *testing.T, p tier.Pinner, keys []tier.Key) {
	t.Helper()
	if got := pinsOf(p, keys); len(got) != 0 {
		t.Fatalf("%d of %d keys still in Pins(): %v", len(got), len(keys), got)
	}
}

// Pin reports which keys the store held and pins only those; a missing key stays missing.
func testPinMissing(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 4, 30)
	mustPut(t, s, Items(recs[:3]))
	held := mustPin(t, p, Keys(recs), 10*time.Minute)
	if fmt.Sprint(held) != fmt.Sprint([]bool{true, true, true, false}) {
		t.Fatalf("Pin = %v, want [true true true false]", held)
	}
	checkPinned(t, p, Keys(recs[:3]), 10*time.Minute, c.Now().Add(10*time.Minute))
	checkUnpinned(t, p, Keys(recs[3:]))
	if has := mustContains(t, s, Keys(recs[3:])); has[0] {
		t.Fatal("Pin of a missing key stored it")
	}
	if st := s.Stats(); st.PinnedItems != 3 {
		t.Fatalf("Stats().PinnedItems = %d, want 3", st.PinnedItems)
	}
}

// Put with PinTTL stores the item pinned; a later Put without one keeps the pin.
func testPutPinned(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 3, 31)
	items := Items(recs)
	for i := range items[:2] {
		items[i].PinTTL = time.Hour
	}
	mustPut(t, s, items)
	checkValues(t, mustGet(t, s, Keys(recs)), [][]byte{items[0].Value, items[1].Value, items[2].Value})
	checkPinned(t, p, Keys(recs[:2]), time.Hour, c.Now().Add(time.Hour))
	checkUnpinned(t, p, Keys(recs[2:]))
	st := s.Stats()
	if st.PinnedItems != 2 {
		t.Fatalf("Stats().PinnedItems = %d, want 2", st.PinnedItems)
	}
	if st.CapacityBytes > 0 && st.PinnedBytes < int64(len(items[0].Value)+len(items[1].Value)) {
		t.Fatalf("Stats().PinnedBytes = %d, less than the %d bytes pinned", st.PinnedBytes, len(items[0].Value)+len(items[1].Value))
	}
	c.Advance(time.Minute)
	again := tier.Item{Key: items[0].Key, Value: bytes.Clone(items[0].Value)}
	mustPut(t, s, []tier.Item{again})
	checkPinned(t, p, Keys(recs[:1]), time.Hour, c.Now().Add(time.Hour))
}

// Pin with ttl <= 0 unpins and keeps the value.
func testUnpin(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 2, 32)
	items := Items(recs)
	mustPut(t, s, items)
	mustPin(t, p, Keys(recs), 5*time.Minute)
	if held := mustPin(t, p, Keys(recs), 0); !held[0] || !held[1] {
		t.Fatalf("unpin: held %v, want both", held)
	}
	checkUnpinned(t, p, Keys(recs))
	mustPin(t, p, Keys(recs), 5*time.Minute)
	mustPin(t, p, Keys(recs[:1]), -time.Second)
	checkUnpinned(t, p, Keys(recs[:1]))
	checkPinned(t, p, Keys(recs[1:]), 5*time.Minute, c.Now().Add(5*time.Minute))
	checkValues(t, mustGet(t, s, Keys(recs)), [][]byte{items[0].Value, items[1].Value})
	if st := s.Stats(); st.PinnedItems != 1 {
		t.Fatalf("Stats().PinnedItems = %d, want 1", st.PinnedItems)
	}
}

// A Get that finds a pinned item refreshes its expiry to now + TTL; Contains does not.
func testPinGetRefreshes(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 2, 33)
	mustPut(t, s, Items(recs))
	mustPin(t, p, Keys(recs), 10*time.Minute)
	start := c.Now()
	c.Advance(6 * time.Minute)
	mustGet(t, s, Keys(recs[:1]))
	mustContains(t, s, Keys(recs[1:]))
	checkPinned(t, p, Keys(recs[:1]), 10*time.Minute, start.Add(16*time.Minute))
	checkPinned(t, p, Keys(recs[1:]), 10*time.Minute, start.Add(10*time.Minute))
	c.Advance(6 * time.Minute) // past the first expiry: only the refreshed pin is left
	checkPinned(t, p, Keys(recs[:1]), 10*time.Minute, start.Add(16*time.Minute))
	checkUnpinned(t, p, Keys(recs[1:]))
}

// After its TTL a pin is gone; the item stays, as an unpinned one, and a use does not revive
// the pin.
func testPinExpiry(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 2, 34)
	items := Items(recs)
	mustPut(t, s, items)
	mustPin(t, p, Keys(recs), 10*time.Minute)
	c.Advance(10*time.Minute + time.Second)
	checkUnpinned(t, p, Keys(recs))
	if st := s.Stats(); st.PinnedItems != 0 || st.PinnedBytes != 0 {
		t.Fatalf("after expiry: PinnedItems %d PinnedBytes %d, want 0", st.PinnedItems, st.PinnedBytes)
	}
	checkValues(t, mustGet(t, s, Keys(recs)), [][]byte{items[0].Value, items[1].Value})
	if !opts.ServerClock {
		checkUnpinned(t, p, Keys(recs))
	}
}

func testPinDelete(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 2, 35)
	mustPut(t, s, Items(recs))
	mustPin(t, p, Keys(recs), time.Hour)
	if err := s.Delete(context.Background(), Keys(recs[:1])); err != nil {
		t.Fatal(err)
	}
	checkUnpinned(t, p, Keys(recs[:1]))
	if held := mustPin(t, p, Keys(recs[:1]), time.Hour); held[0] {
		t.Fatal("Pin of a deleted key reports it held")
	}
	if st := s.Stats(); st.PinnedItems != 1 {
		t.Fatalf("Stats().PinnedItems = %d after deleting one of two pins, want 1", st.PinnedItems)
	}
}

func testPinCanceled(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Pin(ctx, Keys(Chain(identityA, rootA, SmallLayout, 1, 36)), time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Pin with a canceled context: %v, want context.Canceled", err)
	}
}

// Retention under pressure, for a store with a budget: pins survive a flood of unpinned
// Puts that evicts everything else; with only pins left a Put is declined, never an
// eviction of a pin; after the TTL the former pins go like any unpinned item.
func testPinPressure(t *testing.T, s tier.Store, p tier.Pinner, c *Clock) {
	pinned := Items(Chain(identityA, rootA, SmallLayout, 3, 41))
	pinned[0].PinTTL, pinned[1].PinTTL = time.Hour, time.Hour
	mustPut(t, s, pinned)
	mustPin(t, p, []tier.Key{pinned[2].Key}, time.Hour)
	pinKeys := []tier.Key{pinned[0].Key, pinned[1].Key, pinned[2].Key}

	flood := func(seed uint64) []tier.Item {
		items := Items(Chain(identityA, rootA, SmallLayout, 4*pressureSlots, seed))
		for i := range items {
			mustPut(t, s, items[i:i+1])
		}
		return items
	}
	f := flood(42)
	if has := mustContains(t, s, pinKeys); !has[0] || !has[1] || !has[2] {
		t.Fatalf("after a flood of unpinned Puts: pins held %v, want all", has)
	}
	last := f[len(f)-1].Key
	if has := mustContains(t, s, []tier.Key{f[0].Key, last}); has[0] || !has[1] {
		t.Fatalf("after the flood: first/last flood item held %v, want [false true]", has)
	}
	if s.Stats().Evictions == 0 {
		t.Fatal("a flood over the budget evicted nothing")
	}

	// Pin more until the budget holds only pins and a pinned Put is declined.
	more := Items(Chain(identityA, rootA, SmallLayout, 2*pressureSlots, 43))
	declined := s.Stats().Declined
	n := 0
	for ; n < len(more); n++ {
		more[n].PinTTL = time.Hour
		mustPut(t, s, more[n:n+1])
		if s.Stats().Declined > declined {
			break
		}
	}
	if n == len(more) {
		t.Fatalf("%d pinned Puts over a budget of about %d items: none declined", n, pressureSlots)
	}
	keys := slices.Clone(pinKeys)
	for _, it := range more[:n] {
		keys = append(keys, it.Key)
	}
	if has := mustContains(t, s, keys); slices.Contains(has, false) {
		t.Fatalf("with only pins left: held %v, want every pin", has)
	}
	if has := mustContains(t, s, []tier.Key{more[n].Key, last}); has[0] || has[1] {
		t.Fatalf("declined pin / last unpinned held %v, want neither", has)
	}
	st := s.Stats()
	extra := Items(Chain(identityA, rootA, SmallLayout, 1, 44))
	mustPut(t, s, extra)
	after := s.Stats()
	if after.Declined != st.Declined+1 || after.Evictions != st.Evictions {
		t.Fatalf("unpinned Put with only pins left: declined %d->%d, evictions %d->%d; want declined +1, no eviction",
			st.Declined, after.Declined, st.Evictions, after.Evictions)
	}
	if after.PinnedItems != int64(len(keys)) {
		t.Fatalf("Stats().PinnedItems = %d, want %d", after.PinnedItems, len(keys))
	}

	// Expired, the former pins are unpinned items like any other: the next flood takes them.
	c.Advance(time.Hour + time.Second)
	flood(45)
	if has := mustContains(t, s, keys); slices.Contains(has, true) {
		t.Fatalf("after the TTL and a flood: former pins held %v, want none", has)
	}
	if st := s.Stats(); st.PinnedItems != 0 || st.PinnedBytes != 0 {
		t.Fatalf("after expiry: PinnedItems %d PinnedBytes %d, want 0", st.PinnedItems, st.PinnedBytes)
	}
}

// ConcurrentPinOps runs workers doing Put (pinned or not), Pin, unpin, Get and Delete over
// the same keys at once (run under -race). Afterwards the caller checks what it needs.
func ConcurrentPinOps(t *testing.T, s tier.Store, keys []tier.Item, workers, rounds int) {
	t.Helper()
	p := s.(tier.Pinner)
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range rounds {
				it := keys[(w*7+i*3)%len(keys)]
				var err error
				switch (w + i) % 6 {
				case 0:
					err = s.Put(ctx, []tier.Item{{Key: it.Key, Value: bytes.Clone(it.Value), PinTTL: time.Duration(1+i%3) * time.Hour}})
				case 1:
					err = s.Put(ctx, []tier.Item{{Key: it.Key, Value: bytes.Clone(it.Value)}})
				case 2:
					_, err = p.Pin(ctx, []tier.Key{it.Key}, time.Duration(1+w%2)*time.Hour)
				case 3:
					_, err = p.Pin(ctx, []tier.Key{it.Key}, 0)
				case 4:
					_, err = s.Get(ctx, []tier.Key{it.Key})
				case 5:
					if i%4 == 0 {
						err = s.Delete(ctx, []tier.Key{it.Key})
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// Concurrent pin operations leave a consistent store: every pin listed is held, and the
// counters agree with the list.
func testPinConcurrent(t *testing.T, s tier.Store, p tier.Pinner, c *Clock, opts Options) {
	items := Items(Chain(identityA, rootA, SmallLayout, 12, 37))
	ConcurrentPinOps(t, s, items, 4, 60)
	pins := p.Pins()
	keys := make([]tier.Key, len(pins))
	for i, pi := range pins {
		keys[i] = pi.Key
	}
	if has := mustContains(t, s, keys); slices.Contains(has, false) {
		t.Fatalf("Pins() lists keys the store does not hold: %v", has)
	}
	if st := s.Stats(); st.PinnedItems != int64(len(pins)) {
		t.Fatalf("Stats().PinnedItems = %d, Pins() lists %d", st.PinnedItems, len(pins))
	}
}
