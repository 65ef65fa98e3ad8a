package tiertest

import (
	"math/rand/v2"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// SmallLayout is the block shape the suites use: small enough that a test
// writes thousands of records in milliseconds.
var SmallLayout = kvcache.Layout{BlockSize: 4, Layers: 2, KVHeads: 2, HeadDim: 8, DType: kvcache.F16}

// Chain returns n records of one prefix under root: block i's parent is
// block i-1 (root for block 0), tokens and K/V bytes are drawn from seed.
func Chain(identity [32]byte, root prefix.Hash, l kvcache.Layout, n int, seed uint64) []*tier.Record {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	recs := make([]*tier.Record, n)
	parent := root
	for i := range recs {
		toks := make([]int32, l.BlockSize)
		for j := range toks {
			toks[j] = rng.Int32N(50000)
		}
		kv := make([]byte, l.BlockBytes())
		for j := range kv {
			kv[j] = byte(rng.Uint32())
		}
		h := prefix.Chain(parent, toks, nil)
		recs[i] = &tier.Record{Identity: identity, Root: root, Hash: h, Parent: parent, Tokens: toks, Layout: l, KV: kv}
		parent = h
	}
	return recs
}

// Encode encodes r, panicking on a bad record (a bug in the test).
func Encode(r *tier.Record) []byte {
	b, err := r.Encode()
	if err != nil {
		panic(err)
	}
	return b
}

// Items encodes records as store items.
func Items(recs []*tier.Record) []tier.Item {
	items := make([]tier.Item, len(recs))
	for i, r := range recs {
		items[i] = tier.Item{Key: r.Key(), Value: Encode(r)}
	}
	return items
}

// Keys returns the records' keys.
func Keys(recs []*tier.Record) []tier.Key {
	keys := make([]tier.Key, len(recs))
	for i, r := range recs {
		keys[i] = r.Key()
	}
	return keys
}

// Want returns what a reader of r would expect.
func Want(r *tier.Record) tier.Want {
	return tier.Want{Identity: r.Identity, Root: r.Root, Hash: r.Hash, Parent: r.Parent, Tokens: r.Tokens, Layout: r.Layout}
}
