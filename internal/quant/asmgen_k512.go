//go:build ignore

// asmgen_k512 writes matmul_k512_amd64.s: AVX-512 (F, BW, VL, VNNI)
// kernels for Q4_K, Q5_K and Q6_K weight rows against 1 to 4 Q8_K
// activation rows (decode, batched decode and the bands of prefill), two
// weight rows per 512-bit register.
//
//	go run asmgen_k512.go asmgen_prefetch.go [-o matmul_k512_amd64.s]
//
// TestAsmgenK512 checks that the committed file is this program's output.
//
// # Method
//
// ggml's AVX2 vec_dot for these types keeps 8 f32 lanes per row: per
// super-block, lane k gets an exact integer sum (sumi) and
// acc = fma(y.d*w.d, sumi, acc); the mins go to a 4-lane accumulator (Q4_K)
// or one scalar (Q5_K), and the result is hsum_float_8(acc) plus the mins.
// Here a 512-bit register holds the 8 lanes of weight row a in its low half
// and of row b in its high half; the activation chunk is broadcast to both
// halves, and each block's unpacked weights and scales serve every
// activation row of the band (1..4). Each half runs exactly the reference's per-lane sequence (the
// integer parts are exact, the float operations the same and in the same
// order), so the value of a row is the reference's, and the same as the
// AVX2 tiles give for it inside a prefill: the determinism rule holds across
// kernels.
//
// The scales go through the same integer steps as the AVX2 kernels
// (VPMADDUBSW then VPDPWSSD with the scale broadcast per sub-block; Q6_K's
// scales are picked per half by VPERMW). A band streams each weight byte
// once, so the kernels prefetch the next two rows while reading these.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

var lines []string

