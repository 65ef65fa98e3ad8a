package prefix

import (
	"errors"
	"fmt"

	"stockpot/internal/kvcache"
)

// BlockID is a block of the working pool (an alias, so engine code uses
// kvcache and prefix ids interchangeably).
type BlockID = kvcache.BlockID

// Owner names whoever computes blocks (the engine's request id). It scopes
// pending marks so Abort can drop them.
type Owner uint64

// ErrNoSpace is returned (wrapped, with the numbers) when Allocate cannot find
// enough free or evictable blocks.
var ErrNoSpace = errors.New("prefix: not enough kv blocks")

// Config configures a Cache.
type Config struct {
	// NumBlocks is the number of blocks in the working pool. Required (> 0).
	NumBlocks int
	// BlockSize is the number of tokens per block; it must equal the arena's
	// Layout.BlockSize. 0 means 16, the serve default (--block-size).
	BlockSize int
	// MinHitsToProtect is the admission threshold of eviction: a cached block
	// reused by at least this many later requests is evicted only after every
	// evictable block reused fewer times. 1 (the default) means "a block used
	// once, by the request that computed it, goes first", which keeps a shared
	// system prompt alive through a flood of one-off documents. 0 puts every
	// block in one class: plain leaf-first LRU.
	MinHitsToProtect int
	// DisableEvents stops the Cache queuing events (for callers that neither
	// publish nor offload). Evicted blocks are then lost silently.
	DisableEvents bool
	// ReuseEvents queues a Reused event for every block Reused counts (for
	// offload's selective write-through, which writes a block when its reuses
	// reach the admission threshold). Off by default: one event per reused
	// block of every request.
	ReuseEvents bool
}

// DefaultConfig returns the defaults; NumBlocks still has to be set.
func DefaultConfig() Config {
	return Config{BlockSize: 16, MinHitsToProtect: 1}
}

// validate returns cfg with defaults filled in, or an error. It never
// modifies the caller's struct (cfg is a copy).
func (cfg Config) validate() (Config, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultConfig().BlockSize
	}
	if cfg.BlockSize < 0 {
		return cfg, fmt.Errorf("prefix: block size %d must be > 0", cfg.BlockSize)
	}
	if cfg.NumBlocks <= 0 {
		return cfg, fmt.Errorf("prefix: %d blocks, need at least 1", cfg.NumBlocks)
	}
	if cfg.NumBlocks > 1<<30 {
		return cfg, fmt.Errorf("prefix: %d blocks is more than block ids hold", cfg.NumBlocks)
	}
	if cfg.MinHitsToProtect < 0 {
		return cfg, fmt.Errorf("prefix: MinHitsToProtect %d must be >= 0", cfg.MinHitsToProtect)
	}
	return cfg, nil
}

// entryState is the index state of a block.
type entryState uint8

const (
	// stateNone: not in the index. The block is free, or referenced by
	// sequences that computed it but did not (or could not) commit it.
	stateNone entryState = iota
	// stateLive: in the index; Match can return it.
	stateLive
	// stateDead: invalidated while referenced. It still occupies its hash in
	// the index, so nobody commits the hash or a child under it, but Match
	// never returns it. It is dropped when its last reference goes.
	stateDead
)

// entry is the index record of one block, stored per block id (a block is in
// the index at most once). Its token ids live in Cache.tokens.
type entry struct {
	hash   Hash // index key: Chain(parent, tokens, nil)
	parent Hash // the previous block's hash, or the root for depth 0
	root   Hash // the chain's root (identity + salt), for Invalidate

	// parentBlock is the block indexed under parent, or -1 when parent is a
	// root. Valid for live entries: a parent with children is never evicted
	// and is invalidated together with them.
	parentBlock BlockID
	depth       int32 // blocks before this one in the chain

	children   int32 // live entries whose parentBlock is this block
	pinnedKids int32 // of those, how many are pinned

	// pinned: ref > 0 or pinnedKids > 0, i.e. not evictable even by peeling
	// leaves. Maintained for live entries only; see Cache.evictable.
	pinned bool
	state  entryState

	hits uint32 // reuses after the commit (Reused: distinct requests)
	// noOffload: the offload tiers must not keep it (CommitNoOffload; AllowOffload clears it).
	noOffload bool
	lastUse   uint64 // Cache.clock at the last Match, Commit or Release
	heapIdx   int32  // index in Cache.heap, or -1
	// owner tags a live entry with the principal whose request committed it (quota.go);
	// 0 = none.
	owner uint16

	// kids links live entries into their parent's child list (see diverge.go): block id + 1
	// of the first child and of the previous and next siblings; 0 = none, so a zeroed entry
	// is unlinked.
	kids kidLinks
}

