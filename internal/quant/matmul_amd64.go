//go:build amd64

package quant

import "stockpot/internal/gguf"

// kernels maps weight types to the fastest kernel this CPU runs.
var kernels = pickKernels()

var kernelName = "go"

// Kernel names the MatMul implementation in use, for benchmarks and logs.
func Kernel() string { return kernelName }

func pickKernels() map[gguf.Type]kernel {
	k := make(map[gguf.Type]kernel, len(refKernels))
	for t, f := range refKernels {
		k[t] = f
	}
	return k
}
