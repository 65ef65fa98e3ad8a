package router

import (
	"math/bits"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// hashChain is a request's block hashes for one identity and block size, computed only as far
// as a lookup walks: the walk stops at a replica's first missing block, so a prompt of 600
// blocks whose best replica holds 3 costs a few SHA-256s, not 600 (each is about 0.15 µs,
// the bulk of a kv-aware pick on long prompts). Replicas of one model share one chain, so
// the hashes one replica's walk computed serve the next. Not safe for concurrent use: a
// Request is picked for by one goroutine.
type hashChain struct {
	identity  string
	blockSize int
	salt      string
	tokens    []int32
	root      prefix.Hash
	hashes    []prefix.Hash // hashes[i] covers tokens[:(i+1)*blockSize]

	cache *hashCache // nil: no cache
	keys  []fastKey  // keys[i] is hashes[i]'s cache key (with a cache)
	rootK fastKey
}

// blocks is how many full blocks the prompt has (the most hashes there can be).
func (c *hashChain) blocks() int { return len(c.tokens) / c.blockSize }

// extend computes hashes up to n (at most blocks()), taking what it can from the cache.
func (c *hashChain) extend(n int) {
	n = min(n, c.blocks())
	if n <= len(c.hashes) {
		return
	}
	if len(c.hashes) == 0 {
		c.root = prefix.Root([]byte(c.identity), c.salt)
		c.hashes = make([]prefix.Hash, 0, c.blocks()) // one allocation, 32 bytes a block
		if c.cache != nil {
			c.rootK = c.cache.rootKey(c.root)
			c.keys = make([]fastKey, 0, c.blocks())
		}
	}
	from, bs := len(c.hashes), c.blockSize
	if c.cache != nil {
		var buf [8 + 4*64]byte
		parent := c.rootK
		if from > 0 {
			parent = c.keys[from-1]
		}
		for i := from; i < n; i++ {
			parent = c.cache.nextKey(parent, c.tokens[i*bs:(i+1)*bs], buf[:0])
			c.keys = append(c.keys, parent)
		}
		c.hashes = c.hashes[:n]
		hit, promote := c.cache.lookup(c.keys[from:n], c.hashes[from:n])
		c.hashes = c.hashes[:from+hit]
		if promote > 0 {
			c.cache.store(c.keys[from:from+hit], c.hashes[from:from+hit])
		}
	}
	parent := c.root
	if len(c.hashes) > 0 {
		parent = c.hashes[len(c.hashes)-1]
	}
	computed := len(c.hashes)
	for i := computed; i < n; i++ {
		parent = prefix.Chain(parent, c.tokens[i*bs:(i+1)*bs], nil)
		c.hashes = append(c.hashes, parent)
	}
	if c.cache != nil {
		c.cache.store(c.keys[computed:n], c.hashes[computed:n])
	}
}

// all returns every block hash (prefix.BlockHashes of the prompt).
func (c *hashChain) all() []prefix.Hash {
	c.extend(c.blocks())
	return c.hashes
}

// firstHashes is how many hashes a walk computes before its first lookup; it then doubles.
const firstHashes = 4

// matchChain is match over a lazily hashed chain: it hashes more blocks (outside the read
// lock) only while the replica holds every block so far.
func (ix *replicaIndex) matchChain(c *hashChain, weights *[kvtier.Count]float64, expireBefore int64) (n int, weighted float64) {
	for {
		if n == len(c.hashes) {
			if n >= c.blocks() {
				return n, weighted
			}
			c.extend(max(2*n, firstHashes))
		}
		ix.mu.RLock()
		for ; n < len(c.hashes); n++ {
			e, ok := ix.mu.blocks[c.hashes[n]]
			if !ok || e.tiers == 0 || e.stored < expireBefore {
				ix.mu.RUnlock()
				return n, weighted
			}
			weighted += weights[bits.TrailingZeros8(e.tiers)] // its fastest tier
		}
		ix.mu.RUnlock()
	}
}
