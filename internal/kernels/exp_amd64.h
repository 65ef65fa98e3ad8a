// Shared by act_amd64.s and conv_amd64.s (#include): single-precision e^x, and ln for x >= 1,
// eight lanes at a time (AVX2+FMA). Each file that includes it gets its own copies of the
// constants (file-local symbols).

DATA actCutoff<>+0(SB)/4, $0xc2ad0000
GLOBL actCutoff<>(SB), RODATA|NOPTR, $4
DATA actMant<>+0(SB)/4, $0x007fffff
GLOBL actMant<>(SB), RODATA|NOPTR, $4
DATA actHalf<>+0(SB)/4, $0x3f000000
GLOBL actHalf<>(SB), RODATA|NOPTR, $4
DATA actSqrtHF<>+0(SB)/4, $0x3f3504f3
GLOBL actSqrtHF<>(SB), RODATA|NOPTR, $4
DATA actP0<>+0(SB)/4, $0x3d9021bb
GLOBL actP0<>(SB), RODATA|NOPTR, $4
DATA actP1<>+0(SB)/4, $0xbdebd1b8
GLOBL actP1<>(SB), RODATA|NOPTR, $4
DATA actP2<>+0(SB)/4, $0x3def251a
GLOBL actP2<>(SB), RODATA|NOPTR, $4
DATA actP3<>+0(SB)/4, $0xbdfe5d4f
GLOBL actP3<>(SB), RODATA|NOPTR, $4
DATA actP4<>+0(SB)/4, $0x3e11e9bf
GLOBL actP4<>(SB), RODATA|NOPTR, $4
DATA actP5<>+0(SB)/4, $0xbe2aae50
GLOBL actP5<>(SB), RODATA|NOPTR, $4
DATA actP6<>+0(SB)/4, $0x3e4cceac
GLOBL actP6<>(SB), RODATA|NOPTR, $4
DATA actP7<>+0(SB)/4, $0xbe7ffffc
GLOBL actP7<>(SB), RODATA|NOPTR, $4
DATA actP8<>+0(SB)/4, $0x3eaaaaaa
GLOBL actP8<>(SB), RODATA|NOPTR, $4
DATA actQ1<>+0(SB)/4, $0xb95e8083
GLOBL actQ1<>(SB), RODATA|NOPTR, $4
DATA actMHalf<>+0(SB)/4, $0xbf000000
GLOBL actMHalf<>(SB), RODATA|NOPTR, $4
DATA actQ2<>+0(SB)/4, $0x3f318000
GLOBL actQ2<>(SB), RODATA|NOPTR, $4
DATA actTwenty<>+0(SB)/4, $0x41a00000
GLOBL actTwenty<>(SB), RODATA|NOPTR, $4
DATA act126<>+0(SB)/4, $0x0000007e
GLOBL act126<>(SB), RODATA|NOPTR, $4

#define ABCAST(bits, reg, regx) \
	MOVL $bits, AX \
	VMOVD AX, regx \
	VPBROADCASTD regx, reg

// The constants of EXP: log2e, ln2 in two parts, the Taylor coefficients 1/7! .. 1/2!, 1, and
// the upper clamp 88 (e^88 is finite).
#define EXPCONSTS \
	ABCAST(0x3fb8aa3b, Y14, X14) \
	ABCAST(0x3f317200, Y13, X13) \
	ABCAST(0x35bfbe8e, Y12, X12) \
	ABCAST(0x39500d01, Y11, X11) \
	ABCAST(0x3ab60b61, Y10, X10) \
	ABCAST(0x3c088889, Y9, X9) \
	ABCAST(0x3d2aaaab, Y8, X8) \
	ABCAST(0x3e2aaaab, Y7, X7) \
	ABCAST(0x3f000000, Y6, X6) \
	ABCAST(0x3f800000, Y5, X5) \
	ABCAST(0x42b00000, Y4, X4)

// EXP: Y1 = e^Y1 (Y0, Y2, Y3, Y15 clobbered). x is clamped above at 88 (NaN kept), below
// −86.5 gives 0; e^x = 2^k·e^r, k = round(x·log2e), r = x − k·ln2, e^r by its degree-7
// Taylor polynomial.
#define EXP \
	VMINPS Y1, Y4, Y1 \
	VBROADCASTSS actCutoff<>(SB), Y15 \
	VCMPPS $5, Y15, Y1, Y0 \
	VMULPS Y14, Y1, Y2 \
	VROUNDPS $0, Y2, Y2 \
	VMOVAPS Y1, Y3 \
	VFNMADD231PS Y13, Y2, Y3 \
	VFNMADD231PS Y12, Y2, Y3 \
	VCVTPS2DQ Y2, Y2 \
	VPSLLD $23, Y2, Y2 \
	VMOVAPS Y11, Y1 \
	VFMADD213PS Y10, Y3, Y1 \
	VFMADD213PS Y9, Y3, Y1 \
	VFMADD213PS Y8, Y3, Y1 \
	VFMADD213PS Y7, Y3, Y1 \
	VFMADD213PS Y6, Y3, Y1 \
	VFMADD213PS Y5, Y3, Y1 \
	VFMADD213PS Y5, Y3, Y1 \
	VPADDD Y2, Y1, Y1 \
	VANDPS Y0, Y1, Y1

// LOG: Y1 = ln Y1 for Y1 >= 1 (Y0, Y2, Y3, Y15 clobbered): Cephes' logf. y = m·2^e with m
// in [√½, √2), ln y = e·ln2 + ln m, ln m by its polynomial in m−1.
#define LOG \
	VPSRLD $23, Y1, Y2 \
	VPBROADCASTD act126<>(SB), Y15 \
	VPSUBD Y15, Y2, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VBROADCASTSS actMant<>(SB), Y15 \
	VANDPS Y15, Y1, Y1 \
	VBROADCASTSS actHalf<>(SB), Y15 \
	VORPS Y15, Y1, Y1 \
	VBROADCASTSS actSqrtHF<>(SB), Y15 \
	VCMPPS $1, Y15, Y1, Y0 \
	VANDPS Y5, Y0, Y3 \
	VSUBPS Y3, Y2, Y2 \
	VANDPS Y1, Y0, Y3 \
	VSUBPS Y5, Y1, Y1 \
	VADDPS Y3, Y1, Y1 \
	VMULPS Y1, Y1, Y3 \
	VBROADCASTSS actP0<>(SB), Y0 \
	VBROADCASTSS actP1<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VBROADCASTSS actP2<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VBROADCASTSS actP3<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VBROADCASTSS actP4<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VBROADCASTSS actP5<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VBROADCASTSS actP6<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VBROADCASTSS actP7<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VBROADCASTSS actP8<>(SB), Y15 \
	VFMADD213PS Y15, Y1, Y0 \
	VMULPS Y1, Y0, Y0 \
	VMULPS Y3, Y0, Y0 \
	VBROADCASTSS actQ1<>(SB), Y15 \
	VFMADD231PS Y15, Y2, Y0 \
	VBROADCASTSS actMHalf<>(SB), Y15 \
	VFMADD231PS Y15, Y3, Y0 \
	VADDPS Y0, Y1, Y1 \
	VBROADCASTSS actQ2<>(SB), Y15 \
	VFMADD231PS Y15, Y2, Y1
