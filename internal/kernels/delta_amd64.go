//go:build amd64

package kernels

import "golang.org/x/sys/cpu"

// deltaAsm: the AVX2 step (delta_amd64.s) runs on this CPU.
var deltaAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func deltaStepTAVX2(st *float32, S int, q, k, v, decay *float32, decayStride int, delta, o *float32, beta, scale float32)
