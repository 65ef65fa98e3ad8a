//go:build amd64

#include "textflag.h"

// func readStreamAVX2(p *byte, n int) uint64
//
// XOR of the n bytes at p as 64-bit words (n a multiple of 128), reading
// them front to back with the weight kernels' prefetch distance (8 KB): a
// stream of reads with no arithmetic to speak of, the ceiling a GEMV
// kernel's weight reads can reach (BenchmarkDecodeBandwidth's "read" row).
TEXT ·readStreamAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $7, CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	TESTQ CX, CX
	JZ done
loop:
	PREFETCHT0 8192(SI)
	PREFETCHT0 8256(SI)
	VPXOR (SI), Y0, Y0
	VPXOR 32(SI), Y1, Y1
	VPXOR 64(SI), Y2, Y2
	VPXOR 96(SI), Y3, Y3
	ADDQ $128, SI
	DECQ CX
	JNZ loop
done:
	VPXOR Y1, Y0, Y0
	VPXOR Y3, Y2, Y2
	VPXOR Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPXOR X1, X0, X0
	VPSRLDQ $8, X0, X1
	VPXOR X1, X0, X0
	VMOVQ X0, AX
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET
