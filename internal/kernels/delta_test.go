package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// deltaStepRowMajor is the model's step on a row-major state (internal/model's deltaStep).
func deltaStepRowMajor(st, q, k, v, decay, delta, o []float32, beta, scale float32) {
	S := len(delta)
	dot := func(a, b []float32) float32 {
		var s float32
		for i, x := range a {
			s = fmaf(x, b[i], s)
		}
		return s
	}
	for j := range S {
		row := st[j*S : (j+1)*S]
		for i := range row {
			if len(decay) == 1 {
				row[i] *= decay[0]
			} else {
				row[i] *= decay[i]
			}
		}
	}
	for j := range S {
		delta[j] = (v[j] - dot(st[j*S:(j+1)*S], k)) * beta
	}
	for j := range S {
		row := st[j*S : (j+1)*S]
		for i, kk := range k {
			row[i] = fmaf(kk, delta[j], row[i])
		}
	}
	for j := range S {
		o[j] = dot(st[j*S:(j+1)*S], q) * scale
	}
}

// TestDeltaStepT: over a run of tokens, the transposed step (the AVX2 kernel where it runs,
// the scalar one everywhere) leaves every bit of the state and the outputs as the row-major
// reference does, for per-channel (KDA) and per-head (Gated DeltaNet) decay, at the state
// sizes the kernel takes and one it leaves to the scalar path.
func TestDeltaStepT(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	vec := func(n int, scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * scale)
		}
		return x
	}
	for _, S := range []int{16, 32, 64, 128, 24} {
		for _, perChannel := range []bool{true, false} {
			st := vec(S*S, 0.3)
			stT := make([]float32, S*S)
			TransposeSquare(stT, st, S)
			ref := append([]float32(nil), stT...)
			for tok := range 12 {
				q, k, v := vec(S, 0.2), vec(S, 0.2), vec(S, 1)
				decay := []float32{float32(math.Exp(-r.Float64()))}
				if perChannel {
					decay = make([]float32, S)
					for i := range decay {
						decay[i] = float32(math.Exp(-r.Float64()))
					}
				}
				beta, scale := float32(r.Float64()), 1/float32(math.Sqrt(float64(S)))
				dA, oA := make([]float32, S), make([]float32, S)
				dB, oB := make([]float32, S), make([]float32, S)
				dC, oC := make([]float32, S), make([]float32, S)
				DeltaStepT(stT, q, k, v, decay, dA, oA, beta, scale)
				deltaStepTRef(ref, q, k, v, decay, dB, oB, beta, scale)
				deltaStepRowMajor(st, q, k, v, decay, dC, oC, beta, scale)
				back := make([]float32, S*S)
				TransposeSquare(back, stT, S)
				for j := range S {
					if bits(oA[j]) != bits(oB[j]) || bits(oA[j]) != bits(oC[j]) || bits(dA[j]) != bits(dC[j]) {
						t.Fatalf("S=%d per-channel=%v token %d row %d: o %v / %v / %v, delta %v / %v", S, perChannel, tok, j, oA[j], oB[j], oC[j], dA[j], dC[j])
					}
				}
				for i := range st {
					if bits(back[i]) != bits(st[i]) || bits(stT[i]) != bits(ref[i]) {
						t.Fatalf("S=%d per-channel=%v token %d: state element %d is %v, reference %v", S, perChannel, tok, i, back[i], st[i])
					}
				}
			}
		}
	}
}

func bits(x float32) uint32 { return math.Float32bits(x) }

func BenchmarkDeltaStepT(b *testing.B) {
	const S = 64
	r := rand.New(rand.NewPCG(1, 1))
	vec := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 0.1)
		}
		return x
	}
	st, q, k, v, decay := vec(S*S), vec(S), vec(S), vec(S), vec(S)
	for i := range decay {
		decay[i] = 0.99
	}
	d, o := make([]float32, S), make([]float32, S)
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			DeltaStepT(st, q, k, v, decay, d, o, 0.5, 0.125)
		}
	})
	b.Run("scalar", func(b *testing.B) {
		for b.Loop() {
			deltaStepRowMajor(st, q, k, v, decay, d, o, 0.5, 0.125)
		}
	})
}
