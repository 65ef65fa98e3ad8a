//go:build amd64

package kernels

import "golang.org/x/sys/cpu"

//go:generate go run asmgen.go

//go:noescape
func roundF16F16C(dst, src *float32, n int)

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
	kernelsAVX512 = &tileKernels{name: "avx512", mr: 6, nr: 4, kstep: 16, tiles: tilesAVX512, roundF16: roundF16Vec}
	kernelsAVX2   = &tileKernels{name: "avx2", mr: 4, nr: 3, kstep: 8, tiles: tilesAVX2, roundF16: roundF16Vec}
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
	}
}
