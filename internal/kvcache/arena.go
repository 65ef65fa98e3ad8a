package kvcache

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrBudget is returned (wrapped, with the numbers) when a memory budget
// holds fewer blocks than needed.
var ErrBudget = errors.New("kvcache: kv memory budget too small")

// Arena is the K/V memory of NumBlocks blocks, back to back in one slab.
// Exactly one of the f32, f16 and q8 slabs is non-nil, chosen by
// Layout.DType. Block id b occupies elements [b*BlockElems, (b+1)*BlockElems)
// of the f32 or f16 slab, or bytes [b*BlockBytes, (b+1)*BlockBytes) of the
// q8 slab (Q8_0 blocks, see Layout).
//
// The Arena does no bookkeeping: who may write a block is decided by the Pool
// that hands out its ids. The arena never moves, so views stay valid for its
// lifetime.
type Arena struct {
	layout    Layout
	numBlocks int
	elems     int // layout.BlockElems(), cached
	f32       []float32
	f16       []uint16
	q8        []byte
}

// NewArena allocates numBlocks blocks of layout l.
func NewArena(l Layout, numBlocks int) (*Arena, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if numBlocks <= 0 {
		return nil, fmt.Errorf("%w: %d blocks requested", ErrBudget, numBlocks)
	}
	a := &Arena{layout: l, numBlocks: numBlocks, elems: l.BlockElems()}
	n := numBlocks * a.elems
	switch l.DType {
	case F32:
		a.f32 = make([]float32, n)
	case F16:
		a.f16 = make([]uint16, n)
	case Q8_0:
		a.q8 = make([]byte, int64(numBlocks)*l.BlockBytes())
	}
	return a, nil
}

// NewArenaForBudget allocates as many blocks of layout l as fit in
// budgetBytes. It fails with ErrBudget when that is fewer than minBlocks
// (for example one full context, so that any single request can run).
func NewArenaForBudget(l Layout, budgetBytes int64, minBlocks int) (*Arena, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	n := l.BlocksFor(budgetBytes)
	if n < minBlocks || n <= 0 {
		return nil, fmt.Errorf("%w: %d bytes hold %d blocks of %d bytes (%d tokens each), need at least %d blocks (%d bytes)",
			ErrBudget, budgetBytes, n, l.BlockBytes(), l.BlockSize, max(minBlocks, 1), int64(max(minBlocks, 1))*l.BlockBytes())
	}
	return NewArena(l, n)
}

// Layout returns the block layout.
func (a *Arena) Layout() Layout { return a.layout }

// NumBlocks returns the number of blocks.
func (a *Arena) NumBlocks() int { return a.numBlocks }

// Bytes returns the size of the slab in bytes.
func (a *Arena) Bytes() int64 { return int64(a.numBlocks) * a.layout.BlockBytes() }

// F32 returns the whole slab when the dtype is F32, else nil. Shared, not a copy.
func (a *Arena) F32() []float32 { return a.f32 }

// F16 returns the whole slab when the dtype is F16, else nil. Shared, not a copy.
func (a *Arena) F16() []uint16 { return a.f16 }

// Q8 returns the whole slab when the dtype is Q8_0, else nil. Shared, not a copy.
func (a *Arena) Q8() []byte { return a.q8 }

func (a *Arena) check(id BlockID) int {
	if id < 0 || int(id) >= a.numBlocks {
		panic(fmt.Sprintf("kvcache: block %d outside arena of %d blocks", id, a.numBlocks))
	}
	return int(id) * a.elems
}

// BlockF32 returns block id's elements (F32 arenas only). Shared, not a copy.
func (a *Arena) BlockF32(id BlockID) []float32 {
	off := a.check(id)
	if a.f32 == nil {
		panic("kvcache: BlockF32 on a " + a.layout.DType.String() + " arena")
	}
	return a.f32[off : off+a.elems : off+a.elems]
}

// BlockF16 returns block id's elements (F16 arenas only). Shared, not a copy.
func (a *Arena) BlockF16(id BlockID) []uint16 {
	off := a.check(id)
	if a.f16 == nil {
		panic("kvcache: BlockF16 on a " + a.layout.DType.String() + " arena")
	}
	return a.f16[off : off+a.elems : off+a.elems]
}

// BlockData returns block id as Layout.BlockBytes() bytes in host byte order,
// for copying a block out to an offload tier or back in. It aliases the arena:
// the caller must copy out before the block is handed to another sequence
// (see prefix.Cache's eviction contract) and may copy in only while it holds
// the block's only reference.
func (a *Arena) BlockData(id BlockID) []byte {
	off := a.check(id)
	n := int(a.layout.BlockBytes())
	switch {
	case a.f32 != nil:
		return unsafe.Slice((*byte)(unsafe.Pointer(&a.f32[off])), n)
	case a.f16 != nil:
		return unsafe.Slice((*byte)(unsafe.Pointer(&a.f16[off])), n)
	}
	b := int(id) * n
	return a.q8[b : b+n : b+n]
}

// CopyBlock copies block src's K/V into block dst.
func (a *Arena) CopyBlock(dst, src BlockID) {
	copy(a.BlockData(dst), a.BlockData(src))
}
