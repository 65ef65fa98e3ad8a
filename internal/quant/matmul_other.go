//go:build !amd64

package quant

import "stockpot/internal/gguf"

// kernels are the references on platforms without SIMD kernels.
var kernels = refKernels

// Kernel names the MatMul implementation in use, for benchmarks and logs.
func Kernel() string { return "go" }

var _ = gguf.TypeQ8_0
