//go:build amd64

#include "textflag.h"

// func pvLanesF16(lanes *float32, hd, lmask, lane0 int, p *float32, v *byte, ldv, n int)
//
// For j < n: lane row l = (lane0+j) & lmask of lanes (hd floats each) +=
// p[j] * widen(V row j), V row j at v + j*ldv bytes, with the FMA of
// axpyF16AVX2 (acc = fma(v, p, acc), eight elements at a time; hd is a
// multiple of 8).
TEXT ·pvLanesF16(SB), NOSPLIT, $0-64
	MOVQ lanes+0(FP), DI
	MOVQ hd+8(FP), R8
	MOVQ lmask+16(FP), R9
	MOVQ lane0+24(FP), R10
	MOVQ p+32(FP), SI
	MOVQ v+40(FP), DX
	MOVQ ldv+48(FP), R11
	MOVQ n+56(FP), CX
	TESTQ CX, CX
	JZ pvf16done
pvf16key:
	MOVQ R10, AX
	ANDQ R9, AX
	IMULQ R8, AX
	SHLQ $2, AX
	ADDQ DI, AX
	VBROADCASTSS (SI), Y0
	XORQ BX, BX
pvf16d:
	VCVTPH2PS (DX)(BX*2), Y1
	VFMADD213PS (AX)(BX*4), Y0, Y1
	VMOVUPS Y1, (AX)(BX*4)
	ADDQ $8, BX
	CMPQ BX, R8
	JLT pvf16d
	ADDQ $4, SI
	ADDQ R11, DX
	INCQ R10
	DECQ CX
	JNZ pvf16key
pvf16done:
	VZEROUPPER
	RET

// func pvLanesF32(lanes *float32, hd, lmask, lane0 int, p *float32, v *byte, ldv, n int)
//
// pvLanesF16 for f32 V rows (axpyF32AVX2's FMA).
TEXT ·pvLanesF32(SB), NOSPLIT, $0-64
	MOVQ lanes+0(FP), DI
	MOVQ hd+8(FP), R8
	MOVQ lmask+16(FP), R9
	MOVQ lane0+24(FP), R10
	MOVQ p+32(FP), SI
	MOVQ v+40(FP), DX
	MOVQ ldv+48(FP), R11
	MOVQ n+56(FP), CX
	TESTQ CX, CX
	JZ pvf32done
pvf32key:
	MOVQ R10, AX
	ANDQ R9, AX
	IMULQ R8, AX
	SHLQ $2, AX
	ADDQ DI, AX
	VBROADCASTSS (SI), Y0
	XORQ BX, BX
pvf32d:
	VMOVUPS (DX)(BX*4), Y1
	VFMADD213PS (AX)(BX*4), Y0, Y1
	VMOVUPS Y1, (AX)(BX*4)
	ADDQ $8, BX
	CMPQ BX, R8
	JLT pvf32d
	ADDQ $4, SI
	ADDQ R11, DX
	INCQ R10
	DECQ CX
	JNZ pvf32key
pvf32done:
	VZEROUPPER
	RET

// func pvLanesF16Z(lanes *float32, hd, lmask, lane0 int, p *float32, v *byte, ldv, n int)
//
// pvLanesF16 sixteen elements at a time (AVX-512; hd a multiple of 16):
// the same FMA per element.
TEXT ·pvLanesF16Z(SB), NOSPLIT, $0-64
	MOVQ lanes+0(FP), DI
	MOVQ hd+8(FP), R8
	MOVQ lmask+16(FP), R9
	MOVQ lane0+24(FP), R10
	MOVQ p+32(FP), SI
	MOVQ v+40(FP), DX
	MOVQ ldv+48(FP), R11
	MOVQ n+56(FP), CX
	TESTQ CX, CX
	JZ pvzdone
pvzkey:
	MOVQ R10, AX
	ANDQ R9, AX
	IMULQ R8, AX
	SHLQ $2, AX
	ADDQ DI, AX
	VBROADCASTSS (SI), Z0
	XORQ BX, BX
pvzd:
	VCVTPH2PS (DX)(BX*2), Z1
	VFMADD213PS (AX)(BX*4), Z0, Z1
	VMOVUPS Z1, (AX)(BX*4)
	ADDQ $16, BX
	CMPQ BX, R8
	JLT pvzd
	ADDQ $4, SI
	ADDQ R11, DX
	INCQ R10
	DECQ CX
	JNZ pvzkey
pvzdone:
	VZEROUPPER
	RET
