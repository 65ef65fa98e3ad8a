package router

import (
	"encoding/binary"
	"hash/maphash"
	"sync"

	"stockpot/internal/prefix"
)

// hashCache remembers chain hashes the router computed for earlier requests, so a prompt
// that extends one seen before (the next turn of an agent's conversation, a shared system
// prompt) costs a cheap key per block and a map probe per run of blocks instead of a SHA-256
// per block (about 0.15 µs each: 90 µs for a 10K-token prompt in blocks of 16).
//
// It holds runs of runBlocks consecutive hashes, aligned to the chain's start, keyed by a
// 64-bit chain of maphash values over the same inputs as the SHA-256 chain (the root, then
// each run's tokens): a key names a token prefix under a root just as the hash does. Runs rather than single blocks because a probe of a large map
// is a cache miss (about 0.1 µs) and so is an insert: per block they would cost more than the
// SHA-256 they save on a miss; per run of 16 they are noise.
//
// A false hit needs a 64-bit collision with one of the ~2^13 keys held: about 2^-51 a
// lookup, and it would only mislead one routing guess (the replica checks its own hashes).
// maphash's seed is random per process, so keys cannot be aimed.
//
// Size: two generations of at most hashCacheRuns runs each; when the current one fills it
// becomes the previous one and the oldest is dropped, so recently used prefixes stay (a hit
// in the previous generation is copied forward). A run is 512 bytes of hashes plus the
// map's overhead: 2 × 4096 runs ≈ 4.5 MiB, for 2M tokens of distinct prefixes at block 16.
type hashCache struct {
	seed maphash.Seed
	mu   struct {
		sync.RWMutex
		cur, prev map[fastKey]*hashRun
	}
}

const (
	runBlocks     = 16   // hashes per cache entry
	hashCacheRuns = 4096 // runs per generation (see hashCache)
)

// hashRun is runBlocks consecutive chain hashes; never modified once stored.
type hashRun [runBlocks]prefix.Hash

type fastKey uint64

func newHashCache() *hashCache {
	c := &hashCache{seed: maphash.MakeSeed()}
	c.mu.cur = make(map[fastKey]*hashRun, hashCacheRuns)
	return c
}

// rootKey is the fast key standing for a chain's root.
func (c *hashCache) rootKey(root prefix.Hash) fastKey {
	return fastKey(maphash.Bytes(c.seed, root[:]))
}

// nextKey is the fast key of the run holding tokens after the prefix named by parent. It
// encodes into buf and returns it for reuse.
func (c *hashCache) nextKey(parent fastKey, tokens []int32, buf []byte) (fastKey, []byte) {
	buf = binary.LittleEndian.AppendUint64(buf[:0], uint64(parent))
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	return fastKey(maphash.Bytes(c.seed, buf)), buf
}

// lookup returns the run whose last block's key is k.
func (c *hashCache) lookup(k fastKey) (*hashRun, bool) {
	c.mu.RLock()
	r, ok := c.mu.cur[k]
	promote := false
	if !ok {
		r, ok = c.mu.prev[k]
		promote = ok
	}
	c.mu.RUnlock()
	if promote {
		c.mu.Lock()
		c.putLocked(k, r)
		c.mu.Unlock()
	}
	return r, ok
}

// store remembers hs (runBlocks hashes) as the run whose last block's key is k.
func (c *hashCache) store(k fastKey, hs []prefix.Hash) {
	r := new(hashRun)
	copy(r[:], hs)
	c.mu.Lock()
	c.putLocked(k, r)
	c.mu.Unlock()
}

func (c *hashCache) putLocked(k fastKey, r *hashRun) {
	if len(c.mu.cur) >= hashCacheRuns {
		// Sized up front: growing a map rehashes it, several times on the way to a generation.
		c.mu.prev, c.mu.cur = c.mu.cur, make(map[fastKey]*hashRun, hashCacheRuns)
	}
	c.mu.cur[k] = r
}
