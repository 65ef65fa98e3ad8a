//go:build amd64

package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	"stockpot/internal/gguf"
)

var usePairs0, useK5120 = usePairs, useK512

func init() {
	if usePairs || useK512 {
		extraVariants = append(extraVariants, variant{"vnni-nopairs", func() func() {
			usePairs, useK512 = false, false
			return func() { usePairs, useK512 = usePairs0, useK5120 }
		}})
	}
	if kVNNI {
		extraVariants = append(extraVariants, variant{"avx2", func() func() {
			kVNNI, usePairs, useK512 = false, false, false
			return func() { kVNNI, usePairs, useK512 = true, usePairs0, useK5120 }
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

// TestQuantizeQ8_KAVX2 checks the assembly Q8_K activation quantizer against
// quantizeQ8_K byte for byte: an all-zero block, a block of only NaNs and
// zeros, ties between +amax and -amax in either order, infinities, NaNs
// beside finite values, huge and tiny scales, and ordinary activations.
func TestQuantizeQ8_KAVX2(t *testing.T) {
	if !useQ8_0AVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(19, 20))
	const nb = 40
	src := make([]float32, nb*qkK)
	nan := float32(math.NaN())
	for i := range src {
		b, j := i/qkK, i%qkK
		v := float32(r.NormFloat64() * math.Pow(10, float64(b%9-4)))
		switch b {
		case 0: // all zero
			v = 0
		case 1: // NaNs and zeros: amax stays 0
			v = 0
			if j%3 == 0 {
				v = nan
			}
		case 2: // -3 before +3: the first wins
			v = float32(j%7) - 3
		case 3: // +3 before -3
			v = 3 - float32(j%7)
		case 4:
			if j == 77 {
				v = float32(math.Inf(-1))
			}
		case 5:
			if j%50 == 1 {
				v = nan
			}
		case 6:
			v *= 1e30
		case 7:
			v *= 1e-35
		case 8: // the maximum in the last lane
			v = float32(j%5) * 0.25
			if j == qkK-1 {
				v = -9
			}
		}
		src[i] = v
	}
	have := make([]byte, nb*q8_KBytes)
	want := make([]byte, nb*q8_KBytes)
	for i := range have {
		have[i] = 0xAA // every byte must be written
	}
	quantizeRowsQ8_K(src, have, nb)
	quantizeRowsQ8_KGo(src, want, nb)
	for i := range want {
		if have[i] != want[i] {
			t.Fatalf("byte %d (block %d, offset %d): assembly %#x, Go %#x", i, i/q8_KBytes, i%q8_KBytes, have[i], want[i])
		}
	}
}

// TestMatMulPairs checks the pair kernels bit for bit against the reference
// on weights with every quant value (random bytes, so Q8_0's -128 and all
// nibble and 5th-bit patterns occur), activations with extreme quants, odd
// M (a row paired with itself), odd n ranges (a weight row paired with
// itself) and bands of more than four pairs, through MatMulPaired with a
// prepared form and through MatMul.
func TestMatMulPairs(t *testing.T) {
	if !usePairs {
		t.Skip("no AVX-512 VNNI on this CPU")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, ty := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0} {
		for _, K := range []int{32, 96, 576} {
			for _, M := range []int{1, 2, 3, 4, 5, 8, 9, 17} {
				N := 1 + r.IntN(9)
				w := make([]byte, N*ty.RowBytes(K))
				for i := range w {
					w[i] = byte(r.Uint32())
				}
				bb := ty.RowBytes(qk0)
				for b := 0; b < len(w); b += bb { // finite scales
					binary.LittleEndian.PutUint16(w[b:], F32ToF16(float32(r.NormFloat64())*0.01))
				}
				xq := make([]byte, M*q8_0Bytes*K/qk0)
				for i := range xq {
					xq[i] = byte(r.Uint32())
				}
				for b := 0; b < len(xq); b += q8_0Bytes {
					binary.LittleEndian.PutUint16(xq[b:], F32ToF16(float32(r.NormFloat64())))
				}
				xp := make([]byte, PairBytes(M, K))
				PreparePairs(xp, xq, M, K, 0, (M+1)/2)
				for n0 := 0; n0 < min(N, 2); n0++ {
					ldd := N + 1
					want := make([]float32, M*ldd)
					have := make([]float32, M*ldd)
					alloc := make([]float32, M*ldd)
					refKernels[ty](want, ldd, xq, M, w, K, n0, N)
					MatMulPaired(ty, have, ldd, xq, xp, M, w, K, n0, N)
					MatMul(ty, alloc, ldd, xq, M, w, K, n0, N)
					for i := range want {
						if math.Float32bits(have[i]) != math.Float32bits(want[i]) || math.Float32bits(alloc[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v K=%d M=%d N=%d n0=%d element (%d, %d): paired %v, MatMul %v, reference %v",
								ty, K, M, N, n0, i/ldd, i%ldd, have[i], alloc[i], want[i])
						}
					}
				}
			}
		}
	}
}

// FuzzPairKernels fuzzes the shapes (and the bytes) the pair kernels see:
// M activation rows, N weight rows from n0, K = 32*kb, every weight type
// they serve; the result must be the reference's bit for bit.
func FuzzPairKernels(f *testing.F) {
	f.Add(uint8(1), uint8(5), uint8(0), uint8(18), uint8(0), uint64(1))
	f.Add(uint8(4), uint8(9), uint8(1), uint8(3), uint8(1), uint64(2))
	f.Add(uint8(17), uint8(2), uint8(1), uint8(1), uint8(2), uint64(3))
	f.Fuzz(func(t *testing.T, m, n, n0, kb, ti uint8, seed uint64) {
		M, N, K := 1+int(m%20), 1+int(n%24), qk0*(1+int(kb%48))
		lo := int(n0) % N
		ty := []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0}[ti%3]
		xq, w := randomOperands(ty, M, N, K, seed)
		want := make([]float32, M*N)
		have := make([]float32, M*N)
		refKernels[ty](want, N, xq, M, w, K, lo, N)
		MatMul(ty, have, N, xq, M, w, K, lo, N)
		for i := range want {
			if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v M=%d N=%d K=%d n0=%d element %d: have %v, want %v", ty, M, N, K, lo, i, have[i], want[i])
			}
		}
	})
}

// BenchmarkPairsVsTiles compares, in one run, the pair kernels (paired form
// made once, as internal/kernels does) with the AVX2/VNNI tiles they
// replace, for decode (M=1), four streams (M=4) and a prefill band (M=64),
// on a 1536x576 projection that stays in cache (arithmetic, not memory).
func BenchmarkPairsVsTiles(b *testing.B) {
	if !usePairs {
		b.Skip("no AVX-512 VNNI")
	}
	const N, K = 1536, 576
	for _, ty := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ5_0, gguf.TypeQ4_0} {
		for _, M := range []int{1, 4, 64} {
			xq, w := randomOperands(ty, M, N, K, 7)
			xp := make([]byte, PairBytes(M, K))
			PreparePairs(xp, xq, M, K, 0, (M+1)/2)
			dst := make([]float32, M*N)
			for _, pairs := range []bool{true, false} {
				b.Run(fmt.Sprintf("%v/M=%d/pairs=%v", ty, M, pairs), func(b *testing.B) {
					usePairs = pairs
					defer func() { usePairs = true }()
					for b.Loop() {
						if pairs {
							MatMulPaired(ty, dst, N, xq, xp, M, w, K, 0, N)
						} else {
							MatMul(ty, dst, N, xq, M, w, K, 0, N)
						}
					}
					b.ReportMetric(float64(M*N*K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
				})
			}
		}
	}
}

// BenchmarkK512VsTiles compares, in one run, the AVX-512 K-quant kernels
// with the AVX2/VNNI one-row-by-four tiles they replace, for decode (M=1),
// four streams (M=4) and a prefill band (M=64), on a 576x768 projection
// that stays in cache (arithmetic, not memory).
func BenchmarkK512VsTiles(b *testing.B) {
	if !useK512 {
		b.Skip("no AVX-512 VNNI")
	}
	const N, K = 576, 768
	for _, ty := range []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
		for _, M := range []int{1, 4, 64} {
			xq, w := randomOperands(ty, M, N, K, 7)
			dst := make([]float32, M*N)
			for _, k512 := range []bool{true, false} {
				b.Run(fmt.Sprintf("%v/M=%d/k512=%v", ty, M, k512), func(b *testing.B) {
					useK512 = k512
					defer func() { useK512 = useK5120 }()
					for b.Loop() {
						MatMul(ty, dst, N, xq, M, w, K, 0, N)
					}
					b.ReportMetric(float64(M*N*K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
				})
			}
		}
	}
}

// TestQ5_0RowsAVX2 checks the AVX2 (non-VNNI) Q5_0 path's two kernels
// against each other: four activation rows at a time (q5_0Tile1x4AVX2, a
// weight block unpacked once for them) give bitwise what each row alone
// gives (q5_0Tile4x1AVX2), so a token's values do not depend on how many
// rows its product had (a decode step's one, a prefill chunk's hundreds).
func TestQ5_0RowsAVX2(t *testing.T) {
	if !(cpu.X86.HasAVX2 && cpu.X86.HasFMA) {
		t.Skip("no AVX2 on this CPU: the Go reference runs, and TestMatMul covers it")
	}
	r := rand.New(rand.NewPCG(21, 22))
	for _, K := range []int{32, 96, 576} {
		for _, M := range []int{4, 5, 8, 11} {
			N := 1 + r.IntN(13)
			ty := gguf.TypeQ5_0
			w := make([]byte, N*ty.RowBytes(K))
			for i := range w {
				w[i] = byte(r.Uint32())
			}
			for b := 0; b < len(w); b += ty.RowBytes(qk0) {
				binary.LittleEndian.PutUint16(w[b:], F32ToF16(float32(r.NormFloat64())*0.01))
			}
			xrow := K / qk0 * q8_0Bytes
			xq := make([]byte, M*xrow)
			for i := range xq {
				xq[i] = byte(r.Uint32())
			}
			for b := 0; b < len(xq); b += q8_0Bytes {
				binary.LittleEndian.PutUint16(xq[b:], F32ToF16(float32(r.NormFloat64())))
			}
			got := make([]float32, M*N)
			rowsQ5_0(false, got, N, xq, M, w, K, 0, N)
			for m := range M {
				want := make([]float32, N)
				rowsQ5_0(false, want, N, xq[m*xrow:(m+1)*xrow], 1, w, K, 0, N)
				for n := range N {
					if math.Float32bits(got[m*N+n]) != math.Float32bits(want[n]) {
						t.Fatalf("K=%d M=%d (%d,%d): %d rows %v, alone %v", K, M, m, n, M, got[m*N+n], want[n])
					}
				}
			}
		}
	}
}

// BenchmarkQ5_0RowsStream times rowsQ5_0 without VNNI at one and four activation rows
// (single-stream and 4-stream decode) over 52 MB of Q5_0 weights, more than the caches
// hold, as a model's products stream them: ns per weight block × activation row.
func BenchmarkQ5_0RowsStream(b *testing.B) {
	if !(cpu.X86.HasAVX2 && cpu.X86.HasFMA) {
		b.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(1, 2))
	K, N := 576, 131072
	w := make([]byte, N*gguf.TypeQ5_0.RowBytes(K))
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for _, M := range []int{1, 4} {
		xq := make([]byte, M*K/qk0*q8_0Bytes)
		for i := range xq {
			xq[i] = byte(r.Uint32() % 100)
		}
		dst := make([]float32, M*N)
		b.Run(fmt.Sprint("rows=", M), func(b *testing.B) {
			for b.Loop() {
				rowsQ5_0(false, dst, N, xq, M, w, K, 0, N)
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/float64(M*N*K/qk0), "ns/block-pair")
		})
	}
}
