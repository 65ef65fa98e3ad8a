//go:build amd64

#include "textflag.h"

// The folding kernel. consts.go derives the multipliers in ·foldK and says why they fold:
// the accumulators keep the message's value mod P; they are reduced to one 128-bit lane and
// finished with two CRC32 instructions. With dst non-nil every vector loaded is also stored
// there (the branch goes the same way on every round).

// func foldAVX512(s uint32, dst, src *byte, n int) uint32
// REQUIRES: n % 16 == 0, n >= 256.
TEXT ·foldAVX512(SB), NOSPLIT, $0-36
	MOVL s+0(FP), AX
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LEAQ ·foldK(SB), BX
	VBROADCASTI32X4 0(BX), Z8  // 2048 bits, every lane
	VBROADCASTI32X4 16(BX), Z9 // 512 bits, every lane
	VMOVDQU64 32(BX), Z10      // 384, 256, 128, 0 bits, lane by lane
	VMOVDQU   64(BX), X11      // 128 bits

	// Four accumulators from the first 256 bytes, the state added to the first 4.
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	TESTQ     DI, DI
	JZ        first
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z1, 64(DI)
	VMOVDQU64 Z2, 128(DI)
	VMOVDQU64 Z3, 192(DI)
	ADDQ      $256, DI

first:
	VMOVD  AX, X12
	VPXORQ Z12, Z0, Z0
	ADDQ   $256, SI
	SUBQ   $256, CX

loop256:
	CMPQ      CX, $256
	JB        fold4
	VMOVDQU64 0(SI), Z4
	VMOVDQU64 64(SI), Z5
	VMOVDQU64 128(SI), Z6
	VMOVDQU64 192(SI), Z7
	TESTQ     DI, DI
	JZ        fold256
	VMOVDQU64 Z4, 0(DI)
	VMOVDQU64 Z5, 64(DI)
	VMOVDQU64 Z6, 128(DI)
	VMOVDQU64 Z7, 192(DI)
	ADDQ      $256, DI

fold256:
	VPCLMULQDQ $0x00, Z8, Z0, Z12
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x00, Z8, Z1, Z13
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x00, Z8, Z2, Z14
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x00, Z8, Z3, Z15
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGQ $0x96, Z4, Z12, Z0 // Z0 ^= Z12 ^ Z4
	VPTERNLOGQ $0x96, Z5, Z13, Z1
	VPTERNLOGQ $0x96, Z6, Z14, Z2
	VPTERNLOGQ $0x96, Z7, Z15, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop256

fold4:
	// Z0 onto Z1, Z1 onto Z2, Z2 onto Z3: 64 bytes on each time.
	VPCLMULQDQ $0x00, Z9, Z0, Z12
	VPCLMULQDQ $0x11, Z9, Z0, Z13
	VPTERNLOGQ $0x96, Z12, Z13, Z1
	VPCLMULQDQ $0x00, Z9, Z1, Z12
	VPCLMULQDQ $0x11, Z9, Z1, Z13
	VPTERNLOGQ $0x96, Z12, Z13, Z2
	VPCLMULQDQ $0x00, Z9, Z2, Z12
	VPCLMULQDQ $0x11, Z9, Z2, Z13
	VPTERNLOGQ $0x96, Z12, Z13, Z3

loop64:
	CMPQ      CX, $64
	JB        reduce
	VMOVDQU64 0(SI), Z4
	TESTQ     DI, DI
	JZ        fold64
	VMOVDQU64 Z4, 0(DI)
	ADDQ      $64, DI

fold64:
	VPCLMULQDQ $0x00, Z9, Z3, Z12
	VPCLMULQDQ $0x11, Z9, Z3, Z3
	VPTERNLOGQ $0x96, Z4, Z12, Z3
	ADDQ       $64, SI
	SUBQ       $64, CX
	JMP        loop64

reduce:
	// Lanes 0, 1, 2 of Z3 onto lane 3 (384, 256, 128 bits on), then the four lanes summed.
	VPCLMULQDQ    $0x00, Z10, Z3, Z12
	VPCLMULQDQ    $0x11, Z10, Z3, Z13
	VEXTRACTI32X4 $3, Z3, X14      // zeroes the rest of Z14
	VPTERNLOGQ    $0x96, Z14, Z13, Z12
	VEXTRACTI64X4 $1, Z12, Y13
	VPXORQ        Y13, Y12, Y12
	VEXTRACTI128  $1, Y12, X13
	VPXOR         X13, X12, X0

loop16:
	CMPQ    CX, $16
	JB      done
	VMOVDQU 0(SI), X4
	TESTQ   DI, DI
	JZ      fold16
	VMOVDQU X4, 0(DI)
	ADDQ    $16, DI

fold16:
	VPCLMULQDQ $0x00, X11, X0, X12
	VPCLMULQDQ $0x11, X11, X0, X0
	VPTERNLOGQ $0x96, X4, X12, X0
	ADDQ       $16, SI
	SUBQ       $16, CX
	JMP        loop16

done:
	// X0 ≡ the message: its CRC state from 0 is the message's.
	VMOVQ   X0, R8
	VPEXTRQ $1, X0, R9
	XORL    AX, AX
	CRC32Q  R8, AX
	CRC32Q  R9, AX
	VZEROUPPER
	MOVL    AX, ret+32(FP)
	RET
