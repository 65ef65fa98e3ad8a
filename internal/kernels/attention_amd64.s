//go:build amd64

#include "textflag.h"

// Attention's softmax and gather helpers (AVX2+FMA+F16C). n is a multiple
// of 8; the Go wrappers in attention_amd64.go do the rest.

// expCutoff: below it expSumAVX2 returns 0 (2^k would leave the normal
// range); 8 copies of -86.5 for a 256-bit memory operand.
DATA expCutoff<>+0(SB)/8, $0xc2ad0000c2ad0000
DATA expCutoff<>+8(SB)/8, $0xc2ad0000c2ad0000
DATA expCutoff<>+16(SB)/8, $0xc2ad0000c2ad0000
DATA expCutoff<>+24(SB)/8, $0xc2ad0000c2ad0000
GLOBL expCutoff<>(SB), RODATA|NOPTR, $32

#define BCAST(bits, reg, regx) \
	MOVL $bits, AX \
	VMOVD AX, regx \
	VPBROADCASTD regx, reg

// func scaleMaxAVX2(x *float32, n int, s float32) float32
// x[i] *= s; returns the max of the scaled values (-Inf when n is 0).
TEXT ·scaleMaxAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y15
	BCAST(0xff800000, Y0, X0)
	XORQ DX, DX
	CMPQ CX, $0
	JLE smdone
smloop:
	VMULPS (SI)(DX*4), Y15, Y1
	VMOVUPS Y1, (SI)(DX*4)
	VMAXPS Y1, Y0, Y0
	ADDQ $8, DX
	CMPQ DX, CX
	JLT smloop
smdone:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VMAXPS X1, X0, X0
	VMOVSHDUP X0, X1
	VMAXSS X1, X0, X0
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func expSumAVX2(x *float32, n int, mx float32) float64
// x[i] = exp(x[i] - mx) and returns Σ x[i] in float64, summed in one
// 4-lane float64 accumulator (low then high half of each 8), then lanes
// added (0+1)+(2+3).
//
// exp(x) = 2^k * e^r, k = round(x*log2e), r = x - k*ln2 (ln2 split in two,
// FMA), e^r by its degree-7 Taylor polynomial (Horner, FMA); 2^k is added
// to the exponent bits; x < -86.5 gives 0, NaN stays NaN.
TEXT ·expSumAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS mx+16(FP), Y15
	BCAST(0x3fb8aa3b, Y14, X14) // log2e
	BCAST(0x3f317200, Y13, X13) // ln2 high part
	BCAST(0x35bfbe8e, Y12, X12) // ln2 low part
	BCAST(0x39500d01, Y11, X11) // 1/5040
	BCAST(0x3ab60b61, Y10, X10) // 1/720
	BCAST(0x3c088889, Y9, X9)   // 1/120
	BCAST(0x3d2aaaab, Y8, X8)   // 1/24
	BCAST(0x3e2aaaab, Y7, X7)   // 1/6
	BCAST(0x3f000000, Y6, X6)   // 1/2
	BCAST(0x3f800000, Y5, X5)   // 1
	VXORPD Y0, Y0, Y0
	XORQ DX, DX
	CMPQ CX, $0
	JLE esdone
esloop:
	VMOVUPS (SI)(DX*4), Y1
	VSUBPS Y15, Y1, Y1           // x - mx
	VMULPS Y14, Y1, Y2
	VROUNDPS $0, Y2, Y2          // k
	VMOVAPS Y1, Y3
	VFNMADD231PS Y13, Y2, Y3
	VFNMADD231PS Y12, Y2, Y3     // r
	VCMPPS $5, expCutoff<>(SB), Y1, Y1 // !(x < cutoff)
	VCVTPS2DQ Y2, Y2
	VPSLLD $23, Y2, Y2
	VMOVAPS Y11, Y4
	VFMADD213PS Y10, Y3, Y4
	VFMADD213PS Y9, Y3, Y4
	VFMADD213PS Y8, Y3, Y4
	VFMADD213PS Y7, Y3, Y4
	VFMADD213PS Y6, Y3, Y4
	VFMADD213PS Y5, Y3, Y4
	VFMADD213PS Y5, Y3, Y4       // e^r
	VPADDD Y2, Y4, Y4
	VANDPS Y1, Y4, Y4
	VMOVUPS Y4, (SI)(DX*4)
	VCVTPS2PD X4, Y3
	VADDPD Y3, Y0, Y0
	VEXTRACTF128 $1, Y4, X4
	VCVTPS2PD X4, Y3
	VADDPD Y3, Y0, Y0
	ADDQ $8, DX
	CMPQ DX, CX
	JLT esloop
esdone:
	VEXTRACTF128 $1, Y0, X1
	VHADDPD X0, X0, X0
	VHADDPD X1, X1, X1
	VADDSD X1, X0, X0
	MOVSD X0, ret+24(FP)
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, s float32)
// x[i] *= s.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y15
	XORQ DX, DX
	CMPQ CX, $0
	JLE scdone
scloop:
	VMULPS (SI)(DX*4), Y15, Y1
	VMOVUPS Y1, (SI)(DX*4)
	ADDQ $8, DX
	CMPQ DX, CX
	JLT scloop
scdone:
	VZEROUPPER
	RET

// func f16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ DX, DX
	CMPQ CX, $0
	JLE cvdone
cvloop:
	VCVTPH2PS (SI)(DX*2), Y1
	VMOVUPS Y1, (DI)(DX*4)
	ADDQ $8, DX
	CMPQ DX, CX
	JLT cvloop
cvdone:
	VZEROUPPER
	RET
