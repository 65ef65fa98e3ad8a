package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"stockpot/internal/blend"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// Chunk blending (package blend has the design): a request whose Blend marks chunks of its
// prompt has, past its exact prefix (the device match and restores, as for any request),
// its chunks' K/V computed at position 0 under blend.ChunkRoot and cached, copied with keys
// re-rotated into its own blocks, and a fraction of its tokens recomputed.
//
// While the request queues, the chunks the device lacks are prefetched from the lower tiers
// (ChunkFetches, ChunkPrefetched), each as a prompt of its own under the chunk root, and
// admission waits for them as it does for the prompt's prefetch. In the core a blend runs
// inside prefill, at the first Schedule after each admission (startBlend): every chunk's full
// blocks are looked up under the chunk root, on the device and then in what its prefetch
// found (restoreChunk: copied in before the step, committed), and the missing ones allocated; the request's chain hashes are cut where its K/V stops being
// exact, so nothing approximate is ever committed under the prompt's chain. Then its
// prefill steps are, in order: the missing chunk blocks, computed at chunk positions over
// the chunk's own block table and committed as they fill (phase A); once every chunk is
// cached, the copies (Plan.Blends, applied by the runner before the step's forward pass);
// then the recompute ranges, in position order, the last with logits (phase B). Advance
// pops each planned item (blendSeq.inflight, in plan order). A preemption releases the
// chunk blocks and starts the blend over at readmission; finishing releases them. The usage
// and the evidence keep what the first admission counted, as they do for any preempted
// request (recordFirstAdmission), even when the readmission blends otherwise or, the pool
// then too full for the chunks, not at all: counters never go back.
//
// When the chunk blocks cannot be allocated the request is not blended (Usage.Blend says
// so): its prompt is computed like any other, which is the exact answer.

// ErrBlend refuses a request's blend: its marks are invalid, or this engine cannot blend
// (a hybrid model: ErrHybrid; a Q8_0 K/V cache; no prefix cache; CacheBlend on a model of one
// layer).
// The client's to fix: a 400 at the API.
var ErrBlend = errors.New("engine: blend refused")

// ErrHybrid is ErrBlend's reason on a hybrid model (see package blend, Hybrids).
var ErrHybrid = errors.New("the model carries recurrent state that depends on every earlier token, so a chunk's cached state cannot be placed at another position")

// BlendUsage is what a blended request reports (Usage.Blend). Invariant, with it:
// Device+Host+Disk+Remote+Transfer+Computed+BlendedTokens == PromptTokens.
type BlendUsage struct {
	// BlendedTokens took their K/V from a cached chunk and kept it; RecomputedTokens had
	// cached chunk K/V and were recomputed anyway (the policy's choice: they are in
	// ComputedTokens).
	BlendedTokens, RecomputedTokens int
	// Chunks reports each marked chunk, in prompt order.
	Chunks []BlendChunk
	// Declined says why the request was not blended although it asked ("" when it was):
	// BlendDeclinedPool.
	Declined string
}

// BlendChunk is one marked chunk's fate: Hit of its tokens were found in the chunk cache
// (the rest of its full blocks this request computed at position 0 and cached), Blended of
// them kept the cached K/V. A chunk inside the exact prefix, or shorter than a block, has
// neither.
type BlendChunk struct {
	Start, End   int
	Hit, Blended int
	// Restored counts the tokens of Hit read from each lower tier (kvtier.Host, Disk,
	// Remote); the rest of Hit was on the device.
	Restored kvtier.Counts
	// Part names the chat part that marked the chunk ("messages[2].content[1]"); the engine
	// leaves it empty, the runner fills it from the request's marks.
	Part string
}

// BlendDeclinedPool: the pool had no room for the chunks' blocks beside the prompt's.
const BlendDeclinedPool = "kv_pool"

// BlendCopy is one copy of chunk K/V into a request's blocks, for the runner to apply
// before the step's forward pass: positions [DstPos, DstPos+N) of the table Dst take the K/V
// of positions [SrcPos, SrcPos+N) of the table Src, keys re-rotated by DstPos−SrcPos.
// Both tables are the core's: valid until the next Schedule.
type BlendCopy struct {
	Src, Dst       []kvcache.BlockID
	SrcPos, DstPos int
	N              int
}

