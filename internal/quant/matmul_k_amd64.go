//go:build amd64

package quant

import (
	"golang.org/x/sys/cpu"

	"stockpot/internal/gguf"
)

//go:generate go run asmgen_k.go
//go:generate go run asmgen_k512.go asmgen_prefetch.go

//go:noescape
func q4_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32, dst *float32, ldd int)

//go:noescape
func q4_KTile1x1AVX2(w, x *byte, nb int, acc *[12]float32, rows int, dst *float32)

//go:noescape
func q6_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32, dst *float32, ldd int)

//go:noescape
func q6_KTile1x1AVX2(w, x *byte, nb int, acc *[8]float32, rows int, dst *float32)

//go:noescape
func q5_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32, dst *float32, ldd int)

//go:noescape
func q5_KTile1x1AVX2(w, x *byte, nb int, acc *[12]float32, rows int, dst *float32)

//go:noescape
func q5_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32, dst *float32, ldd int)

//go:noescape
func q5_KTile1x1VNNI(w, x *byte, nb int, acc *[12]float32, rows int, dst *float32)

//go:noescape
func q4_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32, dst *float32, ldd int)

//go:noescape
func q4_KTile1x1VNNI(w, x *byte, nb int, acc *[12]float32, rows int, dst *float32)

//go:noescape
func q6_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32, dst *float32, ldd int)

//go:noescape
func q6_KTile1x1VNNI(w, x *byte, nb int, acc *[8]float32, rows int, dst *float32)

