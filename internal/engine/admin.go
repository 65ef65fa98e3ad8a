package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
)

// The cache admin operations (serve's POST /v1/cache/prewarm, GET /v1/cache, DELETE
// /v1/cache). Each runs on the runner goroutine, between scheduling steps (e.do), or as an
// ordinary request, so none needs a lock on the pool or the index.

// Prewarm computes req's prompt into the working pool without generating: it runs the prefill
// as an ordinary request (so it is scheduled, deduplicated and restored from the tiers like
// any other) that stops after it, and returns the prompt's usage (CompletionTokens and
// DecodeMs are 0). Why not a prefill-only mode in the scheduler: the prefill's last position
// yields one set of logits anyway; sampling one greedy token from them costs one pass over
// the vocabulary, its K/V is never written (a request that ends at max_tokens does not feed
// its last token back), and the scheduler stays as it is. The full blocks of the prompt are
// committed to the prefix cache and stay there, evictable, when the request ends.
//
// req is copied; its Sampling, MaxTokens, StopTokens and Logprobs are ignored.
func (e *Engine) Prewarm(ctx context.Context, req *Request) (Usage, error) {
	r := *req
	r.MaxTokens, r.Sampling, r.StopTokens, r.IgnoreEOS, r.Logprobs = 1, SamplingParams{HasSeed: true}, nil, true, 0
	ch, err := e.Generate(ctx, &r)
	if err != nil {
		return Usage{}, err
	}
	var last Output
	for o := range ch {
		last = o
	}
	switch {
	case last.Err != nil:
		return Usage{}, last.Err
	case last.FinishReason == FinishCancelled || last.Usage == nil:
		if err := ctx.Err(); err != nil {
			return Usage{}, err
		}
		return Usage{}, ErrShutdown
	}
	u := *last.Usage
	u.CompletionTokens, u.DecodeMs = 0, 0
	return u, nil
}

// PoolResidency is the working pool's occupancy, in blocks.
type PoolResidency struct {
	Blocks     int   // the pool's capacity
	Used       int   // referenced by running requests
	Cached     int   // unreferenced, holding reusable prefix blocks
	Free       int   // neither
	BlockBytes int64 // K/V bytes per block
	BlockSize  int   // tokens per block
}

// CachedPrefix is one indexed block seen as the prefix it ends: the chain from its root
// through it, Tokens long.
type CachedPrefix struct {
	Root   prefix.Hash // identity + tenant salt
	Hash   prefix.Hash // the block that ends the prefix
	Depth  int         // blocks before it in the chain
	Tokens int         // (Depth + 1) × BlockSize
	Bytes  int64       // the prefix's K/V bytes: (Depth + 1) × BlockBytes
	Hits   int         // reuses of its last block since it was committed
}

// RootResidency is how much of the pool one root (tenant) holds.
type RootResidency struct {
	Root   prefix.Hash
	Blocks int
}

// Residency is GET /v1/cache's view of the working pool.
type Residency struct {
	Pool PoolResidency
	// Roots is the roots by blocks held, most first, at most the limit.
	Roots []RootResidency
	// ByHits: the most reused prefixes, each the longest one at its hit count (a block whose
	// child has as many hits is not listed: the longer prefix says the same), most first.
	// ByBytes: the longest chains (leaves), largest first. At most the limit each.
	ByHits, ByBytes []CachedPrefix
}

// Residency reports the working pool and its top prefixes, at most limit of each list
// (limit < 1: 1). It walks the index on the runner goroutine: O(indexed blocks).
func (e *Engine) Residency(limit int) Residency {
	limit = max(limit, 1)
	bs, bb := e.cfg.BlockSize, e.arena.Layout().BlockBytes()
	var out Residency
	e.do(func() {
		used, cached, _ := cacheAdapter{e.cache}.stats()
		total := e.arena.NumBlocks()
		out.Pool = PoolResidency{Blocks: total, Used: used, Cached: cached, Free: total - used - cached, BlockBytes: bb, BlockSize: bs}
		type node struct {
			p                  CachedPrefix
			parent             prefix.Hash
			children, maxChild int // maxChild: the most hits of a child
		}
		nodes := map[prefix.Hash]*node{}
		roots := map[prefix.Hash]int{}
		e.cache.Live(func(ev prefix.Event) {
			d := int(ev.Depth)
			nodes[ev.Hash] = &node{parent: ev.Parent, maxChild: -1, p: CachedPrefix{Root: ev.Root, Hash: ev.Hash, Depth: d,
				Tokens: (d + 1) * bs, Bytes: int64(d+1) * bb, Hits: int(ev.Hits)}}
			roots[ev.Root]++
		})
		for _, n := range nodes {
			if p, ok := nodes[n.parent]; ok {
				p.children++
				p.maxChild = max(p.maxChild, n.p.Hits)
			}
		}
		for _, n := range nodes {
			if n.maxChild < n.p.Hits {
				out.ByHits = append(out.ByHits, n.p)
			}
			if n.children == 0 {
				out.ByBytes = append(out.ByBytes, n.p)
			}
		}
		for r, n := range roots {
			out.Roots = append(out.Roots, RootResidency{Root: r, Blocks: n})
		}
	})
	// Ties broken by hash so the listing is deterministic.
	byHash := func(a, b CachedPrefix) int { return cmp.Compare(string(a.Hash[:]), string(b.Hash[:])) }
	slices.SortFunc(out.ByHits, func(a, b CachedPrefix) int {
		return cmp.Or(cmp.Compare(b.Hits, a.Hits), cmp.Compare(b.Depth, a.Depth), byHash(a, b))
	})
	slices.SortFunc(out.ByBytes, func(a, b CachedPrefix) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Hits, a.Hits), byHash(a, b))
	})
	slices.SortFunc(out.Roots, func(a, b RootResidency) int {
		return cmp.Or(cmp.Compare(b.Blocks, a.Blocks), cmp.Compare(string(a.Root[:]), string(b.Root[:])))
	})
	out.ByHits = out.ByHits[:min(limit, len(out.ByHits))]
	out.ByBytes = out.ByBytes[:min(limit, len(out.ByBytes))]
	out.Roots = out.Roots[:min(limit, len(out.Roots))]
	return out
}

