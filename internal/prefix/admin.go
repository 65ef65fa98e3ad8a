package prefix

// Dropped is what an admin drop (DropRoot, DropAll) removed from the index.
type Dropped struct {
	// Blocks is every block that left the index (Invalidate's count).
	Blocks int
	// Busy is how many of them running sequences still reference: their K/V stays theirs
	// until they release it, and only then returns to the free list (the block is dead, not
	// freed under them).
	Busy int
}

// DropRoot is Invalidate(root), also counting the dropped blocks still in use (the cache
// admin API's DELETE /v1/cache?salt=S).
func (c *Cache) DropRoot(root Hash) Dropped {
	busy := c.busyUnder(func(e *entry) bool { return e.root == root })
	return Dropped{Blocks: c.Invalidate(root), Busy: busy}
}

// DropAll is Clear, also counting the dropped blocks still in use (DELETE /v1/cache?all=1).
func (c *Cache) DropAll() Dropped {
	busy := c.busyUnder(func(*entry) bool { return true })
	return Dropped{Blocks: c.Clear(), Busy: busy}
}

// busyUnder counts the live entries matching under that are referenced.
func (c *Cache) busyUnder(under func(*entry) bool) int {
	n := 0
	for i := range c.meta {
		e := &c.meta[i]
		if e.state == stateLive && under(e) && c.pool.RefCount(BlockID(i)) > 0 {
			n++
		}
	}
	return n
}
