//go:build amd64

package kernels

import "golang.org/x/sys/cpu"

//go:noescape
func scaleMaxAVX2(x *float32, n int, s float32) float32

//go:noescape
func expSumAVX2(x *float32, n int, mx float32) float64

//go:noescape
func scaleAVX2(x *float32, n int, s float32)

//go:noescape
func f16ToF32AVX2(dst *float32, src *uint16, n int)

var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

func init() {
	if hasAVX2FMA {
		softmaxCausal = softmaxCausalAVX2
		widenF16 = widenF16AVX2
	}
}

// softmaxCausalAVX2 is softmaxCausalRef with the multiple-of-8 body of
// each pass in assembly and the last n%8 elements in Go, so an element's
// arithmetic depends only on n (the query's position). The exp of the
// body is expSumAVX2's polynomial, that of the tail expf32.
func softmaxCausalAVX2(row []float32, n int, scale float32) {
	n = min(max(n, 0), len(row))
	clear(row[n:])
	if n == 0 {
		return
	}
	x := row[:n]
	nv := n &^ 7
	mx := scaleMaxAVX2(&x[0], nv, scale)
	for j := nv; j < n; j++ {
		v := x[j] * scale
		x[j] = v
		mx = max(mx, v)
	}
	sum := expSumAVX2(&x[0], nv, mx)
	for j := nv; j < n; j++ {
		e := expf32(x[j] - mx)
		x[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	scaleAVX2(&x[0], nv, inv)
	for j := nv; j < n; j++ {
		x[j] *= inv
	}
}

func widenF16AVX2(dst []float32, src []uint16) {
	n := len(src)
	dst = dst[:n]
	m := n &^ 7
	if m > 0 {
		f16ToF32AVX2(&dst[0], &src[0], m)
	}
	for i := m; i < n; i++ {
		dst[i] = f16ToF32(src[i])
	}
}
