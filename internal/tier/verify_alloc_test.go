//go:build !race

package tier_test

import (
	"testing"

	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// TestDecodeVerifyToAllocatesNothing: verifying a block into a Record the caller owns, with
// or without copying its K/V out, allocates nothing (a fetch of many blocks pays one
// allocation for all their Records, not two a block). Not under -race: its instrumentation
// allocates.
func TestDecodeVerifyToAllocatesNothing(t *testing.T) {
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 14)[0]
	r.Aux, r.StateComplete = [][]byte{{1, 2}}, true
	b, want := tiertest.Encode(r), tiertest.Want(r)
	dst := make([]byte, want.Layout.BlockBytes())
	var rec tier.Record
	rec.Tokens = make([]int32, 0, want.Layout.BlockSize)
	for _, d := range [][]byte{nil, dst} {
		var err error
		if n := testing.AllocsPerRun(50, func() { err = tier.DecodeVerifyTo(&rec, b, want, d) }); n != 0 || err != nil {
			t.Errorf("DecodeVerifyTo (dst %d bytes): %v allocations a block, %v; want 0, nil", len(d), n, err)
		}
	}
}
