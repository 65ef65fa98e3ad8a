package offload

import (
	"bytes"
	"testing"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// A fetch that overlaps one in flight joins the reads of the blocks they share and leads its
// own Get for the others, in one call (Fetcher.get): every block lands in each fetch's own
// destination, verified, and only the values no other fetch joined go back to the store.
func TestFetchJoinsPartOfARead(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 4, 44)
	st := &recyclingStore{Store: memstore.New(), gate: make(chan struct{})}
	st.Store.Put(ctx, tiertest.Items(recs))
	f := newFetcher(t, []TierStore{{kvtier.Host, st}}, nil, nil)
	a, b := request(recs[1:3]), request(recs)
	a.Into, b.Into = destinations(2), destinations(4)
	fa := f.Fetch(ctx, a)
	waitFor(t, "the first fetch's read", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.mu.flight) == 2 })
	fb := f.Fetch(ctx, b)
	waitFor(t, "the second fetch to join blocks 1 and 2 and read 0 and 3", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		joined := 0
		for _, c := range f.mu.flight {
			joined += c.waiters
		}
		return len(f.mu.flight) == 4 && joined == 2
	})
	close(st.gate)
	for i, fu := range []*Future{fa, fb} {
		res, err := fu.Wait(ctx)
		req := []Request{a, b}[i]
		if err != nil || res.Usable != len(req.Hashes) {
			t.Fatalf("fetch %d: usable %d of %d, %v", i, res.Usable, len(req.Hashes), err)
		}
		for j, blk := range res.Blocks {
			want := recs[j+1-i]
			if !bytes.Equal(req.Into[j], want.KV) || &blk.Record.KV[0] != &req.Into[j][0] || blk.Record.Hash != want.Hash {
				t.Fatalf("fetch %d block %d: not block %s's K/V in its destination", i, j, want.Hash.Short())
			}
		}
	}
	if st.recycled != 2 {
		t.Fatalf("recycled %d values, want 2 (blocks 0 and 3: the second fetch's own read)", st.recycled)
	}
}
