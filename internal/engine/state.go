package engine

import (
	"stockpot/internal/model"
	"stockpot/internal/prefix"
)

// Hybrid models (model.Config.Hybrid: Gated DeltaNet or KDA layers beside attention) carry,
// besides their K/V blocks, a recurrent state per sequence that the model advances token by
// token.
// K/V alone cannot resume such a sequence: position p also needs the state after tokens
// [0, p). So the engine keeps, beside the blocks, checkpoints of that state at block ends:
//
//   - seqStates holds one running state per sequence, keyed by the core's sequence id.
//   - checkpoints holds the state at the end of cached blocks, keyed by the block's chain
//     hash. The hash names the whole token prefix under its root (identity and salt), so a
//     checkpoint stored under a hash is the right one for any block that hash names: keyed by
//     hash, a checkpoint can never go stale, only be dropped to save memory.
//
// The scheduler plans a checkpoint at the end of every Config.StateCheckpointBlocks-th block
// (PlanItem.Checkpoints); Forward fills it while it computes the step; the commit of the block
// keeps it. A prefix is reused only up to the deepest block with a checkpoint (device hits and
// restored blocks alike, see Core.cutToCheckpoint): what is matched past it is discarded, counted as
// incomplete_state, and recomputed from that checkpoint (stateIndex.resume).
//
// Checkpoints leave with their blocks (Evicted, Removed, Cleared events, see flushEvents),
// carried down the tiers with the evicted K/V, and are bounded by a budget taken from the
// working pool's memory (New splits Config.KVMemory): past it the oldest are dropped, and
// those blocks are simply not a point a prefix may end at any more.

// seqStates holds the recurrent states of a hybrid model's sequences; nil for other models.
type seqStates struct {
	m    *model.Model
	by   map[uint64]*model.State
	free []*model.State
}

func newSeqStates(m *model.Model) *seqStates {
	if !m.Config().Hybrid() {
		return nil
	}
	return &seqStates{m: m, by: map[uint64]*model.State{}}
}

// of returns sequence seq's state, creating it (at position 0) if it has none.
func (s *seqStates) of(seq uint64) *model.State {
	st := s.by[seq]
	if st == nil {
		if n := len(s.free); n > 0 {
			st, s.free = s.free[n-1], s.free[:n-1]
			st.Reset()
		} else {
			st = s.m.NewState()
		}
		s.by[seq] = st
	}
	return st
}

// get returns the state for a plan item, reset when the item starts at position 0. Otherwise
// it stands where the sequence's last step (or its resume) left it; the model refuses an item
// whose position is not where its state stands.
func (s *seqStates) get(it PlanItem) *model.State {
	if s == nil {
		return nil
	}
	st := s.of(it.Seq)
	if it.Pos == 0 {
		st.Reset()
	}
	return st
}

// release drops a finished sequence's state (kept for reuse).
func (s *seqStates) release(seq uint64) {
	if s == nil {
		return
	}
	if st := s.by[seq]; st != nil {
		delete(s.by, seq)
		s.free = append(s.free, st)
	}
}

// stateIndex is what the core needs of a hybrid model's block checkpoints (nil for models
// without recurrent state). The engine's is checkpoints; core scripts use a fake.
type stateIndex interface {
	// has reports whether a checkpoint of the state at the end of block h is held.
	has(h prefix.Hash) bool
	// put keeps st as the checkpoint of block h (taking it over; a second one for the same
	// h is retired). The index may drop its oldest checkpoints to stay within its budget.
	put(h prefix.Hash, st *model.State)
	// retire gives back a checkpoint nobody keeps (its block was not committed).
	retire(st *model.State)
	// resume sets sequence seq's running state to the checkpoint of block h.
	//
	// REQUIRES: has(h).
	resume(seq uint64, h prefix.Hash)
}

