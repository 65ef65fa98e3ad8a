package router

import (
	"fmt"
	"math/rand/v2"
	"strconv"
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
				hn, hw := ix.matchChain(c, &defaultTierWeights, nil)
				// The oracle: match over the usable blocks (the prompt's last token is computed).
				wn, ww := ix.match(want[:max(0, n-1)/bs], &defaultTierWeights, nil)
				name := fmt.Sprintf("bs=%d n=%d held=%d cache=%v", bs, n, held, cache != nil)
				if hn != wn || hw != ww {
					t.Errorf("%s: matchChain %d/%v, match %d/%v", name, hn, hw, wn, ww)
				}
				limit := max(2*held, firstHashes)
				if cache != nil { // a cached run comes whole
					limit = (limit + runBlocks - 1) / runBlocks * runBlocks
				}
				if len(c.hashes) > limit {
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

// TestHashCacheGenerations: the cache keeps the most recent runs across a generation
// turnover, drops the oldest, and a hit in the previous generation is carried forward.
func TestHashCacheGenerations(t *testing.T) {
	c := newHashCache()
	key := func(i int) fastKey { return fastKey(uint64(i) * 0x9e3779b97f4a7c15) }
	run := func(i int) []prefix.Hash {
		hs := make([]prefix.Hash, runBlocks)
		for j := range hs {
			hs[j] = prefix.Hash{byte(i), byte(i >> 8), byte(j)}
		}
		return hs
	}
	put := func(from, to int) {
		for i := from; i < to; i++ {
			c.store(key(i), run(i))
		}
	}
	has := func(i int) bool {
		r, ok := c.lookup(key(i))
		return ok && r[runBlocks-1] == run(i)[runBlocks-1]
	}
	put(0, hashCacheRuns)                // fills the first generation
	put(hashCacheRuns, hashCacheRuns+10) // turns it over: 0.. are now the previous generation
	if !has(5) {                         // found there, and carried forward
		t.Fatal("a run of the previous generation was lost")
	}
	put(hashCacheRuns+10, 2*hashCacheRuns+9) // another turnover drops the rest of 0..
	if has(6) {
		t.Error("a run two generations old is still there")
	}
	if !has(5) {
		t.Error("a recently used run was dropped")
	}
	if !has(2*hashCacheRuns + 8) {
		t.Error("the newest run is missing")
	}
}

// BenchmarkChainExtend: hashing a 2048-token prompt's 128 blocks (of 16) with no cache (SHA-256
// only), on a cache miss (a new prompt: SHA-256 plus keys and inserts, into a cache already
// holding a generation's worth), and on a hit (keys and probes only).
func BenchmarkChainExtend(b *testing.B) {
	prompt := func(seed int) []int32 {
		t := make([]int32, 2048)
		for i := range t {
			t[i] = int32(seed*7919+i) % 150000
		}
		return t
	}
	warm := newHashCache()
	for s := 0; len(warm.mu.cur) < hashCacheRuns-20; s++ {
		(&hashChain{identity: "id", blockSize: 16, tokens: prompt(-1 - s), cache: warm}).all()
	}
	same := prompt(0)
	(&hashChain{identity: "id", blockSize: 16, tokens: same, cache: warm}).all()
	b.Run("no-cache", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			(&hashChain{identity: "id", blockSize: 16, tokens: same}).all()
		}
	})
	b.Run("cache-miss", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++ // a new salt: a new root, so every block is new to the cache
			(&hashChain{identity: "id", blockSize: 16, salt: strconv.Itoa(i), tokens: same, cache: warm}).all()
		}
	})
	b.Run("cache-hit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			(&hashChain{identity: "id", blockSize: 16, tokens: same, cache: warm}).all()
		}
	})
}