// Cache is the prefix cache of the working pool: it owns the block pool
// (kvcache.Pool) and the index from block hash to block, decides what to
// evict, dedups blocks being computed, and queues events for the router and
// the offload tiers. See the package doc for the design and the contracts.
//
// Not safe for concurrent use: the engine's scheduler goroutine owns it.
type Cache struct {
	cfg  Config
	pool *kvcache.Pool

	// index maps the hash of every live or dead entry to its block.
	// Invariant: index[h] == b iff meta[b].state != stateNone && meta[b].hash == h.
	index map[Hash]BlockID
	meta  []entry // per block id
	// tokens[b*BlockSize : (b+1)*BlockSize] are block b's tokens while it is
	// in the index (confirmed on every hit so a hash collision can never hand
	// out foreign K/V).
	tokens []int32

	// heap is a min-heap of evictable leaves (live, ref 0, no children),
	// ordered by evictBefore.
	heap []BlockID
	// evictable counts live entries that are not pinned: exactly the blocks
	// Allocate can reclaim by evicting leaves one after another.
	evictable int

	// pending maps a hash being computed to its owner; owned lists each
	// owner's marks (possibly stale: Abort checks pending[h] == owner).
	// Invariant: no pending hash is in index.
	pending map[Hash]Owner
	owned   map[Owner][]Hash

	clock uint64 // logical time, advanced by every touch

	events      []Event
	eventTokens []int32 // backing store of the queued events' Tokens
	// The buffers last returned by Events, reused by the next drain.
	spareEvents []Event
	spareTokens []int32

	scratch []BlockID
	stats   counters

	// Miss evidence (diverge.go): the child lists' heads under each root, the recently
	// evicted hashes and which roots hold a first block's content.
	rootKids map[Hash]int32
	ghosts   ghostSet
	firsts   contentRoots

	// Owner quotas (quota.go): live blocks per owner tag, the tags' limits in blocks, and
	// how many tags hold more than their limit now.
	ownerBlocks map[uint16]int
	ownerLimit  map[uint16]int
	overOwners  int
}

type counters struct {
	queries, queryTokens, hitBlocks, hitTokens uint64
	stored, duplicates, collisions, evictions  uint64
	removed, orphans                           uint64
}

// New returns an empty Cache over cfg.NumBlocks free blocks.
func New(cfg Config) (*Cache, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Cache{
		cfg:     cfg,
		pool:    kvcache.NewPool(cfg.NumBlocks),
		index:   make(map[Hash]BlockID, cfg.NumBlocks),
		meta:    make([]entry, cfg.NumBlocks),
		tokens:  make([]int32, cfg.NumBlocks*cfg.BlockSize),
		heap:    make([]BlockID, 0, cfg.NumBlocks),
		pending: make(map[Hash]Owner),
		owned:   make(map[Owner][]Hash),
	}
	c.initDiverge()
	for i := range c.meta {
		c.meta[i].heapIdx = -1
		c.meta[i].parentBlock = -1
	}
	return c, nil
}

// Config returns the configuration with defaults filled in.
func (c *Cache) Config() Config { return c.cfg }

// BlockSize returns the tokens per block.
func (c *Cache) BlockSize() int { return c.cfg.BlockSize }

func (c *Cache) blockTokens(b BlockID) []int32 {
	bs := c.cfg.BlockSize
	return c.tokens[int(b)*bs : (int(b)+1)*bs : (int(b)+1)*bs]
}

