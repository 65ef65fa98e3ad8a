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
	shared := newHashCache()
	for _, cache := range []*hashCache{nil, shared, shared} { // the second pass finds all in the cache
		testMatchChain(t, cache)
	}
}

func testMatchChain(t *testing.T, cache *hashCache) {
	r := rand.New(rand.NewPCG(5, 6)) // the same prompts on every pass
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
				c := &hashChain{identity: "id", blockSize: bs, salt: "salt", tokens: toks, cache: cache}
				hn, hw := ix.matchChain(c, &defaultTierWeights, 0)
				wn, ww := ix.match(want, &defaultTierWeights, 0)
				name := fmt.Sprintf("bs=%d n=%d held=%d cache=%v", bs, n, held, cache != nil)
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

// TestHashCacheGenerations: the cache keeps the most recent entries across a generation
// turnover, drops the oldest, and a hit in the previous generation is carried forward.
func TestHashCacheGenerations(t *testing.T) {
	c := newHashCache()
	key := func(i int) fastKey { return fastKey(uint64(i) * 0x9e3779b97f4a7c15) }
	val := func(i int) prefix.Hash { return prefix.Hash{byte(i), byte(i >> 8), byte(i >> 16)} }
	put := func(from, to int) {
		keys, hs := []fastKey{}, []prefix.Hash{}
		for i := from; i < to; i++ {
			keys, hs = append(keys, key(i)), append(hs, val(i))
		}
		c.store(keys, hs)
	}
	get := func(i int) (prefix.Hash, bool) {
		var h [1]prefix.Hash
		n, _ := c.lookup([]fastKey{key(i)}, h[:])
		return h[0], n == 1
	}
	put(0, hashCacheGen)               // fills the first generation
	put(hashCacheGen, hashCacheGen+10) // turns it over: 0.. are now the previous generation
	if h, ok := get(5); !ok || h != val(5) {
		t.Fatalf("an entry of the previous generation: %v %v", h, ok)
	}
	c.store([]fastKey{key(5)}, []prefix.Hash{val(5)}) // what extend does with a promoted hit
	put(hashCacheGen+10, 2*hashCacheGen+10)           // another turnover drops the rest of 0..
	if _, ok := get(6); ok {
		t.Error("an entry two generations old is still there")
	}
	if h, ok := get(5); !ok || h != val(5) {
		t.Error("a promoted entry was dropped")
	}
	if h, ok := get(2*hashCacheGen + 9); !ok || h != val(2*hashCacheGen+9) {
		t.Error("the newest entry is missing")
	}
}
