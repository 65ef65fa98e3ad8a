//go:build amd64

#include "textflag.h"

// Decode-shaped (one activation row) kernels for Q8_0 and Q4_0 weights:
// four weight rows against one Q8_0 activation row. Each weight row runs
// exactly the per-pair sequence of q8_0TileAVX2 / q4_0TileAVX2 (exact
// integer lanes, d = d_w*d_x, acc = fma(d, lanes, acc) per block), so
// acc[8r:8r+8] holds the same bits the 2x2 tile produces for that pair.
// The VNNI variants replace maddubs+madd by one VPDPBUSD on |w| and
// sign(x, w): |w| <= 128 and sign(x, w) is in [-128, 127], so a maddubs
// pair sum lies in [-32768, 32512] and never saturates; both give the
// same exact int32 lane sums.
//
// Registers: SI, DI, R10, R11 weight rows; R8 activation row; Y0-Y3
// accumulators; Y4 activation quants; Y10 activation scale; Y15 int16 ones;
// Y13, Y14 nibble mask and 8 (Q4_0).

// Q8_0 weights: Y6 = weight quants of row P.
#define LOADQ8(P) \
	VMOVDQU 2(P), Y6

// Q4_0 weights: low nibbles then high nibbles, minus 8.
#define LOADQ4(P) \
	VMOVDQU 2(P), X6; \
	VPSRLW $4, X6, X12; \
	VINSERTI128 $1, X12, Y6, Y6; \
	VPAND Y13, Y6, Y6; \
	VPSUBB Y14, Y6, Y6

// Integer lanes of Y6 (weights) against Y4 into Y7 (int32).
#define DOTAVX2 \
	VPSIGNB Y6, Y4, Y7; \
	VPSIGNB Y6, Y6, Y6; \
	VPMADDUBSW Y7, Y6, Y7; \
	VPMADDWD Y15, Y7, Y7

#define DOTVNNI \
	VPSIGNB Y6, Y4, Y8; \
	VPSIGNB Y6, Y6, Y6; \
	VPXOR Y7, Y7, Y7; \
	VPDPBUSD Y8, Y6, Y7

// acc = fma(d_w*d_x, float(lanes), acc) for the weight row at P.
#define ACCUM(P, ACC) \
	VCVTDQ2PS Y7, Y7; \
	VPBROADCASTW (P), X9; \
	VCVTPH2PS X9, Y9; \
	VMULPS Y10, Y9, Y12; \
	VFMADD231PS Y7, Y12, ACC

#define PROLOGUE \
	MOVQ w0+0(FP), SI; \
	MOVQ w1+8(FP), DI; \
	MOVQ w2+16(FP), R10; \
	MOVQ w3+24(FP), R11; \
	MOVQ x+32(FP), R8; \
	MOVQ nb+40(FP), CX; \
	MOVQ acc+48(FP), DX; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	MOVL $0x00010001, AX; \
	VMOVD AX, X15; \
	VPBROADCASTD X15, Y15; \
	MOVL $0x0f0f0f0f, AX; \
	VMOVD AX, X13; \
	VPBROADCASTD X13, Y13; \
	MOVL $0x08080808, AX; \
	VMOVD AX, X14; \
	VPBROADCASTD X14, Y14

// R12 = the next group of four rows (rows are consecutive, so it starts one
// row past w3), or ·prefetchAhead bytes (prefetch.go) past w0 when that is
// further; the loops prefetch from it while computing this group, so the
// weights stream from memory without waiting. One group ahead was not far
// enough for Q8_0 on AVX2: one thread streamed a decode product at 19.6 GB/s,
// and at 25.4 with 8192 ahead. Calibration sets the distance
// (kernels.CalibratePrefetch). A prefetch never faults and never changes a
// value (at the n edge it may touch rows already read).
#define NEXTGROUP \
	MOVQ R11, R12; \
	SUBQ R10, R12; \
	ADDQ R11, R12; \
	MOVQ ·prefetchAhead(SB), AX; \
	ADDQ SI, AX; \
	CMPQ AX, R12; \
	CMOVQGT AX, R12

