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

// Attention's vector helpers. n is a multiple of 8; the caller does the
// rest. One 8-lane accumulator, reduced as the AVX2 tiles reduce.

#define HSUM8(acc, accx, tmpx) \
	VEXTRACTF128 $1, acc, tmpx \
	VADDPS tmpx, accx, accx \
	VMOVHLPS accx, accx, tmpx \
	VADDPS tmpx, accx, accx \
	VMOVSHDUP accx, tmpx \
	VADDSS tmpx, accx, accx

// func dotF32AVX2(a *float32, b *float32, n int) float32
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), DX
	XORQ CX, CX
	VXORPS Y0, Y0, Y0
	CMPQ DX, $0
	JLE dotf32done
dotf32loop:
	VMOVUPS (SI)(CX*4), Y1
	VFMADD231PS (DI)(CX*4), Y1, Y0
	ADDQ $8, CX
	CMPQ CX, DX
	JLT dotf32loop
dotf32done:
	HSUM8(Y0, X0, X1)
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF16AVX2(a *float32, b *uint16, n int) float32
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), DX
	XORQ CX, CX
	VXORPS Y0, Y0, Y0
	CMPQ DX, $0
	JLE dotf16done
dotf16loop:
	VCVTPH2PS (DI)(CX*2), Y1
	VFMADD231PS (SI)(CX*4), Y1, Y0
	ADDQ $8, CX
	CMPQ CX, DX
	JLT dotf16loop
dotf16done:
	HSUM8(Y0, X0, X1)
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyF32AVX2(y *float32, a float32, x *float32, n int)
TEXT ·axpyF32AVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), DX
	XORQ CX, CX
	CMPQ DX, $0
	JLE axpyf32done
axpyf32loop:
	VMOVUPS (SI)(CX*4), Y1
	VFMADD213PS (DI)(CX*4), Y0, Y1
	VMOVUPS Y1, (DI)(CX*4)
	ADDQ $8, CX
	CMPQ CX, DX
	JLT axpyf32loop
axpyf32done:
	VZEROUPPER
	RET

// func axpyF16AVX2(y *float32, a float32, x *uint16, n int)
TEXT ·axpyF16AVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), DX
	XORQ CX, CX
	CMPQ DX, $0
	JLE axpyf16done
axpyf16loop:
	VCVTPH2PS (SI)(CX*2), Y1
	VFMADD213PS (DI)(CX*4), Y0, Y1
	VMOVUPS Y1, (DI)(CX*4)
	ADDQ $8, CX
	CMPQ CX, DX
	JLT axpyf16loop
axpyf16done:
	VZEROUPPER
	RET
