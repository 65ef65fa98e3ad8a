package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestReadStream checks the read loop against the Go reference on random
// lengths and alignments (it is a benchmark's yardstick, so it must read
// every byte it claims to).
func TestReadStream(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	buf := make([]byte, 1<<16+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for range 500 {
		off := r.IntN(64)
		n := r.IntN(len(buf) - off + 1)
		b := buf[off : off+n]
		if got, want := readStream(b), readStreamGo(b); got != want {
			t.Fatalf("offset %d length %d: %#x, want %#x", off, n, got, want)
		}
	}
}
