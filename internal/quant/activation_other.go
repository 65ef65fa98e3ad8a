//go:build !amd64

package quant

func quantizeRowsQ8_0(src []float32, dst []byte, nb int) { quantizeRowsQ8_0Go(src, dst, nb) }

func quantizeRowsQ8_K(src []float32, dst []byte, nb int) { quantizeRowsQ8_KGo(src, dst, nb) }
