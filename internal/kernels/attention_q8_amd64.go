//go:build amd64

package kernels

//go:noescape
func dequantQ8AVX2(dst *float32, src *byte, nb int)

func init() {
	if hasAVX2FMA {
		dequantQ8 = dequantQ8Vec
	}
}

// dequantQ8Vec is dequantQ8Ref in assembly (bit for bit: one exact int8
// conversion and one multiply per element).
func dequantQ8Vec(dst []float32, src []byte) {
	nb := len(dst) / q8Block
	if nb == 0 {
		return
	}
	_ = src[nb*q8Bytes-1]
	_ = dst[nb*q8Block-1]
	dequantQ8AVX2(&dst[0], &src[0], nb)
}
