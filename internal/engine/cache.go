package engine

import (
	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
)

// cacheAdapter fits prefix.Cache to the core's blockCache interface.
type cacheAdapter struct{ c *prefix.Cache }

func (a cacheAdapter) match(root prefix.Hash, hashes []prefix.Hash, tokens []int32) ([]kvcache.BlockID, []prefix.Hash, int) {
	m := a.c.Lookup(root, hashes, tokens)
	return m.Blocks, m.Hashes, m.Pending
}

func (a cacheAdapter) reused(blocks []kvcache.BlockID, allow int) {
	for _, b := range blocks[:min(allow, len(blocks))] {
		a.c.AllowOffload(b)
	}
	a.c.Reused(blocks)
}

func (a cacheAdapter) allocate(n int) ([]kvcache.BlockID, error) { return a.c.Allocate(n) }

func (a cacheAdapter) appendAllocate(dst []kvcache.BlockID, n int) ([]kvcache.BlockID, error) {
	return a.c.AppendAllocate(dst, n)
}

func (a cacheAdapter) available() int { return a.c.Available() }

func (a cacheAdapter) markPending(owner uint64, hashes []prefix.Hash) {
	a.c.MarkPending(hashes, prefix.Owner(owner))
}

func (a cacheAdapter) commit(hash, parent prefix.Hash, tokens []int32, block kvcache.BlockID, share, offload bool) kvcache.BlockID {
	var canon kvcache.BlockID
	if offload {
		canon, _ = a.c.Commit(hash, parent, tokens, block)
	} else {
		canon, _ = a.c.CommitNoOffload(hash, parent, tokens, block)
	}
	if !share || canon == block {
		return block
	}
	// Another request committed the same block first: hold the shared one and free ours.
	a.c.Ref(canon)
	a.c.Release([]kvcache.BlockID{block})
	return canon
}

func (a cacheAdapter) abort(owner uint64) { a.c.Abort(prefix.Owner(owner)) }

func (a cacheAdapter) release(blocks []kvcache.BlockID) { a.c.Release(blocks) }

func (a cacheAdapter) ref(block kvcache.BlockID) { a.c.Ref(block) }

func (a cacheAdapter) holds(hash prefix.Hash, block kvcache.BlockID) bool {
	return a.c.Holds(hash, block)
}

func (a cacheAdapter) stats() (used, cached int, evictions uint64) {
	s := a.c.Stats()
	return s.Referenced, s.Cached, s.Evictions
}

func (a cacheAdapter) setOwner(block kvcache.BlockID, owner uint16, limit int) {
	a.c.SetOwnerLimit(owner, limit)
	a.c.SetOwner(block, owner)
}
