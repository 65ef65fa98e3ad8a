package kernels

import "fmt"

// matMulQuant handles quantized weights through package quant.
func matMulQuant(p *Pool, dst, x []float32, M int, w *Weight) {
	panic(fmt.Sprintf("kernels: MatMul of %v weights is not wired to package quant yet", w.Type))
}
