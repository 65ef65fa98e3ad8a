package kvcache

import (
	"fmt"
	"unsafe"
)

// BlockTable is one sequence's list of blocks. Token position p lives in
// block Blocks()[p/BlockSize] at slot p%BlockSize. The table only names
// blocks; the references they carry belong to whoever appended them (the
// engine), which releases what Truncate and Reset return.
type BlockTable struct {
	blockSize int
	blocks    []BlockID
}

// NewBlockTable returns an empty table for blocks of blockSize positions.
func NewBlockTable(blockSize int) *BlockTable {
	if blockSize <= 0 {
		panic(fmt.Sprintf("kvcache: NewBlockTable(%d)", blockSize))
	}
	return &BlockTable{blockSize: blockSize}
}

// BlockSize returns the positions per block.
func (t *BlockTable) BlockSize() int { return t.blockSize }

// Len returns the number of blocks.
func (t *BlockTable) Len() int { return len(t.blocks) }

// Capacity returns the token positions the blocks hold: Len()*BlockSize.
func (t *BlockTable) Capacity() int { return len(t.blocks) * t.blockSize }

// Blocks returns the block ids in position order. Shared, not a copy: valid
// until the next Append, Truncate, Set or Reset.
func (t *BlockTable) Blocks() []BlockID { return t.blocks }

// Int32s returns the block ids as []int32 for kernels.PagedKV.Table.
// Shared, not a copy, with the same lifetime as Blocks.
func (t *BlockTable) Int32s() []int32 {
	if len(t.blocks) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&t.blocks[0])), len(t.blocks))
}

// Block returns the i-th block.
func (t *BlockTable) Block(i int) BlockID { return t.blocks[i] }

// Locate returns the block and slot of token position pos.
// REQUIRES: 0 <= pos < Capacity() (panics otherwise).
func (t *BlockTable) Locate(pos int) (BlockID, int) {
	if pos < 0 || pos >= t.Capacity() {
		panic(fmt.Sprintf("kvcache: position %d outside table of %d blocks x %d", pos, len(t.blocks), t.blockSize))
	}
	return t.blocks[pos/t.blockSize], pos % t.blockSize
}

// Needed returns how many more blocks the table needs to hold tokens
// positions in all (0 if it already does).
func (t *BlockTable) Needed(tokens int) int {
	return max(0, BlocksForTokens(tokens, t.blockSize)-len(t.blocks))
}

// Append adds blocks at the end.
func (t *BlockTable) Append(ids ...BlockID) { t.blocks = append(t.blocks, ids...) }

// Set replaces the i-th block (for example with the canonical copy of a block
// computed twice). The caller moves the references.
func (t *BlockTable) Set(i int, id BlockID) { t.blocks[i] = id }

// Truncate keeps the first n blocks and returns the removed ones in position
// order, as a new slice the caller owns (and releases).
func (t *BlockTable) Truncate(n int) []BlockID {
	if n < 0 || n > len(t.blocks) {
		panic(fmt.Sprintf("kvcache: Truncate(%d) of table with %d blocks", n, len(t.blocks)))
	}
	removed := append([]BlockID(nil), t.blocks[n:]...)
	t.blocks = t.blocks[:n]
	return removed
}

// TruncateTokens keeps the blocks holding the first tokens positions and
// returns the removed ones (see Truncate).
func (t *BlockTable) TruncateTokens(tokens int) []BlockID {
	return t.Truncate(min(len(t.blocks), BlocksForTokens(tokens, t.blockSize)))
}

// Reset empties the table and returns all its blocks (see Truncate).
func (t *BlockTable) Reset() []BlockID { return t.Truncate(0) }