// checkpoints is the engine's stateIndex: the checkpoints of cached blocks, by chain hash,
// within a budget of max. Runner goroutine only.
//
// Retired states are recycled only at the next step (recycle, at the top of the runner's
// loop): a state dropped or retired during a step may still be the source a resume copies
// from, or the destination Forward fills, within that step.
type checkpoints struct {
	m      *model.Model
	seqs   *seqStates
	byHash map[prefix.Hash]*model.State
	fifo   []prefix.Hash // insertion order, for the budget; may name dropped hashes (skipped)
	max    int
	// dropped counts checkpoints dropped for the budget (not with their block).
	dropped uint64

	free, retired []*model.State
}

// maxFreeStates bounds the recycled states kept for reuse: a few steps' checkpoints.
const maxFreeStates = 64

func newCheckpoints(m *model.Model, seqs *seqStates, max int) *checkpoints {
	if seqs == nil {
		return nil
	}
	return &checkpoints{m: m, seqs: seqs, byHash: map[prefix.Hash]*model.State{}, max: max}
}

func (c *checkpoints) has(h prefix.Hash) bool {
	_, ok := c.byHash[h]
	return ok
}

func (c *checkpoints) get(h prefix.Hash) *model.State { return c.byHash[h] }

func (c *checkpoints) put(h prefix.Hash, st *model.State) {
	if old, ok := c.byHash[h]; ok {
		if old != st {
			c.retire(st)
		}
		return
	}
	c.byHash[h] = st
	c.fifo = append(c.fifo, h)
	for len(c.byHash) > c.max && len(c.fifo) > 0 {
		old := c.fifo[0]
		c.fifo = c.fifo[1:]
		if st, ok := c.byHash[old]; ok {
			delete(c.byHash, old)
			c.retire(st)
			c.dropped++
		}
	}
	if len(c.fifo) > 2*len(c.byHash)+64 {
		// Compact: keep the live hashes in order (a hash put again after a drop is listed
		// twice; its first place counts).
		seen := make(map[prefix.Hash]bool, len(c.byHash))
		kept := c.fifo[:0]
		for _, x := range c.fifo {
			if _, ok := c.byHash[x]; ok && !seen[x] {
				seen[x] = true
				kept = append(kept, x)
			}
		}
		c.fifo = append([]prefix.Hash(nil), kept...)
	}
}

func (c *checkpoints) retire(st *model.State) {
	if st != nil {
		c.retired = append(c.retired, st)
	}
}

func (c *checkpoints) resume(seq uint64, h prefix.Hash) {
	src := c.byHash[h]
	if src == nil {
		panic("engine: resume from a block without a checkpoint") // the core checked has
	}
	c.seqs.of(seq).CopyFrom(src)
}

// drop forgets block h's checkpoint (its block left the working pool).
func (c *checkpoints) drop(h prefix.Hash) {
	if st, ok := c.byHash[h]; ok {
		delete(c.byHash, h)
		c.retire(st)
	}
}

// dropAll forgets every checkpoint (the pool was cleared).
func (c *checkpoints) dropAll() {
	for h, st := range c.byHash {
		delete(c.byHash, h)
		c.retire(st)
	}
	c.fifo = c.fifo[:0]
}

// alloc returns a state for Forward to fill (its contents are overwritten).
func (c *checkpoints) alloc() *model.State {
	if n := len(c.free); n > 0 {
		st := c.free[n-1]
		c.free = c.free[:n-1]
		return st
	}
	return c.m.NewState()
}

// recycle makes the states retired before this step available to alloc.
func (c *checkpoints) recycle() {
	if c == nil {
		return
	}
	for _, st := range c.retired {
		if len(c.free) < maxFreeStates {
			c.free = append(c.free, st)
		}
	}
	clear(c.retired)
	c.retired = c.retired[:0]
}

// checkpointBudget is how many checkpoints a pool of blocks keeps: one per every-th block,
// rounded up, and at least one.
func checkpointBudget(blocks, every int) int {
	return max(1, (blocks+every-1)/every)
}
