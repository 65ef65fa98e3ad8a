package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"stockpot/internal/gguf"
)

var weightTypes = []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}

// randomOperands quantizes random weights (N x K) and activations (M x K).
func randomOperands(t gguf.Type, M, N, K int, seed uint64) (xq, w []byte) {
	r := rand.New(rand.NewPCG(seed, 1))
	row := make([]float32, K)
	w = make([]byte, N*t.RowBytes(K))
	for n := range N {
		for i := range row {
			row[i] = float32(r.NormFloat64()) * 0.05
		}
		if err := QuantizeRow(t, row, w[n*t.RowBytes(K):(n+1)*t.RowBytes(K)]); err != nil {
			panic(err)
		}
	}
	at := ActivationType(t)
	x := make([]float32, M*K)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	xq = make([]byte, M*at.RowBytes(K))
	QuantizeActivations(at, x, xq)
	return xq, w
}

// TestMatMulKernels compares every kernel in use with the reference, bit for
// bit, on odd shapes and sub-ranges of n.
func TestMatMulKernels(t *testing.T) {
	for _, v := range variants() {
		undo := v.set()
		checkKernels(t, v.name)
		undo()
	}
}

// variant is a kernel selection to test and benchmark besides the default.
type variant struct {
	name string
	set  func() (undo func())
}

// extraVariants are filled in by per-architecture test files.
var extraVariants []variant

func variants() []variant {
	return append([]variant{{Kernel(), func() func() { return func() {} }}}, extraVariants...)
}

func checkKernels(t *testing.T, name string) {
	for _, ty := range weightTypes {
		for _, sh := range []struct{ M, N, K, n0, n1 int }{
			{1, 1, 256, 0, 1}, {2, 3, 256, 0, 3}, {3, 5, 512, 1, 5}, {5, 7, 768, 0, 7},
			{7, 9, 256, 2, 9}, {4, 16, 1024, 3, 13}, {6, 1, 256, 0, 1},
			// Several cache bands of activation rows for the K-quant tiles.
			{23, 3, 4096, 0, 3}, {45, 2, 2048, 1, 2},
		} {
			xq, w := randomOperands(ty, sh.M, sh.N, sh.K, uint64(sh.M*1000+sh.N))
			ldd := sh.N + 3
			want := make([]float32, sh.M*ldd)
			have := make([]float32, sh.M*ldd)
			refKernels[ty](want, ldd, xq, sh.M, w, sh.K, sh.n0, sh.n1)
			MatMul(ty, have, ldd, xq, sh.M, w, sh.K, sh.n0, sh.n1)
			for m := range sh.M {
				for n := range ldd {
					h, wv := have[m*ldd+n], want[m*ldd+n]
					if math.Float32bits(h) != math.Float32bits(wv) {
						t.Errorf("%s %s M=%d N=%d K=%d n=[%d,%d): (m=%d, n=%d): have %v, want %v",
							ty, name, sh.M, sh.N, sh.K, sh.n0, sh.n1, m, n, h, wv)
					}
				}
			}
			// Row m of the result is the same whatever M is, and column n
			// the same whatever n0 and n1 are.
			one := make([]float32, ldd)
			for m := range sh.M {
				MatMul(ty, one, ldd, xq[m*ActivationType(ty).RowBytes(sh.K):], 1, w, sh.K, sh.n0, sh.n1)
				for n := sh.n0; n < sh.n1; n++ {
					if math.Float32bits(one[n]) != math.Float32bits(have[m*ldd+n]) {
						t.Errorf("%s M=1 vs M=%d at (m=%d, n=%d): have %v, want %v", ty, sh.M, m, n, one[n], have[m*ldd+n])
					}
					MatMul(ty, one, ldd, xq[m*ActivationType(ty).RowBytes(sh.K):], 1, w, sh.K, n, n+1)
					if math.Float32bits(one[n]) != math.Float32bits(have[m*ldd+n]) {
						t.Errorf("%s n=[%d,%d) vs one column at (m=%d, n=%d): have %v, want %v", ty, sh.n0, sh.n1, m, n, one[n], have[m*ldd+n])
					}
				}
			}
		}
	}
}