// blendSeq is a blended request's state in the core.
type blendSeq struct {
	spec blend.Spec  // normalized: chunks sorted by start
	root prefix.Hash // the chunks' chain root: blend.ChunkRoot of the request's own root

	planned  bool // startBlend ran since the last admission
	declined bool
	copied   bool // the copies went into a plan
	counted  bool // the usage holds the first plan's numbers
	chunks   []blendChunk
	sel      blend.Selection
	next     int         // the next prompt position to plan
	inflight []blendItem // the items planned in the last Schedule, in plan order
	cb       *cacheBlend // Policy CacheBlend's state (blend_cacheblend.go); nil for EPIC

	// The chunks' prefetches from the lower tiers (ChunkFetches): fetching is how many have
	// not answered, fetched their answers by chunk index, until startBlend uses them.
	fetching int
	fetched  map[int]*Prefetched
}

// blendChunk is one chunk's blocks under the chunk root. Invariant: committed <= computed/B
// <= len(blocks) == len(hashes); blocks are the core's references.
type blendChunk struct {
	tokens    []int32 // the chunk's full blocks' tokens (a view of the prompt)
	hashes    []prefix.Hash
	blocks    []kvcache.BlockID
	matched   int // blocks found cached: on the device, then restored (restored of them)
	restored  kvtier.Counts
	computed  int // chunk positions [0, computed) hold final K/V
	committed int // leading blocks committed
}

// blendItem is one planned item: a chunk's (chunk >= 0), the prompt's (-1) or CacheBlend's
// measuring pass over the prompt (checkItem), ending at end.
type blendItem struct{ chunk, end int }

// newBlendSeq is the core's state for req's blend (nil without one). root is the request's
// own chain root (never the public root of a shared prefix).
func newBlendSeq(req *Request, root prefix.Hash) *blendSeq {
	if req.Blend == nil {
		return nil
	}
	return &blendSeq{spec: req.Blend.Normalize(), root: blend.ChunkRoot(root)}
}

// checkBlend validates req.Blend for this engine (Generate): the marks against the prompt,
// then what the engine can blend.
func (e *Engine) checkBlend(req *Request) error {
	if req.Blend == nil {
		return nil
	}
	mc := e.model.Config()
	// The bound on chunks is the server's (--blend-max-chunks, checked before the engine).
	if err := req.Blend.Validate(len(req.Prompt), blend.Limits{ContextLength: mc.ContextLength}); err != nil {
		return fmt.Errorf("%w: %w", ErrBlend, err)
	}
	switch {
	case mc.Hybrid() || mc.Kimi():
		return fmt.Errorf("%w on %s: %w; blend only attention models (llama, qwen2, qwen3)", ErrBlend, mc.Arch, ErrHybrid)
	case e.arena.Q8() != nil:
		return fmt.Errorf("%w: the K/V cache is q8_0, whose rows are stored Hadamard-rotated; blending needs an f32 or f16 cache (--kv-type)", ErrBlend)
	case !e.cfg.PrefixCache:
		return fmt.Errorf("%w: the prefix cache is off (--prefix-cache=false), and chunks are cached in it", ErrBlend)
	case req.Blend.Policy == blend.CacheBlend && mc.Layers < 2:
		return fmt.Errorf("%w: policy %q measures deviation at layer 1 or deeper, and the model has %d layer", ErrBlend, blend.PolicyCacheBlendName, mc.Layers)
	}
	return nil
}

// planBlend plans s's prefill for this step when s blends, spending at most budget tokens,
// and returns the budget left; handled false leaves s to the usual prefill (it is not
// blended).
func (c *Core) planBlend(s *seq, plan *Plan, budget int) (left int, handled bool) {
	b := s.blend
	if b == nil || b.declined {
		return budget, false
	}
	if !b.planned && !c.startBlend(s, plan) {
		return budget, false
	}
	b.inflight = b.inflight[:0]
	// Phase A: the chunks' missing blocks, at chunk positions, over their own tables.
	waiting := false
	for i := range b.chunks {
		ch := &b.chunks[i]
		if ch.computed >= len(ch.tokens) {
			continue
		}
		waiting = true
		if budget == 0 {
			break
		}
		n := min(len(ch.tokens)-ch.computed, budget)
		plan.Items = append(plan.Items, PlanItem{Seq: s.id, Tokens: ch.tokens[ch.computed : ch.computed+n], Pos: ch.computed, Blocks: ch.blocks})
		b.inflight = append(b.inflight, blendItem{chunk: i, end: ch.computed + n})
		budget -= n
	}
	if waiting {
		return budget, true
	}
	if b.cb != nil {
		return c.planCacheBlend(s, plan, budget), true
	}
	// Phase B: the copies once, then the recompute ranges in position order.
	if !b.copied {
		for _, cp := range b.sel.Copies {
			if n := cp.N - cp.Recompute; n > 0 {
				// The recomputed head is overwritten before anything reads it: not copied.
				plan.Blends = append(plan.Blends, BlendCopy{Src: b.chunks[cp.Chunk].blocks, Dst: s.blocks,
					SrcPos: cp.Src + cp.Recompute, DstPos: cp.Dst + cp.Recompute, N: n})
			}
		}
		b.copied = true
	}
	for _, r := range b.sel.Recompute {
		if budget == 0 {
			break
		}
		lo := max(r.Lo, b.next)
		if lo >= r.Hi {
			continue
		}
		end := lo + min(r.Hi-lo, budget)
		plan.Items = append(plan.Items, PlanItem{Seq: s.id, Tokens: s.tokens[lo:end], Pos: lo, Blocks: s.blocks, WantLogits: end == s.prompt})
		b.inflight = append(b.inflight, blendItem{chunk: -1, end: end})
		b.next = end
		budget -= end - lo
	}
	return budget, true
}

