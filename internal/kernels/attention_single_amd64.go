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

//go:generate go run asmgen_attn.go

//go:noescape
func pvGroups16F16(lanes *float32, hd int, p *float32, vptrs *uintptr, ng, ldv int)

//go:noescape
func pvGroups16F32(lanes *float32, hd int, p *float32, vptrs *uintptr, ng, ldv int)

//go:noescape
func lanesReduce16(out, lanes *float32, hd int)

//go:noescape
func scoresF16Z(s, q *float32, k *byte, ldk, n, hd int)

//go:noescape
func scoresF32Z(s, q *float32, k *byte, ldk, n, hd int)

func init() {
	if hasAVX2FMA {
		pvRun = pvRunAVX2
	}
	if hasAVX512F {
		pvGroups = pvGroupsAVX512
		reduce16 = func(out, lanes []float32, hd int) {
			_ = lanes[16*hd-1]
			_ = out[hd-1]
			lanesReduce16(&out[0], &lanes[0], hd)
		}
		scores16 = func(s, q []float32, k unsafe.Pointer, ldk int, f16 bool) {
			if len(s) == 0 {
				return
			}
			if f16 {
				scoresF16Z(&s[0], &q[0], (*byte)(k), ldk, len(s), len(q))
			} else {
				scoresF32Z(&s[0], &q[0], (*byte)(k), ldk, len(s), len(q))
			}
		}
	}
}

// pvGroupsAVX512 runs pvGroups16 (registers hold the 16 lane accumulators
// of 16 elements while all groups are added).
func pvGroupsAVX512(lanes []float32, hd int, p []float32, vptrs []uintptr, ldv int, f16 bool) {
	ng := len(vptrs)
	if ng == 0 {
		return
	}
	_ = lanes[16*hd-1]
	_ = p[16*ng-1]
	if f16 {
		pvGroups16F16(&lanes[0], hd, &p[0], &vptrs[0], ng, ldv)
	} else {
		pvGroups16F32(&lanes[0], hd, &p[0], &vptrs[0], ng, ldv)
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
