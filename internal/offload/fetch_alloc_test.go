//go:build !race

package offload

import (
	"testing"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/tiertest"
)

// TestFetchAllocationsPerFetch: a host restore allocates per fetch, not per block: the
// blocks' Records and tokens are two arrays of the fetch's, the singleflight entries one, the
// verification none (tier.DecodeVerifyTo). A fetch of 16 blocks allocates what one of 4
// does, with and without Into. Not under -race: its instrumentation allocates.
func TestFetchAllocationsPerFetch(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 16, 45)
	h, err := hostmem.New(hostmem.Config{CapacityBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	h.Put(ctx, tiertest.Items(recs))
	f := newFetcher(t, []TierStore{{kvtier.Host, h}}, nil, nil)
	for _, into := range []bool{false, true} {
		allocs := map[int]float64{}
		for _, n := range []int{4, 16} {
			req := request(recs[:n])
			if into {
				req.Into = destinations(n)
			}
			var usable int
			allocs[n] = testing.AllocsPerRun(20, func() {
				res, err := f.fetch(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				usable = res.Usable
			})
			if usable != n {
				t.Fatalf("into %v: %d of %d blocks usable", into, usable, n)
			}
		}
		if allocs[16] != allocs[4] {
			t.Errorf("into %v: %v allocations fetching 4 blocks, %v fetching 16: want the same", into, allocs[4], allocs[16])
		}
		t.Logf("into %v: %v allocations a fetch", into, allocs[16])
	}
}
