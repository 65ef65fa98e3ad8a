package blend

import (
	"math"
	"math/rand/v2"
	"testing"

	"stockpot/internal/kernels"
)

// TestRerotate holds re-rotation to RoPE at the new position: bitwise for a key cached at
// chunk position 0 (what a full prefill stores there), within float tolerance for the rest.
func TestRerotate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const heads, hd = 2, 64
	for _, r := range []kernels.RoPEParams{
		{NDims: hd, Base: 10000},
		{NDims: hd, Base: 1000000, NeoX: true},
		{NDims: 32, Base: 10000, FreqScale: 0.5},
	} {
		for _, delta := range []int{0, 1, 17, 512, 4000} {
			for _, j := range []int{0, 1, 5, 300} {
				k := make([]float32, heads*hd)
				for i := range k {
					k[i] = rng.Float32()*2 - 1
				}
				want := append([]float32(nil), k...)
				kernels.RoPE(want, heads, hd, j+delta, r)
				have := append([]float32(nil), k...)
				kernels.RoPE(have, heads, hd, j, r) // as cached at chunk position j
				Rerotate(have, heads, hd, delta, r)
				for i := range want {
					d := math.Abs(float64(have[i] - want[i]))
					if j == 0 && have[i] != want[i] {
						t.Fatalf("%+v delta %d j 0: element %d have %v want %v bitwise", r, delta, i, have[i], want[i])
					}
					// Angles are f32 products of the position: the error grows with it.
					if tol := 1e-5 + 4e-7*float64(j+delta); d > tol {
						t.Fatalf("%+v delta %d j %d: element %d have %v want %v (|d| %g > %g)", r, delta, j, i, have[i], want[i], d, tol)
					}
				}
			}
		}
	}
}
