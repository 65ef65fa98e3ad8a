package disk

import (
	"hash/crc32"
	"sync/atomic"
)

// CRC-32C algebra for GetChecked, which checks a file's trailer without reading its value
// again (tier.CheckedGetter): the file's checksum is CRC-32C(header ‖ value), and a value the
// reader verified is a tier record, which ends in the little-endian CRC-32C of the bytes
// before it. A message followed by its own CRC has a fixed CRC (recordResidue), so
// CRC-32C(header ‖ value) = crcCombine(CRC-32C(header), recordResidue, len(value)): 112 bytes
// checksummed and one multiplication instead of a pass over the value.
//
// The arithmetic is in GF(2)[x] modulo the Castagnoli polynomial, in the reflected bit order
// hash/crc32 uses (bit 31 is x^0). crc32.Checksum is the oracle of every test (crc_test.go,
// FuzzCRCCombine).

// castagnoliReflected is the Castagnoli polynomial, reflected (crc32.Castagnoli).
const castagnoliReflected = crc32.Castagnoli

// castagnoli is hash/crc32's table, for the constants below and the tests' oracle; the store
// checksums through package crc32c, which returns the same values faster.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordResidue is CRC-32C(m ‖ le32(CRC-32C(m))) for any m: that of the empty message, whose
// CRC is 0.
var recordResidue = crc32.Checksum([]byte{0, 0, 0, 0}, castagnoli)

// gfMul returns a·b mod P.
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 { // a's terms from x^0 up
		if a&m != 0 {
			p ^= b
		}
		// b *= x
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow2k[k] is x^(2^k) mod P, for shifting by n bits in one multiplication per set bit of n.
var xPow2k = func() (t [64]uint32) {
	t[0] = 1 << 30 // x^1
	for k := 1; k < len(t); k++ {
		t[k] = gfMul(t[k-1], t[k-1])
	}
	return t
}()

// xPowBytes returns x^(8n) mod P: the shift of a CRC past n more bytes.
func xPowBytes(n uint64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = gfMul(p, xPow2k[k])
		}
	}
	return p
}

// lastShift caches xPowBytes for the last length asked: every file of a store holds one
// block's record, so they all have the same value length.
var lastShift atomic.Pointer[[2]uint64]

// crcCombine returns CRC-32C(a ‖ b) from crcA = CRC-32C(a), crcB = CRC-32C(b) and len(b).
func crcCombine(crcA, crcB uint32, lenB int) uint32 {
	n := uint64(lenB)
	var shift uint32
	if c := lastShift.Load(); c != nil && c[0] == n {
		shift = uint32(c[1])
	} else {
		shift = xPowBytes(n)
		lastShift.Store(&[2]uint64{n, uint64(shift)})
	}
	return gfMul(crcA, shift) ^ crcB
}
