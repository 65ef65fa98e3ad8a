package engine

import (
	"math"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/kvtier"
	"stockpot/internal/miss"
	"stockpot/internal/model"
	"stockpot/internal/prefix"
)

// blockCache is what the scheduler core needs from the prefix cache (prefix.Cache satisfies it
// through a thin adapter). Block ids index the K/V arena.
type blockCache interface {
	// match takes refs on the longest cached run of full blocks of tokens under root (at most
	// ⌊(len−1)/B⌋ blocks) and says how many blocks right after it other requests are computing.
	// hashes are the chain hashes of every full block of tokens (given, returned as they are).
	// It counts no reuse: a match may be a peek or an admission that is retried.
	match(root prefix.Hash, hashes []prefix.Hash, tokens []int32) (blocks []kvcache.BlockID, out []prefix.Hash, pending int)
	// reused counts one reuse on each block (held): the request's first admission used them.
	// The first allow of them are within its max_offload_tokens: offloading them is allowed.
	reused(blocks []kvcache.BlockID, allow int)
	// allocate takes n fresh blocks (ref 1 each), evicting cached ones if it must.
	allocate(n int) ([]kvcache.BlockID, error)
	// appendAllocate is allocate appending to dst (dst as it was on error): a decode step's
	// next block goes into the sequence's table without a slice of its own.
	appendAllocate(dst []kvcache.BlockID, n int) ([]kvcache.BlockID, error)
	// available says how many blocks allocate could hand out now (free plus evictable).
	available() int
	// markPending says owner is computing the blocks with these hashes.
	markPending(owner uint64, hashes []prefix.Hash)
	// commit registers a computed block and returns the block the caller holds from now on:
	// block itself, or, when share is set and another request committed the same block first,
	// that shared block (ref'd for the caller; block is released). Either stays ref'd.
	// offload false: the tiers must not keep it (beyond the request's max_offload_tokens).
	commit(hash, parent prefix.Hash, tokens []int32, block kvcache.BlockID, share, offload bool) kvcache.BlockID
	// abort drops owner's pending marks.
	abort(owner uint64)
	// release drops one ref on each block (tail blocks should be evicted first).
	release(blocks []kvcache.BlockID)
	// ref takes one more reference on a block the caller holds (a pin keeps its blocks so).
	ref(block kvcache.BlockID)
	// holds reports whether block is cached under hash (its commit was not refused).
	holds(hash prefix.Hash, block kvcache.BlockID) bool
	// setOwner tags a cached block with its tenant's owner number and sets that owner's
	// limit in blocks (0: none): eviction prefers owners over their limit (tenant.go).
	setOwner(block kvcache.BlockID, owner uint16, limit int)
	stats() (used, cached int, evictions uint64)
}

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateDone
)

// seq is one request inside the core.
type seq struct {
	id   uint64
	req  *Request
	root prefix.Hash
	// public and mark split the chain after a public prefix (tenant.go): blocks before
	// public are public blocks under root (the public root), block public is hashed with
	// mark (its tenant root's bytes). mark nil: one plain chain from root.
	public int
	mark   []byte
	state  seqState
	tokens []int32 // prompt followed by generated tokens
	prompt int     // prompt length

	// K/V bookkeeping. Invariant: computed <= len(blocks)*B; blocks[i] holds positions
	// [i*B, (i+1)*B); hashes[i] is the chain hash of full block i once known; committed counts
	// the leading blocks registered with the cache.
	blocks    []kvcache.BlockID
	hashes    []prefix.Hash
	committed int
	computed  int // tokens whose K/V is in blocks

	sampler   *sampler
	generated int
	// outTokens holds the Output.Tokens slots of s's next tokens (see slab): one per token,
	// never reused, since the stream's consumer may keep what it was handed.
	outTokens slab[Token]
	usage     Usage
	admitted  bool // usage cache split fixed at first admission
	preempted int
	blend     *blendSeq // chunk blending (blend.go); nil without

	enqueued, started, firstToken, lastToken time.Time
	cancelled                                bool

	// Prefetch from lower tiers (see Restorer). prefetching is true from Add until the result
	// arrives; prefetched holds it until admission uses it.
	prefetching bool
	prefetched  *Prefetched
	heldSince   time.Time // when admission first held s back for its prefetch
	// For PrefetchCost: the prefetch's latest progress, when its plan was first seen and
	// when it last made progress (the plan, or more blocks arrived). See worthWaiting.
	progress              Progress
	plannedAt, progressAt time.Time

	// reserved holds the blocks Reserve took for prompt blocks reservedFirst, reservedFirst+1,
	// ...: uncommitted, s's alone. The Restorer may write them while prefetching is true, so
	// they are reused or released only after. dropReserved: reclaim wants them back while
	// the prefetch runs; they are released, with what was restored in them, when it ends.
	reserved      []kvcache.BlockID
	reservedFirst int
	dropReserved  bool
	lateCounted   bool // counted in prefetchLate (admission passes may repeat)
}

// Delivery is an output for one request, queued by the core for the runner to deliver.
type Delivery struct {
	Seq uint64
	Out Output
}

// Plan is the work of one forward step: for each item, tokens at consecutive positions.
type Plan struct {
	Items    []PlanItem
	Restores []Restore   // copies into blocks to do before the forward pass
	Blends   []BlendCopy // chunk K/V placed into blocks before the forward pass (blend.go)
	// Measures are CacheBlend's deviations to measure after the forward pass
	// (blend_cacheblend.go)
	Measures []BlendMeasure
}

// PlanItem is one sequence's share of a step.
type PlanItem struct {
	Seq        uint64
	Tokens     []int32
	Pos        int
	Blocks     []kvcache.BlockID // the sequence's block table (covers Pos+len(Tokens)-1)
	WantLogits bool
	// Checkpoints, for a hybrid model, are the block ends inside this step, in
	// (Pos, Pos+len(Tokens)], where the recurrent state is to be kept (see state.go): the
	// runner sets each State (at position (Block+1)·BlockSize), Forward fills it, and
	// Advance keeps it with the block's commit.
	Checkpoints []Checkpoint
	// Positions, when non-nil, are the tokens' positions (ascending from Pos, not
	// consecutive: CacheBlend's recompute, blend_cacheblend.go); nil: Pos, Pos+1, ...
	Positions []int
	// BlendCheck marks CacheBlend's measuring pass: the runner stores the tokens' K/V
	// through the check layer only (model.ForwardKV), and no logits.
	BlendCheck bool
}

// End is the position after the item's last token.
func (it PlanItem) End() int {
	if it.Positions != nil {
		return it.Positions[len(it.Positions)-1] + 1
	}
	return it.Pos + len(it.Tokens)
}

// Checkpoint is the recurrent state at the end of a sequence's block Block.
type Checkpoint struct {
	Block int
	State *model.State
}

