package engine

import (
	"fmt"
	"sync/atomic"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/model"
	"stockpot/internal/prefix"
)

// Restorer finds a queued request's prefix blocks in the lower tiers while it waits.
// Implementations do I/O on their own goroutines and never touch the engine's state.
type Restorer interface {
	// Prefetch looks for blocks first, first+1, ... of a prompt (hashes[i] is block i's chain
	// hash under root, tokens the prompt) and calls done exactly once, from any goroutine, with
	// the verified contiguous run it found, starting at first. It decides with its cost model
	// which blocks are worth restoring rather than recomputing.
	Prefetch(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, done func(Prefetched))
}

// IntoRestorer is a Restorer that can verify blocks straight into pool blocks the engine
// reserved for the request (Core.Reserve), so a restore is one pass over the bytes (checksum
// and copy together) instead of a verify on the fetch goroutines and a copy on the runner's.
type IntoRestorer interface {
	// PrefetchInto is Prefetch with dst[i] the K/V storage of the block reserved for prompt
	// block first+i (len(dst) blocks from first; the prefetch looks no further). It may write
	// dst[i] until it calls done, never after; a block it restored there is reported with
	// InPlace set and no Data. A block that failed verification may hold garbage: it is not
	// reported, and the engine computes into it.
	PrefetchInto(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, dst [][]byte, done func(Prefetched))
}

// ProgressRestorer is an IntoRestorer that also reports how a prefetch goes while it runs:
// the plan its cost model made, then the blocks that have arrived (PrefetchCost weighs the
// wait with them).
type ProgressRestorer interface {
	// PrefetchProgress is PrefetchInto (dst nil: Prefetch) reporting to progress, from any
	// goroutine, until it calls done: Plan once the tiers were looked up and the blocks worth
	// restoring chosen, then Arrive as they are read and verified.
	PrefetchProgress(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, dst [][]byte, progress *PrefetchProgress, done func(Prefetched))
}

// PrefetchProgress is one prefetch's progress: the Restorer's goroutines write it, the
// runner reads it (Load) at every scheduling step and hands it to the core
// (Core.PrefetchProgressed). Atomics: it never blocks a fetch.
type PrefetchProgress struct {
	planned            atomic.Bool
	blocks, arrived    atomic.Int64
	restore, recompute atomic.Int64 // time.Duration
}

// Plan records the plan: blocks to restore, the cost model's estimate of reading them
// (restore) and of computing them instead (recompute). Call it before any Arrive.
func (p *PrefetchProgress) Plan(blocks int, restore, recompute time.Duration) {
	p.blocks.Store(int64(blocks))
	p.restore.Store(int64(restore))
	p.recompute.Store(int64(recompute))
	p.planned.Store(true) // last: a reader that sees it sees the plan
}

// Arrive adds n blocks read and verified.
func (p *PrefetchProgress) Arrive(n int) { p.arrived.Add(int64(n)) }

// Load returns the progress so far (the zero Progress before Plan).
func (p *PrefetchProgress) Load() Progress {
	if !p.planned.Load() {
		return Progress{}
	}
	return Progress{Planned: true, Blocks: int(p.blocks.Load()), Arrived: int(p.arrived.Load()),
		Restore: time.Duration(p.restore.Load()), Recompute: time.Duration(p.recompute.Load())}
}

// Progress is a prefetch's progress as the core sees it (PrefetchProgress.Load).
type Progress struct {
	Planned   bool          // the Restorer has chosen what to restore
	Blocks    int           // blocks it will read: the cost model found them cheaper than recomputing
	Arrived   int           // of them, read and verified so far
	Restore   time.Duration // the cost model's estimate of reading all Blocks
	Recompute time.Duration // its estimate of computing them instead
}

// Prefetched is the result of a prefetch.
type Prefetched struct {
	First  int             // index of Blocks[0] in the prompt's blocks
	Blocks []RestoredBlock // contiguous from First, verified, worth restoring
	// Discarded counts blocks found in some tier but not used, by reason (checksum, identity,
	// incomplete_state, slower_than_recompute, after_break).
	Discarded map[string]int
	Elapsed   time.Duration
}

// RestoredBlock is one block's verified K/V bytes (kvcache block layout).
type RestoredBlock struct {
	Tier kvtier.Tier // where it came from: one of kvtier.Below
	Data []byte      // the K/V to copy in; nil when InPlace
	// InPlace: the K/V is already in the block reserved for this prompt block (PrefetchInto).
	InPlace bool
	// State, for a hybrid model, is the block's recurrent-state checkpoint as the tier holds
	// it (model.State.AppendBinary bytes; nil when the record has none). The engine decodes
	// and checks it when the result is delivered, before the runner sees it (Checkpoint); the
	// Restorer may alias its read buffers here, read only, until it calls done.
	State []byte
	// Checkpoint is State decoded and verified (its position is this block's end), set by
	// the engine; nil when the block has no usable checkpoint. A hybrid prefix is restored
	// only up to the last block that has one.
	Checkpoint *model.State
}

// ReasonIncompleteState is the discard reason of blocks found past a hybrid prefix's last
// complete state checkpoint (the tiers' tier.ReasonIncompleteState, the label value of
// stockpot_kv_blocks_discarded_total{reason}).
const ReasonIncompleteState = "incomplete_state"

// PrefetchPolicy says how admission treats a request whose prefetch has not finished.
type PrefetchPolicy uint8

const (
	// PrefetchWait holds the request (not the ones behind it) until its prefetch is done.
	PrefetchWait PrefetchPolicy = iota
	// PrefetchTimeout waits up to Config.PrefetchMaxWait, then computes what has not arrived.
	PrefetchTimeout
	// PrefetchBestEffort never waits: whatever has arrived at admission is used.
	PrefetchBestEffort
	// PrefetchCost waits while restoring is cheaper than recomputing, by the cost model's
	// own estimates (the Restorer's Progress): see Core.worthWaiting. Before a plan arrives
	// (or with a Restorer that reports none) it waits up to PrefetchMaxWait, as
	// PrefetchTimeout does.
	PrefetchCost
)

// The names of the policies, as `stockpot serve --prefetch` takes them.
var prefetchPolicyNames = [...]string{PrefetchWait: "wait", PrefetchTimeout: "timeout", PrefetchBestEffort: "best-effort", PrefetchCost: "cost"}

func (p PrefetchPolicy) String() string {
	if int(p) < len(prefetchPolicyNames) {
		return prefetchPolicyNames[p]
	}
	return fmt.Sprintf("prefetch(%d)", uint8(p))
}

// ParsePrefetchPolicy is the inverse of PrefetchPolicy.String.
func ParsePrefetchPolicy(s string) (PrefetchPolicy, error) {
	for p, n := range prefetchPolicyNames {
		if n == s {
			return PrefetchPolicy(p), nil
		}
	}
	return 0, fmt.Errorf("%q: want cost, wait, timeout or best-effort", s) // the caller names the setting
}

// Restore is a copy the runner performs before the forward pass: tier bytes into a block.
type Restore struct {
	Block int32
	Data  []byte
}
