// Package crc32c owns the CRC-32C (Castagnoli, reflected) the tiers checksum their records
// and files with: Update, Checksum and UpdateCopy, bit-identical to hash/crc32 with
// crc32.MakeTable(crc32.Castagnoli), so no record or file format changes with it.
//
// # Why not hash/crc32 alone
//
// A block restored from host RAM is verified on its way into the device pool, and the
// restore is worth doing only while it is much faster than recomputing the prefix; its peer
// is a plain copy() of the same bytes. hash/crc32 runs three streams of the SSE4.2 CRC32
// instruction (about 23 GB/s on a Zen 5 core), which was half the time of a host restore
// and held it at 0.35-0.8x of copy() (issue 23). Folding with VPCLMULQDQ, 4×512 bits a round,
// runs at about 45-50 GB/s from L1 and fuses with the copy: UpdateCopy stores every 64-byte
// vector it loads, so the restore reads its source once, with no 4 KiB chunking. On 16 MiB
// of 512 KiB blocks (BenchmarkUpdateCopyVsCopy, Zen 5) it runs at 0.94-1.0x of copy(), where
// hash/crc32 and copy() chunk by chunk ran at 0.41-0.50x.
//
// # Paths
//
// At start-up amd64 picks, via golang.org/x/sys/cpu, the AVX-512 kernel (VPCLMULQDQ with
// AVX-512 F, BW and VL, plus PCLMULQDQ and SSE4.2) for inputs of 256 bytes and more, else
// hash/crc32; other architectures use hash/crc32 (ARMv8's CRC32 instructions on arm64).
// Inputs under 256 bytes, and the last len%16 bytes of longer ones, always go to hash/crc32.
//
// The kernel (crc32c_amd64.s) keeps four 512-bit accumulators, each folded 256 bytes on per
// round by carry-less multiplies with x^k mod P; then folds them into one, then its four
// 128-bit lanes into one, then finishes with two CRC32 instructions. consts.go derives the
// multipliers from the polynomial at start-up (nothing is pasted) and explains the
// arithmetic; TestFoldConstants checks each against hash/crc32.
//
// # Invariants
//
// Every path returns what hash/crc32 returns for every input, initial CRC and alignment:
// tests compare each path (forced through update/updateCopy, the tests' hook) with
// hash/crc32 on every length at every alignment 0..63 and FuzzUpdate fuzzes them. UpdateCopy
// writes dst[:len(src)] and nothing else; its dst must not overlap src.
//
// Imports: stdlib and golang.org/x/sys/cpu.
package crc32c