// CoreConfig tunes the scheduler.
type CoreConfig struct {
	BlockSize      int
	ContextLength  int
	MaxBatchTokens int     // tokens per forward step (decode tokens + prefill chunk)
	MaxRunning     int     // sequences decoding at once
	PrefixCache    bool    // reuse cached blocks
	Dedup          bool    // wait for blocks another request is prefilling instead of computing them
	EOG            []int32 // the model's end-of-generation tokens; stop unless Request.IgnoreEOS

	Prefetch        PrefetchPolicy
	PrefetchMaxWait time.Duration // for PrefetchTimeout

	PinBudget int // the most blocks pins may hold (see pins.go); 0 = no pins
	// PinOwners divides the pin budget among owners 1..len (tenants, Request.Owner) and the
	// operator (0): PinOwners[i] caps owner i+1's pinned blocks (0: no cap, < 0: none), and
	// each owner has a share no other can take (pins.go). nil: one budget for all.
	PinOwners []int

	// CheckpointEvery, for a hybrid model (Core.states set), keeps the recurrent state at
	// the end of every CheckpointEvery-th block of a chain (blocks b with (b+1) % N == 0):
	// the granularity a prefix can be resumed at. 0 is 1.
	CheckpointEvery int
	// StateBytes is the size of one checkpoint (Usage.StateBytes of a request that resumes).
	StateBytes int
	// BlockBytes is one block's K/V size, for tenants' device byte quotas
	// (Request.DeviceQuotaBytes); 0: quotas off.
	BlockBytes int64
}

// Core is the pure scheduler: no goroutines, no I/O, no clock. The runner feeds it requests,
// cancellations and the time, asks for a Plan, runs it, and hands back the logits.
type Core struct {
	cfg     CoreConfig
	cache   blockCache
	seqs    map[uint64]*seq
	waiting []*seq // FCFS
	running []*seq // admission order
	// outbox queues outputs until Ready hands them out; readied is what the last Ready
	// returned, which the caller reads until its next Ready call: then it becomes the
	// outbox, so that a step's deliveries allocate nothing.
	outbox, readied []Delivery
	stats           coreStats
	// plan is the Plan Schedule returns, reused: valid until the next Schedule.
	plan Plan

	pendingRestores []Restore // set by admit, handed out by Schedule
	// restored marks the blocks admit committed from a restore since the last
	// ClearRestored: their Stored events are tagged Restored (Engine.flushEvents).
	restored map[kvcache.BlockID]struct{}
	pins     *pinTable
	// states holds a hybrid model's block checkpoints (state.go); nil for other models.
	// With it, a prefix is reused only up to the deepest block end it has a checkpoint of.
	states stateIndex

	// orphans holds the reservations of requests that ended while their prefetch was in
	// flight, by request id: released when its result arrives (Prefetched), never before,
	// since the Restorer may write them until then. reservedBlocks counts the blocks in
	// every seq's reserved and in orphans.
	orphans        map[uint64][]kvcache.BlockID
	reservedBlocks int

	// Tenants (tenant.go): the public set, blocks under publicRoot an operator marked
	// public, and the tenant that committed each block first (the cross-tenant audit).
	publicRoot prefix.Hash
	public     map[prefix.Hash]struct{}
	owners     map[kvcache.BlockID]string
}

// Ready returns the outputs queued since the last call, in order. The slice is valid until
// the next call (the Outputs in it are values: they may be kept).
func (c *Core) Ready() []Delivery {
	out := c.outbox
	clear(c.readied) // the caller is done with the last batch: keep no Usage alive through it
	c.outbox, c.readied = c.readied[:0], out
	return out
}

type coreStats struct {
	dedupWaits    uint64
	preemptions   uint64
	decodeWaits   uint64        // decode steps skipped waiting for in-flight prefetches' reservations
	pinsShed      uint64        // pinned blocks unpinned for a request that could not run otherwise
	prefetchStall time.Duration // time admissions were held back waiting for prefetches
	restored      kvtier.Counts // blocks restored, by tier
	// The evidence counters below are counted where the engine decides (admit, finish,
	// Prefetched), not summed from the Usage it reports, so that the two can be compared.
	finished, cancelled uint64
	hits                [HitClasses]uint64 // requests by hit class, at first admission (cold when never admitted)
	promptTokens        uint64
	sourceTokens        kvtier.Counts // prompt tokens reused, by tier (device: matched; lower: restored)
	computedTokens      uint64
	blendedTokens       uint64 // prompt tokens that kept a cached chunk's K/V (blend.go's startBlend)
	discardedTokens     uint64
	prefetchLate        uint64 // admissions that went ahead without their prefetch's answer
	prefetchDropped     uint64 // prefetch answers that came after admission or after the request ended
	stateDiscarded      uint64 // blocks matched or restored past the last checkpoint (incomplete_state)
}

// CoreStats is a snapshot of the scheduler's counters (all cumulative except Running and
// Waiting).
type CoreStats struct {
	Running, Waiting int
	DedupWaits       uint64        // admissions passed over for blocks another request computes
	Preemptions      uint64        // sequences preempted to free memory for a decode
	DecodeWaits      uint64        // decode steps a request skipped for blocks in-flight prefetches hold
	PrefetchStall    time.Duration // time admissions were held back waiting for prefetches
	Restored         kvtier.Counts // blocks restored from the lower tiers, indexed by Tier
	ReservedBlocks   int           // blocks reserved for prefetches now (Reserve), not yet used or released
	PinsShed         uint64        // pinned blocks unpinned early for a request that could not run otherwise
	// StateDiscarded counts blocks (device hits and restored ones) a hybrid model's
	// requests found past their last complete state checkpoint: discarded as
	// incomplete_state and recomputed.
	StateDiscarded uint64
	// QueuedPrefillTokens is the prompt tokens admitted or queued requests have yet to
	// prefill: each waiting request's prompt (its cached prefix is found only at admission)
	// and each running one's uncomputed part. The replica's load signal (kvevents.Load).
	QueuedPrefillTokens int
	Evidence            Evidence
}

// Evidence is the engine's own accounting of the prompts it served: counted where each
// decision is taken, so it is a check on the Usage objects (which it must equal, summed over
// every request the engine finished, cancelled ones included).
type Evidence struct {
	Finished, Cancelled uint64             // requests ended; Cancelled is part of Finished
	Hits                [HitClasses]uint64 // requests by hit class (HitCold, HitPartial, HitWarm)
	PromptTokens        uint64             // prompt tokens of requests admitted or ended unadmitted
	SourceTokens        kvtier.Counts      // prompt tokens reused, by tier
	ComputedTokens      uint64             // prompt tokens prefilled
	BlendedTokens       uint64             // prompt tokens that kept a cached chunk's K/V (chunk blending)
	DiscardedTokens     uint64             // found in a lower tier but not used
	PrefetchLate        uint64             // admissions that went ahead before their prefetch answered
	PrefetchDropped     uint64             // prefetch answers that came too late to be used
}

