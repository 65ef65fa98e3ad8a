package hostmem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/tiertest"
)

func newStore(t *testing.T, capacity int64) *hostmem.Store {
	t.Helper()
	s, err := hostmem.New(hostmem.Config{CapacityBytes: capacity})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	tiertest.RunOptions(t, func(t *testing.T) tier.Store { return newStore(t, 64<<20) }, tiertest.Options{
		Pins: func(t *testing.T, capacity int64, now func() time.Time) tier.Store {
			s, err := hostmem.New(hostmem.Config{CapacityBytes: capacity, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

var (
	identity = [32]byte{7}
	root     = prefix.Root(identity[:], "")
)

func TestConfig(t *testing.T) {
	if _, err := hostmem.New(hostmem.Config{}); err == nil {
		t.Fatal("zero capacity accepted")
	}
	if _, err := hostmem.New(hostmem.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
}

// Scripted LRU: a budget of 3 entries; touching an entry with Get saves it;
// Contains does not.
func TestLRUEviction(t *testing.T) {
	recs := tiertest.Chain(identity, root, tiertest.SmallLayout, 5, 1)
	items := tiertest.Items(recs)
	per := int64(len(items[0].Value)) + 192
	s := newStore(t, 3*per)
	ctx := context.Background()
	step := func(put int) {
		if err := s.Put(ctx, items[put:put+1]); err != nil {
			t.Fatal(err)
		}
	}
	has := func() (got [5]bool) {
		c, _ := s.Contains(ctx, tiertest.Keys(recs))
		copy(got[:], c)
		return got
	}
	step(0)
	step(1)
	step(2)
	s.Get(ctx, []tier.Key{recs[0].Key()})      // 0 is now the most recent
	s.Contains(ctx, []tier.Key{recs[1].Key()}) // not a use
	step(3)                                    // evicts 1
	if got, want := has(), [5]bool{true, false, true, true, false}; got != want {
		t.Fatalf("after put 3: %v, want %v", got, want)
	}
	step(4) // evicts 2
	if got, want := has(), [5]bool{true, false, false, true, true}; got != want {
		t.Fatalf("after put 4: %v, want %v", got, want)
	}
	st := s.Stats()
	if st.Evictions != 2 || st.Items != 3 || st.UsedBytes != 3*per || st.CapacityBytes != 3*per {
		t.Fatalf("stats %+v, want 2 evictions, 3 items, %d bytes used of %d", st, 3*per, 3*per)
	}
}

func TestTooLarge(t *testing.T) {
	recs := tiertest.Chain(identity, root, tiertest.SmallLayout, 2, 2)
	items := tiertest.Items(recs)
	s := newStore(t, int64(len(items[0].Value))+192)
	big := tier.Item{Key: tier.Key{Root: root, Hash: prefix.Hash{1}}, Value: make([]byte, 1<<20)}
	err := s.Put(context.Background(), []tier.Item{big, items[0]})
	if !errors.Is(err, tier.ErrTooLarge) {
		t.Fatalf("Put of an oversize value: %v, want ErrTooLarge", err)
	}
	if has, _ := s.Contains(context.Background(), []tier.Key{big.Key, items[0].Key}); has[0] || !has[1] {
		t.Fatalf("after Put: contains %v, want [false true]", has)
	}
}

// Get hands back the stored slice itself: no copy.
func TestZeroCopy(t *testing.T) {
	recs := tiertest.Chain(identity, root, tiertest.SmallLayout, 1, 3)
	items := tiertest.Items(recs)
	s := newStore(t, 1<<20)
	s.Put(context.Background(), items)
	vals, _ := s.Get(context.Background(), tiertest.Keys(recs))
	if &vals[0][0] != &items[0].Value[0] {
		t.Fatal("Get copied the value")
	}
	if n := testing.AllocsPerRun(100, func() { s.Get(context.Background(), tiertest.Keys(recs)) }); n > 2 {
		t.Fatalf("Get allocates %.0f times per call", n)
	}
}

// SpillTo gets what each Put evicted, in eviction order, outside the lock (the callback may
// call the store); overwrites and deletes are not spilled.
func TestSpill(t *testing.T) {
	recs := tiertest.Chain(identity, root, tiertest.SmallLayout, 5, 2)
	items := tiertest.Items(recs)
	per := int64(len(items[0].Value)) + 192
	s := newStore(t, 3*per)
	ctx := context.Background()
	var spilled []tier.Key
	s.SpillTo(func(its []tier.Item) {
		for _, it := range its {
			if has, _ := s.Contains(ctx, []tier.Key{it.Key}); has[0] {
				t.Errorf("spilled %s is still in the store", it.Key)
			}
			spilled = append(spilled, it.Key)
		}
	})
	s.Put(ctx, items[:3])
	s.Put(ctx, items[1:2]) // an overwrite: not an eviction
	s.Delete(ctx, []tier.Key{items[2].Key})
	s.Put(ctx, items[3:5]) // room for one after the delete: evicts 0
	if want := []tier.Key{items[0].Key}; fmt.Sprint(spilled) != fmt.Sprint(want) {
		t.Fatalf("spilled %v, want %v", spilled, want)
	}
}

// A restored chain is touched head last, so eviction takes its tail first and what stays is
// a usable prefix.
func TestGetKeepsChainHeads(t *testing.T) {
	recs := tiertest.Chain(identity, root, tiertest.SmallLayout, 6, 3)
	items := tiertest.Items(recs)
	per := int64(len(items[0].Value)) + 192
	s := newStore(t, 4*per)
	ctx := context.Background()
	s.Put(ctx, items[:4])
	s.Get(ctx, tiertest.Keys(recs[:4])) // the chain, in prefix order
	s.Put(ctx, items[4:6])
	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{true, true, false, false, true, true}; fmt.Sprint(has) != fmt.Sprint(want) {
		t.Fatalf("after a restore and two puts: %v, want %v (the tail evicted, not the head)", has, want)
	}
}
