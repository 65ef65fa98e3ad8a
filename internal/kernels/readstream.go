package kernels

import "encoding/binary"

// readStreamGo is readStream's reference and tail: the XOR of b's whole
// little-endian 64-bit words.
func readStreamGo(b []byte) uint64 {
	var x uint64
	for ; len(b) >= 8; b = b[8:] {
		x ^= binary.LittleEndian.Uint64(b)
	}
	return x
}
