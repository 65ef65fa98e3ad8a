//go:build amd64

#include "textflag.h"

// ConvSiLU's body (AVX2+FMA): channels [0, width) of n tokens, width a multiple of 8.

// convClampLo: e^y is taken for y = −x clamped to [−80, 80] (2^k stays normal; past the
// clamp silu is x itself, or below 1e−33 in magnitude); 8 copies of −80.
DATA convClampLo<>+0(SB)/8, $0xc2a00000c2a00000
DATA convClampLo<>+8(SB)/8, $0xc2a00000c2a00000
DATA convClampLo<>+16(SB)/8, $0xc2a00000c2a00000
DATA convClampLo<>+24(SB)/8, $0xc2a00000c2a00000
GLOBL convClampLo<>(SB), RODATA|NOPTR, $32

#define CBCAST(bits, reg, regx) \
	MOVL $bits, AX \
	VMOVD AX, regx \
	VPBROADCASTD regx, reg

// func convSiLUAVX2(out, win, wT *float32, cd, K, n, width int)
// out[t*cd+ch] = silu(Σ_{i<K} win[(t+i)*cd+ch]·wT[i*cd+ch]) for t < n, ch < width: the sum
// a chain of VFMADD231PS from 0 in tap order; e^y = 2^k·e^r, k = round(y·log2e),
// r = y − k·ln2 (ln2 in two parts), e^r by its degree-7 Taylor polynomial; then x/(1+e^y).
TEXT ·convSiLUAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ win+8(FP), SI
	MOVQ wT+16(FP), R8
	MOVQ cd+24(FP), R9
	MOVQ K+32(FP), R10
	MOVQ n+40(FP), R11
	MOVQ width+48(FP), R12
	SHLQ $2, R9                 // a row, in bytes
	CBCAST(0x80000000, Y15, X15) // sign
	CBCAST(0x3fb8aa3b, Y14, X14) // log2e
	CBCAST(0x3f317200, Y13, X13) // ln2 high part
	CBCAST(0x35bfbe8e, Y12, X12) // ln2 low part
	CBCAST(0x39500d01, Y11, X11) // 1/5040
	CBCAST(0x3ab60b61, Y10, X10) // 1/720
	CBCAST(0x3c088889, Y9, X9)   // 1/120
	CBCAST(0x3d2aaaab, Y8, X8)   // 1/24
	CBCAST(0x3e2aaaab, Y7, X7)   // 1/6
	CBCAST(0x3f000000, Y6, X6)   // 1/2
	CBCAST(0x3f800000, Y5, X5)   // 1
	CBCAST(0x42a00000, Y4, X4)   // 80
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
	VXORPS Y15, Y0, Y1           // y = −x
	VMINPS Y4, Y1, Y1
	VMAXPS convClampLo<>(SB), Y1, Y1
	VMULPS Y14, Y1, Y2
	VROUNDPS $0, Y2, Y2          // k
	VMOVAPS Y1, Y3
	VFNMADD231PS Y13, Y2, Y3
	VFNMADD231PS Y12, Y2, Y3     // r
	VCVTPS2DQ Y2, Y2
	VPSLLD $23, Y2, Y2
	VMOVAPS Y11, Y1
	VFMADD213PS Y10, Y3, Y1
	VFMADD213PS Y9, Y3, Y1
	VFMADD213PS Y8, Y3, Y1
	VFMADD213PS Y7, Y3, Y1
	VFMADD213PS Y6, Y3, Y1
	VFMADD213PS Y5, Y3, Y1
	VFMADD213PS Y5, Y3, Y1       // e^r
	VPADDD Y2, Y1, Y1            // e^y
	VADDPS Y5, Y1, Y1
	VDIVPS Y1, Y0, Y0            // x/(1+e^y)
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