// Stats returns the core's counters. The wrapper reads them through here, never the fields.
func (c *Core) Stats() CoreStats {
	return CoreStats{
		Running: len(c.running), Waiting: len(c.waiting),
		DedupWaits: c.stats.dedupWaits, Preemptions: c.stats.preemptions, DecodeWaits: c.stats.decodeWaits,
		PrefetchStall: c.stats.prefetchStall, Restored: c.stats.restored,
		ReservedBlocks: c.reservedBlocks, PinsShed: c.stats.pinsShed,
		StateDiscarded:      c.stats.stateDiscarded,
		QueuedPrefillTokens: c.queuedPrefill(),
		Evidence: Evidence{
			Finished: c.stats.finished, Cancelled: c.stats.cancelled, Hits: c.stats.hits,
			PromptTokens: c.stats.promptTokens, SourceTokens: c.stats.sourceTokens,
			ComputedTokens: c.stats.computedTokens, BlendedTokens: c.stats.blendedTokens, DiscardedTokens: c.stats.discardedTokens,
			PrefetchLate: c.stats.prefetchLate, PrefetchDropped: c.stats.prefetchDropped,
		},
	}
}

// queuedPrefill is CoreStats.QueuedPrefillTokens.
func (c *Core) queuedPrefill() int {
	n := 0
	for _, s := range c.waiting {
		n += max(s.prompt-s.computed, 0)
	}
	for _, s := range c.running {
		n += max(s.prompt-s.computed, 0)
	}
	return n
}

func newCore(cfg CoreConfig, cache blockCache) *Core {
	return &Core{cfg: cfg, cache: cache, seqs: map[uint64]*seq{}, pins: newPinTable(cfg.PinBudget, cfg.BlockSize, cfg.PinOwners),
		orphans: map[uint64][]kvcache.BlockID{}}
}

// Add queues a request. Validation of limits happens before (Engine.Generate). It returns the
// root of the request's chain: root, or the public root when its prompt starts with a public
// prefix it may read (tenant.go).
func (c *Core) Add(id uint64, req *Request, root prefix.Hash, seed uint64, now time.Time) prefix.Hash {
	// tokens has room for every token the request may generate, so that decoding never
	// regrows it (its length is bounded by the context length and max_tokens).
	gen := max(min(req.MaxTokens, c.cfg.ContextLength-len(req.Prompt)), 1)
	s := &seq{
		id: id, req: req, prompt: len(req.Prompt),
		tokens:  append(make([]int32, 0, len(req.Prompt)+gen), req.Prompt...),
		sampler: newSampler(req.Sampling, seed),
	}
	s.sampler.room = gen
	if req.FirstToken != nil {
		s.sampler.forced = *req.FirstToken
	}
	s.root, s.public, s.mark = c.splitChain(req, root)
	s.blend = newBlendSeq(req, root)
	s.enqueued = now
	s.usage.PromptTokens = len(req.Prompt)
	if c.states != nil {
		s.usage.ReuseUnitBlocks = max(c.cfg.CheckpointEvery, 1) // resumed only at a checkpoint
	}
	c.seqs[id] = s
	c.waiting = append(c.waiting, s)
	return s.root
}

// Prefetching marks a queued request as waiting for a prefetch (see CoreConfig.Prefetch).
func (c *Core) Prefetching(id uint64) {
	if s, ok := c.seqs[id]; ok && s.state == stateWaiting {
		s.prefetching = true
	}
}

// Reserve takes n fresh blocks for request id's prompt blocks first..first+n-1, for an
// IntoRestorer to verify K/V into while the request waits, and marks the request prefetching
// (as Prefetching). It returns nil and takes nothing when the request is not a queued one
// never admitted, or when all reservations would then hold more than half of the blocks no
// running request holds (free, evictable, or reserved): a queue of long prompts must neither
// push the cached prefixes out of the pool long before it is admitted nor leave the running
// requests no room to decode. The caller then prefetches without a reservation.
//
// The blocks are the request's alone and outside the prefix index (allocate hands out
// uncommitted blocks, and only admission commits them). Its first admission uses them for
// those positions: in place where the prefetch restored them, as fresh blocks to compute
// into otherwise (a block that failed verification holds garbage, like any fresh block).
// They are released instead when the request is admitted before its prefetch ends, when it
// ends (cancel), or when an earlier request's admission needs the memory (reclaim), and in
// every case only once the prefetch has ended (Prefetched): the Restorer may write them
// until then.
func (c *Core) Reserve(id uint64, first, n int) []kvcache.BlockID {
	s, ok := c.seqs[id]
	if !ok || s.state != stateWaiting || s.admitted || s.prefetching || len(s.reserved) > 0 || n <= 0 ||
		2*(c.reservedBlocks+n) > c.cache.available()+c.reservedBlocks {
		return nil
	}
	ids, err := c.cache.allocate(n)
	if err != nil {
		return nil
	}
	s.reserved, s.reservedFirst = ids, first
	s.prefetching = true
	c.reservedBlocks += n
	return ids
}

// releaseReserved gives reserved blocks back to the pool.
//
// REQUIRES: their prefetch has ended (nothing writes them any more).
func (c *Core) releaseReserved(ids []kvcache.BlockID) {
	c.cache.release(ids)
	c.reservedBlocks -= len(ids)
}

// withoutInPlace cuts a run of restored blocks before its first InPlace block: what is left
// does not depend on a reservation (blocks stay contiguous).
func withoutInPlace(run []RestoredBlock) []RestoredBlock {
	for i, b := range run {
		if b.InPlace {
			return run[:i]
		}
	}
	return run
}

// Prefetched hands a request its prefetch result. The prefetch has ended: a reservation
// nobody will use (the request ended, was admitted without it, or reclaim asked for it) is
// released here.
func (c *Core) Prefetched(id uint64, p Prefetched, now time.Time) {
	if ids, ok := c.orphans[id]; ok {
		delete(c.orphans, id)
		c.releaseReserved(ids)
	}
	s, ok := c.seqs[id]
	if !ok {
		c.stats.prefetchDropped++ // the request ended first
		return
	}
	if s.admitted || s.state != stateWaiting {
		c.stats.prefetchDropped++ // admitted without it (timeout, best-effort)
	}
	s.prefetching = false
	if !s.heldSince.IsZero() {
		c.stats.prefetchStall += now.Sub(s.heldSince)
		s.heldSince = time.Time{}
	}
	keep := s.state == stateWaiting && !s.admitted
	if len(s.reserved) > 0 && (!keep || s.dropReserved) {
		c.releaseReserved(s.reserved)
		s.reserved, s.dropReserved = nil, false
	}
	if keep {
		if len(s.reserved) == 0 {
			p.Blocks = withoutInPlace(p.Blocks)
		}
		s.prefetched = &p
		s.usage.RestoreMs = ms(p.Elapsed)
	}
}