// startBlend looks s's chunks up under the chunk root (every one whose full blocks reach past
// s's exact prefix, s.computed): on the device, then in what their prefetches found in the
// lower tiers (ChunkPrefetched), whose bytes it queues in plan.Restores and commits. It
// allocates the blocks of the rest, selects what to copy and recompute past s's exact
// prefix, and cuts s's chain hashes where its K/V stops being exact. It reports false,
// holding nothing, when the pool cannot hold the chunks: s is then computed as usual.
func (c *Core) startBlend(s *seq, plan *Plan) bool {
	b, B := s.blend, c.cfg.BlockSize
	from := s.computed
	b.chunks = b.chunks[:0]
	places := make([]blend.Placement, len(b.spec.Chunks))
	need := 0
	for i, ck := range b.spec.Chunks {
		places[i].Chunk = ck
		full := ck.Len() / B
		// A chunk the exact prefix reaches into is looked up (and cached) whole, its K/V
		// being at chunk positions; SelectEPIC copies only its part past from.
		if ck.Start+full*B <= from || full == 0 {
			b.chunks = append(b.chunks, blendChunk{})
			continue
		}
		toks := s.tokens[ck.Start : ck.Start+full*B : ck.Start+full*B]
		hashes := prefix.AppendBlockHashes(nil, b.root, toks, B)
		// One token more lifts match's cap of ⌊(len−1)/B⌋ blocks (a prompt's last token is
		// always computed; a chunk's is not): the chunk's last block is reusable too.
		matched, _, _ := c.cache.match(b.root, hashes, append(toks, 0))
		b.chunks = append(b.chunks, blendChunk{tokens: toks, hashes: hashes, blocks: slices.Grow(matched, full-len(matched)),
			matched: len(matched), computed: len(matched) * B, committed: len(matched)})
		need += full - len(matched)
		places[i].Cached = full * B
	}
	fresh, err := c.cache.allocate(need)
	if err != nil {
		c.releaseBlendChunks(b)
		b.declined = true
		b.fetched = nil
		if !b.counted {
			s.usage.Blend = &BlendUsage{Declined: BlendDeclinedPool}
		}
		return false
	}
	for i := range b.chunks {
		ch := &b.chunks[i]
		k := len(ch.tokens)/B - len(ch.blocks)
		ch.blocks = append(ch.blocks, fresh[:k]...)
		fresh = fresh[k:]
		c.restoreChunk(s, i, plan)
	}
	b.fetched = nil // used, or superseded by the device
	if b.spec.Policy == blend.CacheBlend {
		c.startCacheBlend(s, places) // SelectEPIC at 0, then the pass that picks
	} else {
		b.sel = blend.SelectEPIC(from, s.prompt, places, b.spec.Recompute)
	}
	b.next, b.planned, b.copied = from, true, false
	if exact := max(b.sel.Exact/B, s.committed); exact < len(s.hashes) {
		// Past the first blended position no block is a prefix's: keep them out of the
		// chain (and out of other requests' dedup waits).
		s.hashes = s.hashes[:exact]
		c.cache.abort(s.id)
		if exact > s.committed {
			c.cache.markPending(s.id, s.hashes[s.committed:])
		}
	}
	if !b.counted {
		b.counted = true
		u := &BlendUsage{BlendedTokens: b.sel.Blended, RecomputedTokens: b.sel.Recomputed, Chunks: make([]BlendChunk, len(b.chunks))}
		for i, ch := range b.chunks {
			u.Chunks[i] = BlendChunk{Start: b.spec.Chunks[i].Start, End: b.spec.Chunks[i].End, Hit: ch.matched * B, Restored: ch.restored}
		}
		for _, cp := range b.sel.Copies {
			u.Chunks[cp.Chunk].Blended = cp.N - cp.Recompute
		}
		s.usage.Blend = u
		s.usage.ComputedTokens -= b.sel.Blended
		c.stats.computedTokens -= uint64(b.sel.Blended) // counted computed at admission
		c.stats.blendedTokens += uint64(b.sel.Blended)
	}
	return true
}