// TestMatMulAccuracy checks the quantized product against the float product
// of the dequantized operands (a sanity check of the formats, not of ggml).
func TestMatMulAccuracy(t *testing.T) {
	const M, N, K = 3, 4, 512
	for _, ty := range weightTypes {
		xq, w := randomOperands(ty, M, N, K, 7)
		dst := make([]float32, M*N)
		MatMul(ty, dst, N, xq, M, w, K, 0, N)
		wf, xf := make([]float32, K), make([]float32, K)
		at := ActivationType(ty)
		for m := range M {
			DequantizeRow(at, xq[m*at.RowBytes(K):(m+1)*at.RowBytes(K)], xf)
			for n := range N {
				DequantizeRow(ty, w[n*ty.RowBytes(K):(n+1)*ty.RowBytes(K)], wf)
				var want float64
				for i := range K {
					want += float64(wf[i]) * float64(xf[i])
				}
				if have := float64(dst[m*N+n]); math.Abs(have-want) > 1e-4*(1+math.Abs(want)) {
					t.Errorf("%s (m=%d, n=%d): have %v, want %v", ty, m, n, have, want)
				}
			}
		}
	}
}

func TestQuantizeRowErrors(t *testing.T) {
	tests := []struct {
		t      gguf.Type
		n, nb  int
		errMsg string
	}{
		{gguf.TypeQ8_0, 33, 34, "not a multiple of the block size 32"},
		{gguf.TypeQ8_0, 32, 33, "takes 34 bytes, have 33"},
		{gguf.Type(7), 32, 24, "unsupported type Q5_1"},
		{gguf.TypeQ5_K, 255, 176, "not a multiple of the block size 256"},
	}
	for _, tt := range tests {
		err := QuantizeRow(tt.t, make([]float32, tt.n), make([]byte, tt.nb))
		if err == nil || !strings.Contains(err.Error(), tt.errMsg) {
			t.Errorf("QuantizeRow(%s, %d, %d): have %v, want %q", tt.t, tt.n, tt.nb, err, tt.errMsg)
		}
	}
}

// BenchmarkMatMul measures a prefill-shaped product (M=64 tokens, a 576x576
// projection like SmolLM-135M) for the kernel in use and the reference.
func BenchmarkMatMul(b *testing.B) { benchMatMul(b, 64) }

// BenchmarkMatMulDecode is the decode shape: one token (M=1) against the
// same 576x576 projection.
func BenchmarkMatMulDecode(b *testing.B) { benchMatMul(b, 1) }

