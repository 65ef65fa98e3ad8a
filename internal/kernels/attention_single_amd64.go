//go:build amd64

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var hasAVX512F = cpu.X86.HasAVX512F

//go:noescape
func pvLanesF16(lanes *float32, hd, lmask, lane0 int, p *float32, v *byte, ldv, n int)

//go:noescape
func pvLanesF16Z(lanes *float32, hd, lmask, lane0 int, p *float32, v *byte, ldv, n int)

//go:noescape
func pvLanesF32(lanes *float32, hd, lmask, lane0 int, p *float32, v *byte, ldv, n int)

func init() {
	if hasAVX2FMA {
		pvRun = pvRunAVX2
	}
}

// pvRunAVX2 is pvRunRef in assembly (the same FMA per element; hd is a
// multiple of 8 on the SIMD path, see singleOK).
func pvRunAVX2(lanes []float32, hd, kstep, lane0 int, p []float32, v unsafe.Pointer, ldv int, f16 bool) {
	if len(p) == 0 {
		return
	}
	_ = lanes[kstep*hd-1]
	if f16 && hasAVX512F && hd%16 == 0 {
		pvLanesF16Z(&lanes[0], hd, kstep-1, lane0, &p[0], (*byte)(v), ldv, len(p))
	} else if f16 {
		pvLanesF16(&lanes[0], hd, kstep-1, lane0, &p[0], (*byte)(v), ldv, len(p))
	} else {
		pvLanesF32(&lanes[0], hd, kstep-1, lane0, &p[0], (*byte)(v), ldv, len(p))
	}
}
