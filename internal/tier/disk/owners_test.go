package disk

import (
	"testing"

	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// TestOwnerBudget: while an owner holds more than its limit, eviction takes its least
// recently used file first, even when another owner's are older; within the limit, the LRU.
func TestOwnerBudget(t *testing.T) {
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 6, 6)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	s := open(t, t.TempDir(), digestA, 4*per)
	defer s.Close()
	put := func(i int, owner uint16) {
		t.Helper()
		it := items[i]
		it.Owner = owner
		if err := s.Put(ctx, []tier.Item{it}); err != nil {
			t.Fatal(err)
		}
	}
	put(0, 1) // owner 1's two files are the oldest
	put(1, 1)
	put(2, 2)
	put(3, 2)
	s.SetOwnerLimit(2, per) // owner 2 holds 2 files, may hold 1
	put(4, 0)               // evicts 2 (owner 2's oldest), not 0
	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{true, true, false, true, true, false}; !equal(has, want) {
		t.Fatalf("with owner 2 over its budget: %v, want %v", has, want)
	}
	if got := s.OwnerBytes(2); got != per {
		t.Fatalf("owner 2 holds %d bytes, want %d", got, per)
	}
	put(5, 0) // owner 2 within its budget: the LRU (0) goes
	has, _ = s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{false, true, false, true, true, true}; !equal(has, want) {
		t.Fatalf("with owner 2 within its budget: %v, want %v", has, want)
	}
	if got := s.OwnerBytes(1); got != per {
		t.Fatalf("owner 1 holds %d bytes, want %d", got, per)
	}
}