// Match is the result of Cache.Match.
type Match struct {
	// Blocks are the cached blocks holding the prompt's first
	// len(Blocks)*BlockSize tokens, in order. The caller holds one reference
	// on each and gives them back with Release.
	Blocks []BlockID
	// Hashes are the chain hashes of every full block of the prompt
	// (len(tokens)/BlockSize of them), for MarkPending and Commit.
	Hashes []Hash
	// Pending is how many blocks right after Blocks another owner is
	// computing now (marked with MarkPending, not yet committed). A scheduler
	// may wait for them instead of computing them twice.
	Pending int
}

// MaxMatchBlocks returns the most blocks a prompt of p tokens may reuse:
// floor((p-1)/blockSize). The last prompt token is always computed, because
// its logits give the first output token and the cache stores K/V, not
// logits. With Q tokens in common with a cached prompt the reuse is
// therefore min(floor(Q/B), floor((P-1)/B)) blocks.
func MaxMatchBlocks(p, blockSize int) int {
	if p <= 1 {
		return 0
	}
	return (p - 1) / blockSize
}

// Match looks up the longest run of cached full blocks at the start of
// tokens under root, confirms every block token by token, takes one reference
// on each block found (Acquire semantics), and counts the pending blocks
// after them. See MaxMatchBlocks for the cap.
func (c *Cache) Match(root Hash, tokens []int32) Match {
	return c.MatchHashes(root, BlockHashes(root, tokens, c.cfg.BlockSize), tokens)
}

// MatchHashes is Match with the block hashes already computed
// (BlockHashes(root, tokens, BlockSize)); it keeps hashes as Match.Hashes.
// Match and MatchHashes count one reuse on every block they return (Reused):
// for callers whose every match is a use. A caller that also matches to look
// (a peek) or retries a match uses Lookup, and Reused once the match is used.
func (c *Cache) MatchHashes(root Hash, hashes []Hash, tokens []int32) Match {
	m := c.Lookup(root, hashes, tokens)
	c.Reused(m.Blocks)
	return m
}

// Reused counts one reuse (the hits of offload admission and of eviction's
// MinHitsToProtect) on each block: a request used them. The engine calls it
// once per request, at the request's first admission, with the blocks that
// admission's match returned, so a block's hits count distinct requests that
// reused it, not peeks or the retries of an admission that had to wait.
// REQUIRES: the caller holds a reference on each block (the match's), so none
// is in the eviction heap, whose order hits are part of (panics otherwise).
func (c *Cache) Reused(blocks []BlockID) {
	for _, b := range blocks {
		if c.pool.RefCount(b) == 0 {
			panic(fmt.Sprintf("prefix: Reused of block %d, which the caller does not hold", b))
		}
		e := &c.meta[b]
		e.hits++
		if c.cfg.ReuseEvents && e.state == stateLive {
			c.queue(Reused, e.hash, e.parent, e.root, e.hits, e.depth, b, c.blockTokens(b), e.noOffload)
		}
	}
}

// Lookup is MatchHashes without counting a reuse: it takes the references,
// stamps recency and counts the query, but a block's hits are left to
// Reused. See MatchHashes.
func (c *Cache) Lookup(root Hash, hashes []Hash, tokens []int32) Match {
	bs := c.cfg.BlockSize
	if len(hashes) != len(tokens)/bs {
		panic(fmt.Sprintf("prefix: %d hashes for %d tokens of block size %d", len(hashes), len(tokens), bs))
	}
	limit := min(len(hashes), MaxMatchBlocks(len(tokens), bs))
	c.clock++
	c.stats.queries++
	c.stats.queryTokens += uint64(len(tokens))

	hits := c.scratch[:0]
	parent := root
	for i := range limit {
		b, ok := c.index[hashes[i]]
		if !ok {
			break
		}
		e := &c.meta[b]
		if e.state != stateLive {
			break
		}
		if e.parent != parent || !equalTokens(c.blockTokens(b), tokens[i*bs:(i+1)*bs]) {
			c.stats.collisions++
			break
		}
		hits = append(hits, b)
		parent = hashes[i]
	}
	c.scratch = hits[:0]

	m := Match{Hashes: hashes}
	if len(hits) > 0 {
		m.Blocks = make([]BlockID, len(hits))
		copy(m.Blocks, hits)
		for _, b := range m.Blocks {
			e := &c.meta[b]
			e.lastUse = c.clock
			c.ref(b)
		}
		c.stats.hitBlocks += uint64(len(hits))
		c.stats.hitTokens += uint64(len(hits) * bs)
	}
	if len(c.pending) > 0 {
		for i := len(hits); i < limit; i++ {
			if _, ok := c.pending[hashes[i]]; !ok {
				break
			}
			m.Pending++
		}
	}
	c.maybeCheck()
	return m
}

func equalTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Ref takes one more reference on a block the caller can name: one it holds,
// or the canonical block Commit returned.
// REQUIRES: b is not free (panics otherwise).
func (c *Cache) Ref(b BlockID) {
	c.ref(b)
	c.maybeCheck()
}

func (c *Cache) ref(b BlockID) {
	c.pool.Ref(b)
	if c.pool.RefCount(b) == 1 && c.meta[b].state == stateLive {
		c.heapRemove(b)
		c.updatePin(b)
	}
}

// Available returns how many blocks Allocate can hand out right now: free
// blocks plus cached blocks that eviction can reach.
func (c *Cache) Available() int { return c.pool.Free() + c.evictable }

// Allocate returns n blocks, each with one reference held by the caller:
// first from the free list (oldest first), then by evicting cached blocks.
// Eviction takes only unreferenced leaves (blocks with no cached children),
// blocks reused fewer than MinHitsToProtect times before the others, and
// least recently used first within a class; a parent becomes a leaf, and so
// evictable, when its last child goes, so eviction never strands a child.
//
// Eviction contract: for every cached block it reclaims, Allocate queues an
// Evicted event (hash, parent, block, tokens) before returning the block.
// The block's K/V is untouched until the caller writes it, so a tier that
// keeps evicted blocks drains Events right after Allocate and copies those
// blocks out (kvcache.Arena.BlockData) before the engine writes to them.
//
// It fails with ErrNoSpace, taking nothing, when fewer than n blocks are
// available.
func (c *Cache) Allocate(n int) ([]BlockID, error) {
	if n <= 0 {
		return nil, nil
	}
	return c.AppendAllocate(make([]BlockID, 0, n), n)
}

// AppendAllocate is Allocate appending the blocks to dst: a decoding sequence whose block
// table has room takes its next block without allocating. On ErrNoSpace it returns dst as
// it was.
func (c *Cache) AppendAllocate(dst []BlockID, n int) ([]BlockID, error) {
	if n <= 0 {
		return dst, nil
	}
	if n > c.Available() {
		return dst, fmt.Errorf("%w: need %d blocks, %d free, %d evictable (%d referenced, %d cached, %d total)",
			ErrNoSpace, n, c.pool.Free(), c.evictable, c.pool.Referenced(), c.pool.Cached(), c.pool.NumBlocks())
	}
	out, want := dst, len(dst)+n
	for len(out) < want {
		if b, ok := c.pool.Alloc(); ok {
			out = append(out, b)
			continue
		}
		if len(c.heap) == 0 {
			// Available promised more: the counters are wrong.
			panic(fmt.Sprintf("prefix: %d evictable but no evictable leaf", c.evictable))
		}
		b := c.heap[0]
		if c.overOwners > 0 {
			b = c.overQuotaVictim(b)
		}
		c.evict(b)
		c.pool.Ref(b) // cached -> referenced, owned by the caller
		out = append(out, b)
	}
	c.maybeCheck()
	return out, nil
}

// evict removes leaf b (live, ref 0, no children) from the index, queueing an
// Evicted event. The block stays off the free list (cached state in the
// pool); the caller takes it.
func (c *Cache) evict(b BlockID) {
	e := &c.meta[b]
	c.heapRemove(b)
	c.evictable-- // b was unpinned
	c.queue(Evicted, e.hash, e.parent, e.root, e.hits, e.depth, b, c.blockTokens(b), e.noOffload)
	if !c.cfg.DisableEvents { // the event just queued
		c.events[len(c.events)-1].Owner = e.owner
	}
	c.ghosts.add(e.hash)
	c.unlink(b)
	c.stats.evictions++
}

