package prefix

import "fmt"

// EventKind says what happened to a block.
type EventKind uint8

const (
	// Stored: the block was committed; Match can return it.
	Stored EventKind = iota + 1
	// Evicted: the block left the index to make room. Its K/V is still intact
	// in Block until the caller of Allocate writes to it: the copy-out window
	// for an offload tier.
	Evicted
	// Removed: the block left the index by Invalidate. Its K/V belongs to an
	// identity no longer served: do not keep it.
	Removed
	// Cleared: every block left the index (Clear). Hash, Parent and Block are
	// zero / -1.
	Cleared
	// Reused: a request reused the block (Reused); Hits is its new count.
	// Queued only with Config.ReuseEvents (offload's selective write-through
	// writes a block when its hits reach the admission threshold).
	Reused
)

func (k EventKind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Evicted:
		return "evicted"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	case Reused:
		return "reused"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one change to the index, for the router's global index (which
// treats Evicted and Removed alike) and the offload tiers. Sequence numbers
// are added by the publisher.
type Event struct {
	Kind   EventKind
	Hash   Hash
	Parent Hash
	Root   Hash   // the chain's root (identity + salt): tiers namespace blocks by it
	Hits   uint32 // reuses of the block since it was stored (offload admission)
	Depth  int32  // blocks before this one in its chain: it ends at token (Depth+1)*BlockSize
	Block  BlockID
	Tokens []int32 // the block's tokens; owned by the receiver
	// NoOffload: the offload tiers must not keep the block (it lies beyond the
	// max_offload_tokens of the request that computed it, and no request that
	// reused it since allowed it; CommitNoOffload, AllowOffload).
	NoOffload bool
	// Owner is the block's owner tag (SetOwner; 0: none) on Evicted events and on the
	// Stored events Live replays, so the tiers can keep per-owner budgets (quota.go).
	Owner uint16
	// Restored, on a Stored event, says the block's K/V was restored from a lower tier, not
	// computed: write-through, which takes computed blocks down, skips it. The Cache never
	// sets it; the engine does, before handing the events on.
	Restored bool
}

// queue appends an event; tokens are copied.
func (c *Cache) queue(kind EventKind, hash, parent, root Hash, hits uint32, depth int32, block BlockID, tokens []int32, noOffload bool) {
	if c.cfg.DisableEvents {
		return
	}
	var t []int32
	if len(tokens) > 0 {
		// Events share one backing array per drain. A later append that
		// reallocates leaves the earlier events' slices on the old array,
		// which still holds them.
		start := len(c.eventTokens)
		c.eventTokens = append(c.eventTokens, tokens...)
		t = c.eventTokens[start:len(c.eventTokens):len(c.eventTokens)]
	}
	c.events = append(c.events, Event{Kind: kind, Hash: hash, Parent: parent, Root: root, Hits: hits, Depth: depth, Block: block, Tokens: t, NoOffload: noOffload})
}

// Events returns the events queued since the last call, oldest first, and
// empties the queue (raft's Ready style: the Cache never calls out). Drain it
// after every Allocate if evicted blocks are to be copied out (see Allocate).
//
// Ownership: the returned slice, and the Tokens in it, stay valid until the
// next call to Events; then the Cache reuses their storage (two buffers,
// swapped), so a steady state queues events without allocating. A caller
// that keeps events longer copies them.
func (c *Cache) Events() []Event {
	ev, tok := c.events, c.eventTokens
	c.events, c.eventTokens = c.spareEvents[:0], c.spareTokens[:0]
	c.spareEvents, c.spareTokens = ev, tok
	return ev
}

// Stats is a snapshot of the cache's state and counters.
type Stats struct {
	Blocks     int // total blocks in the pool
	Free       int // on the free list
	Referenced int // held by running sequences
	Cached     int // unreferenced, in the index
	Evictable  int // cached blocks Allocate can reclaim now
	Indexed    int // entries Match can return (referenced or not)
	Pending    int // hashes marked pending

	Queries     uint64 // Match calls
	QueryTokens uint64 // prompt tokens looked up
	HitBlocks   uint64 // blocks returned by Match
	HitTokens   uint64 // tokens those blocks hold
	Stored      uint64 // blocks committed
	Duplicates  uint64 // commits of a hash already stored (returned the canonical block)
	Collisions  uint64 // hash matches whose tokens or parent differed (never shared)
	Evictions   uint64
	Removed     uint64 // blocks dropped by Invalidate or Clear
	Orphans     uint64 // commits refused because the parent was not in the index
}

// Stats returns a snapshot.
func (c *Cache) Stats() Stats {
	s := Stats{
		Blocks:     c.pool.NumBlocks(),
		Free:       c.pool.Free(),
		Referenced: c.pool.Referenced(),
		Cached:     c.pool.Cached(),
		Evictable:  c.evictable,
		Pending:    len(c.pending),

		Queries:     c.stats.queries,
		QueryTokens: c.stats.queryTokens,
		HitBlocks:   c.stats.hitBlocks,
		HitTokens:   c.stats.hitTokens,
		Stored:      c.stats.stored,
		Duplicates:  c.stats.duplicates,
		Collisions:  c.stats.collisions,
		Evictions:   c.stats.evictions,
		Removed:     c.stats.removed,
		Orphans:     c.stats.orphans,
	}
	for _, b := range c.index {
		if c.meta[b].state == stateLive {
			s.Indexed++
		}
	}
	return s
}
