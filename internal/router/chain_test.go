package router

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// TestMatchChain: the lazy walk finds what the eager one (match over prefix.BlockHashes)
// finds, for every held length and tier, and its hashes are BlockHashes' hashes.
func TestMatchChain(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bs := range []int{1, 4, 16} {
		for _, n := range []int{0, 3, 16, 17, 100, 333} {
			toks := make([]int32, n)
			for i := range toks {
				toks[i] = r.Int32N(50000)
			}
			want := prefix.BlockHashes(prefix.Root([]byte("id"), "salt"), toks, bs)
			for _, held := range []int{0, 1, 3, 4, 5, len(want) / 2, len(want)} {
				if held > len(want) {
					continue
				}
				ix := newReplicaIndex()
				ix.Reset(kvevents.Snapshot{Epoch: 1, Identity: "6964", BlockSize: bs})
				evs := make([]kvevents.Event, held)
				for i := range evs {
					evs[i] = kvevents.Event{Kind: kvevents.Stored, Tier: kvtier.Tier(r.IntN(int(kvtier.Count))), Hash: want[i]}
				}
				ix.Apply(evs)
				c := &hashChain{identity: "id", blockSize: bs, salt: "salt", tokens: toks}
				hn, hw := ix.matchChain(c, &defaultTierWeights, 0)
				wn, ww := ix.match(want, &defaultTierWeights, 0)
				name := fmt.Sprintf("bs=%d n=%d held=%d", bs, n, held)
				if hn != wn || hw != ww {
					t.Errorf("%s: matchChain %d/%v, match %d/%v", name, hn, hw, wn, ww)
				}
				if len(c.hashes) > max(2*held, firstHashes) {
					t.Errorf("%s: hashed %d blocks for a match of %d", name, len(c.hashes), held)
				}
				all := c.all()
				if len(all) != len(want) {
					t.Fatalf("%s: %d hashes, want %d", name, len(all), len(want))
				}
				for i := range all {
					if all[i] != want[i] {
						t.Fatalf("%s: hash %d differs", name, i)
					}
				}
			}
		}
	}
}
