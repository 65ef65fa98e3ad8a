package kvcache

import (
	"errors"
	"fmt"
)

// DType is the element type of the K/V arena.
type DType uint8

const (
	F32 DType = iota // 4 bytes per element
	F16              // 2 bytes per element, IEEE half, stored as uint16
)

// Size returns the bytes per element.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16:
		return 2
	}
	panic(fmt.Sprintf("kvcache: unknown dtype %d", d))
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ErrLayout is returned (wrapped) for an invalid Layout.
var ErrLayout = errors.New("kvcache: invalid layout")

// Layout is the shape of one K/V block:
//
//	block = [Layers][2: K then V][BlockSize slots][KVHeads][HeadDim] of DType
type Layout struct {
	BlockSize int // token positions per block
	Layers    int
	KVHeads   int
	HeadDim   int
	DType     DType
}

// Validate reports whether every dimension is positive and the dtype known.
func (l Layout) Validate() error {
	if l.BlockSize <= 0 || l.Layers <= 0 || l.KVHeads <= 0 || l.HeadDim <= 0 {
		return fmt.Errorf("%w: block size %d, layers %d, kv heads %d, head dim %d must all be > 0",
			ErrLayout, l.BlockSize, l.Layers, l.KVHeads, l.HeadDim)
	}
	if l.DType != F32 && l.DType != F16 {
		return fmt.Errorf("%w: dtype %v", ErrLayout, l.DType)
	}
	return nil
}

// RowElems returns the elements of one (layer, K|V, slot) row: KVHeads*HeadDim.
func (l Layout) RowElems() int { return l.KVHeads * l.HeadDim }

// BlockElems returns the elements in one block: Layers*2*BlockSize*KVHeads*HeadDim.
func (l Layout) BlockElems() int { return l.Layers * 2 * l.BlockSize * l.RowElems() }

// BlockBytes returns the bytes in one block.
func (l Layout) BlockBytes() int64 { return int64(l.BlockElems()) * int64(l.DType.Size()) }

// TokenBytes returns the K/V bytes one token position costs (all layers).
func (l Layout) TokenBytes() int64 { return l.BlockBytes() / int64(l.BlockSize) }

// Offset returns the element index, inside a block, of the first element of
// the row (layer, kv, slot), where kv is 0 for K and 1 for V:
//
//	((layer*2 + kv)*BlockSize + slot) * KVHeads*HeadDim
//
// Head h of that row starts HeadDim*h elements later.
func (l Layout) Offset(layer, kv, slot int) int {
	if layer < 0 || layer >= l.Layers || kv < 0 || kv > 1 || slot < 0 || slot >= l.BlockSize {
		panic(fmt.Sprintf("kvcache: offset (layer %d, kv %d, slot %d) outside layout %d layers, block size %d",
			layer, kv, slot, l.Layers, l.BlockSize))
	}
	return ((layer*2+kv)*l.BlockSize + slot) * l.RowElems()
}

// BlocksFor returns how many whole blocks fit in budgetBytes (0 for a
// negative budget).
func (l Layout) BlocksFor(budgetBytes int64) int {
	if budgetBytes <= 0 {
		return 0
	}
	return int(budgetBytes / l.BlockBytes())
}

// BlocksForTokens returns the blocks needed to hold n token positions:
// ceil(n / blockSize).
func BlocksForTokens(n, blockSize int) int {
	if n <= 0 {
		return 0
	}
	return (n + blockSize - 1) / blockSize
}

func (l Layout) String() string {
	return fmt.Sprintf("block %d tokens x %d layers x %d kv heads x %d dims %v (%d bytes)",
		l.BlockSize, l.Layers, l.KVHeads, l.HeadDim, l.DType, l.BlockBytes())
}