// PeekDevice returns how many leading full blocks of tokens the working pool holds now (what
// a prefetch need not fetch). It takes no references.
func (c *Core) PeekDevice(root prefix.Hash, tokens []int32) (int, []prefix.Hash) {
	if !c.cfg.PrefixCache {
		return 0, nil
	}
	blocks, hashes, _ := c.cache.match(root, prefix.BlockHashes(root, tokens, c.cfg.BlockSize), tokens)
	c.cache.release(blocks)
	return len(blocks), hashes
}

// PeekQueued is PeekDevice for queued request id's prompt, in its own chain (which may
// continue a public prefix). It returns 0, nil for an unknown request.
func (c *Core) PeekQueued(id uint64) (int, []prefix.Hash) {
	s, ok := c.seqs[id]
	if !ok || !c.cfg.PrefixCache {
		return 0, nil
	}
	blocks, hashes, _ := c.cache.match(s.root, c.seqHashes(s, s.req.Prompt), s.req.Prompt)
	c.cache.release(blocks)
	return len(blocks), hashes
}

// Cancel ends a request: its blocks are released and a cancelled output is queued.
func (c *Core) Cancel(id uint64, now time.Time) {
	s, ok := c.seqs[id]
	if !ok || s.state == stateDone {
		return
	}
	s.cancelled = true
	c.finish(s, FinishCancelled, now)
}

// Idle reports whether there is nothing to schedule.
func (c *Core) Idle() bool { return len(c.waiting) == 0 && len(c.running) == 0 }

// admit tries to start waiting sequences, FCFS, while blocks and slots allow. A sequence
// waiting on another's in-flight blocks is passed over without blocking those behind it.
//
// Each waiting sequence goes through the stages below, in this order; a stage that says
// "not now" keeps it waiting:
//
//   - heldForPrefetch: is it still waiting for its prefetch (PrefetchWait, PrefetchTimeout)?
//   - endPrefetchHold: admitted without its prefetch, count it late and end its stall.
//   - matchDevice: the device blocks it can reuse; none if it waits on another's (Dedup).
//   - cutToCheckpoint: hybrid models reuse only up to the deepest block with a checkpoint.
//   - allocateBlocks: the rest of its prompt's blocks, or it blocks the queue (FCFS).
//   - installBlocks: its block table, restored bytes queued, pins, commits, state resumed.
//   - recordFirstAdmission: on its first admission only, the usage and the evidence.
func (c *Core) admit(now time.Time) {
	kept := c.waiting[:0]
	blocked := false
	for _, s := range c.waiting {
		if blocked || len(c.running) >= c.cfg.MaxRunning || c.heldForPrefetch(s, now) {
			kept = append(kept, s)
			continue
		}
		c.endPrefetchHold(s, now)
		matched, hashes, ok := c.matchDevice(s)
		if !ok {
			kept = append(kept, s)
			continue
		}
		r := c.cutToCheckpoint(admission{matched: matched, hashes: hashes, restore: c.restorable(s, len(matched))})
		rest, ok := c.allocateBlocks(s, len(r.matched))
		if !ok {
			c.cache.release(r.matched)
			kept = append(kept, s)
			blocked = true // FCFS: nobody overtakes a request waiting for memory
			continue
		}
		c.installBlocks(s, r, rest, now)
		if !s.admitted {
			c.recordFirstAdmission(s, r, now)
		}
		s.prefetched = nil
		s.state = stateRunning
		c.running = append(c.running, s)
	}
	c.waiting = kept
}

// admission is what admit found a sequence can reuse.
type admission struct {
	matched     []kvcache.BlockID // device blocks matched, one cache reference each
	hashes      []prefix.Hash     // the chain hashes of s's full prompt blocks
	restore     []RestoredBlock   // restored blocks, following matched
	unresumable int               // blocks found past the last checkpoint (hybrid models)
}

// reused is the number of blocks the sequence starts with: matched, then restored.
func (a admission) reused() int { return len(a.matched) + len(a.restore) }

// heldForPrefetch reports whether s stays waiting for its prefetch: always under
// PrefetchWait, up to PrefetchMaxWait under PrefetchTimeout, while it is worth it under
// PrefetchCost (worthWaiting). Its hold starts at the first admission that holds it.
//
// A blended request's chunk prefetches (ChunkFetches) hold it the same way, except under
// PrefetchCost, which has no progress of theirs to weigh: they hold it up to
// PrefetchMaxWait, as PrefetchTimeout does (the Restorer's cost model has already cut what
// is slower to read than to recompute).
func (c *Core) heldForPrefetch(s *seq, now time.Time) bool {
	if s.admitted || !s.prefetching && !s.chunksFetching() {
		return false
	}
	var wait bool
	switch c.cfg.Prefetch {
	case PrefetchWait:
		wait = true
	case PrefetchTimeout:
		wait = now.Sub(s.enqueued) < c.cfg.PrefetchMaxWait
	case PrefetchCost:
		wait = s.prefetching && c.worthWaiting(s, now) ||
			s.chunksFetching() && now.Sub(s.enqueued) < c.cfg.PrefetchMaxWait
	}
	if !wait {
		return false
	}
	if s.heldSince.IsZero() {
		s.heldSince = now
	}
	return true
}

// PrefetchProgressed hands the core request id's prefetch progress (ProgressRestorer, read
// by the runner at each step) as of now. Only PrefetchCost reads it.
func (c *Core) PrefetchProgressed(id uint64, p Progress, now time.Time) {
	s, ok := c.seqs[id]
	if !ok || !s.prefetching || s.admitted || !p.Planned {
		return
	}
	if !s.progress.Planned {
		s.plannedAt, s.progressAt = now, now
	} else if p.Arrived > s.progress.Arrived {
		s.progressAt = now
	}
	s.progress = p
}

// worthWaiting is PrefetchCost's rule: s waits for its prefetch while the restore still to
// come is estimated to take less than computing what the prefetch brings, by the cost
// model's own estimates (Progress), and while it makes progress:
//
//   - No plan yet (the tiers are being looked up, or the Restorer reports none), or a plan
//     of nothing: wait up to PrefetchMaxWait from the enqueue, as PrefetchTimeout does (the
//     answer of a plan of nothing follows at once, with its discards).
//   - Every planned block arrived: wait. What is left is local (assembling the result,
//     decoding a hybrid's checkpoints), and the Restorer always answers.
//   - No block arrived for stallBound: stalled, give up.
//   - Otherwise wait while remainingRestore < Recompute. Giving up now computes every
//     planned block (a prefetch given up on is not used, not even the blocks that arrived);
//     waiting costs what is left of the restore.
func (c *Core) worthWaiting(s *seq, now time.Time) bool {
	p := s.progress
	switch {
	case !p.Planned || p.Blocks <= 0:
		return now.Sub(s.enqueued) < c.cfg.PrefetchMaxWait
	case p.Arrived >= p.Blocks:
		return true
	case now.Sub(s.progressAt) >= stallBound(p, c.cfg.PrefetchMaxWait):
		return false
	}
	return remainingRestore(p, now.Sub(s.plannedAt)) < p.Recompute
}

