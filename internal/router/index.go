package router

import (
	"cmp"
	"encoding/hex"
	"math"
	"slices"
	"sync"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// defaultTierWeights value a matched block by where the replica holds it, until the replica
// publishes its measured costs (then tierWeights derives them): a device block is reused for
// free, a host block costs a copy over PCIe, a disk or remote block a read that can approach
// recompute cost for short prefixes. The numbers are relative prefill savings, in blocks.
var defaultTierWeights = [kvtier.Count]float64{
	kvtier.Device: 1.0,
	kvtier.Host:   0.8,
	kvtier.Disk:   0.5,
	kvtier.Remote: 0.3,
}

// DefaultIndexMaxBlocks bounds one replica's index: 1Mi entries, about 80 MiB of map (a
// 32-byte hash, a tier set and a use stamp, plus the map's overhead). Entries expire only by
// the replica's Removed events, Cleared or a snapshot, never by age; the bound keeps a
// replica that never sends Removed (a bug, or a replica that lost track of a tier) from
// growing the router without limit. Past it the least recently stored entries go first.
const DefaultIndexMaxBlocks = 1 << 20

// entry is one block in a replica's index.
type entry struct {
	tiers uint8  // bit t set: tier t holds the block
	used  uint64 // the index's event clock at the block's last Stored event (for the LRU bound)
}

// replicaIndex is one replica's block set, fed by its Subscriber (it is the
// Subscriber's kvevents.Sink). The global index is the set of these, one per
// backend: a resync replaces one replica's map without touching the others,
// and a lookup walks a request's hashes per candidate (a handful of map
// probes per backend per block, stopping at the first miss).
//
// An entry stays until the replica says it is gone (Removed, Cleared, a snapshot without
// it), however old: a cache hit emits no event, so the hottest, longest-lived blocks are the
// ones whose last Stored is oldest. The index is bounded by maxBlocks (LRU by last Stored).
type replicaIndex struct {
	maxBlocks int // 0: DefaultIndexMaxBlocks
	// remote, when set (by the Router, before the index gets its first event), is the
	// router-wide shared remote set this index feeds with the replica's remote-tier
	// announcements (see sharedRemote). Written once, read without a lock.
	remote *replicaIndex
	mu     struct {
		sync.RWMutex
		blocks    map[prefix.Hash]entry
		clock     uint64 // counts Stored events: the LRU's time
		identity  []byte // bytes the replica passes to prefix.Root; nil: unknown
		blockSize int
		// unit is the replica's reuse unit in blocks (kvevents.Snapshot.Unit, at least 1): it
		// reuses a prefix only in whole runs of unit blocks (a hybrid model resumes only at
		// a state checkpoint), so a match counts only those.
		unit  int
		epoch uint64
		valid bool // a snapshot was loaded (and not dropped since)
		// costs is the replica's last published cost figures (nil: none yet), weights the
		// tier weights derived from them.
		costs   *kvevents.Costs
		weights [kvtier.Count]float64
	}
}

func newReplicaIndex() *replicaIndex {
	ix := &replicaIndex{}
	ix.mu.blocks = map[prefix.Hash]entry{}
	return ix
}

func (ix *replicaIndex) limit() int {
	if ix.maxBlocks > 0 {
		return ix.maxBlocks
	}
	return DefaultIndexMaxBlocks
}

// Reset implements kvevents.Sink.
func (ix *replicaIndex) Reset(s kvevents.Snapshot) {
	blocks := make(map[prefix.Hash]entry, min(len(s.Blocks), ix.limit()))
	var clock uint64
	for _, b := range s.Blocks {
		e := blocks[b.Hash]
		if e.tiers == 0 {
			clock++
			e.used = clock
		}
		e.tiers |= 1 << b.Tier
		blocks[b.Hash] = e
	}
	id, err := hex.DecodeString(s.Identity)
	ix.mu.Lock()
	ix.mu.blocks, ix.mu.clock = blocks, clock
	ix.mu.identity, ix.mu.blockSize, ix.mu.epoch, ix.mu.unit = id, s.BlockSize, s.Epoch, s.Unit()
	ix.mu.valid = s.Epoch != 0 && err == nil && s.BlockSize > 0
	ix.mu.costs = nil // a snapshot carries the figures when the replica publishes any
	ix.setCostsLocked(s.Costs)
	ix.boundLocked()
	ix.mu.Unlock()
	if ix.remote != nil {
		var evs []kvevents.Event
		for _, b := range s.Blocks {
			if b.Tier == kvtier.Remote {
				evs = append(evs, kvevents.Event{Kind: kvevents.Stored, Tier: kvtier.Remote, Hash: b.Hash})
			}
		}
		ix.remote.applyShared(evs)
	}
}

// Apply implements kvevents.Sink.
func (ix *replicaIndex) Apply(evs []kvevents.Event) {
	ix.apply(evs)
	if ix.remote == nil {
		return
	}
	var shared []kvevents.Event
	for _, ev := range evs {
		if ev.Tier == kvtier.Remote {
			shared = append(shared, ev)
		}
	}
	ix.remote.applyShared(shared) // after ix.mu is released: never two index locks at once
}

func (ix *replicaIndex) apply(evs []kvevents.Event) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range evs {
		ev := &evs[i]
		bit := uint8(1) << ev.Tier
		switch ev.Kind {
		case kvevents.Stored:
			e := ix.mu.blocks[ev.Hash]
			e.tiers |= bit
			ix.mu.clock++
			e.used = ix.mu.clock
			ix.mu.blocks[ev.Hash] = e
		case kvevents.Removed:
			if e, ok := ix.mu.blocks[ev.Hash]; ok {
				if e.tiers &^= bit; e.tiers == 0 {
					delete(ix.mu.blocks, ev.Hash)
				} else {
					ix.mu.blocks[ev.Hash] = e
				}
			}
		case kvevents.Cleared:
			for h, e := range ix.mu.blocks {
				if e.tiers &^= bit; e.tiers == 0 {
					delete(ix.mu.blocks, h)
				} else {
					ix.mu.blocks[h] = e
				}
			}
		}
	}
	ix.boundLocked()
}

