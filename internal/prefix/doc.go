// Package prefix is the prefix cache of the working K/V pool: chained block
// hashes, the index from hash to block, eviction, in-flight dedup and the
// block events. It is pure (no goroutines, no I/O, no locks); the engine's
// scheduler goroutine owns the Cache and feeds it calls, raft style, and
// drains the events it queued.
//
// # Hash chain
//
// A prompt is cut into full blocks of BlockSize tokens. Block i's hash is
// Chain(hash of block i-1, tokens of block i, extra), and block 0's parent is
// Root(identity, salt). So a block's hash names the model, the tenant and
// every token before it: two prompts share block i exactly when they share
// the identity, the salt and the first (i+1)*BlockSize tokens. Only full
// blocks are hashed; the K/V of a partial block is not final.
//
// # Index: a hash map, not a radix tree
//
// The index is a map from block hash to block id, with one entry per cached
// block holding its parent hash, its tokens, child count, hit count and last
// use, plus a link to its parent's block. Why not a radix tree over tokens
// (SGLang's choice)?
//
//   - Sharing is at block granularity anyway (K/V is paged in blocks), so a
//     tree node per token or per split point buys nothing the engine can use.
//   - The router, the offload tiers and the event stream all speak block
//     hashes; with a hash map, the device index, the host tier and the
//     router's global index use the same key, and a lookup is one map probe
//     per block with no pointer chasing down from the root.
//   - The chain already makes a hash name its whole prefix, so a flat map
//     answers "longest cached prefix" by probing block 0, 1, 2... until a
//     miss: the same O(blocks) as walking a tree.
//   - What a tree gives for free (parents, leaves) is kept explicitly: every
//     entry links to its parent block and counts its children, which is all
//     leaf-first eviction and subtree invalidation need.
//
// Each hit is confirmed token by token (and by parent hash) against the
// stored tokens, so even a SHA-256 collision could never hand one request
// another's K/V: confirmation costs BlockSize int32 compares per block.
//
// # Block life cycle
//
//	free --Allocate--> referenced --Commit--> referenced+indexed
//	referenced+indexed --Release (last ref)--> cached (evictable)
//	cached --Match / Lookup hit--> referenced+indexed (Reused counts the reuse)
//	cached leaf --Allocate (eviction, Evicted event)--> referenced (new owner)
//	referenced, not indexed --Release (last ref)--> free
//
// # Eviction
//
// Allocate takes free blocks first, then evicts cached blocks that are
// unreferenced leaves (no cached child), so a parent goes only after all its
// children and no child is ever stranded without its prefix. Among leaves,
// blocks reused fewer than Config.MinHitsToProtect times go first (a scan
// of one-off prompts does not flush a shared system prompt), then the least
// recently used; Release stamps a sequence's blocks tail first, so its tail
// goes before its head.
//
// A cached block with a referenced descendant is pinned: it cannot become a
// leaf until that descendant is released. The Cache keeps a count of
// unpinned cached blocks, so Available (free + evictable) is exact and
// Allocate either succeeds or fails without evicting anything.
//
// Eviction contract: Allocate queues an Evicted event for each block it
// reclaims before returning it; the block's K/V is untouched until the
// caller writes it, so an offload tier copies it out after draining Events.
//
// # In-flight dedup
//
// A request about to compute blocks marks their hashes pending
// (MarkPending). A request arriving meanwhile with the same prefix gets, from
// Match, the cached blocks plus the number of pending blocks right after
// them, and its scheduler may wait for them rather than compute them twice.
// Commit clears a mark; Abort drops an owner's remaining marks. If two
// requests do compute one block, the second Commit returns the first block
// as canonical; their K/V is bit-identical (the engine's determinism rule).
//
// # Miss evidence
//
// Diverge (diverge.go) says where a prompt left the cached chains once Match has found how
// far it reuses them, from the hashes Match computed: the next block evicted (a bounded
// ghost table of evicted hashes), its first block cached under another root (a bounded map
// from a first block's content to the roots holding it), or the best cached child of the
// last matched block and the tokens down its chain. Every live entry is linked into its
// parent's child list (intrusive, O(1) in Commit and eviction, no allocation) so the
// children are enumerable without a scan. Package miss names the cause.
//
// # Invariants
//
// free + referenced + cached == total (cached = unreferenced indexed
// blocks); every indexed block but root-level ones has an indexed parent;
// child and pinned counts match a recount; the eviction heap holds exactly
// the unreferenced childless indexed blocks; no pending hash is indexed; every live entry
// is in exactly its parent's (or its root's) child list.
// CheckInvariants verifies all of it; the invariants build tag runs it after
// every mutation.
package prefix
