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
	started   bool          // root (and rootK) computed, hashes and keys sized

	cache *hashCache // nil: no cache
	keys  []fastKey  // keys[j] is run j's cache key (with a cache)
	rootK fastKey
	buf   []byte // runKey's scratch
}

// reset empties c for reuse (chainPool), keeping its buffers' capacity and dropping every
// reference to the request's data.
func (c *hashChain) reset() {
	*c = hashChain{hashes: c.hashes[:0], keys: c.keys[:0], buf: c.buf[:0]}
}

// blocks is how many full blocks the prompt has (the most hashes there can be).
func (c *hashChain) blocks() int { return len(c.tokens) / c.blockSize }

// usable is how many leading blocks a replica can reuse: ⌊(P−1)/B⌋, since the prompt's last
// token is always computed (its logits start the answer), so a prompt whose length is a
// multiple of the block size reuses one block fewer than it has.
func (c *hashChain) usable() int { return max(0, len(c.tokens)-1) / c.blockSize }

// extend computes hashes up to n (at most blocks()), taking whole runs from the cache where
// it has them (so it may compute past n, to the end of a run), and storing each run it
// completes with SHA-256.
func (c *hashChain) extend(n int) {
	n = min(n, c.blocks())
	if n <= len(c.hashes) {
		return
	}
	if !c.started {
		c.started = true
		c.root = prefix.Root([]byte(c.identity), c.salt)
		if cap(c.hashes) < c.blocks() {
			c.hashes = make([]prefix.Hash, 0, c.blocks()) // one allocation, 32 bytes a block
		}
		if c.cache != nil {
			c.rootK = c.cache.rootKey(c.root)
			if cap(c.keys) < c.blocks()/runBlocks {
				c.keys = make([]fastKey, 0, c.blocks()/runBlocks)
			}
		}
	}
	bs := c.blockSize
	for len(c.hashes) < n {
		i := len(c.hashes)
		if c.cache != nil && i%runBlocks == 0 && i+runBlocks <= c.blocks() {
			if r, ok := c.cache.lookup(c.runKey(i / runBlocks)); ok {
				c.hashes = append(c.hashes, r[:]...)
				continue
			}
		}
		parent := c.root
		if i > 0 {
			parent = c.hashes[i-1]
		}
		c.hashes = append(c.hashes, prefix.Chain(parent, c.tokens[i*bs:(i+1)*bs], nil))
		if c.cache != nil && (i+1)%runBlocks == 0 { // a run completed by SHA-256: remember it
			c.cache.store(c.runKey(i/runBlocks), c.hashes[i+1-runBlocks:i+1])
		}
	}
}

// runKey returns run j's cache key (a maphash chain over whole runs of tokens), computing
// the keys up to it.
func (c *hashChain) runKey(j int) fastKey {
	span := runBlocks * c.blockSize
	if cap(c.buf) < 8+4*span {
		c.buf = make([]byte, 0, 8+4*span)
	}
	for k := len(c.keys); k <= j; k++ {
		parent := c.rootK
		if k > 0 {
			parent = c.keys[k-1]
		}
		var key fastKey
		key, c.buf = c.cache.nextKey(parent, c.tokens[k*span:(k+1)*span], c.buf)
		c.keys = append(c.keys, key)
	}
	return c.keys[j]
}

// all returns every block hash (prefix.BlockHashes of the prompt).
func (c *hashChain) all() []prefix.Hash {
	c.extend(c.blocks())
	return c.hashes
}

// firstHashes is how many hashes a walk computes before its first lookup; it then doubles.
const firstHashes = 4

// matchChain is match over a lazily hashed chain: it hashes more blocks only while the
// replica (or, through shared, the remote tier) holds every block so far. It counts usable
// blocks only (hashChain.usable), and of those only whole runs of the replica's reuse unit:
// what the replica will reuse, which is what the router predicts.
func (ix *replicaIndex) matchChain(c *hashChain, weights *[kvtier.Count]float64, shared []*replicaIndex) (n int, weighted float64) {
	limit := c.usable()
	u := unitRun{unit: ix.reuseUnit()}
	for {
		if n >= limit {
			return u.n, u.whole
		}
		if n == len(c.hashes) {
			c.extend(max(2*n, firstHashes))
		}
		// One read lock over the run the replica holds itself; a block it lacks is looked
		// up in the shared remote tier outside it (one index locked at a time).
		ix.mu.RLock()
		for end := min(len(c.hashes), limit); n < end; n++ {
			e := ix.mu.blocks[c.hashes[n]]
			if e.tiers != 0 {
				u.add(weights[bits.TrailingZeros8(e.tiers)]) // its fastest tier
				continue
			}
			ix.mu.RUnlock()
			if len(shared) == 0 || !inRemote(shared, c.hashes[n]) {
				return u.n, u.whole
			}
			u.add(weights[kvtier.Remote])
			ix.mu.RLock()
		}
		ix.mu.RUnlock()
	}
}
