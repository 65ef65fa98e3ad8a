//go:build amd64

package kernels

import "golang.org/x/sys/cpu"

// convAsm: ConvSiLU's AVX2 body (conv_amd64.s) runs on this CPU.
var convAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func convSiLUAVX2(out, win, wT *float32, cd, K, n, width int)
