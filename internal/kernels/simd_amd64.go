//go:build amd64

package kernels

import "golang.org/x/sys/cpu"

//go:generate go run asmgen.go

//go:noescape
func roundF16F16C(dst, src *float32, n int)

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func dotF16AVX2(a *float32, b *uint16, n int) float32

//go:noescape
func axpyF32AVX2(y *float32, a float32, x *float32, n int)

//go:noescape
func axpyF16AVX2(y *float32, a float32, x *uint16, n int)

// The Go wrappers run the multiple-of-8 body in assembly and finish the
// last n%8 elements in order in Go.

func dotF32Vec(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	m := n &^ 7
	var s float32
	if m > 0 {
		s = dotF32AVX2(&a[0], &b[0], m)
	}
	for i := m; i < n; i++ {
		s += float32(a[i] * b[i])
	}
	return s
}

func dotF16Vec(a []float32, b []uint16) float32 {
	n := len(a)
	b = b[:n]
	m := n &^ 7
	var s float32
	if m > 0 {
		s = dotF16AVX2(&a[0], &b[0], m)
	}
	for i := m; i < n; i++ {
		s += float32(a[i] * f16ToF32(b[i]))
	}
	return s
}

func axpyF32Vec(y []float32, a float32, x []float32) {
	n := len(y)
	x = x[:n]
	m := n &^ 7
	if m > 0 {
		axpyF32AVX2(&y[0], a, &x[0], m)
	}
	axpyF32Ref(y[m:], a, x[m:])
}

func axpyF16Vec(y []float32, a float32, x []uint16) {
	n := len(y)
	x = x[:n]
	m := n &^ 7
	if m > 0 {
		axpyF16AVX2(&y[0], a, &x[0], m)
	}
	axpyF16Ref(y[m:], a, x[m:])
}

// roundF16Vec is roundF16Ref with F16C: eight at a time, the rest in Go.
func roundF16Vec(dst, src []float32) {
	n := len(src)
	dst = dst[:n]
	m := n &^ 7
	if m > 0 {
		roundF16F16C(&dst[0], &src[0], m)
	}
	roundF16Ref(dst[m:], src[m:])
}

var (
	kernelsAVX512 = &tileKernels{name: "avx512", mr: 6, nr: 4, kstep: 16, tiles: tilesAVX512, pf: tilesAVX512PF, roundF16: roundF16Vec}
	kernelsAVX2   = &tileKernels{name: "avx2", mr: 4, nr: 3, kstep: 8, tiles: tilesAVX2, pf: tilesAVX2PF, roundF16: roundF16Vec}
)

// simdFamilies lists the families this CPU can run, best first (the tests
// check each against the reference).
func simdFamilies() []*tileKernels {
	var fs []*tileKernels
	x := &cpu.X86
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasFMA && x.HasF16C {
		fs = append(fs, kernelsAVX512)
	}
	if x.HasAVX2 && x.HasFMA && x.HasF16C {
		fs = append(fs, kernelsAVX2)
	}
	return fs
}

func init() {
	if fs := simdFamilies(); len(fs) > 0 {
		simd = fs[0]
		roundF16 = roundF16Vec
		dotF32, dotF16, axpyF32, axpyF16 = dotF32Vec, dotF16Vec, axpyF32Vec, axpyF16Vec
	}
}
