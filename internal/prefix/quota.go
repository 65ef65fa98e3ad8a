package prefix

import "fmt"

// Owner quotas: a principal's (a tenant's) cap on the blocks it holds in the working pool.
//
// The engine tags each block it commits with the owner whose request committed it first
// (SetOwner; tags are small numbers the engine assigns) and gives each owner a limit in
// blocks (SetOwnerLimit). While some owner holds more live blocks than its limit, Allocate
// evicts that owner's evictable leaves first: the one the usual order (evictBefore) would
// take first among them. Everyone else's blocks are evicted only when no over-quota owner
// has an evictable leaf left. A quota is a priority, not a wall: an owner over its limit
// still commits blocks (its requests still run), and its blocks stay while nobody needs the
// memory.
//
// Why a scan instead of a heap per owner: the pick runs only while some owner is over its
// limit, and over a heap of at most NumBlocks leaves; one heap per owner would cost every
// commit, release and eviction of every owner, quota or not, to speed up the rare case.

// SetOwner tags live block b with owner (0 clears the tag), moving it between the owners'
// counts.
func (c *Cache) SetOwner(b BlockID, owner uint16) {
	e := &c.meta[b]
	if e.state != stateLive || e.owner == owner {
		return
	}
	c.disown(e)
	if owner == 0 {
		return
	}
	if c.ownerBlocks == nil {
		c.ownerBlocks = map[uint16]int{}
	}
	was := c.overQuota(owner)
	e.owner = owner
	c.ownerBlocks[owner]++
	c.noteOver(owner, was)
}

// SetOwnerLimit caps owner at blocks live blocks (0: no cap).
func (c *Cache) SetOwnerLimit(owner uint16, blocks int) {
	if owner == 0 {
		return
	}
	if c.ownerLimit == nil {
		c.ownerLimit = map[uint16]int{}
	}
	was := c.overQuota(owner)
	if blocks <= 0 {
		delete(c.ownerLimit, owner)
	} else {
		c.ownerLimit[owner] = blocks
	}
	c.noteOver(owner, was)
}

// OwnerBlocks is how many live blocks carry owner's tag.
func (c *Cache) OwnerBlocks(owner uint16) int { return c.ownerBlocks[owner] }

// overQuota reports whether owner holds more than its limit.
func (c *Cache) overQuota(owner uint16) bool {
	l, ok := c.ownerLimit[owner]
	return ok && c.ownerBlocks[owner] > l
}

// noteOver updates overOwners after owner's count or limit changed (was: over before).
func (c *Cache) noteOver(owner uint16, was bool) {
	switch now := c.overQuota(owner); {
	case now && !was:
		c.overOwners++
	case !now && was:
		c.overOwners--
	}
}

// disown takes live entry e out of its owner's count (before it leaves the live state).
func (c *Cache) disown(e *entry) {
	if e.owner == 0 {
		return
	}
	was := c.overQuota(e.owner)
	c.ownerBlocks[e.owner]--
	if c.ownerBlocks[e.owner] == 0 {
		delete(c.ownerBlocks, e.owner)
	}
	o := e.owner
	e.owner = 0
	c.noteOver(o, was)
}

// overQuotaVictim returns the evictable leaf to take next: the first in eviction order
// among the leaves of owners over their limit, or first (the heap's top) when none has one.
func (c *Cache) overQuotaVictim(first BlockID) BlockID {
	best := BlockID(-1)
	for _, b := range c.heap {
		if o := c.meta[b].owner; o != 0 && c.overQuota(o) && (best < 0 || c.evictBefore(b, best)) {
			best = b
		}
	}
	if best < 0 {
		return first
	}
	return best
}

// checkOwners recounts the owners' live blocks and the over-quota count (CheckInvariants).
func (c *Cache) checkOwners() error {
	count := map[uint16]int{}
	for i := range c.meta {
		e := &c.meta[i]
		if e.owner == 0 {
			continue
		}
		if e.state != stateLive {
			return fmt.Errorf("prefix: block %d is state %d with owner %d", i, e.state, e.owner)
		}
		count[e.owner]++
	}
	over := 0
	for o, n := range count {
		if c.ownerBlocks[o] != n {
			return fmt.Errorf("prefix: owner %d holds %d live blocks, counted %d", o, n, c.ownerBlocks[o])
		}
		if c.overQuota(o) {
			over++
		}
	}
	if len(count) != len(c.ownerBlocks) || over != c.overOwners {
		return fmt.Errorf("prefix: %d owners (%d over quota), counted %d (%d)", len(count), over, len(c.ownerBlocks), c.overOwners)
	}
	return nil
}