// remainingRestore estimates what is left of a restore elapsed after its plan. Within the
// model's estimate (elapsed < Restore), what is left of that estimate: early in a restore
// the observed pace misleads, since several reads in flight deliver their first blocks
// together, late. Past it, the observed pace: elapsed per block arrived, for the blocks still
// to come. With none arrived there is no pace: 0, and stallBound decides.
func remainingRestore(p Progress, elapsed time.Duration) time.Duration {
	if elapsed < p.Restore {
		return p.Restore - elapsed
	}
	if p.Arrived <= 0 {
		return 0
	}
	rem := float64(elapsed) * float64(p.Blocks-p.Arrived) / float64(p.Arrived)
	return time.Duration(min(rem, math.MaxInt64/2))
}

// stallBound is how long a restore may go without a block arriving before PrefetchCost gives
// up on it: as long as the whole restore was estimated to take, at least floor
// (PrefetchMaxWait: one slow tier call, the remote tier's 250 ms call timeout among them),
// and at most the recompute it would save. Waiting on nothing for longer than the
// alternative takes is never worth it, and giving up then costs at most twice the best
// choice in hindsight (the ski-rental bound).
func stallBound(p Progress, floor time.Duration) time.Duration {
	return min(max(p.Restore, floor), p.Recompute)
}

// endPrefetchHold counts, once, a prefetch still running when s is admitted as late, and
// ends the stall of a sequence held for its prefetch until now.
func (c *Core) endPrefetchHold(s *seq, now time.Time) {
	if (s.prefetching || s.chunksFetching()) && !s.admitted && !s.lateCounted {
		s.lateCounted = true
		c.stats.prefetchLate++
	}
	if !s.heldSince.IsZero() {
		// Held for its prefetch until now, admitted without it (timeout or best-effort):
		// the stall ends here, not when the late result arrives.
		c.stats.prefetchStall += now.Sub(s.heldSince)
		s.heldSince = time.Time{}
	}
}

// matchDevice returns the blocks of s's prompt found on the device, within
// MaxReuseTokens, and the hashes of its full blocks. ok is false when s must wait for
// blocks another request is computing (Dedup): then nothing is held and a dedup wait is
// counted. Without the prefix cache it matches nothing.
func (c *Core) matchDevice(s *seq) (matched []kvcache.BlockID, hashes []prefix.Hash, ok bool) {
	if !c.cfg.PrefixCache {
		return nil, nil, true
	}
	B := c.cfg.BlockSize
	// With room for the hashes of every block s may fill: Advance appends them.
	hashes = make([]prefix.Hash, 0, cap(s.tokens)/B)
	matched, hashes, pending := c.cache.match(s.root, c.appendSeqHashes(hashes, s, s.tokens), s.tokens)
	if n := s.reuseCap(B); n >= 0 && len(matched) >= n {
		// MaxReuseTokens: computed past the cap as a miss, never waited for.
		c.cache.release(reverse(matched[n:]))
		matched, pending = matched[:n], 0
	}
	if pending > 0 && c.cfg.Dedup {
		c.cache.release(matched)
		c.stats.dedupWaits++
		return nil, nil, false
	}
	return matched, hashes, true
}

// cutToCheckpoint cuts a hybrid model's reuse, device match and restored blocks alike, at
// the deepest block end it has a checkpoint of (resumable), releasing the matched blocks
// past it and counting every cut block in unresumable. Other models reuse all of it.
func (c *Core) cutToCheckpoint(a admission) admission {
	if c.states == nil {
		return a
	}
	keep := c.resumable(a.hashes, len(a.matched), a.restore)
	a.unresumable = a.reused() - keep
	if keep < len(a.matched) {
		c.cache.release(reverse(a.matched[keep:]))
		a.matched, a.restore = a.matched[:keep], nil
	} else {
		a.restore = a.restore[:keep-len(a.matched)]
	}
	return a
}

// allocateBlocks takes the blocks of s's prompt past its matched ones, reclaiming
// reservations and then, with nothing running, shedding pins to make room. ok is false
// when they cannot be had.
func (c *Core) allocateBlocks(s *seq, matched int) (rest []kvcache.BlockID, ok bool) {
	total := kvcache.BlocksForTokens(len(s.tokens), c.cfg.BlockSize)
	rest, err := c.takeBlocks(s, matched, total)
	if err != nil && c.reclaim(s) {
		rest, err = c.takeBlocks(s, matched, total)
	}
	for err != nil && len(c.running) == 0 && c.shedPins() {
		rest, err = c.takeBlocks(s, matched, total)
	}
	return rest, err == nil
}

// installBlocks gives s its block table (matched, restored, then rest), queues the bytes
// of restored blocks not in place, refreshes and adopts pins, commits the full blocks,
// resumes a hybrid model's state from the last reused block, and marks the blocks s will
// compute as pending for dedup.
func (c *Core) installBlocks(s *seq, a admission, rest []kvcache.BlockID, now time.Time) {
	B := c.cfg.BlockSize
	matched, restore := a.matched, a.restore
	if s.blocks == nil {
		// Room for every block the request may fill, so that decoding never regrows it.
		s.blocks = make([]kvcache.BlockID, 0, kvcache.BlocksForTokens(cap(s.tokens), B))
	}
	s.blocks = append(append(s.blocks[:0], matched...), rest...)
	s.hashes = a.hashes
	// Restored blocks follow the device match: copy their bytes in before the forward pass
	// (unless they are in place already, in their reserved blocks: takeBlocks put those at
	// their positions) and register them, so they are shared like any computed block.
	for i, rb := range restore {
		bi := len(matched) + i
		if !rb.InPlace {
			c.pendingRestores = append(c.pendingRestores, Restore{Block: int32(s.blocks[bi]), Data: rb.Data})
		}
		if c.restored == nil {
			c.restored = map[kvcache.BlockID]struct{}{}
		}
		c.restored[s.blocks[bi]] = struct{}{}
		c.stats.restored[rb.Tier]++
		if rb.Tier != kvtier.Device {
			if n := s.usage.tierTokens(rb.Tier); n != nil {
				*n += B
			}
		}
	}
	s.computed = a.reused() * B
	s.committed = len(matched)
	c.pins.hit(s.hashes, len(matched), now) // reusing pinned blocks refreshes their pins
	for bi := range matched {
		c.pins.adopt(c.cache, s, bi, now)
	}
	c.commitFull(s, false, now)
	if c.states != nil {
		// Restored checkpoints join the device's; the sequence resumes from the last.
		for i, rb := range restore {
			if rb.Checkpoint != nil {
				c.states.put(s.hashes[len(matched)+i], rb.Checkpoint)
			}
		}
		if n := a.reused(); n > 0 {
			c.states.resume(s.id, s.hashes[n-1])
		}
	}
	if c.cfg.PrefixCache {
		if len(s.hashes) > len(matched) {
			c.cache.markPending(s.id, s.hashes[len(matched):])
		}
	}
}

