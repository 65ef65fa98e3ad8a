//go:build amd64

#include "textflag.h"

// func roundF16F16C(dst *float32, src *float32, n int)
// n is a multiple of 8.
TEXT ·roundF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	CMPQ CX, $0
	JLE done
loop:
	VMOVUPS (SI)(AX*4), Y0
	VCVTPS2PH $0, Y0, X1
	VCVTPH2PS X1, Y1
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JLT loop
done:
	VZEROUPPER
	RET
