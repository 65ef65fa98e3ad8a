//go:build amd64

#include "textflag.h"

// Elementwise activations in place (AVX2+FMA), n a multiple of 8: expAVX2, softplusAVX2,
// sigmoidAVX2. The Go wrappers in act.go do the rest with the scalar references.

#include "exp_amd64.h"

// func expAVX2(x *float32, n int)
TEXT ·expAVX2(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	EXPCONSTS
	XORQ DX, DX
exploop:
	CMPQ DX, CX
	JGE expdone
	VMOVUPS (SI)(DX*4), Y1
	EXP
	VMOVUPS Y1, (SI)(DX*4)
	ADDQ $8, DX
	JMP exploop
expdone:
	VZEROUPPER
	RET

// func sigmoidAVX2(x *float32, n int)
// x = 1/(1+e^−x).
TEXT ·sigmoidAVX2(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	EXPCONSTS
	XORQ DX, DX
sigloop:
	CMPQ DX, CX
	JGE sigdone
	VMOVUPS (SI)(DX*4), Y1
	ABCAST(0x80000000, Y15, X15)
	VXORPS Y15, Y1, Y1
	EXP
	VADDPS Y5, Y1, Y1
	VDIVPS Y1, Y5, Y1
	VMOVUPS Y1, (SI)(DX*4)
	ADDQ $8, DX
	JMP sigloop
sigdone:
	VZEROUPPER
	RET

// func softplusAVX2(x *float32, n int)
// x = !(x <= 20) ? x : ln(1+e^x) (so NaN stays NaN), 1+e^x rounded to f32 first (ggml's).
TEXT ·softplusAVX2(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	EXPCONSTS
	XORQ DX, DX
sploop:
	CMPQ DX, CX
	JGE spdone
	VMOVUPS (SI)(DX*4), Y1
	EXP
	VADDPS Y5, Y1, Y1
	LOG
	VMOVUPS (SI)(DX*4), Y0
	VBROADCASTSS actTwenty<>(SB), Y15
	VCMPPS $6, Y15, Y0, Y2
	VBLENDVPS Y2, Y0, Y1, Y1
	VMOVUPS Y1, (SI)(DX*4)
	ADDQ $8, DX
	JMP sploop
spdone:
	VZEROUPPER
	RET
