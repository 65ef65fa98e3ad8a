package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestConvSiLU: ConvSiLU against its scalar reference (fused multiply-adds through float64,
// math.Exp) on channel counts around the 8-wide body, inputs spread over SiLU's range and
// its edges (zero, ±80 and past the clamp, NaN): within 4 ulp of the reference, or within
// 1e−30 where the value is that small; the tail channels and a CPU without AVX2 are the
// reference itself, bitwise.
func TestConvSiLU(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, cd := range []int{1, 7, 8, 13, 64, 384} {
		for _, K := range []int{1, 4} {
			n := 6
			win := make([]float32, (n+K-1)*cd)
			for i := range win {
				win[i] = float32(r.NormFloat64() * 3)
			}
			edges := []float32{0, 80, -80, 90, -90, 200, -200, 1e-20, float32(math.NaN())}
			for i, v := range edges {
				if i < len(win) {
					win[i*7%len(win)] = v
				}
			}
			w := make([]float32, cd*K)
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			if K == 1 {
				for i := range w {
					w[i] = 1 // the edges reach SiLU as they are
				}
			}
			wT := TransposeTaps(w, cd, K)
			have, want := make([]float32, n*cd), make([]float32, n*cd)
			ConvSiLU(have, win, wT, cd, K, n)
			convSiLURef(want, win, wT, cd, K, n, 0)
			for i := range want {
				h, w := have[i], want[i]
				ch := i % cd
				switch {
				case math.IsNaN(float64(w)) || math.IsNaN(float64(h)):
					if math.IsNaN(float64(w)) != math.IsNaN(float64(h)) {
						t.Fatalf("cd %d K %d [%d]: %v, want %v", cd, K, i, h, w)
					}
				case ch >= cd&^7 || !convAsm:
					if math.Float32bits(h) != math.Float32bits(w) {
						t.Fatalf("cd %d K %d [%d] (a scalar channel): %v, want %v bitwise", cd, K, i, h, w)
					}
				case math.Abs(float64(h-w)) > 4*ulp(w) && math.Abs(float64(h-w)) > 1e-30:
					t.Fatalf("cd %d K %d [%d]: %v, want %v (%.1f ulp)", cd, K, i, h, w, math.Abs(float64(h-w))/ulp(w))
				}
			}
		}
	}
}

func ulp(x float32) float64 {
	x = float32(math.Abs(float64(x)))
	return float64(math.Nextafter32(x, float32(math.Inf(1))) - x)
}

func TestTransposeTaps(t *testing.T) {
	w := []float32{1, 2, 3, 4, 5, 6} // 2 channels of 3 taps
	if got := TransposeTaps(w, 2, 3); got[0] != 1 || got[1] != 4 || got[2] != 2 || got[3] != 5 || got[4] != 3 || got[5] != 6 {
		t.Fatalf("TransposeTaps: %v", got)
	}
}

func BenchmarkConvSiLU(b *testing.B) {
	const cd, K, n = 384, 4, 512
	win, wT, out := make([]float32, (n+K-1)*cd), make([]float32, K*cd), make([]float32, n*cd)
	for i := range win {
		win[i] = float32(i%17) * 0.1
	}
	for i := range wT {
		wT[i] = 0.3
	}
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			ConvSiLU(out, win, wT, cd, K, n)
		}
	})
	b.Run("reference", func(b *testing.B) {
		for b.Loop() {
			convSiLURef(out, win, wT, cd, K, n, 0)
		}
	})
}