// unlink takes live entry b out of the index and out of its parent's child
// counts. REQUIRES: b is not pinned by children (children == 0).
func (c *Cache) unlink(b BlockID) {
	c.unlinkKid(b)
	e := &c.meta[b]
	c.disown(e)
	delete(c.index, e.hash)
	if p := e.parentBlock; p >= 0 {
		pe := &c.meta[p]
		pe.children--
		if e.pinned {
			pe.pinnedKids--
			c.updatePin(p)
		}
		c.maybeHeapAdd(p)
	}
	*e = entry{heapIdx: -1, parentBlock: -1}
}

// MarkPending records that owner is computing the blocks with these hashes
// (in-flight dedup): Match reports them as Pending to other requests until
// owner commits them or calls Abort. Hashes already indexed or already
// pending for another owner are skipped. It returns how many were marked.
func (c *Cache) MarkPending(hashes []Hash, owner Owner) int {
	n := 0
	for _, h := range hashes {
		if _, ok := c.index[h]; ok {
			continue
		}
		if _, ok := c.pending[h]; ok {
			continue
		}
		c.pending[h] = owner
		c.owned[owner] = append(c.owned[owner], h)
		n++
	}
	c.maybeCheck()
	return n
}

// Abort drops owner's pending marks (call it when a request ends for any
// reason; marks of blocks it committed are already gone).
func (c *Cache) Abort(owner Owner) {
	for _, h := range c.owned[owner] {
		if o, ok := c.pending[h]; ok && o == owner {
			delete(c.pending, h)
		}
	}
	delete(c.owned, owner)
	c.maybeCheck()
}

// Commit registers block, which the caller has just filled with the K/V of
// tokens (one full block) following parent, under hash =
// Chain(parent, tokens, extra). parent is the previous block's hash, or the
// root for a sequence's first block. Commit clears the pending mark for hash,
// whichever owner set it.
//
// It returns the canonical block for hash and whether block was stored:
//
//   - (block, true): indexed; later Matches can return it.
//   - (other, false): the same block was committed first (say two requests
//     computed it concurrently). other holds identical K/V (the engine is
//     deterministic); the caller may switch to it: Ref(other), Release its own
//     block, and update its block table. Its own block is not indexed.
//   - (block, false): not stored, because the hash is taken by a different
//     block (a collision: never happens in practice, and never shares wrong
//     K/V), or the hash or parent was invalidated, or parent is a block hash
//     not live in the index (its own Commit was refused), or block was
//     already committed under this hash.
//
// REQUIRES: the caller holds a reference on block, block is not indexed
// under another hash, and len(tokens) == BlockSize (panics otherwise).
func (c *Cache) Commit(hash, parent Hash, tokens []int32, block BlockID) (BlockID, bool) {
	return c.commit(hash, parent, tokens, block, false)
}

// CommitNoOffload is Commit of a block the offload tiers must not keep: it lies beyond the
// committing request's max_offload_tokens. Its events say NoOffload until a request that
// allows it reuses it (AllowOffload). A duplicate keeps the canonical block's flag.
func (c *Cache) CommitNoOffload(hash, parent Hash, tokens []int32, block BlockID) (BlockID, bool) {
	return c.commit(hash, parent, tokens, block, true)
}

// AllowOffload clears a live block's NoOffload: a request whose max_offload_tokens covers it
// reused it, so it is no one-off suffix.
func (c *Cache) AllowOffload(b BlockID) {
	if c.meta[b].state == stateLive {
		c.meta[b].noOffload = false
	}
}