func p(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

type ktype struct {
	name  string // q4_K, q5_K, q6_K
	bytes int    // block bytes
	lines int    // cache lines prefetched per row and block
}

var ktypes = []ktype{{"q4_K", 144, 3}, {"q5_K", 176, 3}, {"q6_K", 210, 4}}

// scales writes, for Q4_K/Q5_K row ptr, the 8 6-bit scales to AX and the 8
// mins to R9 as bytes (get_scale_min_k4). Clobbers R10, R11, R12.
func scales(ptr string) {
	for _, ins := range []string{
		"MOVL 4(%[1]s), AX",
		"MOVL 8(%[1]s), R9",
		"MOVL 12(%[1]s), R10",
		"MOVL R10, R11",
		"SHRL $4, R11",
		"ANDL $0x0f0f0f0f, R11",
		"MOVL R9, R12",
		"SHRL $6, R12",
		"ANDL $0x03030303, R12",
		"SHLL $4, R12",
		"ORL R12, R11",
		"ANDL $0x3f3f3f3f, R9",
		"ANDL $0x0f0f0f0f, R10",
		"MOVL AX, R12",
		"SHRL $6, R12",
		"ANDL $0x03030303, R12",
		"SHLL $4, R12",
		"ORL R12, R10",
		"ANDL $0x3f3f3f3f, AX",
		"SHLQ $32, R10",
		"ORQ R10, AX",
		"SHLQ $32, R11",
		"ORQ R11, R9",
	} {
		lines = append(lines, "\t"+strings.ReplaceAll(ins, "%[1]s", ptr))
	}
}

// Registers. Z0..Z3 sumi of activation row r (exact int32 per super-block),
// Z20..Z23 acc of row r, Y4..Y7 the mins of row r (Q4_K: 4 lanes per half;
// Q5_K: lanes 0 and 4). Z8, Z9 activation chunks, Z10, Z11 scales per
// sub-block, Z12, Z13 weight levels, Z14 the Q4_K/Q5_K scales (the Q6_K
// 0x30 mask), Z15 0x0f, Z16 0x10, Z17 the Q5_K/Q6_K high bits, Z18 a
// temporary, Z24 w.d per half, Y25 w.dmin per half, Y26 the sign bit.
// AX, R9, R10 point at activation rows 1..3 (R8 at row 0) once a block's
// scales are unpacked.
var xptrs = []string{"R8", "AX", "R9", "R10"}

// hsum reduces acc register a to ggml's hsum_float_8 of each half: lane 0
// of Z1 is row a's, lane 0 of X3 row b's (Z1, Z3: dead sumi registers).
func hsum(a string) {
	p("	// ggml's hsum_float_8 on each half: lane 0 is row a's, lane 8 row b's.")
	p("	VMOVAPS %s, Z1", a)
	p("	VSHUFF32X4 $0xb1, Z1, Z1, Z3")
	p("	VADDPS Z3, Z1, Z1")
	p("	VSHUFPS $0x4e, Z1, Z1, Z3")
	p("	VADDPS Z3, Z1, Z1")
	p("	VMOVSHDUP Z1, Z3")
	p("	VADDPS Z3, Z1, Z1")
	p("	VEXTRACTF32X4 $2, Z1, X3")
}

func kernel(t ktype, R int) {
	name := fmt.Sprintf("%sRows2x%d", t.name, R)
	p("// func %s(w *byte, rowBytes, nw int, x *byte, xstride, nb int, out *float32, ldo int)", name)
	p("//")
	p("// For weight rows 2i+h (i < nw, h < 2; row n at w + n*rowBytes) and the %d", R)
	p("// activation rows r at x + r*xstride: out[r*ldo/4 + 2i+h] = dot(weight row 2i+h, row r).")
	p("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	p("	MOVQ w+0(FP), SI")
	p("	MOVQ rowBytes+8(FP), R13")
	p("	MOVQ nw+16(FP), BX")
	p("	MOVQ out+48(FP), DX")
	p("	MOVL $0x0f0f0f0f, AX")
	p("	VPBROADCASTD AX, Z15")
	p("	MOVL $0x80000000, AX")
	p("	VPBROADCASTD AX, Y26")
	switch t.name {
	case "q5_K":
		p("	MOVL $0x10101010, AX")
		p("	VPBROADCASTD AX, Z16")
	case "q6_K":
		p("	MOVL $0x30303030, AX")
		p("	VPBROADCASTD AX, Z14")
	}
	prefetchDistance(name, 2)
	p("	TESTQ BX, BX")
	p("	JZ %s_done", name)
	p("%s_outer:", name)
	p("	LEAQ (SI)(R13*1), DI")
	p("	MOVQ x+24(FP), R8")
	p("	MOVQ nb+40(FP), CX")
	for r := range R {
		p("	VPXORD Z%d, Z%d, Z%d", 20+r, 20+r, 20+r)
		p("	VPXOR Y%d, Y%d, Y%d", 4+r, 4+r, 4+r)
	}
	p("%s_inner:", name)
	p("	// the block R14 ahead in both rows, prefetched while these are read")
	for l := range t.lines {
		p("	PREFETCHT0 %d(SI)(R14*1)", 64*l)
		p("	PREFETCHT0 %d(DI)(R14*1)", 64*l)
	}
	if t.name == "q6_K" {
		q6Block(R)
	} else {
		q45Block(t.name == "q5_K", R)
	}
	p("	ADDQ $%d, SI", t.bytes)
	p("	ADDQ $%d, DI", t.bytes)
	p("	ADDQ $292, R8")
	p("	DECQ CX")
	p("	JNZ %s_inner", name)
	p("	MOVQ DX, AX")
	p("	MOVQ ldo+56(FP), R11")
	for r := range R {
		hsum(fmt.Sprintf("Z%d", 20+r))
		switch t.name {
		case "q4_K":
			p("	// plus the mins: hsum of 4 lanes per half (acc_m in ggml), lanes 0 and 4")
			p("	VMOVAPS Y%d, Y2", 4+r)
			p("	VSHUFPS $0x4e, Y2, Y2, Y0")
			p("	VADDPS Y0, Y2, Y2")
			p("	VMOVSHDUP Y2, Y0")
			p("	VADDPS Y0, Y2, Y2")
			p("	VEXTRACTF128 $1, Y2, X0")
			p("	VADDSS X2, X1, X1")
			p("	VADDSS X0, X3, X3")
		case "q5_K":
			p("	// plus the mins (summs in ggml): lanes 0 and 4")
			p("	VEXTRACTF128 $1, Y%d, X0", 4+r)
			p("	VADDSS X%d, X1, X1", 4+r)
			p("	VADDSS X0, X3, X3")
		}
		p("	VMOVSS X1, (AX)")
		p("	VMOVSS X3, 4(AX)")
		if r < R-1 {
			p("	ADDQ R11, AX")
		}
	}
	p("	ADDQ $8, DX")
	p("	ADDQ R13, SI")
	p("	DECQ BX")
	p("	JNZ %s_outer", name)
	p("%s_done:", name)
	p("	VZEROUPPER")
	p("	RET")
	p("")
}

// xrows points AX, R9, R10 at activation rows 1..R-1 of this block.
func xrows(R int) {
	if R < 2 {
		return
	}
	p("	MOVQ xstride+32(FP), R11")
	for r := 1; r < R; r++ {
		p("	LEAQ (%s)(R11*1), %s", xptrs[r-1], xptrs[r])
	}
}

// wd puts w.d per half (16 floats) in Z24 from the f16 at off.
func wd(off int) {
	p("	VPBROADCASTW %d(SI), X9", off)
	p("	VPBROADCASTW %d(DI), X10", off)
	p("	VINSERTI128 $1, X10, Y9, Y9")
	p("	VCVTPH2PS Y9, Z24")
}

// accumulate is acc_r = fma(y_r.d*w.d, sumi_r, acc_r) for every row.
func accumulate(R int) {
	p("	// acc = fma(y.d*w.d, sumi, acc), d per half")
	for r := range R {
		p("	VBROADCASTSS (%s), Z10", xptrs[r])
		p("	VMULPS Z10, Z24, Z10")
		p("	VCVTDQ2PS Z%d, Z%d", r, r)
		p("	VFMADD231PS Z%d, Z10, Z%d", r, 20+r)
	}
}

// q45Block is one Q4_K or Q5_K super-block of weight rows SI (a) and DI
// (b) against the R activation rows.
func q45Block(q5 bool, R int) {
	p("	// scales [a, a, b, b] (int16 per 128-bit lane) in Z14, mins [a | b] in Y12")
	scales("SI")
	p("	VMOVQ AX, X14")
	p("	VMOVQ R9, X12")
	scales("DI")
	p("	VMOVQ AX, X13")
	p("	VMOVQ R9, X11")
	p("	VPMOVZXBW X14, X14")
	p("	VPMOVZXBW X13, X13")
	p("	VINSERTI128 $1, X14, Y14, Y14")
	p("	VINSERTI128 $1, X13, Y13, Y13")
	p("	VINSERTI64X4 $1, Y13, Z14, Z14")
	p("	VPMOVZXBW X12, X12")
	p("	VPMOVZXBW X11, X11")
	p("	VINSERTI128 $1, X11, Y12, Y12")
	xrows(R)
	p("	// w.dmin per half, lanes [a x4 | b x4]")
	p("	VPBROADCASTW 2(SI), X9")
	p("	VPBROADCASTW 2(DI), X10")
	p("	VPUNPCKLQDQ X10, X9, X9")
	p("	VCVTPH2PS X9, Y25")
	for r := range R {
		x := xptrs[r]
		p("	VPXORD Z%d, Z%d, Z%d", r, r, r)
		if q5 {
			p("	// summs = fma((-y.d)*w.dmin, Σ min*bsum, summs), the sum in lanes 0 and 4")
		} else {
			p("	// acc_m = fma((-y.d)*w.dmin, madd(mins, hadd(bsums)), acc_m)")
		}
		p("	VBROADCASTSS (%s), Y10", x)
		p("	VPXORD Y26, Y10, Y10")
		p("	VMULPS Y10, Y25, Y10")
		p("	VMOVDQU 260(%s), X8", x)
		p("	VPHADDW 276(%s), X8, X8", x)
		p("	VINSERTI128 $1, X8, Y8, Y8")
		p("	VPMADDWD Y12, Y8, Y8")
		if q5 {
			p("	VPHADDD Y8, Y8, Y8")
			p("	VPHADDD Y8, Y8, Y8")
		}
		p("	VCVTDQ2PS Y8, Y8")
		p("	VFMADD231PS Y8, Y10, Y%d", 4+r)
	}
	qs := 16
	if q5 {
		qs = 48
		p("	VMOVDQU 16(SI), Y9")
		p("	VINSERTI64X4 $1, 16(DI), Z9, Z17")
	}
	for j := range 4 {
		p("	// 64-element chunk %d", j)
		p("	VMOVDQU %d(SI), Y12", qs+32*j)
		p("	VINSERTI64X4 $1, %d(DI), Z12, Z12", qs+32*j)
		p("	VPANDD Z15, Z12, Z13")
		p("	VPSRLW $4, Z12, Z12")
		p("	VPANDD Z15, Z12, Z12")
		if q5 {
			for h, dst := range []string{"Z13", "Z12"} {
				switch b := 2*j + h; {
				case b < 4:
					p("	VPSLLW $%d, Z17, Z18", 4-b)
				case b > 4:
					p("	VPSRLW $%d, Z17, Z18", b-4)
				default:
					p("	VMOVDQU64 Z17, Z18")
				}
				p("	VPANDD Z16, Z18, Z18")
				p("	VPORD Z18, %s, %s", dst, dst)
			}
		}
		p("	VPSHUFB shufk4z<>+%d(SB), Z14, Z11", 128*j)
		p("	VPSHUFB shufk4z<>+%d(SB), Z14, Z10", 128*j+64)
		for r := range R {
			x := xptrs[r]
			p("	VBROADCASTI64X4 %d(%s), Z8", 4+64*j, x)
			p("	VBROADCASTI64X4 %d(%s), Z9", 36+64*j, x)
			p("	VPMADDUBSW Z8, Z13, Z8")
			p("	VPMADDUBSW Z9, Z12, Z9")
			p("	VPDPWSSD Z11, Z8, Z%d", r)
			p("	VPDPWSSD Z10, Z9, Z%d", r)
		}
	}
	wd(0)
	accumulate(R)
}

// q6Block is one Q6_K super-block of weight rows SI (a) and DI (b) against
// the R activation rows.
func q6Block(R int) {
	xrows(R)
	p("	// scales [a | b] as int16 in Z13; sumi starts at -32*madd(bsums, scales)")
	p("	VPMOVSXBW 192(SI), Y13")
	p("	VPMOVSXBW 192(DI), Y12")
	p("	VINSERTI64X4 $1, Y12, Z13, Z13")
	for r := range R {
		p("	VBROADCASTI64X4 260(%s), Z18", xptrs[r])
		p("	VPMADDWD Z13, Z18, Z18")
		p("	VPSLLD $5, Z18, Z18")
		p("	VPXORD Z%d, Z%d, Z%d", r, r, r)
		p("	VPSUBD Z18, Z%d, Z%d", r, r)
	}
	for jj := range 2 {
		p("	// 128-element half %d", jj)
		p("	VMOVDQU %d(SI), Y9", 128+32*jj)
		p("	VINSERTI64X4 $1, %d(DI), Z9, Z17", 128+32*jj)
		for t := range 4 {
			part := 4*jj + t
			ql := 64*jj + 32*(t%2)
			p("	// part %d: levels 0..63", part)
			p("	VMOVDQU %d(SI), Y12", ql)
			p("	VINSERTI64X4 $1, %d(DI), Z12, Z12", ql)
			if t >= 2 {
				p("	VPSRLW $4, Z12, Z12")
			}
			p("	VPANDD Z15, Z12, Z12")
			switch t {
			case 0:
				p("	VPSLLW $4, Z17, Z18")
			case 1:
				p("	VPSLLW $2, Z17, Z18")
			case 2:
				p("	VMOVDQU64 Z17, Z18")
			default:
				p("	VPSRLW $2, Z17, Z18")
			}
			p("	VPANDD Z14, Z18, Z18")
			p("	VPORD Z18, Z12, Z12")
			p("	VMOVDQU64 idxq6<>+%d(SB), Z11", 64*part)
			p("	VPERMW Z13, Z11, Z11")
			for r := range R {
				p("	VBROADCASTI64X4 %d(%s), Z8", 4+32*part, xptrs[r])
				p("	VPMADDUBSW Z8, Z12, Z8")
				p("	VPDPWSSD Z11, Z8, Z%d", r)
			}
		}
	}
	wd(208)
	accumulate(R)
}

func main() {
	out := flag.String("o", "matmul_k512_amd64.s", "output file")
	flag.Parse()
	p(`// Code generated by asmgen_k512.go; DO NOT EDIT.

//go:build amd64

#include "textflag.h"

// AVX-512 kernels for Q4_K, Q5_K and Q6_K weights: two weight rows per
// 512-bit register against 1 to 4 Q8_K activation rows; see asmgen_k512.go.

// shufk4z: pattern i broadcasts int16 element i of each 128-bit lane
// (get_scale_shuffle_k4), 64 bytes each.`)
	for i := range uint64(8) {
		w := (2*i+1)<<8 | 2*i
		q := w * 0x0001000100010001
		for k := range uint64(8) {
			p("DATA shufk4z<>+%d(SB)/8, $0x%016x", 64*i+8*k, q)
		}
	}
	p("GLOBL shufk4z<>(SB), RODATA|NOPTR, $512\n")
	p("// idxq6: for part p, VPERMW indices of Q6_K scales 2p (int16 0..7 of a")
	p("// half) and 2p+1 (8..15); the high half indexes row b's (+16).")
	for part := range 8 {
		var idx []uint64
		for i := range 32 {
			v := 2 * part
			if i%16 >= 8 {
				v++
			}
			if i >= 16 {
				v += 16
			}
			idx = append(idx, uint64(v))
		}
		for k := range 8 {
			q := idx[4*k] | idx[4*k+1]<<16 | idx[4*k+2]<<32 | idx[4*k+3]<<48
			p("DATA idxq6<>+%d(SB)/8, $0x%016x", 64*part+8*k, q)
		}
	}
	p("GLOBL idxq6<>(SB), RODATA|NOPTR, $512\n")
	for _, t := range ktypes {
		for R := 1; R <= 4; R++ {
			kernel(t, R)
		}
	}
	src := strings.TrimRight(strings.Join(lines, "\n"), " \t\r\n\v\f") + "\n"
	if err := os.WriteFile(*out, []byte(src), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