// sharedRemote returns the router-wide set of blocks in the shared remote tier: an index whose
// entries all carry the remote bit, the union of every replica's remote announcements.
//
// Why a set of its own rather than a union of the replicas' indexes at lookup time: a block in
// Redis outlives the replica that wrote it. When the writer is killed, removed from the
// membership, or restarted (its new snapshot knows nothing it wrote before), its index no
// longer says the block is there, yet every replica with the tier can still restore it. So an
// entry here ends only by a Removed in the remote tier from any replica (its reconciler found
// the key gone, and the key is gone for all: the tier is shared), a Cleared of the remote
// tier, or the bound (maxBlocks, LRU by last Stored). A snapshot adds its remote blocks and
// removes none. What the bound and the reconcilers miss (a key Redis expired after its writer
// died) costs a misprediction, never a wrong answer: the replica probes the tier and
// recomputes what is not there.
func sharedRemote(maxBlocks int) *replicaIndex {
	ix := newReplicaIndex()
	ix.maxBlocks = maxBlocks
	return ix
}

// applyShared applies remote-tier events to a sharedRemote set (see there).
func (ix *replicaIndex) applyShared(evs []kvevents.Event) {
	if len(evs) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, ev := range evs {
		switch ev.Kind {
		case kvevents.Stored:
			ix.mu.clock++
			ix.mu.blocks[ev.Hash] = entry{tiers: 1 << kvtier.Remote, used: ix.mu.clock}
		case kvevents.Removed:
			delete(ix.mu.blocks, ev.Hash)
		case kvevents.Cleared:
			clear(ix.mu.blocks)
		}
	}
	ix.boundLocked()
}

// Costs implements kvevents.CostSink: the replica's measured restore costs replace the
// default tier weights for it.
func (ix *replicaIndex) Costs(c kvevents.Costs) {
	ix.mu.Lock()
	ix.setCostsLocked(&c)
	ix.mu.Unlock()
}

// setCostsLocked records c (nil: no figures) and the weights derived from it. REQUIRES:
// ix.mu held for writing.
func (ix *replicaIndex) setCostsLocked(c *kvevents.Costs) {
	if c == nil {
		return
	}
	cc := *c
	ix.mu.costs = &cc
	ix.mu.weights = tierWeights(cc)
}

// tierWeights turns a replica's cost figures into per-tier weights: the share of a block's
// prefill time that restoring it from the tier saves, 1 − read time / prefill time, clamped
// to [0, 1]. The device's weight is 1 (reuse costs nothing); a tier the replica does not have
// (no bandwidth figure) weighs 0.
func tierWeights(c kvevents.Costs) [kvtier.Count]float64 {
	var w [kvtier.Count]float64
	w[kvtier.Device] = 1
	if !(c.PrefillTokensPerSecond > 0) || c.BlockBytes <= 0 || c.BlockSize <= 0 {
		return defaultTierWeights
	}
	prefill := float64(c.BlockSize) / c.PrefillTokensPerSecond
	for _, t := range kvtier.Below {
		bw := c.ReadBandwidth[t]
		if !(bw > 0) || math.IsInf(bw, 0) {
			continue
		}
		w[t] = min(1, max(0, 1-(float64(c.BlockBytes)/bw)/prefill))
	}
	return w
}