//go:noescape
func q4_KRows2x1(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q4_KRows2x2(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q4_KRows2x3(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q4_KRows2x4(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q5_KRows2x1(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q5_KRows2x2(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q5_KRows2x3(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q5_KRows2x4(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q6_KRows2x1(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q6_KRows2x2(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q6_KRows2x3(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

//go:noescape
func q6_KRows2x4(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)

// useK512 selects the AVX-512 kernels (matmul_k512_amd64.s); tests turn it
// off to compare with the AVX2/VNNI tiles. Both compute every value by the
// reference's float sequence.
var useK512 = kVNNI && cpu.X86.HasAVX512F

// rowsK is MatMul on AVX-512: bands of up to four activation rows, each
// streaming weight rows n0..n1-1 once, two weight rows per kernel
// iteration; an odd last weight row runs as a pair with itself (row stride
// 0) into a scratch.
func rowsK(t gguf.Type, dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	nb := K / qkK
	row, xrow := t.RowBytes(K), nb*q8_KBytes
	nw := (n1 - n0) / 2
	var scratch [8]float32
	for m := 0; m < M; m += 4 {
		R := min(4, M-m)
		x := &xq[m*xrow]
		if nw > 0 {
			rows2K(t, R, &w[n0*row], row, nw, x, xrow, nb, &dst[m*ldd+n0], 4*ldd)
		}
		if (n1-n0)%2 == 1 {
			rows2K(t, R, &w[(n1-1)*row], 0, 1, x, xrow, nb, &scratch[0], 8)
			for r := range R {
				dst[(m+r)*ldd+n1-1] = scratch[2*r]
			}
		}
	}
}

// rows2K calls the kernel for type t and R activation rows. Direct calls
// (not a func value) keep the scratch on the caller's stack.
func rows2K(t gguf.Type, R int, w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int) {
	switch {
	case t == gguf.TypeQ4_K && R == 1:
		q4_KRows2x1(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case t == gguf.TypeQ4_K && R == 2:
		q4_KRows2x2(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case t == gguf.TypeQ4_K && R == 3:
		q4_KRows2x3(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case t == gguf.TypeQ4_K:
		q4_KRows2x4(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case t == gguf.TypeQ5_K && R == 1:
		q5_KRows2x1(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case t == gguf.TypeQ5_K && R == 2:
		q5_KRows2x2(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case t == gguf.TypeQ5_K && R == 3:
		q5_KRows2x3(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case t == gguf.TypeQ5_K:
		q5_KRows2x4(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case R == 1:
		q6_KRows2x1(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case R == 2:
		q6_KRows2x2(w, rowBytes, nw, x, xstride, nb, out, ldo)
	case R == 3:
		q6_KRows2x3(w, rowBytes, nw, x, xstride, nb, out, ldo)
	default:
		q6_KRows2x4(w, rowBytes, nw, x, xstride, nb, out, ldo)
	}
}

// kTileBytes bounds the activation rows one pass over the weight rows
// touches (cache blocking; it never changes a value).
const kTileBytes = 96 << 10

// tilesK runs the Q4_K, Q5_K or Q6_K kernels: one weight row against four
// activation rows, then each of the M%4 activation rows left in a band
// against all the weight rows in one call.
// Both kernels run the same per-row instruction sequence, so the value for
// (m, n) does not depend on M, n0, n1 or the band.
func tilesK(t gguf.Type, vnni bool, dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	if useK512 {
		rowsK(t, dst, ldd, xq, M, w, K, n0, n1)
		return
	}
	nb := K / qkK
	row, xrow := t.RowBytes(K), nb*q8_KBytes
	band := max(4, kTileBytes/xrow&^3)
	var acc [48]float32
	for m0 := 0; m0 < M; m0 += band {
		m1 := min(m0+band, M)
		for n := n0; n < n1; n++ {
			wp := &w[n*row]
			m := m0
			for ; m+4 <= m1; m += 4 {
				x := xq[m*xrow:]
				x0, x1, x2, x3 := &x[0], &x[xrow], &x[2*xrow], &x[3*xrow]
				// The kernel writes dst[(m+r)*ldd+n] for r < 4 (asmgen_k.go's reduce4).
				_ = dst[(m+3)*ldd+n]
				d := &dst[m*ldd+n]
				// Direct calls (not a func value) keep acc on the stack.
				switch {
				case t == gguf.TypeQ6_K && vnni:
					q6_KTile1x4VNNI(wp, x0, x1, x2, x3, nb, (*[32]float32)(acc[:32]), d, ldd)
				case t == gguf.TypeQ6_K:
					q6_KTile1x4AVX2(wp, x0, x1, x2, x3, nb, (*[32]float32)(acc[:32]), d, ldd)
				case t == gguf.TypeQ5_K && vnni:
					q5_KTile1x4VNNI(wp, x0, x1, x2, x3, nb, &acc, d, ldd)
				case t == gguf.TypeQ5_K:
					q5_KTile1x4AVX2(wp, x0, x1, x2, x3, nb, &acc, d, ldd)
				case vnni:
					q4_KTile1x4VNNI(wp, x0, x1, x2, x3, nb, &acc, d, ldd)
				default:
					q4_KTile1x4AVX2(wp, x0, x1, x2, x3, nb, &acc, d, ldd)
				}
			}
		}
		// The rows left over (all of a decode step's one row): each runs over the
		// weight rows n0..n1-1 in one call, its values straight into dst (the
		// kernel's own reduction, asmgen_k.go's reduce1).
		for m := m0 + (m1-m0)&^3; m < m1 && n0 < n1; m++ {
			x, d := &xq[m*xrow], &dst[m*ldd+n0]
			_, _ = dst[m*ldd+n1-1], w[n1*row-1] // the kernel's reach, checked here
			wp, rows := &w[n0*row], n1-n0
			switch {
			case t == gguf.TypeQ6_K && vnni:
				q6_KTile1x1VNNI(wp, x, nb, (*[8]float32)(acc[:8]), rows, d)
			case t == gguf.TypeQ6_K:
				q6_KTile1x1AVX2(wp, x, nb, (*[8]float32)(acc[:8]), rows, d)
			case t == gguf.TypeQ5_K && vnni:
				q5_KTile1x1VNNI(wp, x, nb, (*[12]float32)(acc[:12]), rows, d)
			case t == gguf.TypeQ5_K:
				q5_KTile1x1AVX2(wp, x, nb, (*[12]float32)(acc[:12]), rows, d)
			case vnni:
				q4_KTile1x1VNNI(wp, x, nb, (*[12]float32)(acc[:12]), rows, d)
			default:
				q4_KTile1x1AVX2(wp, x, nb, (*[12]float32)(acc[:12]), rows, d)
			}
		}
	}
}
