package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"stockpot/internal/gguf"
)

// kernel computes dst[m*ldd+n] for m < M, n0 <= n < n1. Arguments are
// validated by MatMul.
type kernel func(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int)

// MatMul sets dst[m*ldd+n] = dot(w row n, x row m) for m < M and
// n0 <= n < n1. w holds rows of K elements of type t (Q4_0, Q5_0, Q8_0, Q4_K,
// Q5_K or Q6_K); xq holds M rows of K elements already in ActivationType(t).
// Mis-sized arguments are programmer bugs and panic.
//
// The value for (m, n) is computed by the same float operations whatever M,
// n0 and n1 are (see the package doc).
func MatMul(t gguf.Type, dst []float32, ldd int, xq []byte, M int, w []byte, K int, n0, n1 int) {
	at := ActivationType(t)
	if K <= 0 || K%t.BlockSize() != 0 {
		panic(fmt.Sprintf("quant: MatMul %s: K=%d is not a positive multiple of %d", t, K, t.BlockSize()))
	}
	if M <= 0 || n0 >= n1 {
		return
	}
	if n0 < 0 || len(w) < n1*t.RowBytes(K) || len(xq) < M*at.RowBytes(K) || ldd < n1 || len(dst) < (M-1)*ldd+n1 {
		panic(fmt.Sprintf("quant: MatMul %s: bad shapes: M=%d K=%d n=[%d,%d) ldd=%d len(w)=%d len(xq)=%d len(dst)=%d",
			t, M, K, n0, n1, ldd, len(w), len(xq), len(dst)))
	}
	kernels[t](dst, ldd, xq, M, w, K, n0, n1)
}

// refKernels are the pure-Go references every SIMD kernel must match bit
// for bit.
var refKernels = map[gguf.Type]kernel{
	gguf.TypeQ4_0: matmulQ4_0Ref,
	gguf.TypeQ5_0: matmulQ5_0Ref,
	gguf.TypeQ8_0: matmulQ8_0Ref,
	gguf.TypeQ4_K: matmulQ4_KRef,
	gguf.TypeQ5_K: matmulQ5_KRef,
	gguf.TypeQ6_K: matmulQ6_KRef,
}

func matmulRef(dot func(w, x []byte, nb int) float32, wBytes, xBytes, blockSize int) kernel {
	return func(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
		nb := K / blockSize
		for m := range M {
			x := xq[m*nb*xBytes : (m+1)*nb*xBytes]
			for n := n0; n < n1; n++ {
				dst[m*ldd+n] = dot(w[n*nb*wBytes:(n+1)*nb*wBytes], x, nb)
			}
		}
	}
}

func matmulQ4_0Ref(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	matmulRef(dotQ4_0, q4_0Bytes, q8_0Bytes, qk0)(dst, ldd, xq, M, w, K, n0, n1)
}

func matmulQ5_0Ref(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	matmulRef(dotQ5_0, q5_0Bytes, q8_0Bytes, qk0)(dst, ldd, xq, M, w, K, n0, n1)
}

func matmulQ8_0Ref(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	matmulRef(dotQ8_0, q8_0Bytes, q8_0Bytes, qk0)(dst, ldd, xq, M, w, K, n0, n1)
}

func matmulQ4_KRef(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	matmulRef(dotQ4_K, q4_KBytes, q8_KBytes, qkK)(dst, ldd, xq, M, w, K, n0, n1)
}

func matmulQ5_KRef(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	matmulRef(dotQ5_K, q5_KBytes, q8_KBytes, qkK)(dst, ldd, xq, M, w, K, n0, n1)
}

func matmulQ6_KRef(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	matmulRef(dotQ6_K, q6_KBytes, q8_KBytes, qkK)(dst, ldd, xq, M, w, K, n0, n1)
}

// dotQ8_0 mirrors ggml_vec_dot_q8_0_q8_0 (AVX2): lane k of a block holds the
// exact sum of elements 4k..4k+3; acc[k] = fma(d_w*d_x, lane, acc[k]).
func dotQ8_0(w, x []byte, nb int) float32 {
	var acc [8]float32
	for b := range nb {
		wb, xb := w[b*q8_0Bytes:], x[b*q8_0Bytes:]
		d := f16At(wb, 0) * f16At(xb, 0)
		for k := range 8 {
			var s int32
			for e := 4 * k; e < 4*k+4; e++ {
				s += int32(int8(wb[2+e])) * int32(int8(xb[2+e]))
			}
			acc[k] = fma32(d, float32(s), acc[k])
		}
	}
	return hsum8(&acc)
}

// dotQ4_0 mirrors ggml_vec_dot_q4_0_q8_0 (AVX2); element e < 16 is the low
// nibble of byte e, element e >= 16 the high nibble of byte e-16.
func dotQ4_0(w, x []byte, nb int) float32 {
	var acc [8]float32
	for b := range nb {
		wb, xb := w[b*q4_0Bytes:], x[b*q8_0Bytes:]
		d := f16At(wb, 0) * f16At(xb, 0)
		for k := range 8 {
			var s int32
			for e := 4 * k; e < 4*k+4; e++ {
				q := int32(wb[2+e%16]>>(4*(e/16))&0xf) - 8
				s += q * int32(int8(xb[2+e]))
			}
			acc[k] = fma32(d, float32(s), acc[k])
		}
	}
	return hsum8(&acc)
}

