package prefix

// The eviction heap: a binary min-heap of evictable leaves in Cache.heap,
// each entry's position kept in entry.heapIdx so removal is O(log n). Written
// out rather than container/heap to avoid boxing block ids in interfaces.

// evictBefore orders the heap: blocks below the admission threshold first,
// then least recently used, then deeper blocks (a sequence's tail before its
// head), then lower ids (determinism).
func (c *Cache) evictBefore(a, b BlockID) bool {
	ea, eb := &c.meta[a], &c.meta[b]
	min := uint32(c.cfg.MinHitsToProtect)
	pa, pb := ea.hits >= min, eb.hits >= min
	if pa != pb {
		return !pa
	}
	if ea.lastUse != eb.lastUse {
		return ea.lastUse < eb.lastUse
	}
	if ea.depth != eb.depth {
		return ea.depth > eb.depth
	}
	return a < b
}

func (c *Cache) heapPush(b BlockID) {
	c.meta[b].heapIdx = int32(len(c.heap))
	c.heap = append(c.heap, b)
	c.heapUp(len(c.heap) - 1)
}

// heapRemove takes b off the heap if it is there.
func (c *Cache) heapRemove(b BlockID) {
	i := int(c.meta[b].heapIdx)
	if i < 0 {
		return
	}
	last := len(c.heap) - 1
	if i != last {
		c.heapSwap(i, last)
	}
	c.heap = c.heap[:last]
	c.meta[b].heapIdx = -1
	if i != last {
		if !c.heapDown(i) {
			c.heapUp(i)
		}
	}
}

func (c *Cache) heapSwap(i, j int) {
	c.heap[i], c.heap[j] = c.heap[j], c.heap[i]
	c.meta[c.heap[i]].heapIdx = int32(i)
	c.meta[c.heap[j]].heapIdx = int32(j)
}

func (c *Cache) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !c.evictBefore(c.heap[i], c.heap[p]) {
			return
		}
		c.heapSwap(i, p)
		i = p
	}
}

// heapDown sifts i down and reports whether it moved.
func (c *Cache) heapDown(i int) bool {
	start := i
	n := len(c.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && c.evictBefore(c.heap[r], c.heap[l]) {
			m = r
		}
		if !c.evictBefore(c.heap[m], c.heap[i]) {
			break
		}
		c.heapSwap(i, m)
		i = m
	}
	return i > start
}