// The bytes one iteration reads of the four rows, prefetched from R12.
#define PREFETCH1(STEP) \
	PREFETCHT0 (R12); \
	ADDQ $STEP, R12

#define PREFETCH2(STEP) \
	PREFETCHT0 (R12); \
	PREFETCHT0 64(R12); \
	ADDQ $STEP, R12

#define XLOAD \
	VPBROADCASTW (R8), X10; \
	VCVTPH2PS X10, Y10; \
	VMOVDQU 2(R8), Y4

#define EPILOGUE \
	VMOVUPS Y0, (DX); \
	VMOVUPS Y1, 32(DX); \
	VMOVUPS Y2, 64(DX); \
	VMOVUPS Y3, 96(DX); \
	VZEROUPPER; \
	RET

// func q8_0Tile4x1AVX2(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)
//
// acc[8r:8r+8] is the 8-lane accumulator of weight row r against x.
TEXT ·q8_0Tile4x1AVX2(SB), NOSPLIT, $0-56
	PROLOGUE
	NEXTGROUP
	TESTQ CX, CX
	JZ q8a_done
q8a_loop:
	PREFETCH2(136)
	XLOAD
	LOADQ8(SI)
	DOTAVX2
	ACCUM(SI, Y0)
	LOADQ8(DI)
	DOTAVX2
	ACCUM(DI, Y1)
	LOADQ8(R10)
	DOTAVX2
	ACCUM(R10, Y2)
	LOADQ8(R11)
	DOTAVX2
	ACCUM(R11, Y3)
	ADDQ $34, SI
	ADDQ $34, DI
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $34, R8
	DECQ CX
	JNZ q8a_loop
q8a_done:
	EPILOGUE

// func q8_0Tile4x1VNNI(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)
TEXT ·q8_0Tile4x1VNNI(SB), NOSPLIT, $0-56
	PROLOGUE
	NEXTGROUP
	TESTQ CX, CX
	JZ q8v_done
q8v_loop:
	PREFETCH2(136)
	XLOAD
	LOADQ8(SI)
	DOTVNNI
	ACCUM(SI, Y0)
	LOADQ8(DI)
	DOTVNNI
	ACCUM(DI, Y1)
	LOADQ8(R10)
	DOTVNNI
	ACCUM(R10, Y2)
	LOADQ8(R11)
	DOTVNNI
	ACCUM(R11, Y3)
	ADDQ $34, SI
	ADDQ $34, DI
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $34, R8
	DECQ CX
	JNZ q8v_loop
q8v_done:
	EPILOGUE

// func q4_0Tile4x1AVX2(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)
TEXT ·q4_0Tile4x1AVX2(SB), NOSPLIT, $0-56
	PROLOGUE
	NEXTGROUP
	TESTQ CX, CX
	JZ q4a_done
q4a_loop:
	PREFETCH2(72)
	XLOAD
	LOADQ4(SI)
	DOTAVX2
	ACCUM(SI, Y0)
	LOADQ4(DI)
	DOTAVX2
	ACCUM(DI, Y1)
	LOADQ4(R10)
	DOTAVX2
	ACCUM(R10, Y2)
	LOADQ4(R11)
	DOTAVX2
	ACCUM(R11, Y3)
	ADDQ $18, SI
	ADDQ $18, DI
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $34, R8
	DECQ CX
	JNZ q4a_loop
q4a_done:
	EPILOGUE

// func q4_0Tile4x1VNNI(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)
TEXT ·q4_0Tile4x1VNNI(SB), NOSPLIT, $0-56
	PROLOGUE
	NEXTGROUP
	TESTQ CX, CX
	JZ q4v_done