// recordFirstAdmission marks s admitted and fills, once per request, what its first
// admission decides: the reuse counts, the usage by source, the miss evidence, the
// discarded blocks and the admission counters.
func (c *Core) recordFirstAdmission(s *seq, a admission, now time.Time) {
	B := c.cfg.BlockSize
	matched, restore, unresumable := a.matched, a.restore, a.unresumable
	s.admitted = true
	s.started = now
	// One reuse per request per block, here and only here: not at PeekDevice, not at
	// the matches of admissions that waited (dedup, memory), not at a re-admission
	// after a preemption (those are its own blocks). Offload admission (hits) and
	// eviction's protection count distinct requests.
	c.cache.reused(matched, s.offloadBlocks(B))
	s.usage.DeviceTokens = len(matched) * B
	s.usage.CrossTenantTokens = c.crossTenantTokens(s, matched)
	s.usage.Miss = c.missEvidence(s, a.reused()) // miss.go
	s.usage.ComputedTokens = s.prompt - s.usage.reusedTokens()
	s.usage.QueueMs = ms(now.Sub(s.enqueued))
	if c.states != nil && a.reused() > 0 {
		s.usage.StateBytes = c.cfg.StateBytes
	}
	// The K/V went on past the reuse (on the device, or in a tier: the Restorer cut
	// it): the missing checkpoint is the miss.
	stateMissed := unresumable > 0 || s.prefetched != nil && s.prefetched.Discarded[ReasonIncompleteState] > 0
	if unresumable > 0 {
		c.discard(s, ReasonIncompleteState, unresumable)
		c.stats.stateDiscarded += uint64(unresumable)
	}
	if stateMissed && (unresumable > 0 || s.usage.Miss != nil) {
		s.usage.Miss = &miss.Evidence{Cause: miss.IncompleteState, Block: a.reused(),
			Offset: a.reused() * B, Matched: a.reused() * B, BlockSize: B}
	}
	if s.prefetched != nil {
		for reason, n := range s.prefetched.Discarded {
			c.discard(s, reason, n)
		}
	}
	c.countAdmission(s, len(matched), restore)
}

// discard counts n blocks of s found in some tier but not used, for reason.
func (c *Core) discard(s *seq, reason string, n int) {
	if n <= 0 {
		return
	}
	B := c.cfg.BlockSize
	s.usage.DiscardedTokens += n * B
	c.stats.discardedTokens += uint64(n * B)
	if s.usage.DiscardedBy == nil {
		s.usage.DiscardedBy = map[string]int{}
	}
	s.usage.DiscardedBy[reason] += n * B
}

// resumable is how many leading blocks of a hybrid model's reuse (matched device blocks, then
// restored ones) it may keep: up to the deepest block whose end has a checkpoint of the
// recurrent state (0 when none has). hashes are the prompt's block hashes.
func (c *Core) resumable(hashes []prefix.Hash, matched int, restore []RestoredBlock) int {
	for n := matched + len(restore); n > 0; n-- {
		if n > matched {
			if restore[n-matched-1].Checkpoint != nil {
				return n
			}
			continue
		}
		if c.states.has(hashes[n-1]) {
			return n
		}
	}
	return 0
}

// countAdmission adds a request's first admission to the evidence counters: matched blocks
// from the working pool, restore from the lower tiers, the rest computed.
func (c *Core) countAdmission(s *seq, matched int, restore []RestoredBlock) {
	B := c.cfg.BlockSize
	reused := matched * B
	c.stats.sourceTokens[kvtier.Device] += uint64(matched * B)
	for _, rb := range restore {
		if rb.Tier != kvtier.Device {
			c.stats.sourceTokens[rb.Tier] += uint64(B)
			reused += B
		}
	}
	c.stats.promptTokens += uint64(s.prompt)
	c.stats.computedTokens += uint64(s.prompt - reused)
	c.stats.hits[classify(reused, s.prompt, B, s.usage.ReuseUnitBlocks)]++
}

// restorable returns the prefetched blocks of s that directly follow its device match of
// `matched` blocks, within the reuse cap ⌊(len−1)/B⌋ (the last token is always computed).
func (c *Core) restorable(s *seq, matched int) []RestoredBlock {
	p := s.prefetched
	if p == nil || !c.cfg.PrefixCache || s.admitted {
		return nil
	}
	limit := prefix.MaxMatchBlocks(len(s.tokens), c.cfg.BlockSize)
	if n := s.reuseCap(c.cfg.BlockSize); n >= 0 {
		limit = min(limit, n)
	}
	if matched < p.First || matched >= p.First+len(p.Blocks) || matched >= limit {
		return nil
	}
	run := p.Blocks[matched-p.First:]
	run = run[:min(len(run), limit-matched)]
	if len(s.reserved) == 0 || s.reservedFirst != p.First {
		run = withoutInPlace(run) // in place only in a reservation that is still s's
	}
	return run
}

// takeBlocks returns blocks for s's positions from..total-1: its reserved block where it
// has one (unless its prefetch may still write them), a fresh one elsewhere. Reserved blocks
// outside that range (the device match grew past them since the reservation) are released.
// On success s holds no reservation any more. It takes nothing and fails when the pool
// cannot supply the fresh blocks.
func (c *Core) takeBlocks(s *seq, from, total int) ([]kvcache.BlockID, error) {
	use := len(s.reserved) > 0 && !s.prefetching
	covered := 0
	if use {
		lo, hi := max(from, s.reservedFirst), min(total, s.reservedFirst+len(s.reserved))
		covered = max(0, hi-lo)
	}
	fresh, err := c.cache.allocate(total - from - covered)
	if err != nil || !use {
		return fresh, err
	}
	out := make([]kvcache.BlockID, 0, total-from)
	for bi := from; bi < total; bi++ {
		if r := bi - s.reservedFirst; r >= 0 && r < len(s.reserved) {
			out = append(out, s.reserved[r])
		} else {
			out = append(out, fresh[0])
			fresh = fresh[1:]
		}
	}
	var drop []kvcache.BlockID
	for r, b := range s.reserved {
		if bi := s.reservedFirst + r; bi < from || bi >= total {
			drop = append(drop, b)
		}
	}
	c.reservedBlocks -= len(s.reserved) - len(drop) // used: no longer reserved
	c.releaseReserved(drop)
	s.reserved = nil
	return out, nil
}

