package prefix

import "fmt"

// maybeCheck runs CheckInvariants after every mutation when built with the
// invariants tag (go test -tags invariants), and panics on a violation.
func (c *Cache) maybeCheck() {
	if invariants {
		if err := c.CheckInvariants(); err != nil {
			panic(err)
		}
	}
}

// CheckInvariants verifies the whole structure against a recount: the pool's
// own bookkeeping; index <-> per-block entries; parent links, depths, roots
// and child counts (no live entry without a live parent: no orphans); pinned
// flags and the evictable count; the eviction heap (exactly the evictable
// leaves, heap-ordered); cached blocks == unreferenced live entries; pending
// marks never on indexed hashes. It costs O(NumBlocks); tests call it after
// every step.
func (c *Cache) CheckInvariants() error {
	if err := c.pool.CheckInvariants(); err != nil {
		return err
	}
	if err := c.checkOwners(); err != nil {
		return err
	}
	for h, b := range c.index {
		if b < 0 || int(b) >= len(c.meta) {
			return fmt.Errorf("prefix: index %s -> block %d outside pool", h.Short(), b)
		}
		e := &c.meta[b]
		if e.state == stateNone || e.hash != h {
			return fmt.Errorf("prefix: index %s -> block %d whose entry is state %d hash %s", h.Short(), b, e.state, e.hash.Short())
		}
	}
	children := make([]int32, len(c.meta))
	pinnedKids := make([]int32, len(c.meta))
	live, dead, cachedLive, evictable := 0, 0, 0, 0
	for i := range c.meta {
		b := BlockID(i)
		e := &c.meta[b]
		ref := c.pool.RefCount(b)
		free := c.pool.IsFree(b)
		switch e.state {
		case stateNone:
			if !free && ref == 0 {
				return fmt.Errorf("prefix: block %d unreferenced, not free and not indexed (leaked)", b)
			}
			if e.heapIdx >= 0 {
				return fmt.Errorf("prefix: unindexed block %d on the eviction heap", b)
			}
			continue
		case stateDead:
			dead++
			if ref == 0 || free {
				return fmt.Errorf("prefix: dead block %d has ref %d free %v", b, ref, free)
			}
			if c.index[e.hash] != b {
				return fmt.Errorf("prefix: dead block %d not indexed under its hash", b)
			}
			if e.heapIdx >= 0 {
				return fmt.Errorf("prefix: dead block %d on the eviction heap", b)
			}
			continue
		}
		live++
		if free {
			return fmt.Errorf("prefix: indexed block %d is on the free list", b)
		}
		if got, ok := c.index[e.hash]; !ok || got != b {
			return fmt.Errorf("prefix: block %d (%s) not in the index", b, e.hash.Short())
		}
		if _, ok := c.pending[e.hash]; ok {
			return fmt.Errorf("prefix: indexed hash %s is also pending", e.hash.Short())
		}
		if p := e.parentBlock; p >= 0 {
			pe := &c.meta[p]
			if pe.state != stateLive {
				return fmt.Errorf("prefix: block %d is an orphan: parent block %d is state %d", b, p, pe.state)
			}
			if pe.hash != e.parent || e.depth != pe.depth+1 || e.root != pe.root {
				return fmt.Errorf("prefix: block %d parent link to %d inconsistent (hash %s vs %s, depth %d vs %d)",
					b, p, pe.hash.Short(), e.parent.Short(), e.depth, pe.depth)
			}
			children[p]++
		} else {
			if e.depth != 0 || e.root != e.parent {
				return fmt.Errorf("prefix: root-level block %d has depth %d", b, e.depth)
			}
			if !e.parent.IsRoot() {
				return fmt.Errorf("prefix: block %d has no parent link but its parent %s is not a root", b, e.parent.Short())
			}
		}
		if ref == 0 {
			cachedLive++
		}
	}
	// Pinned flags bottom-up need child counts first; compute pinned by
	// depth order: a block is pinned iff ref > 0 or a child is pinned.
	pinned := make([]bool, len(c.meta))
	maxDepth := int32(0)
	for i := range c.meta {
		if c.meta[i].state == stateLive {
			maxDepth = max(maxDepth, c.meta[i].depth)
		}
	}
	for d := maxDepth; d >= 0; d-- {
		for i := range c.meta {
			e := &c.meta[i]
			if e.state != stateLive || e.depth != d {
				continue
			}
			pinned[i] = c.pool.RefCount(BlockID(i)) > 0 || pinnedKids[i] > 0
			if pinned[i] && e.parentBlock >= 0 {
				pinnedKids[e.parentBlock]++
			}
		}
	}
	for i := range c.meta {
		b := BlockID(i)
		e := &c.meta[b]
		if e.state != stateLive {
			continue
		}
		if e.children != children[b] || e.pinnedKids != pinnedKids[b] {
			return fmt.Errorf("prefix: block %d counts children %d pinned %d, recount %d and %d",
				b, e.children, e.pinnedKids, children[b], pinnedKids[b])
		}
		if e.pinned != pinned[b] {
			return fmt.Errorf("prefix: block %d pinned %v, recount %v", b, e.pinned, pinned[b])
		}
		if !pinned[b] {
			evictable++
		}
		leaf := c.pool.RefCount(b) == 0 && e.children == 0
		if leaf != (e.heapIdx >= 0) {
			return fmt.Errorf("prefix: block %d evictable leaf %v but heap index %d", b, leaf, e.heapIdx)
		}
	}
	if evictable != c.evictable {
		return fmt.Errorf("prefix: evictable %d, recount %d", c.evictable, evictable)
	}
	if cachedLive != c.pool.Cached() {
		return fmt.Errorf("prefix: pool has %d cached blocks, index %d unreferenced live entries", c.pool.Cached(), cachedLive)
	}
	if live+dead != len(c.index) {
		return fmt.Errorf("prefix: index has %d hashes, %d live + %d dead entries", len(c.index), live, dead)
	}
	for i, b := range c.heap {
		if int(c.meta[b].heapIdx) != i {
			return fmt.Errorf("prefix: heap[%d] = block %d with heap index %d", i, b, c.meta[b].heapIdx)
		}
		if i > 0 && c.evictBefore(b, c.heap[(i-1)/2]) {
			return fmt.Errorf("prefix: heap order broken at %d (block %d)", i, b)
		}
	}
	for h, o := range c.pending {
		if _, ok := c.index[h]; ok {
			return fmt.Errorf("prefix: pending hash %s (owner %d) is indexed", h.Short(), o)
		}
	}
	return c.checkKids()
}