q4v_loop:
	PREFETCH2(72)
	XLOAD
	LOADQ4(SI)
	DOTVNNI
	ACCUM(SI, Y0)
	LOADQ4(DI)
	DOTVNNI
	ACCUM(DI, Y1)
	LOADQ4(R10)
	DOTVNNI
	ACCUM(R10, Y2)
	LOADQ4(R11)
	DOTVNNI
	ACCUM(R11, Y3)
	ADDQ $18, SI
	ADDQ $18, DI
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $34, R8
	DECQ CX
	JNZ q4v_loop
q4v_done:
	EPILOGUE

// Q5_0 weights (ggml_vec_dot_q5_0_q8_0, AVX2): the nibbles unpacked as for
// Q4_0, then OR 0xF0 into every byte whose qh bit is clear (ggml's
// bytes_from_bits_32 and andnot), which is the 5-bit level minus 16 as an
// int8. The weight row then runs the same per-pair sequence as Q4_0.
// Y5 = byte shuffle spreading qh byte j/8 to lane j, Y11 = bit j%8 of lane
// j, Y14 = 0xF0 (in place of Q4_0's 8).
#define LOADQ5(P) \
	VMOVDQU 6(P), X6; \
	VPSRLW $4, X6, X12; \
	VINSERTI128 $1, X12, Y6, Y6; \
	VPAND Y13, Y6, Y6; \
	VPBROADCASTD 2(P), Y8; \
	VPSHUFB Y5, Y8, Y8; \
	VPAND Y11, Y8, Y8; \
	VPCMPEQB Y11, Y8, Y8; \
	VPANDN Y14, Y8, Y8; \
	VPOR Y8, Y6, Y6

// LOADQ5K is LOADQ5 with AVX-512 masks (the VNNI kernel runs only where
// AVX512BW and VL are present): K1 = qh, K2 = its complement, and the bytes
// of K2 get 16 subtracted, which is the same int8 as ORing in 0xF0 (a
// nibble is below 16). Y14 = 0x10.
#define LOADQ5K(P) \
	VMOVDQU 6(P), X6; \
	VPSRLW $4, X6, X12; \
	VINSERTI128 $1, X12, Y6, Y6; \
	VPAND Y13, Y6, Y6; \
	KMOVD 2(P), K1; \
	KNOTD K1, K2; \
	VPSUBB Y14, Y6, K2, Y6

DATA q5shuf<>+0(SB)/8, $0x0000000000000000
DATA q5shuf<>+8(SB)/8, $0x0101010101010101
DATA q5shuf<>+16(SB)/8, $0x0202020202020202
DATA q5shuf<>+24(SB)/8, $0x0303030303030303
GLOBL q5shuf<>(SB), RODATA|NOPTR, $32

#define Q5CONST \
	VMOVDQU q5shuf<>(SB), Y5; \
	MOVQ $0x8040201008040201, AX; \
	VMOVQ AX, X11; \
	VPBROADCASTQ X11, Y11; \
	MOVL $0xf0f0f0f0, AX; \
	VMOVD AX, X14; \
	VPBROADCASTD X14, Y14

// func q5_0Tile4x1AVX2(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)
TEXT ·q5_0Tile4x1AVX2(SB), NOSPLIT, $0-56
	PROLOGUE
	NEXTGROUP
	Q5CONST
	TESTQ CX, CX
	JZ q5a_done
q5a_loop:
	PREFETCH2(88)
	XLOAD
	LOADQ5(SI)
	DOTAVX2
	ACCUM(SI, Y0)
	LOADQ5(DI)
	DOTAVX2
	ACCUM(DI, Y1)
	LOADQ5(R10)
	DOTAVX2
	ACCUM(R10, Y2)
	LOADQ5(R11)
	DOTAVX2
	ACCUM(R11, Y3)
	ADDQ $22, SI
	ADDQ $22, DI
	ADDQ $22, R10
	ADDQ $22, R11
	ADDQ $34, R8
	DECQ CX
	JNZ q5a_loop