func (c *Cache) commit(hash, parent Hash, tokens []int32, block BlockID, noOffload bool) (BlockID, bool) {
	if len(tokens) != c.cfg.BlockSize {
		panic(fmt.Sprintf("prefix: Commit of %d tokens, block size %d", len(tokens), c.cfg.BlockSize))
	}
	if c.pool.RefCount(block) == 0 {
		panic(fmt.Sprintf("prefix: Commit of unreferenced block %d", block))
	}
	e := &c.meta[block]
	if e.state != stateNone {
		if e.hash == hash {
			return block, false
		}
		panic(fmt.Sprintf("prefix: Commit of block %d as %s, already indexed as %s", block, hash.Short(), e.hash.Short()))
	}
	// Whoever marked hash pending, it is computed now: waiters may match it. Marks are keyed
	// by hash, so Commit needs no owner; owned[owner] is cleaned by Abort.
	delete(c.pending, hash)

	if b, ok := c.index[hash]; ok {
		ex := &c.meta[b]
		if ex.state == stateLive && ex.parent == parent && equalTokens(c.blockTokens(b), tokens) {
			c.stats.duplicates++
			return b, false
		}
		if ex.state == stateLive {
			c.stats.collisions++
		}
		return block, false
	}
	parentBlock, depth, root := BlockID(-1), int32(0), parent
	if !parent.IsRoot() {
		// A block's parent must be live in the index: a parent that was
		// refused, invalidated or dropped would leave this block cached
		// under no reachable prefix.
		p, ok := c.index[parent]
		if !ok || c.meta[p].state != stateLive {
			c.stats.orphans++
			return block, false
		}
		pe := &c.meta[p]
		parentBlock, depth, root = p, pe.depth+1, pe.root
	}

	c.clock++
	*e = entry{
		hash: hash, parent: parent, root: root,
		parentBlock: parentBlock, depth: depth,
		pinned: true, state: stateLive,
		lastUse: c.clock, heapIdx: -1,
		noOffload: noOffload,
	}
	c.index[hash] = block
	copy(c.blockTokens(block), tokens)
	if parentBlock >= 0 {
		pe := &c.meta[parentBlock]
		pe.children++
		c.heapRemove(parentBlock)
		pe.pinnedKids++
		c.updatePin(parentBlock)
	}
	c.linkKid(block)
	c.stats.stored++
	c.queue(Stored, hash, parent, root, 0, depth, block, tokens, noOffload)
	c.maybeCheck()
	return block, true
}

// Release drops one reference on each block. blocks are one sequence's blocks
// in position order. A block left with no reference stays cached if it is in
// the index (evictable), and goes back to the free list otherwise. The blocks
// are stamped tail first, so of one sequence's blocks the tail is the least
// recently used and is evicted before the head (it is also the only leaf).
func (c *Cache) Release(blocks []BlockID) {
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		c.clock++
		e := &c.meta[b]
		left := c.pool.Unref(b)
		switch e.state {
		case stateLive:
			e.lastUse = c.clock
			if left == 0 {
				c.updatePin(b)
				c.maybeHeapAdd(b)
			}
		case stateDead:
			if left == 0 {
				delete(c.index, e.hash)
				*e = entry{heapIdx: -1, parentBlock: -1}
				c.pool.Release(b)
			}
		default:
			if left == 0 {
				c.pool.Release(b)
			}
		}
	}
	c.maybeCheck()
}

// Invalidate drops every block under root (an identity no longer served):
// unreferenced blocks go back to the free list now; referenced ones leave the
// index for Match at once and return to the free list when released. It
// queues a Removed event per block and returns how many blocks it dropped.
//
// Invalidate is memory reclamation, not the guard against stale K/V: a model
// whose weights change gets a new identity and so a new root. Requests still
// running under root should be stopped by the caller; their later Commits
// under root's invalidated blocks are refused.
func (c *Cache) Invalidate(root Hash) int {
	n := c.drop(func(e *entry) bool { return e.root == root }, true)
	delete(c.rootKids, root) // drop reset every entry under root, and so its child lists
	c.maybeCheck()
	return n
}