// Dropped is what DropCache removed from the working pool.
type Dropped struct {
	// Root is the dropped root; the zero hash for a drop of every root.
	Root prefix.Hash
	// Blocks left the index; Busy of them are still referenced by running requests, which
	// keep their K/V until they end (the blocks are freed then, never under them).
	Blocks, Busy int
}

// DropCache drops every cached block under salt's root (all: under every root of this
// identity) from the working pool, on the runner goroutine. The Removed (or Cleared) events
// go out with the next step, so the router's index forgets them too.
func (e *Engine) DropCache(salt string, all bool) Dropped {
	var d prefix.Dropped
	var root prefix.Hash
	if !all {
		root = e.Root(salt)
	}
	e.do(func() {
		if all {
			d = e.cache.DropAll()
		} else {
			d = e.cache.DropRoot(root)
		}
		e.publishStats()
	})
	return Dropped{Root: root, Blocks: d.Blocks, Busy: d.Busy}
}

// PoolFits reports whether a prompt of n tokens fits the working pool at all (its blocks plus
// the one generated position, as Generate requires); the error says by how much it does not.
func (e *Engine) PoolFits(n int) error {
	need := kvcache.BlocksForTokens(n+1, e.cfg.BlockSize)
	if have := e.arena.NumBlocks(); need > have {
		return fmt.Errorf("%w: %d tokens need %d K/V blocks, the pool holds %d", ErrPromptTooLong, n, need, have)
	}
	return nil
}

// ExportBlocks calls fn, on the runner goroutine, with the full blocks from (block index)
// up to to (exclusive) of prompt under salt's root that the working pool holds, in order,
// stopping at the first it does not hold: each block's chain event (Kind Stored; Tokens
// owned by fn), its K/V and, for a hybrid model, its state checkpoint (nil when the pool
// keeps none at that block); kv and state are valid during the call only. A prefill
// replica streams a prompt's blocks to the decode replica this way (internal/handoff),
// a batch of blocks per call so that the runner is held for a batch's copy at a time.
// Blocks past MaxMatchBlocks of the prompt (the last token's) are never exported. Exporting
// refreshes the blocks' pins, as a hit does. It returns how many blocks fn got.
func (e *Engine) ExportBlocks(salt string, prompt []int32, from, to int, fn func(ev prefix.Event, kv, state []byte)) int {
	bs := e.cfg.BlockSize
	to = min(to, prefix.MaxMatchBlocks(len(prompt), bs))
	if from < 0 || from >= to {
		return 0
	}
	root := prefix.Root(e.cfg.Identity, salt)
	hashes := prefix.BlockHashes(root, prompt, bs)
	n := 0
	e.do(func() {
		toks := prompt[:to*bs+1] // one token past the blocks: Lookup never matches a prompt's last token
		m := e.cache.Lookup(root, hashes[:len(toks)/bs], toks)
		defer e.cache.Release(m.Blocks)
		e.core.TouchPins(hashes, len(m.Blocks), e.cfg.Now()) // a pull is a use: the lease lives on while it runs
		for i := from; i < len(m.Blocks); i++ {
			parent := root
			if i > 0 {
				parent = hashes[i-1]
			}
			ev := prefix.Event{Kind: prefix.Stored, Hash: hashes[i], Parent: parent, Root: root, Depth: int32(i),
				Block: m.Blocks[i], Tokens: append([]int32(nil), prompt[i*bs:(i+1)*bs]...)}
			e.stateBuf = e.stateBuf[:0]
			fn(ev, e.arena.BlockData(m.Blocks[i]), e.encodeState(hashes[i]))
			n++
		}
		e.trimStateBuf()
	})
	return n
}

// Stateful reports whether the model keeps recurrent state (a hybrid): its blocks are
// complete only with their state checkpoints.
func (e *Engine) Stateful() bool { return e.ckpts != nil }

// EndLease ends a prefill's lease on a prompt's blocks once its decode took them (the Local
// pins of the prompt under salt that no other pin needs); the blocks stay cached like any
// other. It returns how many blocks it unpinned.
func (e *Engine) EndLease(salt string, prompt []int32) int {
	root := prefix.Root(e.cfg.Identity, salt)
	hashes := prefix.BlockHashes(root, prompt, e.cfg.BlockSize)
	var n int
	e.do(func() {
		n = e.core.EndLeases(root, hashes)
		e.publishStats()
	})
	return n
}