// restoreChunk takes into chunk i's fresh blocks (those past its device match) the blocks
// its prefetch found in the lower tiers, contiguous from the match: their bytes go into
// plan.Restores, to be copied before the step's forward pass, and they are committed under
// the chunk root at once, so the chunk counts them as found (matched) and computes none of
// them. The prefetch's discarded blocks are counted as s's.
func (c *Core) restoreChunk(s *seq, i int, plan *Plan) {
	b, B := s.blend, c.cfg.BlockSize
	ch := &b.chunks[i]
	p := b.fetched[i]
	if p == nil || len(ch.tokens) == 0 {
		return
	}
	for reason, n := range p.Discarded {
		c.discard(s, reason, n)
	}
	m := ch.matched
	if m < p.First || m >= p.First+len(p.Blocks) {
		return // the device holds all it found (or it starts past a gap)
	}
	for _, rb := range p.Blocks[m-p.First:] {
		if ch.matched == len(ch.blocks) || rb.Data == nil {
			break // a plain prefetch restores nothing in place
		}
		blk := ch.blocks[ch.matched]
		plan.Restores = append(plan.Restores, Restore{Block: int32(blk), Data: rb.Data})
		if c.restored == nil {
			c.restored = map[kvcache.BlockID]struct{}{}
		}
		c.restored[blk] = struct{}{} // its Stored event is tagged Restored: not written down again
		c.stats.restored[rb.Tier]++
		ch.restored[rb.Tier] += uint64(B)
		ch.matched++
	}
	ch.computed = ch.matched * B
	c.commitChunk(b, ch)
}

// ChunkFetch is one marked chunk's lookup in the lower tiers (Core.ChunkFetches): blocks
// First.. of its full blocks, under the chunks' chain root, as a prefetch of a prompt Tokens
// whose block hashes are Hashes (Restorer.Prefetch's arguments).
type ChunkFetch struct {
	Chunk  int // its index in the request's chunks, in prompt order
	Root   prefix.Hash
	Hashes []prefix.Hash
	Tokens []int32
	First  int // blocks the working pool holds already
}

// ChunkFetches lists queued request id's chunks whose full blocks the working pool lacks,
// some or all, and whose blocks reach past the prefix the pool holds for the prompt itself
// (those the lower tiers may hold), and marks the request waiting for as many answers
// (ChunkPrefetched). It takes no references. Nil for a request that does not blend, or
// whose blend this engine refuses (checkBlend ran first).
func (c *Core) ChunkFetches(id uint64) []ChunkFetch {
	s, ok := c.seqs[id]
	if !ok || s.blend == nil || s.admitted || !c.cfg.PrefixCache {
		return nil
	}
	b, B := s.blend, c.cfg.BlockSize
	have, _ := c.PeekQueued(id)
	var out []ChunkFetch
	for i, ck := range b.spec.Chunks {
		full := ck.Len() / B
		if full == 0 || ck.Start+full*B <= have*B {
			continue
		}
		toks := s.req.Prompt[ck.Start : ck.Start+full*B : ck.Start+full*B]
		hashes := prefix.AppendBlockHashes(nil, b.root, toks, B)
		blocks, _, _ := c.cache.match(b.root, hashes, append(toks, 0))
		c.cache.release(blocks)
		if len(blocks) < full {
			out = append(out, ChunkFetch{Chunk: i, Root: b.root, Hashes: hashes, Tokens: toks, First: len(blocks)})
		}
	}
	b.fetching += len(out)
	return out
}

