//go:build !amd64

package quant

import "stockpot/internal/gguf"

// kernels are the references on platforms without SIMD kernels.
var kernels = refKernels

// Kernel names the MatMul implementation in use, for benchmarks and logs.
func Kernel() string { return "go" }

// PairBytes is 0: there are no pair kernels here (see matmul_pair_amd64.go).
func PairBytes(M, K int) int { return 0 }

// PreparePairs is never needed here (PairBytes is 0).
func PreparePairs(xp, xq []byte, M, K, p0, p1 int) {}

// MatMulPaired is MatMul (there is no paired form here).
func MatMulPaired(t gguf.Type, dst []float32, ldd int, xq, xp []byte, M int, w []byte, K int, n0, n1 int) {
	MatMul(t, dst, ldd, xq, M, w, K, n0, n1)
}
