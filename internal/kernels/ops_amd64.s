//go:build amd64

#include "textflag.h"

// 8 copies each of -87, 88 and +Inf for 256-bit memory operands.
DATA sgLo<>+0(SB)/8, $0xc2ae0000c2ae0000
DATA sgLo<>+8(SB)/8, $0xc2ae0000c2ae0000
DATA sgLo<>+16(SB)/8, $0xc2ae0000c2ae0000
DATA sgLo<>+24(SB)/8, $0xc2ae0000c2ae0000
GLOBL sgLo<>(SB), RODATA|NOPTR, $32
DATA sgHi<>+0(SB)/8, $0x42b0000042b00000
DATA sgHi<>+8(SB)/8, $0x42b0000042b00000
DATA sgHi<>+16(SB)/8, $0x42b0000042b00000
DATA sgHi<>+24(SB)/8, $0x42b0000042b00000
GLOBL sgHi<>(SB), RODATA|NOPTR, $32
DATA sgInf<>+0(SB)/8, $0x7f8000007f800000
DATA sgInf<>+8(SB)/8, $0x7f8000007f800000
DATA sgInf<>+16(SB)/8, $0x7f8000007f800000
DATA sgInf<>+24(SB)/8, $0x7f8000007f800000
GLOBL sgInf<>(SB), RODATA|NOPTR, $32

#define BCASTS(bits, reg, regx) \
	MOVL $bits, AX \
	VMOVD AX, regx \
	VPBROADCASTD regx, reg

// func swiGLUAVX2(dst, gate, up *float32, n int)
//
// dst[i] = gate[i] / (1 + exp(-gate[i])) * up[i] for i < n (a multiple of
// 8). exp(t) is expSumAVX2's (2^k * e^r, r = t - k*ln2 with ln2 split in
// two, degree-7 Taylor by Horner with FMA), with t clamped to [-87, 88]
// first: below, 1+exp(t) is 1; above, exp(t) is +Inf (as expf overflows)
// so the result is -0; NaN gates stay NaN through the division.
TEXT ·swiGLUAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), BX
	MOVQ n+24(FP), CX
	BCASTS(0x3fb8aa3b, Y14, X14) // log2e
	BCASTS(0x3f317200, Y13, X13) // ln2 high part
	BCASTS(0x35bfbe8e, Y12, X12) // ln2 low part
	BCASTS(0x39500d01, Y11, X11) // 1/5040
	BCASTS(0x3ab60b61, Y10, X10) // 1/720
	BCASTS(0x3c088889, Y9, X9)   // 1/120
	BCASTS(0x3d2aaaab, Y8, X8)   // 1/24
	BCASTS(0x3e2aaaab, Y7, X7)   // 1/6
	BCASTS(0x3f000000, Y6, X6)   // 1/2
	BCASTS(0x3f800000, Y5, X5)   // 1
	VXORPS Y1, Y1, Y1
	XORQ DX, DX
	CMPQ CX, $0
	JLE sgdone
sgloop:
	VMOVUPS (SI)(DX*4), Y2       // g
	VSUBPS Y2, Y1, Y3            // t = -g
	VCMPPS $0x1e, sgHi<>(SB), Y3, Y0 // t > 88
	VMAXPS sgLo<>(SB), Y3, Y3
	VMINPS sgHi<>(SB), Y3, Y3
	VMULPS Y14, Y3, Y4
	VROUNDPS $0, Y4, Y4          // k
	VFNMADD231PS Y13, Y4, Y3
	VFNMADD231PS Y12, Y4, Y3     // r
	VCVTPS2DQ Y4, Y4
	VPSLLD $23, Y4, Y4
	VMOVAPS Y11, Y1
	VFMADD213PS Y10, Y3, Y1
	VFMADD213PS Y9, Y3, Y1
	VFMADD213PS Y8, Y3, Y1
	VFMADD213PS Y7, Y3, Y1
	VFMADD213PS Y6, Y3, Y1
	VFMADD213PS Y5, Y3, Y1
	VFMADD213PS Y5, Y3, Y1       // e^r
	VPADDD Y4, Y1, Y1            // exp(t)
	VBLENDVPS Y0, sgInf<>(SB), Y1, Y1
	VADDPS Y5, Y1, Y1            // 1 + exp(-g)
	VDIVPS Y1, Y2, Y2            // g / (1 + exp(-g))
	VMULPS (BX)(DX*4), Y2, Y2
	VMOVUPS Y2, (DI)(DX*4)
	VXORPS Y1, Y1, Y1
	ADDQ $8, DX
	CMPQ DX, CX
	JLT sgloop
sgdone:
	VZEROUPPER
	RET
