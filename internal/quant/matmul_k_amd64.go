//go:build amd64

package quant

import (
	"golang.org/x/sys/cpu"

	"stockpot/internal/gguf"
)

//go:generate go run asmgen_k.go
//go:generate go run asmgen_k512.go

//go:noescape
func q4_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32)

//go:noescape
func q4_KTile1x1AVX2(w, x *byte, nb int, acc *[12]float32)

//go:noescape
func q6_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32)

//go:noescape
func q6_KTile1x1AVX2(w, x *byte, nb int, acc *[8]float32)

//go:noescape
func q5_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32)

//go:noescape
func q5_KTile1x1AVX2(w, x *byte, nb int, acc *[12]float32)

//go:noescape
func q5_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32)

//go:noescape
func q5_KTile1x1VNNI(w, x *byte, nb int, acc *[12]float32)

//go:noescape
func q4_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32)

//go:noescape
func q4_KTile1x1VNNI(w, x *byte, nb int, acc *[12]float32)

//go:noescape
func q6_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32)

//go:noescape
func q6_KTile1x1VNNI(w, x *byte, nb int, acc *[8]float32)

//go:noescape
func q4_KRows2(w *byte, rowBytes, nw int, x *byte, nb int, out *float32)

//go:noescape
func q5_KRows2(w *byte, rowBytes, nw int, x *byte, nb int, out *float32)

//go:noescape
func q6_KRows2(w *byte, rowBytes, nw int, x *byte, nb int, out *float32)

// useK512 selects the AVX-512 decode kernels (matmul_k512_amd64.s) for one
// activation row; tests turn it off to compare with the AVX2/VNNI tiles.
// Both compute every value by the reference's float sequence.
var useK512 = kVNNI && cpu.X86.HasAVX512F

// rowsK is MatMul for one activation row on AVX-512: two weight rows per
// kernel iteration, an odd last row as a pair with itself (row stride 0)
// into a scratch.
func rowsK(t gguf.Type, dst []float32, xq, w []byte, K, n0, n1 int) {
	nb := K / qkK
	row := t.RowBytes(K)
	rows2 := func(w *byte, rowBytes, nw int, out *float32) {
		// Direct calls (not a func value) keep out on the stack.
		switch t {
		case gguf.TypeQ4_K:
			q4_KRows2(w, rowBytes, nw, &xq[0], nb, out)
		case gguf.TypeQ5_K:
			q5_KRows2(w, rowBytes, nw, &xq[0], nb, out)
		default:
			q6_KRows2(w, rowBytes, nw, &xq[0], nb, out)
		}
	}
	if nw := (n1 - n0) / 2; nw > 0 {
		rows2(&w[n0*row], row, nw, &dst[n0])
	}
	if (n1-n0)%2 == 1 {
		var s [2]float32
		rows2(&w[(n1-1)*row], 0, 1, &s[0])
		dst[n1-1] = s[0]
	}
}

// kTileBytes bounds the activation rows one pass over the weight rows
// touches (cache blocking; it never changes a value).
const kTileBytes = 96 << 10

// tilesK runs the Q4_K, Q5_K or Q6_K kernels: one weight row against four
// activation rows, then one row at a time for the M%4 rest of each band.
// Both kernels run the same per-row instruction sequence, so the value for
// (m, n) does not depend on M, n0, n1 or the band.
func tilesK(t gguf.Type, vnni bool, dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	if M == 1 && useK512 {
		rowsK(t, dst, xq, w, K, n0, n1)
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
				// Direct calls (not a func value) keep acc on the stack.
				switch {
				case t == gguf.TypeQ6_K:
					a := (*[32]float32)(acc[:32])
					if vnni {
						q6_KTile1x4VNNI(wp, x0, x1, x2, x3, nb, a)
					} else {
						q6_KTile1x4AVX2(wp, x0, x1, x2, x3, nb, a)
					}
					for r := range 4 {
						dst[(m+r)*ldd+n] = hsum8((*[8]float32)(a[8*r:]))
					}
					continue
				case t == gguf.TypeQ5_K && vnni:
					q5_KTile1x4VNNI(wp, x0, x1, x2, x3, nb, &acc)
				case t == gguf.TypeQ5_K:
					q5_KTile1x4AVX2(wp, x0, x1, x2, x3, nb, &acc)
				case vnni:
					q4_KTile1x4VNNI(wp, x0, x1, x2, x3, nb, &acc)
				default:
					q4_KTile1x4AVX2(wp, x0, x1, x2, x3, nb, &acc)
				}
				for r := range 4 {
					dst[(m+r)*ldd+n] = kSum(t, acc[12*r:])
				}
			}
			for ; m < m1; m++ {
				x := &xq[m*xrow]
				a := (*[12]float32)(acc[:12])
				switch {
				case t == gguf.TypeQ6_K:
					a := (*[8]float32)(acc[:8])
					if vnni {
						q6_KTile1x1VNNI(wp, x, nb, a)
					} else {
						q6_KTile1x1AVX2(wp, x, nb, a)
					}
					dst[m*ldd+n] = hsum8(a)
					continue
				case t == gguf.TypeQ5_K && vnni:
					q5_KTile1x1VNNI(wp, x, nb, a)
				case t == gguf.TypeQ5_K:
					q5_KTile1x1AVX2(wp, x, nb, a)
				case vnni:
					q4_KTile1x1VNNI(wp, x, nb, a)
				default:
					q4_KTile1x1AVX2(wp, x, nb, a)
				}
				dst[m*ldd+n] = kSum(t, acc[:12])
			}
		}
	}
}

// kSum finishes a Q4_K or Q5_K row from its 12 accumulator floats: ggml's
// hsum_float_8 of the lanes plus the mins (Q4_K: hsum of 4 lanes; Q5_K:
// the scalar summs).
func kSum(t gguf.Type, a []float32) float32 {
	if t == gguf.TypeQ5_K {
		return hsum8((*[8]float32)(a[:8])) + a[8]
	}
	return hsum8((*[8]float32)(a[:8])) + hsum4((*[4]float32)(a[8:12]))
}
