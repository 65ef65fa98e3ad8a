//go:build amd64

package quant

import (
	"golang.org/x/sys/cpu"

	"stockpot/internal/gguf"
)

//go:generate go run asmgen_pair.go asmgen_prefetch.go

//go:noescape
func preparePair(xa, xb *byte, nb int, dst *byte)

//go:noescape
func q8_0Rows4(w *byte, rowBytes, nq int, xp *byte, nb int, out *float32)

//go:noescape
func q4_0Rows4(w *byte, rowBytes, nq int, xp *byte, nb int, out *float32)

//go:noescape
func q5_0Rows4(w *byte, rowBytes, nq int, xp *byte, nb int, out *float32)

//go:noescape
func q8_0Pairs1(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q8_0Pairs2(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q8_0Pairs3(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q8_0Pairs4(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q4_0Pairs1(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q4_0Pairs2(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q4_0Pairs3(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q4_0Pairs4(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q5_0Pairs1(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q5_0Pairs2(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q5_0Pairs3(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

//go:noescape
func q5_0Pairs4(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)

// pairBlock is the paired form's bytes per pair and block (asmgen_pair.go).
const pairBlock = 192

// usePairs selects the AVX-512 pair kernels for Q8_0, Q4_0 and Q5_0 weights
// (one activation row: the Rows4 kernels; more: the Pairs kernels); tests turn it off to compare with the
// 2x2 tiles. Both compute every value by the reference's float sequence.
var usePairs = kVNNI && cpu.X86.HasAVX512F

// PairBytes returns the size of the paired form of M Q8_0 activation rows
// of K elements that MatMulPaired reads, or 0 when the kernels in use do
// not read it (no AVX-512 VNNI, or K not a multiple of 32). One row is
// paired with itself.
func PairBytes(M, K int) int {
	if !usePairs || M < 1 || K <= 0 || K%qk0 != 0 {
		return 0
	}
	return (M + 1) / 2 * (K / qk0) * pairBlock
}

// PreparePairs writes pairs [p0, p1) of the paired form of xq's M Q8_0
// rows into xp (PairBytes(M, K) bytes): pair p holds rows 2p and 2p+1, the
// last row paired with itself when M is odd.
func PreparePairs(xp, xq []byte, M, K, p0, p1 int) {
	nb := K / qk0
	xrow := nb * q8_0Bytes
	if len(xq) < M*xrow || len(xp) < (M+1)/2*nb*pairBlock || p0 < 0 || p1 > (M+1)/2 {
		panic("quant: PreparePairs: bad shapes")
	}
	for q := p0; q < p1; q++ {
		b := min(2*q+1, M-1)
		preparePair(&xq[2*q*xrow], &xq[b*xrow], nb, &xp[q*nb*pairBlock])
	}
}

// MatMulPaired is MatMul given also xp, the paired form of xq
// (PreparePairs; nil or empty when PairBytes is 0). The values are
// MatMul's.
func MatMulPaired(t gguf.Type, dst []float32, ldd int, xq, xp []byte, M int, w []byte, K int, n0, n1 int) {
	if len(xp) == 0 || !pairType(t) {
		MatMul(t, dst, ldd, xq, M, w, K, n0, n1)
		return
	}
	if K <= 0 || K%qk0 != 0 || M <= 0 || n0 >= n1 {
		MatMul(t, dst, ldd, xq, M, w, K, n0, n1)
		return
	}
	if n0 < 0 || len(w) < n1*t.RowBytes(K) || len(xp) < (M+1)/2*(K/qk0)*pairBlock || ldd < n1 || len(dst) < (M-1)*ldd+n1 {
		panic("quant: MatMulPaired: bad shapes")
	}
	pairsMatMul(t, dst, ldd, xp, M, w, K, n0, n1)
}

func pairType(t gguf.Type) bool {
	return t == gguf.TypeQ8_0 || t == gguf.TypeQ4_0 || t == gguf.TypeQ5_0
}

// callPairs calls the kernel for P pairs (1..4) of weight type t. The calls are
// direct, not through a func value, so that outs (and the arrays it points
// into) stay on the caller's stack: an indirect call's arguments escape.
func callPairs(t gguf.Type, P int, w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32) {
	switch t {
	case gguf.TypeQ8_0:
		switch P {
		case 1:
			q8_0Pairs1(w, rowBytes, nw, xp, stride, nb, outs)
		case 2:
			q8_0Pairs2(w, rowBytes, nw, xp, stride, nb, outs)
		case 3:
			q8_0Pairs3(w, rowBytes, nw, xp, stride, nb, outs)
		default:
			q8_0Pairs4(w, rowBytes, nw, xp, stride, nb, outs)
		}
	case gguf.TypeQ4_0:
		switch P {
		case 1:
			q4_0Pairs1(w, rowBytes, nw, xp, stride, nb, outs)
		case 2:
			q4_0Pairs2(w, rowBytes, nw, xp, stride, nb, outs)
		case 3:
			q4_0Pairs3(w, rowBytes, nw, xp, stride, nb, outs)
		default:
			q4_0Pairs4(w, rowBytes, nw, xp, stride, nb, outs)
		}
	default:
		switch P {
		case 1:
			q5_0Pairs1(w, rowBytes, nw, xp, stride, nb, outs)
		case 2:
			q5_0Pairs2(w, rowBytes, nw, xp, stride, nb, outs)
		case 3:
			q5_0Pairs3(w, rowBytes, nw, xp, stride, nb, outs)
		default:
			q5_0Pairs4(w, rowBytes, nw, xp, stride, nb, outs)
		}
	}
}

// rows4 calls the Rows4 kernel of weight type t, directly (see callPairs).
func rows4(t gguf.Type, w *byte, rowBytes, nq int, xp *byte, nb int, out *float32) {
	switch t {
	case gguf.TypeQ8_0:
		q8_0Rows4(w, rowBytes, nq, xp, nb, out)
	case gguf.TypeQ4_0:
		q4_0Rows4(w, rowBytes, nq, xp, nb, out)
	default:
		q5_0Rows4(w, rowBytes, nq, xp, nb, out)
	}
}

// pairsMatMul runs the pair kernels over bands of up to four pairs (eight
// activation rows); each band streams weight rows n0..n1-1 once. An odd
// last weight row runs as a pair with itself (row stride 0) into a scratch.
// A duplicated activation row writes the same value to the same place.
func pairsMatMul(t gguf.Type, dst []float32, ldd int, xp []byte, M int, w []byte, K, n0, n1 int) {
	if M == 1 {
		rowsMatMul(t, dst, xp, w, K, n0, n1)
		return
	}
	nb := K / qk0
	row := t.RowBytes(K)
	stride := nb * pairBlock
	pairs := (M + 1) / 2
	nw := (n1 - n0) / 2
	odd := (n1-n0)%2 == 1
	var outs, tails [8]*float32
	var scratch [16]float32
	for q0 := 0; q0 < pairs; q0 += 4 {
		P := min(4, pairs-q0)
		for q := range P {
			a, b := 2*(q0+q), min(2*(q0+q)+1, M-1)
			outs[2*q], outs[2*q+1] = &dst[a*ldd+n0], &dst[b*ldd+n0]
			tails[2*q], tails[2*q+1] = &scratch[4*q], &scratch[4*q+2]
		}
		if nw > 0 {
			callPairs(t, P, &w[n0*row], row, nw, &xp[q0*stride], stride, nb, &outs)
		}
		if odd {
			n := n1 - 1
			callPairs(t, P, &w[n*row], 0, 1, &xp[q0*stride], stride, nb, &tails)
			for q := range P {
				a, b := 2*(q0+q), min(2*(q0+q)+1, M-1)
				dst[b*ldd+n] = scratch[4*q+2]
				dst[a*ldd+n] = scratch[4*q]
			}
		}
	}
}

// rowsMatMul is pairsMatMul for one activation row (xp: the row paired
// with itself): four weight rows per kernel iteration, the n1-n0 %4 last
// rows one at a time as a quad of copies (row stride 0) into a scratch.
func rowsMatMul(t gguf.Type, dst []float32, xp []byte, w []byte, K, n0, n1 int) {
	nb := K / qk0
	row := t.RowBytes(K)
	nq := (n1 - n0) / 4
	if nq > 0 {
		rows4(t, &w[n0*row], row, nq, &xp[0], nb, &dst[n0])
	}
	var scratch [4]float32
	for n := n0 + 4*nq; n < n1; n++ {
		rows4(t, &w[n*row], 0, 1, &xp[0], nb, &scratch[0])
		dst[n] = scratch[0]
	}
}
