//go:build amd64

package kernels

import "golang.org/x/sys/cpu"

//go:noescape
func readStreamAVX2(p *byte, n int) uint64

// readStream returns the XOR of b's whole 64-bit words (a trailing n%8
// bytes are not read), reading b front to back: see readStreamAVX2.
func readStream(b []byte) uint64 {
	m := len(b) &^ 127
	var x uint64
	if cpu.X86.HasAVX2 && m > 0 {
		x = readStreamAVX2(&b[0], m)
	} else {
		m = 0
	}
	return x ^ readStreamGo(b[m:])
}
