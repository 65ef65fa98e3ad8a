package router

import (
	"hash/maphash"
	"sync"
)

// tokenCache remembers /tokenize answers (and renderPath's, tagged with the endpoint they
// render for: dialect.go) by the exact bytes the router sent, so a text prompt
// seen before (a retried request, n parallel samples sent as separate requests, a benchmark's
// or an eval's repeated prompt) costs a map probe instead of a round trip to a replica and
// its tokenizer (about 100 µs for 2K tokens on loopback, far more across hosts). A new
// conversation turn is new bytes, so it still asks.
//
// Keys are 64-bit maphash values of the body (random seed per process); a false hit needs a
// collision among the few thousand bodies held (about 2^-50 a lookup) and would only
// mislead one routing guess. Size: two generations of at most tokCacheTokens tokens each
// (16 MiB); prompts over tokCacheMaxPrompt tokens are not kept.
type tokenCache struct {
	seed maphash.Seed
	mu   struct {
		sync.Mutex
		cur, prev map[uint64]tokEntry
		curTokens int
	}
}

type tokEntry struct {
	size int     // len of the body: a cheap second check
	ids  []int32 // shared by every request that hits: never modified
}

const (
	tokCacheTokens    = 1 << 22
	tokCacheMaxPrompt = 1 << 16
)

func newTokenCache() *tokenCache {
	c := &tokenCache{seed: maphash.MakeSeed()}
	c.mu.cur = make(map[uint64]tokEntry)
	return c
}

// get returns the tokens last stored for body. The slice is shared: do not modify it.
func (c *tokenCache) get(body []byte) ([]int32, bool) { return c.getTagged("", body) }

// key is the cache key of body under tag: the endpoint it was rendered for ("" for
// /tokenize's bodies), so one body rendered as two dialects is two entries.
func (c *tokenCache) key(tag string, body []byte) uint64 {
	if tag == "" {
		return maphash.Bytes(c.seed, body)
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	_, _ = h.WriteString(tag)
	_ = h.WriteByte(0)
	_, _ = h.Write(body)
	return h.Sum64()
}

// getTagged is get for a body rendered for the endpoint tag (renderPath's).
func (c *tokenCache) getTagged(tag string, body []byte) ([]int32, bool) {
	k := c.key(tag, body)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.mu.cur[k]
	if !ok {
		if e, ok = c.mu.prev[k]; ok && e.size == len(body) {
			c.putLocked(k, e) // carried forward: recently used
		}
	}
	if !ok || e.size != len(body) {
		return nil, false
	}
	return e.ids, true
}

// put remembers ids as body's tokens. It keeps ids: the caller must not modify them after.
func (c *tokenCache) put(body []byte, ids []int32) { c.putTagged("", body, ids) }

// putTagged is put for a body rendered for the endpoint tag.
func (c *tokenCache) putTagged(tag string, body []byte, ids []int32) {
	if len(ids) > tokCacheMaxPrompt {
		return
	}
	k := c.key(tag, body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(k, tokEntry{size: len(body), ids: ids})
}

func (c *tokenCache) putLocked(k uint64, e tokEntry) {
	if c.mu.curTokens+len(e.ids) > tokCacheTokens {
		c.mu.prev, c.mu.cur, c.mu.curTokens = c.mu.cur, make(map[uint64]tokEntry), 0
	}
	c.mu.cur[k] = e
	c.mu.curTokens += len(e.ids)
}