// Clear drops every cached block, as Invalidate does for every root, and
// queues a single Cleared event. It returns how many blocks it dropped.
func (c *Cache) Clear() int {
	n := c.drop(func(*entry) bool { return true }, false)
	clear(c.rootKids)
	c.queue(Cleared, Hash{}, Hash{}, Hash{}, 0, 0, -1, nil, false)
	c.maybeCheck()
	return n
}

// drop removes the live entries matching under. Every subtree lies under
// one root, so whole subtrees go together and no kept entry refers to a
// dropped one.
func (c *Cache) drop(under func(*entry) bool, events bool) int {
	n := 0
	for i := range c.meta {
		b := BlockID(i)
		e := &c.meta[b]
		if e.state != stateLive || !under(e) {
			continue
		}
		n++
		c.removed(b, events)
		c.disown(e)
		c.heapRemove(b)
		if !e.pinned {
			c.evictable--
		}
		if c.pool.RefCount(b) == 0 {
			delete(c.index, e.hash)
			*e = entry{heapIdx: -1, parentBlock: -1}
			c.pool.Release(b)
		} else {
			*e = entry{hash: e.hash, state: stateDead, heapIdx: -1, parentBlock: -1}
		}
	}
	return n
}

func (c *Cache) removed(b BlockID, event bool) {
	c.stats.removed++
	if event {
		e := &c.meta[b]
		c.queue(Removed, e.hash, e.parent, e.root, e.hits, e.depth, b, c.blockTokens(b), e.noOffload)
	}
}

// updatePin recomputes live entry b's pinned flag and, when it flips, the
// evictable count and the parent's pinnedKids (recursively: a chain of
// unreferenced blocks above a referenced one is pinned as a whole).
func (c *Cache) updatePin(b BlockID) {
	for b >= 0 {
		e := &c.meta[b]
		if e.state != stateLive {
			return
		}
		now := c.pool.RefCount(b) > 0 || e.pinnedKids > 0
		if now == e.pinned {
			return
		}
		e.pinned = now
		if now {
			c.evictable--
		} else {
			c.evictable++
		}
		p := e.parentBlock
		if p < 0 {
			return
		}
		if now {
			c.meta[p].pinnedKids++
		} else {
			c.meta[p].pinnedKids--
		}
		b = p
	}
}

// maybeHeapAdd puts b on the eviction heap if it is an evictable leaf.
func (c *Cache) maybeHeapAdd(b BlockID) {
	e := &c.meta[b]
	if e.state != stateLive || e.heapIdx >= 0 || e.children > 0 || c.pool.RefCount(b) > 0 {
		return
	}
	c.heapPush(b)
}

// Live calls fn for every block in the index (referenced or not), children before parents
// (deepest first), as a Stored event. The event's Tokens are valid only during the call. It is
// for write-back of the whole working pool at shutdown: the blocks' K/V is intact while fn
// runs. Deepest first because the tiers below evict least recently written first: when the
// pool is larger than a tier's budget, what the flush's own overflow evicts is then chain
// tails, and the chain heads, without which nothing after them is reachable, stay.
func (c *Cache) Live(fn func(Event)) {
	byDepth := map[int32][]BlockID{}
	maxDepth := int32(-1)
	for b := range c.meta {
		e := &c.meta[b]
		if e.state != stateLive {
			continue
		}
		byDepth[e.depth] = append(byDepth[e.depth], BlockID(b))
		maxDepth = max(maxDepth, e.depth)
	}
	for d := maxDepth; d >= 0; d-- {
		for _, b := range byDepth[d] {
			e := &c.meta[b]
			fn(Event{Kind: Stored, Hash: e.hash, Parent: e.parent, Root: e.root, Hits: e.hits, Depth: e.depth, Block: b, Tokens: c.blockTokens(b), NoOffload: e.noOffload, Owner: e.owner})
		}
	}
}

// Holds reports whether block b is live in the index under hash h: a block Match can hand out,
// which a caller that wants to keep it (a pin) may hold with Ref. A block whose Commit was
// refused (a collision, an orphan) is not held, and neither is one invalidated since.
func (c *Cache) Holds(h Hash, b BlockID) bool {
	got, ok := c.index[h]
	return ok && got == b && c.meta[b].state == stateLive
}
