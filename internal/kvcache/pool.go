package kvcache

import (
	"errors"
	"fmt"
)

// BlockID names one block of an Arena/Pool: 0 <= id < NumBlocks. It is an
// int32 so a block table converts to the []int32 the attention kernels take.
type BlockID int32

// ErrNoFreeBlocks is returned (wrapped, with the numbers) when the free list
// cannot satisfy an allocation.
var ErrNoFreeBlocks = errors.New("kvcache: no free blocks")

// Pool is the bookkeeping of NumBlocks block ids: a FIFO free list and one
// reference count per block. See the package doc for the three block states.
//
// The free list is a ring: blocks are handed out in the order they were
// freed. The order is part of the contract (tests and the engine's
// determinism rely on it); it also spreads writes evenly over the arena.
//
// Not safe for concurrent use: the scheduler goroutine owns it.
type Pool struct {
	// refs[b] is block b's reference count. free[b] reports whether b is on
	// the free list. Invariant: free[b] implies refs[b] == 0.
	refs []int32
	free []bool

	// ring holds the free list: ring[(head+i)%len(ring)] for i < nfree, oldest
	// first. Each block is on it at most once, so len(ring) == NumBlocks
	// always suffices.
	ring  []BlockID
	head  int
	nfree int

	// nref counts blocks with refs > 0.
	nref int
}

// NewPool returns a pool of numBlocks blocks, all free, in id order.
func NewPool(numBlocks int) *Pool {
	if numBlocks <= 0 {
		panic(fmt.Sprintf("kvcache: NewPool(%d)", numBlocks))
	}
	p := &Pool{
		refs: make([]int32, numBlocks),
		free: make([]bool, numBlocks),
		ring: make([]BlockID, numBlocks),
	}
	for i := range numBlocks {
		p.ring[i] = BlockID(i)
		p.free[i] = true
	}
	p.nfree = numBlocks
	return p
}

// NumBlocks returns the total number of blocks.
func (p *Pool) NumBlocks() int { return len(p.refs) }

// Free returns the number of blocks on the free list.
func (p *Pool) Free() int { return p.nfree }

// Referenced returns the number of blocks with a reference count above zero.
// It is zero when no sequence is running.
func (p *Pool) Referenced() int { return p.nref }

// Cached returns the number of blocks that are neither free nor referenced.
func (p *Pool) Cached() int { return len(p.refs) - p.nfree - p.nref }

// RefCount returns block id's reference count.
func (p *Pool) RefCount(id BlockID) int { p.check(id); return int(p.refs[id]) }

// IsFree reports whether block id is on the free list.
func (p *Pool) IsFree(id BlockID) bool { p.check(id); return p.free[id] }

func (p *Pool) check(id BlockID) {
	if id < 0 || int(id) >= len(p.refs) {
		panic(fmt.Sprintf("kvcache: block %d outside pool of %d blocks", id, len(p.refs)))
	}
}

// Alloc takes the oldest block off the free list and gives it one reference.
// It returns false when the free list is empty.
func (p *Pool) Alloc() (BlockID, bool) {
	if p.nfree == 0 {
		return -1, false
	}
	id := p.ring[p.head]
	p.head++
	if p.head == len(p.ring) {
		p.head = 0
	}
	p.nfree--
	p.free[id] = false
	p.refs[id] = 1
	p.nref++
	return id, true
}

// AllocN appends n blocks from the free list to dst, each with one reference.
// It takes nothing and fails with ErrNoFreeBlocks when fewer than n are free.
func (p *Pool) AllocN(dst []BlockID, n int) ([]BlockID, error) {
	if n > p.nfree {
		return dst, fmt.Errorf("%w: need %d blocks, %d free of %d", ErrNoFreeBlocks, n, p.nfree, len(p.refs))
	}
	for range n {
		id, _ := p.Alloc()
		dst = append(dst, id)
	}
	return dst, nil
}

