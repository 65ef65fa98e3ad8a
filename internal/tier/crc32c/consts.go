package crc32c

import "hash/crc32"

// The folding multipliers, derived here from the polynomial rather than written down.
//
// Representation. The bytes of a 128-bit lane, loaded little-endian, are a polynomial of
// degree < 128 in the reflected order of hash/crc32: bit i of the lane (bit i%8 of byte i/8)
// is the coefficient of x^(127-i), so the low quadword Q0 holds the higher terms and the lane
// is X = Q0·x^64 + Q1. A carry-less multiply of two reflected 64-bit values A and B gives a
// 128-bit lane holding x·A·B (bit k of the product is the coefficient of x^(126-k)). A 32-bit
// CRC value R (bit 31 is x^0, as in hash/crc32) in the low half of a quadword is R·x^32.
//
// Folding. To move a lane X forward by d bits, onto the lane d bits later in the message,
// the fold adds X·x^d mod P there, as clmul(Q0, k0) ⊕ clmul(Q1, k1), which holds when
// x·k0·x^32 ≡ x^(64+d) and x·k1·x^32 ≡ x^d, that is k0 = x^(d+31) mod P and
// k1 = x^(d-33) mod P. The fold keeps the message's value mod P; the last lane X, with
// X ≡ message, is reduced by two CRC32 instructions (X·x^32 mod P is the CRC state of its 16
// bytes from state 0, which is the message's). TestFoldConstants checks every pair against
// hash/crc32.

// foldPair returns the multipliers (k0, k1) that fold a 128-bit lane forward by d bits.
func foldPair(d int) [2]uint64 {
	return [2]uint64{uint64(xPow(d + 31)), uint64(xPow(d - 33))}
}

// xPow returns x^n mod P, reflected (bit 31 is x^0).
func xPow(n int) uint32 {
	p := uint32(1) << 31
	for range n {
		// p *= x
		if p&1 != 0 {
			p = p>>1 ^ crc32.Castagnoli
		} else {
			p >>= 1
		}
	}
	return p
}

// foldK is the table the assembly reads, as pairs (k0, k1) of foldPair:
//
//	[0:2]   2048 bits: the four 512-bit accumulators, each 256 bytes on per round
//	[2:4]   512 bits: one 512-bit accumulator onto the next (64 bytes on)
//	[4:12]  384, 256, 128, 0 bits: a 512-bit accumulator's lanes 0, 1, 2 onto lane 3 (the zero
//	        pair leaves lane 3 out of the products; it is added unmultiplied)
//	[8:10]  128 bits: one 128-bit lane onto the next
var foldK = func() (k [12]uint64) {
	for i, d := range []int{2048, 512, 384, 256, 128} {
		p := foldPair(d)
		k[2*i], k[2*i+1] = p[0], p[1]
	}
	return k
}()
