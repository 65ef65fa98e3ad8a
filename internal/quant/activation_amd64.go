//go:build amd64

package quant

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func quantizeQ8_0AVX2(x *float32, y *byte, nb int)

// useQ8_0AVX2 selects the assembly Q8_0 activation quantizer; tests turn it
// off to compare with the Go version.
var useQ8_0AVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// quantizeRowsQ8_0 quantizes nb blocks of src into dst as the AVX2
// quantize_row_q8_0 does; the assembly and quantizeQ8_0X86 give the same
// bytes.
func quantizeRowsQ8_0(src []float32, dst []byte, nb int) {
	if useQ8_0AVX2 && nb > 0 {
		_ = src[nb*qk0-1]
		_ = dst[nb*q8_0Bytes-1]
		quantizeQ8_0AVX2((*float32)(unsafe.Pointer(&src[0])), &dst[0], nb)
		return
	}
	quantizeRowsQ8_0Go(src, dst, nb)
}

//go:noescape
func quantizeQ8_KAVX2(x *float32, y *byte, nb int)

// quantizeRowsQ8_K quantizes nb super-blocks of src into dst as quantizeQ8_K
// does, the same bytes (TestQuantizeQ8_KAVX2); the assembly where AVX2 is.
func quantizeRowsQ8_K(src []float32, dst []byte, nb int) {
	if useQ8_0AVX2 && nb > 0 {
		_ = src[nb*qkK-1]
		_ = dst[nb*q8_KBytes-1]
		quantizeQ8_KAVX2((*float32)(unsafe.Pointer(&src[0])), &dst[0], nb)
		return
	}
	quantizeRowsQ8_KGo(src, dst, nb)
}