// ChunkPrefetched hands request id the answer of chunk's prefetch (ChunkFetches). An answer
// after the request's admission, or after it ended, is dropped.
func (c *Core) ChunkPrefetched(id uint64, chunk int, p Prefetched, now time.Time) {
	s, ok := c.seqs[id]
	if !ok || s.blend == nil || s.blend.fetching == 0 {
		c.stats.prefetchDropped++
		return
	}
	b := s.blend
	b.fetching--
	if s.admitted || s.state != stateWaiting {
		c.stats.prefetchDropped++
		return
	}
	if b.fetched == nil {
		b.fetched = map[int]*Prefetched{}
	}
	b.fetched[chunk] = &p
	if !s.prefetching && b.fetching == 0 && !s.heldSince.IsZero() {
		c.stats.prefetchStall += now.Sub(s.heldSince) // the last answer it was held for
		s.heldSince = time.Time{}
	}
}

// chunksFetching reports whether s, queued, still waits for its chunks' prefetches.
func (s *seq) chunksFetching() bool { return s.blend != nil && s.blend.fetching > 0 }

// advanceBlend pops the blend item it was planned as; skip reports that Advance's usual
// handling does not apply (a chunk's item, or a recompute range before the last).
func (c *Core) advanceBlend(s *seq, it PlanItem) (skip bool) {
	b := s.blend
	if b == nil || len(b.inflight) == 0 {
		return false
	}
	bi := b.inflight[0]
	b.inflight = b.inflight[1:]
	if bi.chunk == checkItem {
		c.advanceCacheBlendCheck(s, bi.end)
		return true
	}
	if bi.chunk >= 0 {
		ch := &b.chunks[bi.chunk]
		ch.computed = bi.end
		c.commitChunk(b, ch)
		return true
	}
	if !it.WantLogits {
		return true
	}
	c.releaseBlendChunks(b) // the prompt is computed: the chunks stay cached, not held
	return false
}

// commitChunk commits ch's newly computed full blocks under the chunk root; a block another
// request committed first replaces ch's copy (the same K/V: position 0, deterministic).
func (c *Core) commitChunk(b *blendSeq, ch *blendChunk) {
	B := c.cfg.BlockSize
	for ; ch.committed < ch.computed/B; ch.committed++ {
		i := ch.committed
		parent := b.root
		if i > 0 {
			parent = ch.hashes[i-1]
		}
		ch.blocks[i] = c.cache.commit(ch.hashes[i], parent, ch.tokens[i*B:(i+1)*B], ch.blocks[i], true, true)
	}
}

// resetBlend undoes s's blend plan for a preemption: its chunk blocks go back (the
// committed ones stay cached) and the blend starts over at readmission.
func (c *Core) resetBlend(s *seq) {
	if b := s.blend; b != nil {
		c.releaseBlendChunks(b)
		b.planned, b.copied, b.inflight = false, false, b.inflight[:0]
	}
}

// releaseBlendChunks drops the core's references on b's chunk blocks, tails first.
func (c *Core) releaseBlendChunks(b *blendSeq) {
	for i := range b.chunks {
		if ch := &b.chunks[i]; len(ch.blocks) > 0 {
			c.cache.release(reverse(ch.blocks))
			ch.blocks = nil
		}
	}
	b.chunks = b.chunks[:0]
}

// applyBlends applies a step's chunk copies (Plan.Blends) to the arena, re-rotating keys.
// Runner goroutine only; the arena is f32 or f16 (checkBlend).
func (e *Engine) applyBlends(cs []BlendCopy) {
	if len(cs) == 0 {
		return
	}
	mc := e.model.Config()
	rope := e.model.RoPE()
	row := mc.KVDim()
	k, v := make([]float32, row), make([]float32, row)
	src := kernels.PagedKV{F32: e.arena.F32(), F16: e.arena.F16(), BlockSize: e.cfg.BlockSize, Layers: mc.KVLayers(), KVHeads: mc.KVHeads, HeadDim: mc.HeadDim}
	dst := src
	for _, cp := range cs {
		src.Table, dst.Table = blockTable(src.Table, cp.Src), blockTable(dst.Table, cp.Dst)
		for j := range cp.N {
			for l := range src.Layers {
				if !kernels.LoadKV(&src, l, cp.SrcPos+j, k, v) {
					panic("engine: blending over a q8_0 cache (checkBlend refuses it)")
				}
				blend.Rerotate(k, mc.KVHeads, mc.HeadDim, cp.DstPos-cp.SrcPos, rope)
				kernels.StoreKV(&dst, l, cp.DstPos+j, k, v)
			}
		}
	}
}

func blockTable(dst []int32, blocks []kvcache.BlockID) []int32 {
	dst = dst[:0]
	for _, b := range blocks {
		dst = append(dst, int32(b))
	}
	return dst
}