// reclaim frees the reservations of the waiting requests other than s, for s's admission
// (FCFS: s does not fit, and nobody behind it may start before it), or, s nil, for a running
// request's next block (a reservation must not cost a preemption): at once where the
// prefetch has ended, with whatever was restored in them (those requests compute it
// instead), and when it ends for the others. Without it a request that needs the whole pool
// would wait forever behind reservations of requests that cannot start before it. Reports
// whether it freed any block now.
func (c *Core) reclaim(s *seq) bool {
	freed := false
	for _, w := range c.waiting { // admit rebuilds c.waiting in place: a seq may be seen twice
		if w == s || len(w.reserved) == 0 {
			continue
		}
		if w.prefetching {
			w.dropReserved = true
			continue
		}
		c.releaseReserved(w.reserved)
		w.reserved, freed = nil, true
		if w.prefetched != nil {
			w.prefetched.Blocks = withoutInPlace(w.prefetched.Blocks)
		}
	}
	return freed
}

// Schedule admits what fits and plans the next forward step. Decode tokens go first so a long
// prompt never stalls running streams; prefill chunks fill the rest of the token budget.
// The plan is the core's, reused: it is valid until the next call.
func (c *Core) Schedule(now time.Time) *Plan {
	c.pins.expire(c.cache, now)
	c.admit(now)
	B := c.cfg.BlockSize
	budget := c.cfg.MaxBatchTokens
	plan := &c.plan
	clear(plan.Items) // the last step's: hold no block tables or checkpoints through them
	plan.Items, plan.Restores = plan.Items[:0], c.pendingRestores
	clear(plan.Blends)
	plan.Blends = plan.Blends[:0]
	clear(plan.Measures)
	plan.Measures = plan.Measures[:0]
	c.pendingRestores = nil
	// Decode: sequences whose prompt is computed have exactly one uncomputed token.
	for i := 0; i < len(c.running); i++ {
		s := c.running[i]
		if s.computed < len(s.tokens)-1 || budget == 0 {
			continue
		}
		pos := s.computed
		if pos/B >= len(s.blocks) {
			blocks, err := c.cache.appendAllocate(s.blocks, 1)
			if err != nil && c.reclaim(nil) {
				blocks, err = c.cache.appendAllocate(s.blocks, 1)
			}
			for err != nil && c.shedPins() {
				blocks, err = c.cache.appendAllocate(s.blocks, 1)
			}
			if err != nil {
				if !c.preemptFor(s, now) {
					if c.reservedBlocks > 0 {
						// In-flight prefetches hold reservations reclaim could not free yet
						// (it marked them to go back when their prefetch ends, as orphans
						// do): s waits a step for them. It has not reached the pool's limit.
						c.stats.decodeWaits++
						continue
					}
					// s alone holds the whole pool and can never get another block: it has
					// reached the longest generation this pool allows, as if it were the
					// context length. Left running, it would wait forever. Its usage says so.
					s.usage.StoppedBy = StopPoolExhausted
					c.finish(s, FinishLength, now)
				}
				i = -1 // the running list changed; rescan
				plan.Items = plan.Items[:0]
				budget = c.cfg.MaxBatchTokens
				continue
			}
			s.blocks = blocks
		}
		plan.Items = append(plan.Items, PlanItem{Seq: s.id, Tokens: s.tokens[pos : pos+1], Pos: pos, Blocks: s.blocks, WantLogits: true,
			Checkpoints: c.checkpointsIn(s, pos, pos+1)})
		budget--
	}
	// Prefill chunks, in admission order.
	for _, s := range c.running {
		if budget == 0 {
			break
		}
		if s.computed >= len(s.tokens)-1 {
			continue // decoding (handled above)
		}
		if left, ok := c.planBlend(s, plan, budget); ok {
			budget = left
			continue
		}
		n := min(len(s.tokens)-s.computed, budget)
		end := s.computed + n
		plan.Items = append(plan.Items, PlanItem{Seq: s.id, Tokens: s.tokens[s.computed:end], Pos: s.computed, Blocks: s.blocks, WantLogits: end == len(s.tokens),
			Checkpoints: c.checkpointsIn(s, s.computed, end)})
		budget -= n
	}
	return plan
}

// checkpointsIn lists the block ends in (from, to] of s where a hybrid model keeps its
// recurrent state: every CheckpointEvery-th block whose hash is known (it will be committed)
// and whose checkpoint is not held already.
func (c *Core) checkpointsIn(s *seq, from, to int) []Checkpoint {
	if c.states == nil {
		return nil
	}
	B, every := c.cfg.BlockSize, max(c.cfg.CheckpointEvery, 1)
	var out []Checkpoint
	for bi := from / B; (bi+1)*B <= to; bi++ {
		if (bi+1)*B <= from || (bi+1)%every != 0 || bi >= len(s.hashes) || c.states.has(s.hashes[bi]) {
			continue
		}
		out = append(out, Checkpoint{Block: bi})
	}
	return out
}

// preemptFor frees memory for s by preempting the most recently admitted other sequence
// (recompute later: its committed blocks stay cached, so it resumes mostly from the cache).
// Reports false when nothing could be preempted.
func (c *Core) preemptFor(s *seq, now time.Time) bool {
	for i := len(c.running) - 1; i >= 0; i-- {
		v := c.running[i]
		if v == s && len(c.running) > 1 {
			continue
		}
		if v == s {
			return false
		}
		c.running = append(c.running[:i], c.running[i+1:]...)
		c.cache.abort(v.id)
		c.resetBlend(v)
		c.cache.release(reverse(v.blocks))
		v.blocks = nil
		v.computed, v.committed = 0, 0
		v.state = stateWaiting
		v.preempted++
		c.stats.preemptions++
		c.waiting = append([]*seq{v}, c.waiting...)
		return true
	}
	return false
}

// Advance records the results of plan: K/V computed for every item, logits for those that asked.
// logits[i] belongs to plan.Items[i] (nil when not asked).
func (c *Core) Advance(plan *Plan, logits [][]float32, now time.Time) {
	B := c.cfg.BlockSize
	for i, it := range plan.Items {
		s, ok := c.seqs[it.Seq]
		if !ok || s.state != stateRunning {
			c.retireCheckpoints(it.Checkpoints)
			continue
		}
		if c.advanceBlend(s, it) {
			continue
		}
		s.computed = it.End()
		c.commitFull(s, true, now)
		c.keepCheckpoints(s, it.Checkpoints)
		if !it.WantLogits {
			continue
		}
		if s.generated == 0 {
			if len(s.req.Pins) > 0 && s.usage.Pins == nil {
				// The prompt is computed and its full blocks committed: pin them.
				s.usage.Pins = c.pins.pinSeq(c.cache, s, now)
			}
			s.firstToken = now
			s.usage.PrefillMs = ms(now.Sub(s.started))
			s.usage.TTFTMs = ms(now.Sub(s.enqueued))
		}
		tok, err := s.sampler.next(logits[i], s.req.Logprobs, c.cfg.EOG)
		if err != nil {
			c.finish(s, FinishStop, now)
			c.outbox[len(c.outbox)-1].Out.Err = err
			continue
		}
		s.tokens = append(s.tokens, tok.ID)
		s.generated++
		s.lastToken = now
		// The slots left for s: this token and every one after it that may come.
		room := min(s.req.MaxTokens-s.generated+1, c.cfg.ContextLength-len(s.tokens)+1)
		out := s.outTokens.take(1, room, slabTokens)
		out[0] = tok
		c.outbox = append(c.outbox, Delivery{s.id, Output{Tokens: out}})
		switch {
		case c.isStop(s, tok.ID):
			c.finish(s, FinishStop, now)
		case s.generated >= s.req.MaxTokens || len(s.tokens) >= c.cfg.ContextLength:
			c.finish(s, FinishLength, now)
		default:
			// Blocks for generated tokens are hashed as they fill.
			if c.cfg.PrefixCache && len(s.tokens)%B == 0 {
				bi := len(s.tokens)/B - 1
				if bi == len(s.hashes) {
					parent := s.root
					if bi > 0 {
						parent = s.hashes[bi-1]
					}
					s.hashes = append(s.hashes, s.blockHash(parent, bi, s.tokens[bi*B:(bi+1)*B]))
				}
			}
		}
	}
}

