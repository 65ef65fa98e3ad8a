package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

func randQuantWeight(t *testing.T, r *rand.Rand, typ gguf.Type, N, K int) (*Weight, []float32) {
	t.Helper()
	w := &Weight{Type: typ, Rows: N, Cols: K, Data: make([]byte, N*typ.RowBytes(K))}
	deq := make([]float32, N*K)
	rb := typ.RowBytes(K)
	for n := range N {
		src := randFloats(r, K)
		if err := quant.QuantizeRow(typ, src, w.Data[n*rb:(n+1)*rb]); err != nil {
			t.Fatalf("QuantizeRow(%v): %v", typ, err)
		}
		if err := quant.DequantizeRow(typ, w.Data[n*rb:(n+1)*rb], deq[n*K:(n+1)*K]); err != nil {
			t.Fatalf("DequantizeRow(%v): %v", typ, err)
		}
	}
	return w, deq
}

// TestMatMulQuantized checks the quant dispatch: bitwise equal to one
// single-threaded quant.MatMul call, bitwise the same for any M split and
// thread count, and close to a float64 product with the dequantized weights.
func TestMatMulQuantized(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	pools := []*Pool{nil, NewPool(2), NewPool(3)}
	defer pools[1].Close()
	defer pools[2].Close()
	for _, typ := range []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
		K := 2 * typ.BlockSize()
		if typ.BlockSize() == 32 {
			K = 96
		}
		const N, maxM = 23, 9
		t.Run(fmt.Sprintf("%v/K=%d", typ, K), func(t *testing.T) {
			w, deq := randQuantWeight(t, r, typ, N, K)
			x := randFloats(r, maxM*K)
			at := quant.ActivationType(typ)
			xq := make([]byte, maxM*at.RowBytes(K))
			for m := range maxM {
				quant.QuantizeActivations(at, x[m*K:(m+1)*K], xq[m*at.RowBytes(K):(m+1)*at.RowBytes(K)])
			}
			want := make([]float32, maxM*N)
			quant.MatMul(typ, want, N, xq, maxM, w.Data, K, 0, N)
			for m := range maxM {
				for n := range N {
					var s, mag float64
					for k := range K {
						p := float64(x[m*K+k]) * float64(deq[n*K+k])
						s += p
						mag += math.Abs(p)
					}
					if got := float64(want[m*N+n]); math.Abs(got-s) > 0.02*mag {
						t.Fatalf("quant.MatMul (%d,%d): have %v, want about %v", m, n, got, s)
					}
				}
			}
			for M := 1; M <= maxM; M++ {
				p := pools[r.IntN(len(pools))]
				have := make([]float32, M*N)
				for m0 := 0; m0 < M; {
					c := 1 + r.IntN(M-m0)
					MatMul(p, have[m0*N:], x[m0*K:(m0+c)*K], c, w)
					m0 += c
				}
				for i := range have {
					if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
						t.Fatalf("M=%d threads=%d element (%d,%d): have %v, want %v", M, p.Threads(), i/N, i%N, have[i], want[i])
					}
				}
			}
		})
	}
}

// BenchmarkMatMulQuantized reports GFLOP/s of the quantized path
// (activation quantization included) for the 135M shapes.
func BenchmarkMatMulQuantized(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	p := NewPool(0)
	defer p.Close()
	t := &testing.T{}
	for _, typ := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
		for _, s := range []struct{ N, K int }{{576, 768}, {1536, 768}} {
			w, _ := randQuantWeight(t, r, typ, s.N, s.K)
			for _, M := range []int{1, 16} { // M=512 takes seconds until quant has SIMD
				x := randFloats(r, M*s.K)
				dst := make([]float32, M*s.N)
				b.Run(fmt.Sprintf("%v/M=%d/%dx%d", typ, M, s.N, s.K), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						MatMul(p, dst, x, M, w)
					}
					b.ReportMetric(2*float64(M*s.N*s.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// TestMatMulsShared checks that MatMuls, which quantizes the activations
// once for consecutive weights of one activation type, gives bitwise what
// one MatMul per weight gives: runs that share (Q5_0, Q8_0, Q4_0 all read
// Q8_0; Q4_K, Q5_K and Q6_K read Q8_K), a float weight between them, and a
// different K that must not share.
func TestMatMulsShared(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	p := NewPool(2)
	defer p.Close()
	const K = 512
	mk := func(typ gguf.Type, N, k int) *Weight {
		if typ == gguf.TypeF32 || typ == gguf.TypeF16 {
			return randWeight(r, typ, N, k)
		}
		w, _ := randQuantWeight(t, r, typ, N, k)
		return w
	}
	ws := []*Weight{
		mk(gguf.TypeQ5_0, 7, K), mk(gguf.TypeQ8_0, 5, K), mk(gguf.TypeQ4_0, 3, K),
		mk(gguf.TypeF16, 4, K),
		mk(gguf.TypeQ4_K, 6, K), mk(gguf.TypeQ5_K, 5, K), mk(gguf.TypeQ6_K, 9, K),
		mk(gguf.TypeQ8_0, 2, K), mk(gguf.TypeQ4_K, 3, K),
	}
	for _, M := range []int{1, 4, 7} {
		x := randFloats(r, M*K)
		for _, pool := range []*Pool{nil, p} {
			have := make([][]float32, len(ws))
			for i, w := range ws {
				have[i] = make([]float32, M*w.Rows)
			}
			MatMuls(pool, x, M, have, ws)
			for i, w := range ws {
				want := make([]float32, M*w.Rows)
				MatMul(pool, want, x, M, w)
				for e := range want {
					if math.Float32bits(have[i][e]) != math.Float32bits(want[e]) {
						t.Fatalf("M=%d weight %d (%v) element %d: MatMuls %v, MatMul %v", M, i, w.Type, e, have[i][e], want[e])
					}
				}
			}
		}
	}
}