q5a_done:
	EPILOGUE

// func q5_0Tile4x1VNNI(w0, w1, w2, w3, x *byte, nb int, acc *[32]float32)
TEXT ·q5_0Tile4x1VNNI(SB), NOSPLIT, $0-56
	PROLOGUE
	NEXTGROUP
	MOVL $0x10101010, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	TESTQ CX, CX
	JZ q5v_done
q5v_loop:
	PREFETCH2(88)
	XLOAD
	LOADQ5K(SI)
	DOTVNNI
	ACCUM(SI, Y0)
	LOADQ5K(DI)
	DOTVNNI
	ACCUM(DI, Y1)
	LOADQ5K(R10)
	DOTVNNI
	ACCUM(R10, Y2)
	LOADQ5K(R11)
	DOTVNNI
	ACCUM(R11, Y3)
	ADDQ $22, SI
	ADDQ $22, DI
	ADDQ $22, R10
	ADDQ $22, R11
	ADDQ $34, R8
	DECQ CX
	JNZ q5v_loop
q5v_done:
	EPILOGUE

// DOTX accumulates the unpacked weight block (Y6 signed, Y8 = |w|, Y9 its
// scale) against the activation block at XR into ACC: DOTAVX2 and ACCUM's
// operations for that pair, the weight kept for the next activation row.
#define DOTX(XR, ACC) \
	VMOVDQU 2(XR), Y4; \
	VPSIGNB Y6, Y4, Y7; \
	VPMADDUBSW Y7, Y8, Y7; \
	VPMADDWD Y15, Y7, Y7; \
	VCVTDQ2PS Y7, Y7; \
	VPBROADCASTW (XR), X10; \
	VCVTPH2PS X10, Y10; \
	VMULPS Y10, Y9, Y12; \
	VFMADD231PS Y7, Y12, ACC

// func q5_0Tile1x4AVX2(w, x0, x1, x2, x3 *byte, nb int, acc *[32]float32)
//
// One Q5_0 weight row against four Q8_0 activation rows, the weight block
// unpacked once for all four (several streams' decode, prefill without
// VNNI): acc[8r:8r+8] is the 8-lane accumulator of the row against x_r,
// by q5_0Tile4x1AVX2's exact sequence for that pair (the same integer lanes,
// d = d_w*d_x, acc = fma(d, lanes, acc) per block). Y8 holds |w| (LOADQ5's
// temporary, free after it), Y6 the signed weights. It prefetches
// ·prefetchAhead bytes ahead of the weight row, as the K-quant 1x4 kernels
// do: four rows' work per weight block leaves a row streamed from memory at
// a quarter of one row's rate, and a prefetch inside the row (264 bytes,
// before) left it waiting on memory (2.3 ns a block pair streamed, 1.3 with
// 2048 ahead; 1.26 from L2).
TEXT ·q5_0Tile1x4AVX2(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ x0+8(FP), R8
	MOVQ x1+16(FP), R9
	MOVQ x2+24(FP), R10
	MOVQ x3+32(FP), R11
	MOVQ nb+40(FP), CX
	MOVQ acc+48(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	Q5CONST
	MOVQ ·prefetchAhead(SB), R12
	TESTQ CX, CX
	JZ q5x4_done
q5x4_loop:
	PREFETCHT0 (SI)(R12*1)
	LOADQ5(SI)
	VPSIGNB Y6, Y6, Y8
	VPBROADCASTW (SI), X9
	VCVTPH2PS X9, Y9
	DOTX(R8, Y0)
	DOTX(R9, Y1)
	DOTX(R10, Y2)
	DOTX(R11, Y3)
	ADDQ $22, SI
	ADDQ $34, R8
	ADDQ $34, R9
	ADDQ $34, R10
	ADDQ $34, R11
	DECQ CX
	JNZ q5x4_loop
q5x4_done:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VZEROUPPER
	RET
