package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"stockpot/internal/gguf"
)

func randFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// randWeight returns a random N×K weight of type t (F32, F16 or BF16).
func randWeight(r *rand.Rand, t gguf.Type, N, K int) *Weight {
	w := &Weight{Type: t, Rows: N, Cols: K, Data: make([]byte, N*t.RowBytes(K))}
	for i := range N * K {
		v := float32(r.NormFloat64() * 0.5)
		switch t {
		case gguf.TypeF32:
			binary.LittleEndian.PutUint32(w.Data[4*i:], math.Float32bits(v))
		case gguf.TypeF16:
			binary.LittleEndian.PutUint16(w.Data[2*i:], f32ToF16(v))
		case gguf.TypeBF16:
			binary.LittleEndian.PutUint16(w.Data[2*i:], f32ToBF16(v))
		}
	}
	return w
}

// oracleMatMul is a float64 MatMul over the activations as the weight type
// rounds them; it also returns Σ|x·w| per element for error bounds.
func oracleMatMul(x []float32, M int, w *Weight) (want, mag []float64) {
	K, N := w.Cols, w.Rows
	want, mag = make([]float64, M*N), make([]float64, M*N)
	xr := make([]float32, K)
	for m := range M {
		switch w.Type {
		case gguf.TypeF16:
			roundF16Ref(xr, x[m*K:m*K+K])
		case gguf.TypeBF16:
			roundBF16(xr, x[m*K:m*K+K])
		default:
			copy(xr, x[m*K:m*K+K])
		}
		for n := range N {
			row := w.Data[n*w.Type.RowBytes(K):]
			for k := range K {
				p := float64(xr[k]) * float64(weightAt(w.Type, row, k))
				want[m*N+n] += p
				mag[m*N+n] += math.Abs(p)
			}
		}
	}
	return want, mag
}

var floatTypes = []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16}

func TestMatMulMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := NewPool(3)
	defer p.Close()
	shapes := []struct{ M, N, K int }{
		{1, 1, 1}, {1, 7, 5}, {3, 5, 16}, {5, 13, 17}, {7, 9, 33}, {13, 11, 64},
		{6, 4, 15}, {1, 64, 100}, {17, 23, 129}, {37, 19, 47},
	}
	for _, typ := range floatTypes {
		for _, s := range shapes {
			t.Run(fmt.Sprintf("%v/%dx%dx%d", typ, s.M, s.N, s.K), func(t *testing.T) {
				w := randWeight(r, typ, s.N, s.K)
				x := randFloats(r, s.M*s.K)
				have := make([]float32, s.M*s.N)
				MatMul(p, have, x, s.M, w)
				want, mag := oracleMatMul(x, s.M, w)
				for i := range have {
					tol := 1e-6*mag[i] + 1e-30
					if math.Abs(float64(have[i])-want[i]) > tol {
						t.Fatalf("element %d: have %v, want %v (tol %g)", i, have[i], want[i], tol)
					}
				}
			})
		}
	}
}

// TestMatMulDeterministic checks the determinism rule: row m of dst is
// bitwise the same whatever M, row split and thread count.
func TestMatMulDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const maxM = 37
	pools := []*Pool{nil, NewPool(1), NewPool(2), NewPool(3)}
	defer func() {
		for _, p := range pools[1:] {
			p.Close()
		}
	}()
	for _, typ := range floatTypes {
		for _, s := range []struct{ N, K int }{{29, 67}, {50, 64}, {7, 200}} {
			w := randWeight(r, typ, s.N, s.K)
			x := randFloats(r, maxM*s.K)
			for _, fam := range append(simdFamilies(), nil) {
				full := make([]float32, maxM*s.N)
				matMulFloat(pools[2], fam, full, x, maxM, w)
				for M := 1; M <= maxM; M++ {
					p := pools[r.IntN(len(pools))]
					have := make([]float32, M*s.N)
					// Compute rows [0, M) in random chunks.
					for m0 := 0; m0 < M; {
						c := 1 + r.IntN(M-m0)
						matMulFloat(p, fam, have[m0*s.N:], x[m0*s.K:(m0+c)*s.K], c, w)
						m0 += c
					}
					for i := range have {
						if math.Float32bits(have[i]) != math.Float32bits(full[i]) {
							t.Fatalf("%s %v N=%d K=%d M=%d threads=%d: element (%d,%d) have %v, want %v",
								famName(fam), typ, s.N, s.K, M, p.Threads(), i/s.N, i%s.N, have[i], full[i])
						}
					}
				}
			}
		}
	}
}

func famName(ks *tileKernels) string {
	if ks == nil {
		return "ref"
	}
	return ks.name
}

// TestTileKernelsMatchReference compares every SIMD family with the
// pure-Go reference on random shapes, odd sizes included.
func TestTileKernelsMatchReference(t *testing.T) {
	fams := simdFamilies()
	if len(fams) == 0 {
		t.Skip("no SIMD kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(11, 12))
	p := NewPool(2)
	defer p.Close()
	for _, fam := range fams {
		for _, typ := range floatTypes {
			for range 40 {
				M, N, K := 1+r.IntN(20), 1+r.IntN(40), 1+r.IntN(300)
				w := randWeight(r, typ, N, K)
				x := randFloats(r, M*K)
				have, want := make([]float32, M*N), make([]float32, M*N)
				matMulFloat(p, fam, have, x, M, w)
				matMulFloat(p, nil, want, x, M, w)
				_, mag := oracleMatMul(x, M, w)
				for i := range have {
					if tol := 2e-6 * mag[i]; math.Abs(float64(have[i]-want[i])) > tol {
						t.Fatalf("%s %v M=%d N=%d K=%d element (%d,%d): have %v, want %v (tol %g)",
							fam.name, typ, M, N, K, i/N, i%N, have[i], want[i], tol)
					}
				}
			}
		}
	}
}

func TestRoundF16MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	src := make([]float32, 1003)
	for i := range src {
		src[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(60)-40)))
	}
	src[0], src[1], src[2] = 65520, -1e-8, float32(math.Inf(1))
	have, want := make([]float32, len(src)), make([]float32, len(src))
	roundF16(have, src)
	roundF16Ref(want, src)
	for i := range have {
		if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
			t.Fatalf("roundF16(%v): have %v, want %v", src[i], have[i], want[i])
		}
	}
}

func TestHalfConversion(t *testing.T) {
	// Every half survives a round trip through f32.
	for h := range 1 << 16 {
		f := f16ToF32(uint16(h))
		if f != f {
			continue
		}
		if back := f32ToF16(f); back != uint16(h) {
			t.Fatalf("half %#04x: have %#04x after round trip (f32 %v)", h, back, f)
		}
	}
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {65519, 0x7bff},
		{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {5.960464477539063e-08, 0x0001},
		{2.9802322387695312e-08, 0x0000}, {2.98023259e-08, 0x0001}, {float32(math.Inf(-1)), 0xfc00},
	}
	for _, tt := range tests {
		if have := f32ToF16(tt.in); have != tt.want {
			t.Errorf("f32ToF16(%v): have %#04x, want %#04x", tt.in, have, tt.want)
		}
	}
	bf := []struct {
		in   uint32
		want uint16
	}{{0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81}, {0x7fc00001, 0x7fc0}, {0x7f800001, 0x7fc0}}
	for _, tt := range bf {
		if have := f32ToBF16(math.Float32frombits(tt.in)); have != tt.want {
			t.Errorf("f32ToBF16(%#08x): have %#04x, want %#04x", tt.in, have, tt.want)
		}
	}
}
