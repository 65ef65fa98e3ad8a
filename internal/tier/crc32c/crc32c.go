package crc32c

import "hash/crc32"

// castagnoli is hash/crc32's table for the Castagnoli polynomial; crc32.Update recognises it
// and uses the SSE4.2 (amd64) or ARMv8 CRC instructions.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// impl names a way of computing the CRC; active holds the fastest one this CPU runs.
type impl int

const (
	implGeneric impl = iota // hash/crc32
	implAVX512              // 4×512-bit folding with VPCLMULQDQ (AVX-512 F, BW, VL), finished with CRC32
)

func (k impl) String() string {
	switch k {
	case implAVX512:
		return "avx512-vpclmulqdq"
	default:
		return "hash/crc32"
	}
}

// active is the implementation Update and UpdateCopy use, chosen once at start-up.
var active = best()

// copyChunk is how many bytes the hash/crc32 path of UpdateCopy checksums and then copies at
// a time: the chunk is read from memory once, by the checksum, and copied out of the L1
// cache, so the bytes cross the memory bus once instead of twice. 4 KiB measured best on a
// Xeon with a 48 KiB L1 (16 KiB chunks: 0.67x of copy(), 4 KiB: 0.81x, 2 KiB: 0.63x, where
// hash/crc32's three-way interleave no longer pays off). The folding paths need no chunks:
// they copy each vector they load.
const copyChunk = 4 << 10

// Update returns the CRC-32C of b appended to the bytes whose CRC-32C is crc: exactly
// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), b).
func Update(crc uint32, b []byte) uint32 { return update(active, crc, b) }

// Checksum returns the CRC-32C of b: Update(0, b).
func Checksum(b []byte) uint32 { return update(active, 0, b) }

// UpdateCopy copies src into dst and returns Update(crc, src), reading src once.
//
// REQUIRES: len(dst) >= len(src) (panics otherwise); dst and src do not overlap.
func UpdateCopy(crc uint32, dst, src []byte) uint32 { return updateCopy(active, crc, dst, src) }

// update is Update through k, which tests name to check each path.
//
// REQUIRES: supported(k).
func update(k impl, crc uint32, b []byte) uint32 {
	if k != implGeneric && len(b) >= minFold {
		return fold(crc, nil, b)
	}
	return crc32.Update(crc, castagnoli, b)
}

// updateCopy is UpdateCopy through k.
//
// REQUIRES: supported(k).
func updateCopy(k impl, crc uint32, dst, src []byte) uint32 {
	dst = dst[:len(src)]
	if k != implGeneric && len(src) >= minFold {
		return fold(crc, dst, src)
	}
	for off := 0; off < len(src); off += copyChunk {
		c := src[off:min(off+copyChunk, len(src))]
		crc = crc32.Update(crc, castagnoli, c)
		copy(dst[off:], c)
	}
	return crc
}
