//go:build amd64

package quant

import (
	"golang.org/x/sys/cpu"

	"stockpot/internal/gguf"
)

// kernels maps weight types to the fastest kernel this CPU runs.
var kernels, kernelName = pickKernels()

// Kernel names the MatMul implementation in use, for benchmarks and logs.
func Kernel() string { return kernelName }

func pickKernels() (map[gguf.Type]kernel, string) {
	k := make(map[gguf.Type]kernel, len(refKernels))
	for t, f := range refKernels {
		k[t] = f
	}
	if !(cpu.X86.HasAVX2 && cpu.X86.HasFMA) {
		return k, "go"
	}
	// F16C (VCVTPH2PS) comes with every AVX2+FMA CPU.
	k[gguf.TypeQ8_0] = func(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
		if pairsAlloc(gguf.TypeQ8_0, dst, ldd, xq, M, w, K, n0, n1) {
			return
		}
		tiles2x2(false, kVNNI, q8_0Bytes, dst, ldd, xq, M, w, K, n0, n1)
	}
	k[gguf.TypeQ4_0] = func(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
		if pairsAlloc(gguf.TypeQ4_0, dst, ldd, xq, M, w, K, n0, n1) {
			return
		}
		tiles2x2(true, kVNNI, q4_0Bytes, dst, ldd, xq, M, w, K, n0, n1)
	}
	k[gguf.TypeQ5_0] = func(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
		if pairsAlloc(gguf.TypeQ5_0, dst, ldd, xq, M, w, K, n0, n1) {
			return
		}
		if kVNNI {
			tilesQ5_0(dst, ldd, xq, M, w, K, n0, n1)
			return
		}
		rowsQ5_0(false, dst, ldd, xq, M, w, K, n0, n1)
	}
	for _, t := range []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
		k[t] = func(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
			tilesK(t, kVNNI, dst, ldd, xq, M, w, K, n0, n1)
		}
	}
	if kVNNI {
		return k, "avx2+vnni"
	}
	return k, "avx2"
}

// pairsAlloc runs MatMul through the pair kernels when they are in use and
// M >= 2, preparing the paired form of xq for this call only (callers that
// run several calls on one x use PreparePairs and MatMulPaired).
func pairsAlloc(t gguf.Type, dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) bool {
	n := PairBytes(M, K)
	if n == 0 {
		return false
	}
	xp := make([]byte, n)
	PreparePairs(xp, xq, M, K, 0, (M+1)/2)
	pairsMatMul(t, dst, ldd, xp, M, w, K, n0, n1)
	return true
}

// kVNNI selects the K-quant kernels that use VPDPWSSD on 256-bit registers.
var kVNNI = cpu.X86.HasAVX512VNNI && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW

//go:noescape
func q8_0TileAVX2(w0, w1, x0, x1 *byte, nb int, acc *[32]float32)

//go:noescape
func q4_0TileAVX2(w0, w1, x0, x1 *byte, nb int, acc *[32]float32)

//go:noescape
func q8_0Tile2x2VNNI(w0, w1, x0, x1 *byte, nb int, acc *[32]float32)

//go:noescape
func q4_0Tile2x2VNNI(w0, w1, x0, x1 *byte, nb int, acc *[32]float32)

//go:noescape
func q5_0Tile2x2VNNI(w0, w1, x0, x1 *byte, nb int, acc *[32]float32)

// tilesQ5_0 is tiles2x2 for Q5_0 weights on AVX512BW+VL machines: 2x2
// tiles over pairs of activation rows (each weight block is unpacked once
// per pair), an odd last row through rowsQ5_0's 4x1 kernel, which runs
// the same per-pair float sequence.
func tilesQ5_0(dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	nb := K / qk0
	row, xrow := nb*q5_0Bytes, nb*q8_0Bytes
	if M%2 == 1 {
		M--
		rowsQ5_0(true, dst[M*ldd:], ldd, xq[M*xrow:], 1, w, K, n0, n1)
		if M == 0 {
			return
		}
	}
	var acc [32]float32
	for n := n0; n < n1; n += 2 {
		nB := min(n+1, n1-1)
		wA, wB := &w[n*row], &w[nB*row]
		for m := 0; m < M; m += 2 {
			mB := m + 1
			q5_0Tile2x2VNNI(wA, wB, &xq[m*xrow], &xq[mB*xrow], nb, &acc)
			dst[m*ldd+n] = hsum8((*[8]float32)(acc[0:8]))
			dst[mB*ldd+n] = hsum8((*[8]float32)(acc[8:16]))
			dst[m*ldd+nB] = hsum8((*[8]float32)(acc[16:24]))
			dst[mB*ldd+nB] = hsum8((*[8]float32)(acc[24:32]))
		}
	}
}

// tiles2x2 runs a 2x2 tile kernel for 32-element blocks (Q8_0 activations)
// over pairs of activation rows; an odd last activation row (all of decode,
// M=1) goes to the 4x1 kernels (row4x1), which compute each weight row by
// the same per-pair instructions. At an odd n edge the 2x2 tile repeats the
// last row and the duplicate results are dropped; every value is computed
// by the same float operations as inside the matrix.
func tiles2x2(q4, vnni bool, wBytes int,
	dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	nb := K / qk0
	row, xrow := nb*wBytes, nb*q8_0Bytes
	if M%2 == 1 {
		M--
		row4x1(q4, vnni, wBytes, dst[M*ldd:], xq[M*xrow:], w, K, n0, n1)
		if M == 0 {
			return
		}
	}
	var acc [32]float32
	for n := n0; n < n1; n += 2 {
		nB := min(n+1, n1-1)
		wA, wB := &w[n*row], &w[nB*row]
		for m := 0; m < M; m += 2 {
			mB := m + 1
			// Direct calls (not a func value) keep acc on the stack.
			switch {
			case q4 && vnni:
				q4_0Tile2x2VNNI(wA, wB, &xq[m*xrow], &xq[mB*xrow], nb, &acc)
			case q4:
				q4_0TileAVX2(wA, wB, &xq[m*xrow], &xq[mB*xrow], nb, &acc)
			case vnni:
				q8_0Tile2x2VNNI(wA, wB, &xq[m*xrow], &xq[mB*xrow], nb, &acc)
			default:
				q8_0TileAVX2(wA, wB, &xq[m*xrow], &xq[mB*xrow], nb, &acc)
			}
			dst[m*ldd+n] = hsum8((*[8]float32)(acc[0:8]))
			dst[mB*ldd+n] = hsum8((*[8]float32)(acc[8:16]))
			dst[m*ldd+nB] = hsum8((*[8]float32)(acc[16:24]))
			dst[mB*ldd+nB] = hsum8((*[8]float32)(acc[24:32]))
		}
	}
}
