package prefix

import (
	"encoding/binary"
	"fmt"
)

// Miss evidence: where a prompt leaves the cached chains, found from the hashes Match
// already computed (no extra pass over the prompt). Package miss names the cause from it.
//
// Three cheap structures feed it:
//
//   - child lists: every live entry is linked into its parent's list (a root's list head is
//     in rootKids), intrusive and doubly linked, so Commit and eviction keep them in O(1)
//     with no allocation, and the children of the last matched block are enumerable;
//   - ghosts: a bounded direct-mapped table of the hashes eviction took most recently, so
//     "this block was cached and is gone" is one probe;
//   - firsts: a bounded FIFO map from the content of a first block (a 64-bit digest of its
//     tokens, no root) to the roots that committed it, so "this content is cached under
//     another root" (another salt or tenant) costs one map probe and a Chain per candidate.
//
// Ghosts and firsts may name blocks that are gone since: a ghost only has to have been
// evicted (the cause), and firsts' roots are confirmed against the index before use.

// kidLinks are an entry's child-list links, each a block id + 1 (0 = none).
type kidLinks struct {
	first, prev, next int32
}

// ghostCapacity sizes the ghost set: as many hashes as the pool has blocks (what it could
// have held at once), at least 256 and at most 65536 (the table is twice that, 8 bytes a
// slot: 1 MiB at most).
func ghostCapacity(numBlocks int) int { return min(max(numBlocks, 256), 1<<16) }

// firstsCapacity bounds the first-block map: distinct first blocks are few (one per system
// prompt and tenant), so 4096 covers a busy server in 8 bytes + a few roots each.
const firstsCapacity = 4096

// rootsPerContent is the most roots remembered per first-block content: 3 keeps a rootSet
// under 128 bytes, which Go maps store inline (a bigger value is allocated per insert).
const rootsPerContent = 3

func (c *Cache) initDiverge() {
	c.rootKids = make(map[Hash]int32)
	c.ghosts = newGhostSet(ghostCapacity(c.cfg.NumBlocks))
	c.firsts = contentRoots{ring: make([]uint64, firstsCapacity), roots: make(map[uint64]rootSet)}
}

// linkKid puts newly committed entry b at the head of its parent's child list (the root's
// when b is a first block), and records a first block's content under its root.
func (c *Cache) linkKid(b BlockID) {
	e := &c.meta[b]
	id := int32(b) + 1
	if e.parentBlock >= 0 {
		p := &c.meta[e.parentBlock].kids
		e.kids = kidLinks{next: p.first}
		if p.first != 0 {
			c.meta[p.first-1].kids.prev = id
		}
		p.first = id
		return
	}
	head := c.rootKids[e.parent]
	e.kids = kidLinks{next: head}
	if head != 0 {
		c.meta[head-1].kids.prev = id
	}
	c.rootKids[e.parent] = id
	c.firsts.add(contentKey(c.blockTokens(b)), e.root)
}

// unlinkKid takes live entry b out of its parent's child list. REQUIRES: b has no children.
func (c *Cache) unlinkKid(b BlockID) {
	e := &c.meta[b]
	if e.kids.next != 0 {
		c.meta[e.kids.next-1].kids.prev = e.kids.prev
	}
	switch {
	case e.kids.prev != 0:
		c.meta[e.kids.prev-1].kids.next = e.kids.next
	case e.parentBlock >= 0:
		c.meta[e.parentBlock].kids.first = e.kids.next
	case e.kids.next != 0:
		c.rootKids[e.parent] = e.kids.next
	default:
		delete(c.rootKids, e.parent)
	}
	e.kids = kidLinks{}
}

// contentKey is a 64-bit FNV-1a digest of a block's tokens: a first block's content with no
// root. Collisions only cost a Chain that does not confirm.
func contentKey(tokens []int32) uint64 {
	h := uint64(14695981039346656037)
	for _, t := range tokens {
		for i := range 4 {
			h ^= uint64(byte(uint32(t) >> (8 * i)))
			h *= 1099511628211
		}
	}
	return h
}

// ghostSet remembers recently evicted hashes in a direct-mapped table of 64-bit hash
// prefixes: add overwrites the slot, so it holds at most len(slots) of them, the most recent
// winning a collision. No map, no deletes: eviction, on the allocation path, pays one store.
// A prefix names a block well enough (a false hit needs a 2^-64 coincidence and would only
// mislabel a miss); a hash pushed out early just goes unexplained as evicted.
type ghostSet struct {
	slots []uint64
	mask  uint64
}

