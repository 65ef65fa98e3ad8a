//go:build amd64

package quant

//go:noescape
func q8_0Tile4x1AVX2(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)

//go:noescape
func q8_0Tile4x1VNNI(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)

//go:noescape
func q5_0Tile4x1AVX2(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)

//go:noescape
func q5_0Tile4x1VNNI(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)

//go:noescape
func q5_0Tile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32)

//go:noescape
func q4_0Tile4x1AVX2(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)

//go:noescape
func q4_0Tile4x1VNNI(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)

// row4x1 computes one activation row (xq at offset m*xrow, results at
// dst[m*ldd+n]) against weight rows n0..n1-1, four weight rows per call.
// Each weight row runs the same per-pair float sequence as tiles2x2's
// kernels, so every value is bit-identical to the one a 2x2 tile gives;
// at the n edge the last row repeats and the duplicates are dropped.
func row4x1(q4, vnni bool, wBytes int, dst []float32, xq []byte, w []byte, K, n0, n1 int) {
	nb := K / qk0
	row := nb * wBytes
	x := &xq[0]
	var acc [32]float32
	for n := n0; n < n1; n += 4 {
		nB, nC, nD := min(n+1, n1-1), min(n+2, n1-1), min(n+3, n1-1)
		wA, wB, wC, wD := &w[n*row], &w[nB*row], &w[nC*row], &w[nD*row]
		// Direct calls (not a func value) keep acc on the stack.
		switch {
		case q4 && vnni:
			q4_0Tile4x1VNNI(wA, wB, wC, wD, x, nb, &acc)
		case q4:
			q4_0Tile4x1AVX2(wA, wB, wC, wD, x, nb, &acc)
		case vnni:
			q8_0Tile4x1VNNI(wA, wB, wC, wD, x, nb, &acc)
		default:
			q8_0Tile4x1AVX2(wA, wB, wC, wD, x, nb, &acc)
		}
		dst[nD] = hsum8((*[8]float32)(acc[24:32]))
		dst[nC] = hsum8((*[8]float32)(acc[16:24]))
		dst[nB] = hsum8((*[8]float32)(acc[8:16]))
		dst[n] = hsum8((*[8]float32)(acc[0:8]))
	}
}

// rowsQ5_0 is MatMul for Q5_0 weights: every activation row runs the 4x1
// kernel over weight rows n0..n1-1 (there is no 2x2 tile for Q5_0; the
// caller's L2-sized row panels keep the weights cached across the M rows).
// Each value is the same per-pair sequence whatever M, n0 and n1 are; at
// the n edge the last row repeats and the duplicates are dropped.
func rowsQ5_0(vnni bool, dst []float32, ldd int, xq []byte, M int, w []byte, K, n0, n1 int) {
	nb := K / qk0
	row, xrow := nb*q5_0Bytes, nb*q8_0Bytes
	var acc [32]float32
	m0 := 0
	if !vnni {
		// Four activation rows at a time: each weight block unpacked once for the four
		// (q5_0Tile1x4AVX2, every value the 4x1 kernel's for its pair).
		for ; m0+4 <= M; m0 += 4 {
			x0, x1, x2, x3 := &xq[m0*xrow], &xq[(m0+1)*xrow], &xq[(m0+2)*xrow], &xq[(m0+3)*xrow]
			for n := n0; n < n1; n++ {
				q5_0Tile1x4AVX2(&w[n*row], x0, x1, x2, x3, nb, &acc)
				for r := range 4 {
					dst[(m0+r)*ldd+n] = hsum8((*[8]float32)(acc[8*r : 8*r+8]))
				}
			}
		}
	}
	for m := m0; m < M; m++ {
		x := &xq[m*xrow]
		d := dst[m*ldd:]
		for n := n0; n < n1; n += 4 {
			nB, nC, nD := min(n+1, n1-1), min(n+2, n1-1), min(n+3, n1-1)
			wA, wB, wC, wD := &w[n*row], &w[nB*row], &w[nC*row], &w[nD*row]
			if vnni {
				q5_0Tile4x1VNNI(wA, wB, wC, wD, x, nb, &acc)
			} else {
				q5_0Tile4x1AVX2(wA, wB, wC, wD, x, nb, &acc)
			}
			d[nD] = hsum8((*[8]float32)(acc[24:32]))
			d[nC] = hsum8((*[8]float32)(acc[16:24]))
			d[nB] = hsum8((*[8]float32)(acc[8:16]))
			d[n] = hsum8((*[8]float32)(acc[0:8]))
		}
	}
}