func benchMatMul(b *testing.B, M int) {
	const N, K = 576, 576
	for _, ty := range weightTypes {
		Kq := K
		if ty.BlockSize() == 256 {
			Kq = 768
		}
		xq, w := randomOperands(ty, M, N, Kq, 1)
		dst := make([]float32, M*N)
		impls := []variant{{"ref", nil}}
		if Kernel() != "go" {
			impls = append(variants(), impls...)
		}
		for _, impl := range impls {
			k := refKernels[ty]
			if impl.set != nil {
				k = kernels[ty]
			}
			b.Run(fmt.Sprintf("%s/%s", ty, impl.name), func(b *testing.B) {
				if impl.set != nil {
					defer impl.set()()
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					k(dst, N, xq, M, w, Kq, 0, N)
				}
				b.ReportMetric(float64(M*N*Kq)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// TestMatMulDecodeRows checks the decode path (M=1, which the Q8_0 and Q4_0
// kernels tile differently from M>1) bit for bit against the same row
// computed inside an M=5 call and against the reference, for every n edge
// shape of the 2x2 and 4x1 tiles.
func TestMatMulDecodeRows(t *testing.T) {
	const M, K = 5, 512
	for _, v := range variants() {
		undo := v.set()
		for _, ty := range weightTypes {
			Kq := K
			if ty.BlockSize() == 256 {
				Kq = 768
			}
			xrow := ActivationType(ty).RowBytes(Kq)
			for N := 1; N <= 11; N++ {
				xq, w := randomOperands(ty, M, N, Kq, uint64(100+N))
				for n0 := 0; n0 < min(N, 3); n0++ {
					want := make([]float32, M*N)
					all := make([]float32, M*N)
					refKernels[ty](want, N, xq, M, w, Kq, n0, N)
					MatMul(ty, all, N, xq, M, w, Kq, n0, N)
					for m := range M {
						one := make([]float32, N)
						MatMul(ty, one, N, xq[m*xrow:(m+1)*xrow], 1, w, Kq, n0, N)
						for n := n0; n < N; n++ {
							a, o, r := math.Float32bits(all[m*N+n]), math.Float32bits(one[n]), math.Float32bits(want[m*N+n])
							if a != r || o != r {
								t.Errorf("%s %s N=%d n0=%d (m=%d, n=%d): M=1 %v, M=%d %v, reference %v",
									ty, v.name, N, n0, m, n, one[n], M, all[m*N+n], want[m*N+n])
							}
						}
					}
				}
			}
		}
		undo()
	}
}

// FuzzKQuantKernels fuzzes the shapes (and the weight bytes) the Q4_K,
// Q5_K and Q6_K kernels see: M activation rows (across cache bands), N
// weight rows from n0, K = 256*kb, with raw=1 every byte of each weight
// block but its f16 scales random (any scale, min and level pattern). Every
// kernel variant must give the reference's bits, and row m the same bits as
// an M=1 call (the determinism rule).
func FuzzKQuantKernels(f *testing.F) {
	f.Add(uint8(1), uint8(5), uint8(0), uint8(1), uint8(0), uint8(0), uint64(1))
	f.Add(uint8(4), uint8(9), uint8(1), uint8(3), uint8(1), uint8(1), uint64(2))
	f.Add(uint8(17), uint8(2), uint8(1), uint8(2), uint8(2), uint8(0), uint64(3))
	f.Add(uint8(45), uint8(3), uint8(2), uint8(16), uint8(1), uint8(1), uint64(4))
	f.Fuzz(func(t *testing.T, m, n, n0, kb, ti, raw uint8, seed uint64) {
		M, N, K := 1+int(m%48), 1+int(n%12), qkK*(1+int(kb%16))
		lo := int(n0) % N
		ty := []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}[ti%3]
		xq, w := randomOperands(ty, M, N, K, seed)
		if raw%2 == 1 {
			r := rand.New(rand.NewPCG(seed, 2))
			bb := ty.BlockBytes()
			for b := 0; b < len(w); b += bb {
				for i := range bb {
					if keep := (ty == gguf.TypeQ6_K && i >= 208) || (ty != gguf.TypeQ6_K && i < 4); !keep {
						w[b+i] = byte(r.Uint32())
					}
				}
			}
		}
		want := make([]float32, M*N)
		refKernels[ty](want, N, xq, M, w, K, lo, N)
		xrow := ActivationType(ty).RowBytes(K)
		for _, v := range variants() {
			undo := v.set()
			have := make([]float32, M*N)
			MatMul(ty, have, N, xq, M, w, K, lo, N)
			one := make([]float32, N)
			for mm := range M {
				MatMul(ty, one, N, xq[mm*xrow:], 1, w, K, lo, N)
				for i := mm * N; i < (mm+1)*N; i++ {
					if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v %s M=%d N=%d K=%d n0=%d element %d: have %v, want %v", ty, v.name, M, N, K, lo, i, have[i], want[i])
					}
					if math.Float32bits(one[i-mm*N]) != math.Float32bits(have[i]) {
						t.Fatalf("%v %s M=%d row %d: M=1 gives %v, M=%d gives %v", ty, v.name, M, mm, one[i-mm*N], M, have[i])
					}
				}
			}
			undo()
		}
	})
}
