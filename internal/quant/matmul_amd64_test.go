//go:build amd64

package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func init() {
	if kVNNI {
		extraVariants = append(extraVariants, variant{"avx2", func() func() {
			kVNNI = false
			return func() { kVNNI = true }
		}})
	}
}

// TestQuantizeQ8_0AVX2 checks the assembly Q8_0 activation quantizer
// against the Go one byte for byte, on values with zeros, ties, outliers,
// infinities and NaNs.
func TestQuantizeQ8_0AVX2(t *testing.T) {
	if !useQ8_0AVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(9, 9))
	const nb = 64
	src := make([]float32, nb*qk0)
	for i := range src {
		b := i / qk0
		switch {
		case b == 0: // all zero
		case b == 1:
			src[i] = float32(i%7) - 3 // exact ties after scaling
		case b == 2 && i%qk0 == 5:
			src[i] = float32(math.Inf(1 - 2*(i%2)))
		case b == 3 && i%qk0 == 9:
			src[i] = float32(math.NaN())
		case b == 4:
			src[i] = float32(r.NormFloat64()) * 1e30
		case b == 5:
			src[i] = float32(r.NormFloat64()) * 1e-30
		default:
			src[i] = float32(r.NormFloat64() * math.Pow(10, float64(b%9-4)))
		}
	}
	have := make([]byte, nb*q8_0Bytes)
	want := make([]byte, nb*q8_0Bytes)
	quantizeRowsQ8_0(src, have, nb)
	quantizeRowsQ8_0Go(src, want, nb)
	for i := range want {
		if have[i] != want[i] {
			t.Fatalf("byte %d (block %d): assembly %#x, Go %#x", i, i/q8_0Bytes, have[i], want[i])
		}
	}
}
