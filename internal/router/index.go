package router

import (
	"encoding/hex"
	"sync"
	"time"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// TierWeights value a matched block by where the replica holds it: a device
// block is reused for free, a host block costs a copy over PCIe, a disk or
// remote block a read that can approach recompute cost for short prefixes.
// The numbers are relative prefill savings, in blocks.
var defaultTierWeights = [kvtier.Count]float64{
	kvtier.Device: 1.0,
	kvtier.Host:   0.8,
	kvtier.Disk:   0.5,
	kvtier.Remote: 0.3,
}

// entry is one block in a replica's index.
type entry struct {
	tiers  uint8 // bit t set: tier t holds the block
	stored int64 // unix nanos of the last stored event (for expiry)
}

// replicaIndex is one replica's block set, fed by its Subscriber (it is the
// Subscriber's kvevents.Sink). The global index is the set of these, one per
// backend: a resync replaces one replica's map without touching the others,
// and a lookup walks a request's hashes per candidate (a handful of map
// probes per backend per block, stopping at the first miss).
type replicaIndex struct {
	mu struct {
		sync.RWMutex
		blocks    map[prefix.Hash]entry
		identity  []byte // bytes the replica passes to prefix.Root; nil: unknown
		blockSize int
		epoch     uint64
		valid     bool // a snapshot was loaded (and not dropped since)
	}
}

func newReplicaIndex() *replicaIndex {
	ix := &replicaIndex{}
	ix.mu.blocks = map[prefix.Hash]entry{}
	return ix
}

// Reset implements kvevents.Sink.
func (ix *replicaIndex) Reset(s kvevents.Snapshot) {
	blocks := make(map[prefix.Hash]entry, len(s.Blocks))
	now := time.Now().UnixNano()
	for _, b := range s.Blocks {
		e := blocks[b.Hash]
		e.tiers |= 1 << b.Tier
		e.stored = now
		blocks[b.Hash] = e
	}
	id, err := hex.DecodeString(s.Identity)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.mu.blocks = blocks
	ix.mu.identity, ix.mu.blockSize, ix.mu.epoch = id, s.BlockSize, s.Epoch
	ix.mu.valid = s.Epoch != 0 && err == nil && s.BlockSize > 0
}

// Apply implements kvevents.Sink.
func (ix *replicaIndex) Apply(evs []kvevents.Event) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range evs {
		ev := &evs[i]
		bit := uint8(1) << ev.Tier
		switch ev.Kind {
		case kvevents.Stored:
			e := ix.mu.blocks[ev.Hash]
			e.tiers |= bit
			e.stored = ev.Time.UnixNano()
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

// match walks hashes in order while the replica holds them (and they have
// not expired), returning the count and the tier-weighted count (each block
// weighted by its fastest tier).
func (ix *replicaIndex) match(hashes []prefix.Hash, weights *[kvtier.Count]float64, expireBefore int64) (n int, weighted float64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, h := range hashes {
		e, ok := ix.mu.blocks[h]
		if !ok || e.tiers == 0 || e.stored < expireBefore {
			break
		}
		t := 0
		for e.tiers&(1<<t) == 0 {
			t++
		}
		n++
		weighted += weights[t]
	}
	return n, weighted
}
