package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestActivations: Exp, Sigmoid and Softplus against their scalar references over their
// whole useful range and its edges (±0, the clamps, ±Inf, NaN), on lengths around the 8-wide
// body: within 4 ulp, or 1e−37 where the value is that small; past the vector exp's clamp
// (x > 88) Exp gives e^88, finite. Tail elements, and a CPU without AVX2, are the references
// bitwise.
func TestActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	edges := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 20, 20.5, 19.5, -86, -87, -90, 87.9, 88,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1, -1, 0.3466, -0.3466}
	for _, tc := range []struct {
		name string
		f    func([]float32)
		ref  func(float32) float32
	}{
		{"exp", Exp, func(x float32) float32 { return float32(math.Exp(float64(x))) }},
		{"sigmoid", Sigmoid, SigmoidRef},
		{"softplus", Softplus, SoftplusRef},
	} {
		for _, n := range []int{1, 7, 8, 9, 64, 1003} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.Float64()*180 - 90)
				if i%3 == 0 {
					x[i] = float32(r.NormFloat64() * 2)
				}
			}
			for i, e := range edges {
				if i < n {
					x[(i*5)%n] = e
				}
			}
			have := append([]float32(nil), x...)
			tc.f(have)
			for i, v := range x {
				h, w := have[i], tc.ref(v)
				switch {
				case math.IsNaN(float64(w)) || math.IsNaN(float64(h)):
					if math.IsNaN(float64(w)) != math.IsNaN(float64(h)) {
						t.Fatalf("%s(%v) [n %d]: %v, want %v", tc.name, v, n, h, w)
					}
				case i >= n&^7 || !actAsm:
					if math.Float32bits(h) != math.Float32bits(w) {
						t.Fatalf("%s(%v) [n %d, a scalar element]: %v, want %v bitwise", tc.name, v, n, h, w)
					}
				case tc.name == "exp" && v > 88:
					if h != float32(math.Exp(88)) && math.Abs(float64(h)-math.Exp(88)) > 4*ulp(float32(math.Exp(88))) {
						t.Fatalf("exp(%v): %v, want e^88", v, h)
					}
				case math.Abs(float64(h-w)) > tolerance(tc.name, w):
					t.Fatalf("%s(%v) [n %d]: %v, want %v (%.1f ulp)", tc.name, v, n, h, w, math.Abs(float64(h-w))/ulp(w))
				}
			}
		}
	}
}

// TestActivationsDense sweeps the ranges the models use, finely: softplus and sigmoid over
// [−30, 30], exp over [−86, 88]; the worst ulp is logged (softplus's only above 1, where its
// sum's rounding does not dominate).
func TestActivationsDense(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      func([]float32)
		ref    func(float32) float32
		lo, hi float32
	}{
		{"exp", Exp, func(x float32) float32 { return float32(math.Exp(float64(x))) }, -86, 88},
		{"sigmoid", Sigmoid, SigmoidRef, -30, 30},
		{"softplus", Softplus, SoftplusRef, -30, 30},
	} {
		const n = 1 << 16
		x := make([]float32, n)
		for i := range x {
			x[i] = tc.lo + (tc.hi-tc.lo)*float32(i)/n
		}
		have := append([]float32(nil), x...)
		tc.f(have)
		worst := 0.0
		for i, v := range x {
			w := tc.ref(v)
			d := math.Abs(float64(have[i] - w))
			if d > tolerance(tc.name, w) {
				t.Errorf("%s(%v): %v, want %v", tc.name, v, have[i], w)
				break
			}
			if d > 1e-37 && (tc.name != "softplus" || w > 1) {
				worst = max(worst, d/ulp(w))
			}
		}
		if worst > 4 {
			t.Errorf("%s over [%v, %v]: worst %.1f ulp", tc.name, tc.lo, tc.hi, worst)
		}
		t.Logf("%s over [%v, %v]: worst %.2f ulp", tc.name, tc.lo, tc.hi, worst)
	}
}

func BenchmarkActivations(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%200)*0.1 - 10
	}
	y := make([]float32, len(x))
	for _, tc := range []struct {
		name string
		f    func([]float32)
		ref  func(float32) float32
	}{{"softplus", Softplus, SoftplusRef}, {"sigmoid", Sigmoid, SigmoidRef}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				copy(y, x)
				tc.f(y)
			}
		})
		b.Run(tc.name+"-ref", func(b *testing.B) {
			for b.Loop() {
				for i, v := range x {
					y[i] = tc.ref(v)
				}
			}
		})
	}
}

// tolerance is how far an activation's vector path may be from its reference at w: 4 ulp,
// or 1e−37 where w is that small. Softplus adds an ulp of 1: ln(1+e^x) rounds 1+e^x to
// single precision first (ggml's formula, the reference's too), so where e^x is small an ulp
// of difference in e^x is an ulp of 1 in the sum, and about that much in its log.
func tolerance(name string, w float32) float64 {
	tol := max(4*ulp(w), 1e-37)
	if name == "softplus" {
		tol += 0x1p-23
	}
	return tol
}