// Ref adds a reference to a referenced or cached block. A cached block
// becomes referenced.
//
// REQUIRES: id is not free (panics otherwise: a free block's content is
// garbage and it may be handed out at any moment).
func (p *Pool) Ref(id BlockID) {
	p.check(id)
	if p.free[id] {
		panic(fmt.Sprintf("kvcache: Ref of free block %d", id))
	}
	if p.refs[id] == 0 {
		p.nref++
	}
	p.refs[id]++
}

// Unref drops one reference and returns the count left. At zero the block is
// cached, not free: the caller decides whether to keep it (a prefix index
// holding it) or to give it back with Release.
//
// REQUIRES: refs > 0 (panics otherwise).
func (p *Pool) Unref(id BlockID) int {
	p.check(id)
	if p.free[id] {
		panic(fmt.Sprintf("kvcache: Unref of free block %d", id))
	}
	if p.refs[id] <= 0 {
		panic(fmt.Sprintf("kvcache: Unref of unreferenced block %d", id))
	}
	p.refs[id]--
	if p.refs[id] == 0 {
		p.nref--
	}
	return int(p.refs[id])
}

// Release puts a cached block (ref 0, not free) at the back of the free list.
//
// REQUIRES: id is cached (panics if free or referenced).
func (p *Pool) Release(id BlockID) {
	p.check(id)
	if p.free[id] {
		panic(fmt.Sprintf("kvcache: Release of free block %d (double free)", id))
	}
	if p.refs[id] != 0 {
		panic(fmt.Sprintf("kvcache: Release of block %d with %d references", id, p.refs[id]))
	}
	tail := p.head + p.nfree
	if tail >= len(p.ring) {
		tail -= len(p.ring)
	}
	p.ring[tail] = id
	p.nfree++
	p.free[id] = true
}

// UnrefRelease drops one reference and, if none are left, puts the block on
// the free list. It is the whole release path for blocks nobody caches.
func (p *Pool) UnrefRelease(id BlockID) {
	if p.Unref(id) == 0 {
		p.Release(id)
	}
}

// FreeList returns the free list, oldest first, as a new slice.
func (p *Pool) FreeList() []BlockID {
	out := make([]BlockID, 0, p.nfree)
	for i := range p.nfree {
		out = append(out, p.ring[(p.head+i)%len(p.ring)])
	}
	return out
}

// CheckInvariants verifies the pool's bookkeeping: the free list holds each
// free block exactly once, free blocks have no references, counters match,
// and free + referenced + cached == total.
func (p *Pool) CheckInvariants() error {
	n := len(p.refs)
	if p.nfree < 0 || p.nfree > n {
		return fmt.Errorf("kvcache: free count %d outside [0, %d]", p.nfree, n)
	}
	seen := make([]bool, n)
	for i := range p.nfree {
		id := p.ring[(p.head+i)%n]
		if id < 0 || int(id) >= n {
			return fmt.Errorf("kvcache: free list entry %d is block %d, outside pool of %d", i, id, n)
		}
		if seen[id] {
			return fmt.Errorf("kvcache: block %d on the free list twice", id)
		}
		seen[id] = true
		if !p.free[id] {
			return fmt.Errorf("kvcache: block %d on the free list but not marked free", id)
		}
	}
	nref, nfree := 0, 0
	for id := range n {
		if p.free[id] {
			nfree++
			if !seen[id] {
				return fmt.Errorf("kvcache: block %d marked free but not on the free list", id)
			}
			if p.refs[id] != 0 {
				return fmt.Errorf("kvcache: free block %d has %d references", id, p.refs[id])
			}
		}
		if p.refs[id] < 0 {
			return fmt.Errorf("kvcache: block %d has %d references", id, p.refs[id])
		}
		if p.refs[id] > 0 {
			nref++
		}
	}
	if nfree != p.nfree || nref != p.nref {
		return fmt.Errorf("kvcache: counters free %d referenced %d, recount free %d referenced %d", p.nfree, p.nref, nfree, nref)
	}
	if p.Free()+p.Referenced()+p.Cached() != n {
		return fmt.Errorf("kvcache: free %d + referenced %d + cached %d != total %d", p.Free(), p.Referenced(), p.Cached(), n)
	}
	return nil
}
