//go:build amd64

#include "textflag.h"

// ConvSiLU's body (AVX2+FMA): channels [0, width) of n tokens, width a multiple of 8. e^y is
// exp_amd64.h's EXP (shared with the activations in act_amd64.s).

#include "exp_amd64.h"

// func convSiLUAVX2(out, win, wT *float32, cd, K, n, width int)
// out[t*cd+ch] = silu(Σ_{i<K} win[(t+i)*cd+ch]·wT[i*cd+ch]) for t < n, ch < width: the sum
// a chain of VFMADD231PS from 0 in tap order, then x/(1+e^−x). The sum waits in out while
// EXP takes every free register.
TEXT ·convSiLUAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ win+8(FP), SI
	MOVQ wT+16(FP), R8
	MOVQ cd+24(FP), R9
	MOVQ K+32(FP), R10
	MOVQ n+40(FP), R11
	MOVQ width+48(FP), R12
	SHLQ $2, R9 // a row, in bytes
	EXPCONSTS
	XORQ BX, BX
tloop:
	CMPQ BX, R11
	JGE done
	XORQ CX, CX
chloop:
	CMPQ CX, R12
	JGE tnext
	VXORPS Y0, Y0, Y0
	LEAQ (SI)(CX*4), AX
	LEAQ (R8)(CX*4), DX
	MOVQ R10, R13
iloop:
	VMOVUPS (AX), Y1
	VFMADD231PS (DX), Y1, Y0
	ADDQ R9, AX
	ADDQ R9, DX
	DECQ R13
	JNZ iloop
	VMOVUPS Y0, (DI)(CX*4)
	VXORPS Y1, Y1, Y1
	VSUBPS Y0, Y1, Y1 // −x
	EXP
	VADDPS Y5, Y1, Y1
	VMOVUPS (DI)(CX*4), Y0
	VDIVPS Y1, Y0, Y0 // x/(1+e^−x)
	VMOVUPS Y0, (DI)(CX*4)
	ADDQ $8, CX
	JMP chloop
tnext:
	ADDQ R9, SI
	ADDQ R9, DI
	INCQ BX
	JMP tloop
done:
	VZEROUPPER
	RET
