package kvcache

import (
	"errors"
	"fmt"
	"strings"
)

// DType is the element type of the K/V arena.
type DType uint8

const (
	F32  DType = iota // 4 bytes per element
	F16               // 2 bytes per element, IEEE half, stored as uint16
	Q8_0              // blocks of Q8Block elements: f16 scale d, then Q8Block int8 (34 bytes per 32)
)

// The Q8_0 block, as ggml's block_q8_0: element i of a block is d*qs[i].
// A K or V row is quantized per head, so HeadDim must be a multiple of
// Q8Block (no block straddles two heads).
const (
	Q8Block      = 32
	Q8BlockBytes = 2 + Q8Block
)

// ParseDType parses a K/V type name as the --kv-type flag spells it:
// "f32", "f16" or "q8_0" (case-insensitive).
func ParseDType(s string) (DType, error) {
	for _, d := range []DType{F32, F16, Q8_0} {
		if strings.EqualFold(s, d.String()) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%w: K/V type %q, want f32, f16 or q8_0", ErrLayout, s)
}

// Valid reports whether d is a known dtype.
func (d DType) Valid() bool { return d <= Q8_0 }

// RowBytes returns the bytes of n elements (for Q8_0, n must be a multiple
// of Q8Block).
func (d DType) RowBytes(n int) int {
	switch d {
	case F32:
		return 4 * n
	case F16:
		return 2 * n
	case Q8_0:
		if n%Q8Block != 0 {
			panic(fmt.Sprintf("kvcache: q8_0 row of %d elements, not a multiple of %d", n, Q8Block))
		}
		return n / Q8Block * Q8BlockBytes
	}
	panic(fmt.Sprintf("kvcache: unknown dtype %d", d))
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case Q8_0:
		return "q8_0"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ErrLayout is returned (wrapped) for an invalid Layout.
var ErrLayout = errors.New("kvcache: invalid layout")

// Layout is the shape of one K/V block:
//
//	block = [Layers][2: K then V][BlockSize slots][KVHeads][HeadDim] of DType
//
// For Q8_0 the innermost [HeadDim] is HeadDim/Q8Block blocks of
// Q8BlockBytes bytes, so a row (layer, K|V, slot) is RowBytes() bytes and
// head h of it starts h*DType.RowBytes(HeadDim) bytes in.
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
	if !l.DType.Valid() {
		return fmt.Errorf("%w: dtype %v", ErrLayout, l.DType)
	}
	if l.DType == Q8_0 && l.HeadDim%Q8Block != 0 {
		return fmt.Errorf("%w: q8_0 K/V needs a head dim that is a multiple of %d, have %d", ErrLayout, Q8Block, l.HeadDim)
	}
	return nil
}

// RowElems returns the elements of one (layer, K|V, slot) row: KVHeads*HeadDim.
func (l Layout) RowElems() int { return l.KVHeads * l.HeadDim }

// BlockElems returns the elements in one block: Layers*2*BlockSize*KVHeads*HeadDim.
func (l Layout) BlockElems() int { return l.Layers * 2 * l.BlockSize * l.RowElems() }

// RowBytes returns the bytes of one (layer, K|V, slot) row.
func (l Layout) RowBytes() int { return l.DType.RowBytes(l.RowElems()) }

// BlockBytes returns the bytes in one block: Layers*2*BlockSize*RowBytes().
func (l Layout) BlockBytes() int64 {
	return int64(l.Layers) * 2 * int64(l.BlockSize) * int64(l.RowBytes())
}

// TokenBytes returns the K/V bytes one token position costs (all layers).
func (l Layout) TokenBytes() int64 { return l.BlockBytes() / int64(l.BlockSize) }

// Offset returns the element index, inside a block, of the first element of
// the row (layer, kv, slot), where kv is 0 for K and 1 for V:
//
//	((layer*2 + kv)*BlockSize + slot) * KVHeads*HeadDim
//
// Head h of that row starts HeadDim*h elements later. For Q8_0, whose
// elements are not addressable, see ByteOffset.
func (l Layout) Offset(layer, kv, slot int) int {
	if layer < 0 || layer >= l.Layers || kv < 0 || kv > 1 || slot < 0 || slot >= l.BlockSize {
		panic(fmt.Sprintf("kvcache: offset (layer %d, kv %d, slot %d) outside layout %d layers, block size %d",
			layer, kv, slot, l.Layers, l.BlockSize))
	}
	return ((layer*2+kv)*l.BlockSize + slot) * l.RowElems()
}

// ByteOffset returns the byte offset, inside a block, of the row (layer, kv,
// slot): ((layer*2 + kv)*BlockSize + slot) * RowBytes(). It holds for every
// dtype.
func (l Layout) ByteOffset(layer, kv, slot int) int {
	return l.Offset(layer, kv, slot) / l.RowElems() * l.RowBytes()
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
