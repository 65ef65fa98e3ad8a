//go:build amd64

#include "textflag.h"

// func quantizeQ8_0AVX2(x *float32, y *byte, nb int)
//
// ggml's AVX2 quantize_row_q8_0 (the x86 from_float for Q8_0 activations),
// instruction for instruction: the lane-wise MAXPS reduction of |x| in the
// same operand order (so NaNs fall the same way), d = amax/127 stored as
// f16 (VCVTPS2PH, nearest even), the multiplier 127/amax (0 for amax == 0),
// ROUNDPS to nearest even, CVTPS2DQ, and the saturating packs. nb blocks of
// 32 floats in, 34-byte blocks out.
TEXT ·quantizeQ8_0AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X14
	VMOVDQU q8perm<>(SB), Y13
	TESTQ CX, CX
	JZ done

loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VMAXPS Y5, Y4, Y4
	VANDPS Y15, Y2, Y5
	VMAXPS Y5, Y4, Y4
	VANDPS Y15, Y3, Y5
	VMAXPS Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X4, X5, X4      // max(hi, lo)
	VMOVHLPS X4, X4, X5
	VMAXPS X5, X4, X4      // max(max4, movehl)
	VMOVSHDUP X4, X5
	VMAXSS X5, X4, X4      // max(lane0, lane1): amax in X4

	VDIVSS X14, X4, X6     // d = amax / 127
	VCVTPS2PH $0, X6, X7
	VPEXTRW $0, X7, AX
	MOVW AX, (DI)

	VXORPS X8, X8, X8      // id = amax != 0 ? 127/amax : 0
	VUCOMISS X8, X4
	JNE nonzero
	JP nonzero             // NaN != 0
	VXORPS X9, X9, X9
	JMP scaled
nonzero:
	VDIVSS X4, X14, X9
scaled:
	VBROADCASTSS X9, Y9
	VMULPS Y9, Y0, Y0
	VMULPS Y9, Y1, Y1
	VMULPS Y9, Y2, Y2
	VMULPS Y9, Y3, Y3
	VROUNDPS $0, Y0, Y0
	VROUNDPS $0, Y1, Y1
	VROUNDPS $0, Y2, Y2
	VROUNDPS $0, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, 2(DI)

	ADDQ $128, SI
	ADDQ $34, DI
	DECQ CX
	JNZ loop

done:
	VZEROUPPER
	RET

DATA q8perm<>+0(SB)/4, $0
DATA q8perm<>+4(SB)/4, $4
DATA q8perm<>+8(SB)/4, $1
DATA q8perm<>+12(SB)/4, $5
DATA q8perm<>+16(SB)/4, $2
DATA q8perm<>+20(SB)/4, $6
DATA q8perm<>+24(SB)/4, $3
DATA q8perm<>+28(SB)/4, $7
GLOBL q8perm<>(SB), RODATA|NOPTR, $32

// func quantizeQ8_KAVX2(x *float32, y *byte, nb int)
//
// quantize_row_q8_K_ref (quantizeQ8_K, which x86 ggml uses for Q8_K
// activations) for nb super-blocks of 256 floats into 292-byte blocks, the
// same bytes: amax = the largest |x| (a NaN never wins, as x > amax is false
// for it), maxV = the first x with |x| == amax, an all-zero block for
// amax == 0, iscale = -127/maxV, each quant nearestInt(iscale*x) by the same
// magic-number addition and mask, min(127, q) and its low byte (a NaN's
// quant as Go computes it, not a saturating conversion), the 16 sums of
// 16 quants as int16, and d = 1/iscale. Every float operation is one of the
// Go code's, rounded alike.
TEXT ·quantizeQ8_KAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15  // |x| mask
	MOVL $0x4b400000, AX   // 12582912.0
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VMOVDQU q8perm<>(SB), Y13
	MOVL $0x007fffff, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	MOVL $0x00400000, AX
	VMOVD AX, X11
	VPBROADCASTD X11, Y11
	MOVL $127, AX
	VMOVD AX, X10
	VPBROADCASTD X10, Y10
	MOVL $0xff, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9
	MOVL $0x01010101, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8
	MOVL $0x00010001, AX
	VMOVD AX, X7
	VPBROADCASTD X7, Y7
	TESTQ CX, CX
	JZ kdone

kblock:
	// amax: Y4 = max(|x|, Y4) lane-wise, |x| first so that a NaN keeps Y4.
	VXORPS Y4, Y4, Y4
	XORQ BX, BX
