//go:build amd64

package kernels

import "golang.org/x/sys/cpu"

// actAsm: the activations' AVX2 bodies (act_amd64.s) run on this CPU.
var actAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func expAVX2(x *float32, n int)

//go:noescape
func sigmoidAVX2(x *float32, n int)

//go:noescape
func softplusAVX2(x *float32, n int)
