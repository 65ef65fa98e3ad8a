package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"stockpot/internal/gguf"
)

// ActivationType returns ggml's vec_dot_type for weights of type t: the
// format activations are quantized to before MatMul. Q8_0 for Q4_0, Q5_0
// and Q8_0, Q8_K for Q4_K, Q5_K and Q6_K. It panics for other types.
func ActivationType(t gguf.Type) gguf.Type {
	switch t {
	case gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0:
		return gguf.TypeQ8_0
	case gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K:
		return gguf.TypeQ8_K
	}
	panic(fmt.Sprintf("quant: no quantized activation type for %s", t))
}

// QuantizeActivations quantizes one or more rows of activations src into dst
// as ggml's from_float for at does on x86 (Q8_0: the AVX2 quantize_row_q8_0;
// Q8_K: quantize_row_q8_K_ref). len(src) must be a multiple of the block
// size and len(dst) at.RowBytes(len(src)); anything else panics.
func QuantizeActivations(at gguf.Type, src []float32, dst []byte) {
	if at != gguf.TypeQ8_0 && at != gguf.TypeQ8_K {
		panic(fmt.Sprintf("quant: %s is not an activation type", at))
	}
	nb, err := checkRow(at, len(src), len(dst))
	if err != nil {
		panic(err)
	}
	if at == gguf.TypeQ8_K {
		quantizeRowsQ8_K(src, dst, nb)
		return
	}
	quantizeRowsQ8_0(src, dst, nb)
}

// quantizeRowsQ8_KGo is quantizeRowsQ8_K in Go, one super-block at a time.
func quantizeRowsQ8_KGo(src []float32, dst []byte, nb int) {
	for i := range nb {
		quantizeQ8_K(src[i*qkK:(i+1)*qkK], dst[i*q8_KBytes:(i+1)*q8_KBytes])
	}
}

// quantizeRowsQ8_0Go is quantizeRowsQ8_0 in Go, one block at a time.
func quantizeRowsQ8_0Go(src []float32, dst []byte, nb int) {
	for i := range nb {
		quantizeQ8_0X86(src[i*qk0:(i+1)*qk0], dst[i*q8_0Bytes:(i+1)*q8_0Bytes])
	}
}

// maxps is x86 MAXPS for one lane: a > b ? a : b (b when either is NaN).
func maxps(a, b float32) float32 {
	if a > b {
		return a
	}
	return b
}

// quantizeQ8_0X86 is the AVX2 quantize_row_q8_0 for one block: the lane-wise
// max reduction of |x| in the same order (so NaNs behave the same), the
// multiplier 127/amax (not 1/d), round-half-even, and saturating packs.
func quantizeQ8_0X86(x []float32, y []byte) {
	var m [8]float32
	for l := range 8 {
		m[l] = abs32(x[l])
		for v := 1; v < 4; v++ {
			m[l] = maxps(m[l], abs32(x[8*v+l]))
		}
	}
	var m4 [4]float32
	for l := range 4 {
		m4[l] = maxps(m[l+4], m[l])
	}
	m0 := maxps(m4[0], m4[2])
	m1 := maxps(m4[1], m4[3])
	amax := maxps(m0, m1)

	binary.LittleEndian.PutUint16(y, F32ToF16(amax/127))
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	for j, v := range x {
		r := float64(float32(v * id))
		var q int8
		switch {
		case !(math.Abs(r) < 1<<31):
			q = -128 // CVTPS2DQ gives 0x80000000, packs saturate it
		default:
			q = int8(max(-128, min(127, math.RoundToEven(r))))
		}
		y[2+j] = uint8(q)
	}
}