kamax:
	VANDPS (SI)(BX*1), Y15, Y0
	VMAXPS Y4, Y0, Y4
	VANDPS 32(SI)(BX*1), Y15, Y0
	VMAXPS Y4, Y0, Y4
	VANDPS 64(SI)(BX*1), Y15, Y0
	VMAXPS Y4, Y0, Y4
	VANDPS 96(SI)(BX*1), Y15, Y0
	VMAXPS Y4, Y0, Y4
	ADDQ $128, BX
	CMPQ BX, $1024
	JNE kamax
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VMOVHLPS X4, X4, X5
	VMAXPS X5, X4, X4
	VMOVSHDUP X4, X5
	VMAXSS X5, X4, X4
	VXORPS X5, X5, X5
	VUCOMISS X5, X4
	JNE knonzero
	// amax == 0: the whole block is zero (292 bytes).
	VPXOR Y0, Y0, Y0
	VMOVDQU Y0, (DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)
	VMOVDQU Y0, 256(DI)
	MOVL $0, 288(DI)
	JMP knext

knonzero:
	// maxV: the first x with |x| == amax (there is one).
	VBROADCASTSS X4, Y4
	XORQ BX, BX
kfind:
	VANDPS (SI)(BX*4), Y15, Y0
	VCMPPS $0, Y4, Y0, Y0
	VMOVMSKPS Y0, AX
	TESTL AX, AX
	JNZ kfound
	ADDQ $8, BX
	JMP kfind
kfound:
	BSFL AX, AX
	ADDQ AX, BX
	VMOVSS (SI)(BX*4), X0
	MOVL $0xc2fe0000, AX   // -127.0
	VMOVD AX, X1
	VDIVSS X0, X1, X1      // iscale = -127 / maxV
	MOVL $0x3f800000, AX   // 1.0
	VMOVD AX, X2
	VDIVSS X1, X2, X2      // d = 1 / iscale
	VMOVSS X2, (DI)
	VBROADCASTSS X1, Y6

	XORQ BX, BX
	LEAQ 4(DI), R8         // quants
	LEAQ 260(DI), R9       // bsums
kquant:
	VMULPS (SI)(BX*1), Y6, Y0
	VMULPS 32(SI)(BX*1), Y6, Y1
	VMULPS 64(SI)(BX*1), Y6, Y2
	VMULPS 96(SI)(BX*1), Y6, Y3
	VADDPS Y14, Y0, Y0
	VADDPS Y14, Y1, Y1
	VADDPS Y14, Y2, Y2
	VADDPS Y14, Y3, Y3
	VPAND Y12, Y0, Y0
	VPAND Y12, Y1, Y1
	VPAND Y12, Y2, Y2
	VPAND Y12, Y3, Y3
	VPSUBD Y11, Y0, Y0
	VPSUBD Y11, Y1, Y1
	VPSUBD Y11, Y2, Y2
	VPSUBD Y11, Y3, Y3
	VPMINSD Y10, Y0, Y0
	VPMINSD Y10, Y1, Y1
	VPMINSD Y10, Y2, Y2
	VPMINSD Y10, Y3, Y3
	VPAND Y9, Y0, Y0       // the low byte, as int8(q) keeps it
	VPAND Y9, Y1, Y1
	VPAND Y9, Y2, Y2
	VPAND Y9, Y3, Y3
	VPACKUSDW Y1, Y0, Y0   // 0..255 pass the unsigned packs unchanged
	VPACKUSDW Y3, Y2, Y2
	VPACKUSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, (R8)
	// bsums of the two 16-quant groups: pairs, quads, then within each half.
	VPMADDUBSW Y0, Y8, Y1
	VPMADDWD Y7, Y1, Y1
	VPHADDD Y1, Y1, Y1
	VPHADDD Y1, Y1, Y1
	VMOVD X1, AX
	MOVW AX, (R9)
	VEXTRACTI128 $1, Y1, X1
	VMOVD X1, AX
	MOVW AX, 2(R9)
	ADDQ $128, BX
	ADDQ $32, R8
	ADDQ $4, R9
	CMPQ BX, $1024
	JNE kquant

knext:
	ADDQ $1024, SI
	ADDQ $292, DI
	DECQ CX
	JNZ kblock

kdone:
	VZEROUPPER
	RET
