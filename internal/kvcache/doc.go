// Package kvcache owns the device K/V memory of the engine and the bookkeeping
// of its blocks. It is pure: no goroutines, no I/O, no locks. The engine's
// single scheduler goroutine owns every value of this package.
//
// Key types:
//
//   - Layout: the shape of one block. A block holds BlockSize consecutive token
//     positions for every layer that keeps K/V (attention and MLA layers; a
//     recurrent layer keeps a state checkpoint instead), laid out as
//     [layer][K then V][slot 0..BlockSize-1][kvHead][headDim] (docs/DESIGN.md,
//     "K/V block layout"), in f32, f16 or q8_0 (ggml's block_q8_0: per 32
//     elements of a head row one f16 scale and 32 int8, 34 bytes, so a token
//     costs 17/64 of its f32 bytes; the dtype is part of the cache identity,
//     identity.Descriptor.KVType, so blocks of two dtypes never share a hash
//     chain). Keeping every layer of a position
//     range in one block makes the block the single unit of sharing, hashing,
//     offload and restore: copying a block out is one contiguous copy.
//   - Arena: the K/V memory itself, one slab of NumBlocks blocks back to back,
//     sized from a byte budget. BlockData gives a byte view of one block for
//     the offload tiers.
//   - Pool: ids, reference counts and the free list for NumBlocks blocks. It
//     knows nothing about hashes; the prefix cache (package prefix) builds the
//     "cached" state on top of it.
//   - BlockTable: one sequence's list of block ids; position p lives in block
//     table[p/BlockSize] at slot p%BlockSize.
//
// Block states in a Pool (exactly one holds for every id):
//
//	free        on the free list, ref 0, content meaningless
//	referenced  ref > 0, owned by one or more running sequences
//	cached      ref 0, off the free list: held by its owner (the prefix
//	            index) because its content may be reused
//
// Invariant: Free() + Referenced() + Cached() == NumBlocks(). Reference
// counts panic on misuse (Ref of a free block, Unref below zero, Free of a
// referenced block): those are programmer bugs that would otherwise hand the
// same memory to two sequences.
package kvcache
