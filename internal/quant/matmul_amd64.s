//go:build amd64

#include "textflag.h"

// func q8_0TileAVX2(w0, w1, x0, x1 *byte, nb int, acc *[32]float32)
//
// Runs ggml's AVX2 Q8_0·Q8_0 block loop for a 2x2 tile (weight rows w0, w1
// against activation rows x0, x1) over nb blocks and stores the four 8-lane
// accumulators: acc[0:8] = w0·x0, [8:16] = w0·x1, [16:24] = w1·x0,
// [24:32] = w1·x1. Per block and pair: lanes = madd(maddubs(|w|, sign(x, w)),
// 1) as floats; acc = fma(d_w*d_x, lanes, acc). Each accumulator only ever
// sees its own pair's data, so the tile position does not change any value.
TEXT ·q8_0TileAVX2(SB), NOSPLIT, $0-48
	MOVQ w0+0(FP), SI
	MOVQ w1+8(FP), DI
	MOVQ x0+16(FP), R8
	MOVQ x1+24(FP), R9
	MOVQ nb+32(FP), CX
	MOVQ acc+40(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	TESTQ CX, CX
	JZ done

loop:
	VPBROADCASTW (R8), X10
	VCVTPH2PS X10, Y10
	VPBROADCASTW (R9), X11
	VCVTPH2PS X11, Y11
	VMOVDQU 2(R8), Y4
	VMOVDQU 2(R9), Y5

	// weight row 0
	VMOVDQU 2(SI), Y6
	VPSIGNB Y6, Y4, Y7
	VPSIGNB Y6, Y5, Y8
	VPSIGNB Y6, Y6, Y6
	VPMADDUBSW Y7, Y6, Y7
	VPMADDUBSW Y8, Y6, Y8
	VPMADDWD Y15, Y7, Y7
	VPMADDWD Y15, Y8, Y8
	VCVTDQ2PS Y7, Y7
	VCVTDQ2PS Y8, Y8
	VPBROADCASTW (SI), X9
	VCVTPH2PS X9, Y9
	VMULPS Y10, Y9, Y12
	VFMADD231PS Y7, Y12, Y0
	VMULPS Y11, Y9, Y12
	VFMADD231PS Y8, Y12, Y1

	// weight row 1
	VMOVDQU 2(DI), Y6
	VPSIGNB Y6, Y4, Y7
	VPSIGNB Y6, Y5, Y8
	VPSIGNB Y6, Y6, Y6
	VPMADDUBSW Y7, Y6, Y7
	VPMADDUBSW Y8, Y6, Y8
	VPMADDWD Y15, Y7, Y7
	VPMADDWD Y15, Y8, Y8
	VCVTDQ2PS Y7, Y7
	VCVTDQ2PS Y8, Y8
	VPBROADCASTW (DI), X9
	VCVTPH2PS X9, Y9
	VMULPS Y10, Y9, Y12
	VFMADD231PS Y7, Y12, Y2
	VMULPS Y11, Y9, Y12
	VFMADD231PS Y8, Y12, Y3

	ADDQ $34, SI
	ADDQ $34, DI
	ADDQ $34, R8
	ADDQ $34, R9
	DECQ CX
	JNZ loop

done:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VZEROUPPER
	RET