// keepCheckpoints keeps the checkpoints a step computed for s's blocks that are committed
// (by hash: the state is the same whichever block holds the K/V); the others are retired.
func (c *Core) keepCheckpoints(s *seq, cps []Checkpoint) {
	for _, cp := range cps {
		if cp.State == nil {
			continue
		}
		if cp.Block < s.committed && cp.State.Pos == (cp.Block+1)*c.cfg.BlockSize {
			c.states.put(s.hashes[cp.Block], cp.State)
		} else {
			c.states.retire(cp.State)
		}
	}
}

func (c *Core) retireCheckpoints(cps []Checkpoint) {
	for _, cp := range cps {
		if cp.State != nil {
			c.states.retire(cp.State)
		}
	}
}

func (c *Core) isStop(s *seq, id int32) bool {
	if !s.req.IgnoreEOS || s.req.Sampling.Constraint != nil {
		for _, t := range c.cfg.EOG {
			if t == id {
				return true
			}
		}
	}
	for _, t := range s.req.StopTokens {
		if t == id {
			return true
		}
	}
	return false
}

// commitFull registers every newly completed block of s with the cache. With share, a block
// another request committed first replaces s's own copy in its block table (identical K/V: the
// forward pass is deterministic), so duplicates computed without dedup free their memory at
// once. admit does not share: restores into s's own blocks are still pending there.
func (c *Core) commitFull(s *seq, share bool, now time.Time) {
	if !c.cfg.PrefixCache {
		return
	}
	B := c.cfg.BlockSize
	for s.committed < s.computed/B && s.committed < len(s.hashes) {
		bi := s.committed
		parent := s.root
		if bi > 0 {
			parent = s.hashes[bi-1]
		}
		mine := s.blocks[bi]
		s.blocks[bi] = c.cache.commit(s.hashes[bi], parent, s.tokens[bi*B:(bi+1)*B], s.blocks[bi], share, bi < s.offloadBlocks(B))
		if s.blocks[bi] == mine && c.cache.holds(s.hashes[bi], mine) {
			c.noteOwner(s, mine) // committed first here
		}
		c.pins.adopt(c.cache, s, bi, now)
		s.committed++
	}
}

// WasRestored reports whether block b was committed from a restore since the last
// ClearRestored.
func (c *Core) WasRestored(b kvcache.BlockID) bool {
	_, ok := c.restored[b]
	return ok
}

// ClearRestored forgets the restored blocks WasRestored reports (their events are drained).
// It runs after every step: an empty set costs nothing, and a set a long restore grew is let
// go rather than cleared (clearing costs its capacity, on every step after).
func (c *Core) ClearRestored() {
	switch {
	case len(c.restored) == 0:
	case len(c.restored) > 1024:
		c.restored = nil
	default:
		clear(c.restored)
	}
}

// offloadBlocks is how many leading blocks of s the tiers may keep: those that end within its
// max_offload_tokens (all of them without a cap).
func (s *seq) offloadBlocks(B int) int {
	if s.req.MaxOffloadTokens == nil {
		return math.MaxInt
	}
	return *s.req.MaxOffloadTokens / B
}

func (c *Core) finish(s *seq, reason string, now time.Time) {
	switch s.state {
	case stateRunning:
		for i, r := range c.running {
			if r == s {
				c.running = append(c.running[:i], c.running[i+1:]...)
				break
			}
		}
	case stateWaiting:
		for i, r := range c.waiting {
			if r == s {
				c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
				break
			}
		}
	}
	c.cache.abort(s.id)
	c.resetBlend(s)
	c.cache.release(reverse(s.blocks))
	c.pins.unreserve(s.id)
	s.blocks = nil
	if len(s.reserved) > 0 {
		if s.prefetching {
			c.orphans[s.id] = s.reserved // the Restorer may still write them
		} else {
			c.releaseReserved(s.reserved)
		}
		s.reserved = nil
	}
	s.state = stateDone
	u := s.usage
	if len(s.req.Pins) > 0 && u.Pins == nil {
		// Ended before its prompt was computed: nothing was pinned.
		u.Pins = make([]PinResult, len(s.req.Pins))
		for i, ps := range s.req.Pins {
			n := pinBlocks(ps, s.prompt, c.cfg.BlockSize) * c.cfg.BlockSize
			u.Pins[i] = PinResult{TTL: ps.TTL, Requested: n, Refused: n > 0}
		}
	}
	if !s.admitted {
		u.ComputedTokens = s.prompt
		u.QueueMs = ms(now.Sub(s.enqueued))
		c.stats.promptTokens += uint64(s.prompt)
		c.stats.computedTokens += uint64(s.prompt)
		c.stats.hits[HitCold]++
	}
	c.stats.finished++
	if reason == FinishCancelled {
		c.stats.cancelled++
	}
	u.CompletionTokens = s.generated
	if s.generated > 1 {
		u.DecodeMs = ms(s.lastToken.Sub(s.firstToken))
	}
	c.outbox = append(c.outbox, Delivery{s.id, Output{Done: true, FinishReason: reason, Usage: &u}})
	delete(c.seqs, s.id)
}

// reuseCap is how many leading prompt blocks s may take from a cache at its first admission
// (Request.MaxReuseTokens), or -1 for no cap.
func (s *seq) reuseCap(B int) int {
	if s.req.MaxReuseTokens == nil || s.admitted {
		return -1
	}
	return max(*s.req.MaxReuseTokens, 0) / B
}

// reverse returns a reversed copy, so a sequence's tail (leaf) blocks are released first and
// therefore evicted first.
func reverse(b []kvcache.BlockID) []kvcache.BlockID {
	r := make([]kvcache.BlockID, len(b))
	for i, x := range b {
		r[len(b)-1-i] = x
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