func newGhostSet(capacity int) ghostSet {
	n := 1
	for n < 2*capacity {
		n <<= 1
	}
	return ghostSet{slots: make([]uint64, n), mask: uint64(n - 1)}
}

// ghostKey is a hash's first 8 bytes, never 0 (0 marks an empty slot).
func ghostKey(h Hash) uint64 { return binary.LittleEndian.Uint64(h[:8]) | 1 }

// slot mixes the key's high bits in: the low bits of a hash prefix are as random as any, but
// the mix keeps that true for keys from outside too.
func (g *ghostSet) slot(k uint64) uint64 { return (k ^ k>>29) & g.mask }

func (g *ghostSet) add(h Hash) {
	k := ghostKey(h)
	g.slots[g.slot(k)] = k
}

func (g *ghostSet) has(h Hash) bool {
	k := ghostKey(h)
	return g.slots[g.slot(k)] == k
}

// contentRoots is a bounded FIFO map from a first block's content key to the roots that
// committed it (at most rootsPerContent, most recent last), held inline: adding allocates
// nothing.
type contentRoots struct {
	ring  []uint64
	next  int
	full  bool
	roots map[uint64]rootSet
}

type rootSet struct {
	n     int
	roots [rootsPerContent]Hash
}

func (f *contentRoots) add(k uint64, root Hash) {
	rs, ok := f.roots[k]
	for i := range rs.n {
		if rs.roots[i] == root {
			copy(rs.roots[i:rs.n], rs.roots[i+1:rs.n])
			rs.n--
			break
		}
	}
	if rs.n == rootsPerContent {
		copy(rs.roots[:], rs.roots[1:])
		rs.n--
	}
	rs.roots[rs.n] = root
	rs.n++
	f.roots[k] = rs
	if ok {
		return // already in the ring
	}
	if f.full {
		delete(f.roots, f.ring[f.next])
	}
	f.ring[f.next] = k
	f.next++
	if f.next == len(f.ring) {
		f.next, f.full = 0, true
	}
}

// DivergeKind is what the hash chain alone says about a prompt's miss.
type DivergeKind uint8

const (
	// DivergeNone: the prompt reused every block it could (⌊(len−1)/B⌋).
	DivergeNone DivergeKind = iota
	// DivergeBelowBlock: the prompt has no block it could reuse (len ≤ BlockSize).
	DivergeBelowBlock
	// DivergeEvicted: the next block was cached with this very prefix and eviction took it.
	DivergeEvicted
	// DivergeOtherRoot: nothing is cached under the prompt's root, but its first block is cached
	// under another root (another salt or tenant, or another identity).
	DivergeOtherRoot
	// DivergeNoChild: nothing is cached after the matched blocks: the rest is new content.
	DivergeNoChild
	// Diverged: a cached chain continues after the matched blocks and the prompt leaves it
	// at Offset; the text decides why (package miss).
	Diverged
)

var divergeKindNames = [...]string{"no_miss", "below_block", "evicted", "other_root", "no_child", "diverged"}

func (k DivergeKind) String() string {
	if int(k) < len(divergeKindNames) {
		return divergeKindNames[k]
	}
	return "diverge(?)"
}

// Divergence is where a prompt leaves the cached chains.
type Divergence struct {
	Kind DivergeKind
	// Block is the first prompt block not reused; Offset the first token where the prompt
	// and the best cached chain differ (Block*BlockSize + the tokens they share in it).
	Block, Offset int
	// Cached is the best cached chain's tokens from Block*BlockSize on (Diverged only), at
	// most maxTokens: the child of the last matched block sharing the longest token prefix
	// with the prompt's next block, then at each level the child sharing the most with the
	// prompt at that position (the most recently used on a tie). The caller owns it.
	Cached []int32
}

