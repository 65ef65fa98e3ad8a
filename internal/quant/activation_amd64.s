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