// weights returns the tier weights to score this replica with: derived from its published
// costs, else fallback. hasRemote reports whether the replica published a remote tier (it can
// restore what any replica wrote there).
func (ix *replicaIndex) weights(fallback *[kvtier.Count]float64) (w [kvtier.Count]float64, hasRemote bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.mu.costs == nil {
		return *fallback, false
	}
	return ix.mu.weights, ix.mu.costs.ReadBandwidth[kvtier.Remote] > 0
}

// publishedWeights returns the weights derived from the replica's figures; ok=false before any.
func (ix *replicaIndex) publishedWeights() (w [kvtier.Count]float64, ok bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.mu.weights, ix.mu.costs != nil
}

// boundLocked drops the least recently stored eighth of the entries when the index is past
// its bound: one sort per maxBlocks/8 inserts, O(log n) amortized per Stored. REQUIRES:
// ix.mu held for writing.
func (ix *replicaIndex) boundLocked() {
	lim := ix.limit()
	if len(ix.mu.blocks) <= lim {
		return
	}
	type aged struct {
		h    prefix.Hash
		used uint64
	}
	all := make([]aged, 0, len(ix.mu.blocks))
	for h, e := range ix.mu.blocks {
		all = append(all, aged{h, e.used})
	}
	slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(a.used, b.used) })
	drop := len(all) - lim + lim/8
	for _, a := range all[:min(drop, len(all))] {
		delete(ix.mu.blocks, a.h)
	}
}

// Len returns the number of indexed blocks.
func (ix *replicaIndex) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.mu.blocks)
}

// chain returns what a request needs to compute this replica's hashes.
func (ix *replicaIndex) chain() (identity []byte, blockSize int, ok bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.mu.identity, ix.mu.blockSize, ix.mu.valid
}

// reuseUnit returns the replica's reuse unit in blocks (1 before any snapshot, or from a
// replica that does not publish one).
func (ix *replicaIndex) reuseUnit() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return max(1, ix.mu.unit)
}

// unitRun accumulates a walk's matched blocks in the replica's reuse unit: only whole runs of
// unit blocks count (their weight in whole), the blocks past the last whole run do not.
type unitRun struct {
	unit         int
	n, part      int     // blocks counted; blocks in the unfinished run
	whole, partW float64 // weight of the whole runs; of the unfinished one
}

// add counts one matched block of weight w.
func (u *unitRun) add(w float64) {
	u.part++
	u.partW += w
	if u.part == u.unit {
		u.n += u.part
		u.whole += u.partW
		u.part, u.partW = 0, 0
	}
}

// inRemote reports whether any of shared holds h in the remote tier (which every replica
// with that tier can restore from).
func inRemote(shared []*replicaIndex, h prefix.Hash) bool {
	for _, o := range shared {
		o.mu.RLock()
		e := o.mu.blocks[h]
		o.mu.RUnlock()
		if e.tiers&(1<<kvtier.Remote) != 0 {
			return true
		}
	}
	return false
}

// match walks hashes in order while the replica holds them, returning the count and the
// tier-weighted count (each block weighted by its fastest tier), both rounded down to the
// replica's reuse unit: what it can reuse of the walk. A block the replica does not hold but
// some index in shared holds in the remote tier counts at the remote weight (pass shared only
// for a replica that has the remote tier).
func (ix *replicaIndex) match(hashes []prefix.Hash, weights *[kvtier.Count]float64, shared []*replicaIndex) (n int, weighted float64) {
	u := unitRun{unit: ix.reuseUnit()}
	for _, h := range hashes {
		w, ok := ix.lookup(h, weights, shared)
		if !ok {
			break
		}
		u.add(w)
	}
	return u.n, u.whole
}

// lookup is one block of a walk: the weight of its fastest tier here, else the remote weight
// when shared holds it in the remote tier.
func (ix *replicaIndex) lookup(h prefix.Hash, weights *[kvtier.Count]float64, shared []*replicaIndex) (float64, bool) {
	ix.mu.RLock()
	e := ix.mu.blocks[h]
	ix.mu.RUnlock()
	if e.tiers != 0 {
		t := 0
		for e.tiers&(1<<t) == 0 {
			t++
		}
		return weights[t], true
	}
	// Each index is locked alone (never two at once: no lock order to keep).
	if len(shared) > 0 && inRemote(shared, h) {
		return weights[kvtier.Remote], true
	}
	return 0, false
}