// Diverge explains why tokens reused only matched blocks under root. hashes are the prompt's
// block hashes (Match.Hashes); matched counts the blocks reused from the start (device hits
// and restored blocks, committed since). It reads the index only: no references taken, no
// clock advanced, no events.
func (c *Cache) Diverge(root Hash, hashes []Hash, tokens []int32, matched, maxTokens int) Divergence {
	bs := c.cfg.BlockSize
	limit := min(len(hashes), MaxMatchBlocks(len(tokens), bs))
	if limit == 0 {
		return Divergence{Kind: DivergeBelowBlock}
	}
	if matched >= limit {
		return Divergence{Kind: DivergeNone, Block: matched, Offset: matched * bs}
	}
	d := Divergence{Block: matched, Offset: matched * bs}
	if c.ghosts.has(hashes[matched]) {
		d.Kind = DivergeEvicted
		return d
	}
	var head int32
	if matched == 0 {
		head = c.rootKids[root]
		if head == 0 && c.underOtherRoot(root, tokens[:bs]) {
			d.Kind = DivergeOtherRoot
			return d
		}
	} else {
		b, ok := c.index[hashes[matched-1]]
		if !ok || c.meta[b].state != stateLive {
			d.Kind = DivergeNoChild
			return d
		}
		head = c.meta[b].kids.first
	}
	best, shared := c.bestKid(head, tokens[matched*bs:(matched+1)*bs])
	if best < 0 {
		if matched == 0 && c.underOtherRoot(root, tokens[:bs]) {
			d.Kind = DivergeOtherRoot
			return d
		}
		d.Kind = DivergeNoChild
		return d
	}
	d.Kind = Diverged
	d.Offset += shared
	d.Cached = make([]int32, 0, min(maxTokens, 64*bs))
	for pos, b := matched+1, best; b >= 0 && len(d.Cached)+bs <= maxTokens; pos++ {
		d.Cached = append(d.Cached, c.blockTokens(b)...)
		var want []int32
		if (pos+1)*bs <= len(tokens) {
			want = tokens[pos*bs : (pos+1)*bs]
		}
		b, _ = c.bestKid(c.meta[b].kids.first, want)
	}
	return d
}

// bestKid returns the child in the list at head sharing the longest token prefix with want,
// the most recently used among equals, and that prefix's length; -1 for an empty list.
func (c *Cache) bestKid(head int32, want []int32) (BlockID, int) {
	best, bestShared := BlockID(-1), -1
	for k := head; k != 0; k = c.meta[k-1].kids.next {
		b := BlockID(k - 1)
		n := sharedPrefix(c.blockTokens(b), want)
		if n > bestShared || (n == bestShared && c.meta[b].lastUse > c.meta[best].lastUse) {
			best, bestShared = b, n
		}
	}
	return best, max(bestShared, 0)
}

func sharedPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// underOtherRoot reports whether first (a first block's tokens) is live under a root other than
// root.
func (c *Cache) underOtherRoot(root Hash, first []int32) bool {
	rs := c.firsts.roots[contentKey(first)]
	for _, r := range rs.roots[:rs.n] {
		if r == root {
			continue
		}
		if b, ok := c.index[Chain(r, first, nil)]; ok && c.meta[b].state == stateLive && equalTokens(c.blockTokens(b), first) {
			return true
		}
	}
	return false
}

// checkKids verifies the child lists (CheckInvariants): every live entry is in exactly its
// parent's list (its root's for a first block), the links agree both ways and a list's
// length is the parent's child count.
func (c *Cache) checkKids() error {
	seen := 0
	walk := func(head int32, parent Hash, parentBlock BlockID) (int, error) {
		n, prev := 0, int32(0)
		for k := head; k != 0; k = c.meta[k-1].kids.next {
			if int(k-1) >= len(c.meta) || n > len(c.meta) {
				return n, fmt.Errorf("prefix: child list under %s broken at %d", parent.Short(), k-1)
			}
			e := &c.meta[k-1]
			if e.state != stateLive || e.parent != parent || e.parentBlock != parentBlock || e.kids.prev != prev {
				return n, fmt.Errorf("prefix: block %d in the child list of %s: state %d parent %s prev %d, want prev %d",
					k-1, parent.Short(), e.state, e.parent.Short(), e.kids.prev-1, prev-1)
			}
			prev = k
			n++
		}
		return n, nil
	}
	for root, head := range c.rootKids {
		if head == 0 {
			return fmt.Errorf("prefix: empty child list kept for root %s", root.Short())
		}
		n, err := walk(head, root, -1)
		if err != nil {
			return err
		}
		seen += n
	}
	for i := range c.meta {
		e := &c.meta[i]
		if e.state != stateLive {
			if e.kids != (kidLinks{}) {
				return fmt.Errorf("prefix: block %d (state %d) still linked as a child", i, e.state)
			}
			continue
		}
		n, err := walk(e.kids.first, e.hash, BlockID(i))
		if err != nil {
			return err
		}
		if n != int(e.children) {
			return fmt.Errorf("prefix: block %d lists %d children, counts %d", i, n, e.children)
		}
		seen += n
	}
	live := 0
	for i := range c.meta {
		if c.meta[i].state == stateLive {
			live++
		}
	}
	if seen != live {
		return fmt.Errorf("prefix: child lists hold %d blocks, %d live", seen, live)
	}
	return nil
}