// dotQ5_0 mirrors ggml_vec_dot_q5_0_q8_0 (AVX2): dotQ4_0 with 5-bit levels
// minus 16.
func dotQ5_0(w, x []byte, nb int) float32 {
	var acc [8]float32
	for b := range nb {
		wb, xb := w[b*q5_0Bytes:], x[b*q8_0Bytes:]
		d := f16At(wb, 0) * f16At(xb, 0)
		for k := range 8 {
			var s int32
			for e := 4 * k; e < 4*k+4; e++ {
				s += (int32(q5At(wb, e)) - 16) * int32(int8(xb[2+e]))
			}
			acc[k] = fma32(d, float32(s), acc[k])
		}
	}
	return hsum8(&acc)
}

func q8KScale(x []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(x)) }

func bsum(x []byte, i int) int32 { return int32(int16(binary.LittleEndian.Uint16(x[4+qkK+2*i:]))) }

// dotQ4_K mirrors ggml_vec_dot_q4_K_q8_K (AVX2). Lane k sums, over the four
// 64-element chunks j, scale[2j]*low-nibble products of bytes 4k..4k+3 plus
// scale[2j+1]*high-nibble products. The mins go through a 4-lane
// accumulator: lane i = min[2i]*S[2i] + min[2i+1]*S[2i+1], S[s] the sum of
// the activations of sub-block s.
func dotQ4_K(w, x []byte, nb int) float32 {
	var acc [8]float32
	var accM [4]float32
	for b := range nb {
		wb, xb := w[b*q4_KBytes:], x[b*q8_KBytes:]
		yd := q8KScale(xb)
		d := yd * f16At(wb, 0)
		dmin := -yd * f16At(wb, 2)
		var sc, mn [8]int32
		for j := range 8 {
			s, m := scaleMinK4(j, wb[4:16])
			sc[j], mn[j] = int32(s), int32(m)
		}
		for i := range 4 {
			s0 := bsum(xb, 4*i) + bsum(xb, 4*i+1)
			s1 := bsum(xb, 4*i+2) + bsum(xb, 4*i+3)
			accM[i] = fma32(dmin, float32(mn[2*i]*s0+mn[2*i+1]*s1), accM[i])
		}
		qs, q8 := wb[16:], xb[4:]
		for k := range 8 {
			var sum int32
			for j := range 4 {
				var lo, hi int32
				for e := 4 * k; e < 4*k+4; e++ {
					q := qs[32*j+e]
					lo += int32(q&0xf) * int32(int8(q8[64*j+e]))
					hi += int32(q>>4) * int32(int8(q8[64*j+32+e]))
				}
				sum += sc[2*j]*lo + sc[2*j+1]*hi
			}
			acc[k] = fma32(d, float32(sum), acc[k])
		}
	}
	return hsum8(&acc) + hsum4(&accM)
}

// dotQ5_K mirrors ggml_vec_dot_q5_K_q8_K (AVX2): the lanes are dotQ4_K's
// with 5-bit levels; the mins go through one scalar instead of dotQ4_K's
// 4 lanes: summs = fma(dmin, Σ_s min[s]*S[s], summs) per super-block (the
// integer sum is exact; the C `summs += dmin * sum` compiles to an FMA).
func dotQ5_K(w, x []byte, nb int) float32 {
	var acc [8]float32
	var summs float32
	for b := range nb {
		wb, xb := w[b*q5_KBytes:], x[b*q8_KBytes:]
		yd := q8KScale(xb)
		d := yd * f16At(wb, 0)
		dmin := -yd * f16At(wb, 2)
		var sc, mn [8]int32
		for j := range 8 {
			s, m := scaleMinK4(j, wb[4:16])
			sc[j], mn[j] = int32(s), int32(m)
		}
		var ms int32
		for s := range 8 {
			ms += mn[s] * (bsum(xb, 2*s) + bsum(xb, 2*s+1))
		}
		summs = fma32(dmin, float32(ms), summs)
		qh, qs, q8 := wb[16:48], wb[48:], xb[4:]
		for k := range 8 {
			var sum int32
			for j := range 4 {
				var lo, hi int32
				for e := 4 * k; e < 4*k+4; e++ {
					lo += int32(q5KAt(qs, qh, 64*j+e)) * int32(int8(q8[64*j+e]))
					hi += int32(q5KAt(qs, qh, 64*j+32+e)) * int32(int8(q8[64*j+32+e]))
				}
				sum += sc[2*j]*lo + sc[2*j+1]*hi
			}
			acc[k] = fma32(d, float32(sum), acc[k])
		}
	}
	return hsum8(&acc) + summs
}

// dotQ6_K mirrors ggml_vec_dot_q6_K_q8_K (AVX2). Lane k sums, over the eight
// 32-element parts p, scale[2p + (k >= 4)] times the products of bytes
// 4k..4k+3 with the unsigned levels, minus 32*(S[2k]*scale[2k] +
// S[2k+1]*scale[2k+1]) with S the 16-element activation sums.
func dotQ6_K(w, x []byte, nb int) float32 {
	var acc [8]float32
	for b := range nb {
		wb, xb := w[b*q6_KBytes:], x[b*q8_KBytes:]
		d := q8KScale(xb) * f16At(wb, 208)
		sc := wb[192:208]
		q8 := xb[4:]
		for k := range 8 {
			var sum int32
			for p := range 8 {
				var s int32
				for e := 4 * k; e < 4*k+4; e++ {
					s += q6At(wb, 32*p+e) * int32(int8(q8[32*p+e]))
				}
				sum += int32(int8(sc[2*p+k/4])) * s
			}
			sum -= 32 * (bsum(xb, 2*k)*int32(int8(sc[2*k])) + bsum(xb, 2*k+1)*int32(int8(sc[2*k+1])))
			acc[k] = fma32(d, float32(sum), acc[k])
		}
	}
	return hsum8(&acc)
}
