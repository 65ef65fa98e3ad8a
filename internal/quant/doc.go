// Package quant owns number formats and quantized dot products: fp16/bf16
// conversion, the Q4_0, Q5_0, Q8_0, Q4_K, Q6_K and Q8_K block formats, and MatMul
// of quantized weights against quantized activations.
//
// Numerics follow ggml as llama.cpp runs it on x86, so that Stockpot and
// llama.cpp agree on the same model file:
//   - F32ToF16 rounds to nearest even like F16C; F32ToBF16 rounds like
//     ggml_compute_fp32_to_bf16 (NaN kept quiet).
//   - QuantizeRow/DequantizeRow match ggml's quantize_row_*_ref and
//     dequantize_row_* bit for bit, including make_qkx2_quants and
//     make_qx_quants for the K quants. All float arithmetic is float32 with
//     explicit conversions, so the Go compiler cannot fuse it into FMAs.
//   - QuantizeActivations is ggml's from_float for the vec_dot type as the
//     x86 build runs it: the AVX2 quantize_row_q8_0 (127/amax multiplier,
//     round-half-even) and quantize_row_q8_K (the reference).
//   - MatMul reproduces the float structure of ggml's AVX2 vec_dot kernels:
//     exact integer sums per 8-lane group, one fused multiply-add per block
//     and lane with d = d_w*d_x, then ggml's horizontal-sum order. Integer
//     parts are exact, so the pure-Go reference and every SIMD kernel
//     return the same bits (AVX2 kernels exist for all five weight types:
//     2x2 tiles for Q8_0 and Q4_0, with four weight rows against one
//     activation row for decode and an odd last row; the same for Q5_0
//     where AVX512BW+VL unpack its 5th bits through a mask, else four
//     weight rows against one activation row for every row; one weight row
//     against four activation rows for Q4_K and Q6_K). The decode-shaped
//     kernels prefetch the weight rows the next call reads: a decode step
//     streams every weight byte once, and one core's hardware prefetch
//     alone reaches about 13 GB/s where 20+ is there.
//
// Determinism: MatMul computes every output element with the same sequence
// of float operations whatever M, n0 and n1 are: tiles only decide which
// elements are computed together, never the order of one element's sums.
//
// SIMD kernels live in *_amd64.s behind a pure-Go reference with the same
// signature (matmul_ref.go); *_other.go uses the reference elsewhere.
package quant
