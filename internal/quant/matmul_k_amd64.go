//go:build amd64

package quant

//go:generate go run asmgen_k.go

//go:noescape
func q4_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32)

//go:noescape
func q4_KTile1x1AVX2(w, x *byte, nb int, acc *[12]float32)

//go:noescape
func q6_KTile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32)

//go:noescape
func q6_KTile1x1AVX2(w, x *byte, nb int, acc *[8]float32)

//go:noescape
func q4_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[48]float32)

//go:noescape
func q4_KTile1x1VNNI(w, x *byte, nb int, acc *[12]float32)

//go:noescape
func q6_KTile1x4VNNI(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32)

//go:noescape
func q6_KTile1x1VNNI(w, x *byte, nb int, acc *[8]float32)

// kTileBytes bounds the activation rows one pass over the weight rows
// touches (cache blocking; it never changes a value).
const kTileBytes = 96 << 10

// tilesK runs the Q4_K or Q6_K kernels: one weight row against four
// activation rows, then one row at a time for the M%4 rest of each band.
// Both kernels run the same per-row instruction sequence, so the value for
// (m, n) does not depend on M, n0, n1 or the band.
func tilesK(q6, vnni bool, dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	nb := K / qkK
	wBytes := q4_KBytes
	if q6 {
		wBytes = q6_KBytes
	}
	row, xrow := nb*wBytes, nb*q8_KBytes
	band := max(4, kTileBytes/xrow&^3)
	var acc [48]float32
	for m0 := 0; m0 < M; m0 += band {
		m1 := min(m0+band, M)
		for n := n0; n < n1; n++ {
			wp := &w[n*row]
			m := m0
			for ; m+4 <= m1; m += 4 {
				x := xq[m*xrow:]
				if q6 {
					a := (*[32]float32)(acc[:32])
					if vnni {
						q6_KTile1x4VNNI(wp, &x[0], &x[xrow], &x[2*xrow], &x[3*xrow], nb, a)
					} else {
						q6_KTile1x4AVX2(wp, &x[0], &x[xrow], &x[2*xrow], &x[3*xrow], nb, a)
					}
					for r := range 4 {
						dst[(m+r)*ldd+n] = hsum8((*[8]float32)(a[8*r:]))
					}
				} else {
					if vnni {
						q4_KTile1x4VNNI(wp, &x[0], &x[xrow], &x[2*xrow], &x[3*xrow], nb, &acc)
					} else {
						q4_KTile1x4AVX2(wp, &x[0], &x[xrow], &x[2*xrow], &x[3*xrow], nb, &acc)
					}
					for r := range 4 {
						dst[(m+r)*ldd+n] = hsum8((*[8]float32)(acc[12*r:])) + hsum4((*[4]float32)(acc[12*r+8:]))
					}
				}
			}
			for ; m < m1; m++ {
				x := &xq[m*xrow]
				if q6 {
					a := (*[8]float32)(acc[:8])
					if vnni {
						q6_KTile1x1VNNI(wp, x, nb, a)
					} else {
						q6_KTile1x1AVX2(wp, x, nb, a)
					}
					dst[m*ldd+n] = hsum8(a)
				} else {
					a := (*[12]float32)(acc[:12])
					if vnni {
						q4_KTile1x1VNNI(wp, x, nb, a)
					} else {
						q4_KTile1x1AVX2(wp, x, nb, a)
					}
					dst[m*ldd+n] = hsum8((*[8]float32)(a[:8])) + hsum4((*[4]float32)(a[8:]))
				}
			}
		}
	}
}
