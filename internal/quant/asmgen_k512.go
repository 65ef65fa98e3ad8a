//go:build ignore

// asmgen_k512 writes matmul_k512_amd64.s: AVX-512 (F, BW, VL, VNNI) decode
// kernels for Q4_K, Q5_K and Q6_K weight rows against one Q8_K activation
// row, two weight rows per 512-bit register.
//
//	go run asmgen_k512.go [-o matmul_k512_amd64.s]
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
// halves. Each half runs exactly the reference's per-lane sequence (the
// integer parts are exact, the float operations the same and in the same
// order), so the value of a row is the reference's, and the same as the
// AVX2 tiles give for it inside a prefill: the determinism rule holds across
// kernels.
//
// The scales go through the same integer steps as the AVX2 kernels
// (VPMADDUBSW then VPDPWSSD with the scale broadcast per sub-block; Q6_K's
// scales are picked per half by VPERMW). Decode streams each weight byte
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

// hsum2 reduces Z1 to ggml's hsum_float_8 of each half: lane 0 row a,
// lane 8 row b (then in X3).
func hsum2() {
	p("\t// ggml's hsum_float_8 on each half: lane 0 is row a's, lane 8 row b's.")
	p("\tVSHUFF32X4 $0xb1, Z1, Z1, Z3")
	p("\tVADDPS Z3, Z1, Z1")
	p("\tVSHUFPS $0x4e, Z1, Z1, Z3")
	p("\tVADDPS Z3, Z1, Z1")
	p("\tVMOVSHDUP Z1, Z3")
	p("\tVADDPS Z3, Z1, Z1")
	p("\tVEXTRACTF32X4 $2, Z1, X3")
}

func kernel(t ktype) {
	name := t.name + "Rows2"
	p("// func %s(w *byte, rowBytes, nw int, x *byte, nb int, out *float32)", name)
	p("//")
	p("// out[2i+h] = dot(weight row 2i+h, x) for i < nw, h < 2 (row r at w + r*rowBytes).")
	p("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ rowBytes+8(FP), R13")
	p("\tMOVQ nw+16(FP), BX")
	p("\tMOVQ out+40(FP), DX")
	p("\tMOVL $0x0f0f0f0f, AX")
	p("\tVPBROADCASTD AX, Z15")
	p("\tMOVL $0x80000000, AX")
	p("\tVPBROADCASTD AX, Y7")
	switch t.name {
	case "q5_K":
		p("\tMOVL $0x10101010, AX")
		p("\tVPBROADCASTD AX, Z16")
	case "q6_K":
		p("\tMOVL $0x30303030, AX")
		p("\tVPBROADCASTD AX, Z14")
	}
	p("\tTESTQ BX, BX")
	p("\tJZ %s_done", name)
	p("%s_outer:", name)
	p("\tLEAQ (SI)(R13*1), DI")
	p("\tMOVQ x+24(FP), R8")
	p("\tMOVQ nb+32(FP), CX")
	p("\tVPXORD Z1, Z1, Z1")
	p("\tVPXOR Y2, Y2, Y2")
	p("%s_inner:", name)
	p("\t// the next two rows' block, prefetched while these are read (never changes a value)")
	for l := range t.lines {
		p("\tPREFETCHT0 %d(SI)(R13*2)", 64*l)
		p("\tPREFETCHT0 %d(DI)(R13*2)", 64*l)
	}
	p("\tVPXORD Z0, Z0, Z0")
	if t.name == "q6_K" {
		q6Block()
	} else {
		q45Block(t.name == "q5_K")
	}
	p("\tADDQ $%d, SI", t.bytes)
	p("\tADDQ $%d, DI", t.bytes)
	p("\tADDQ $292, R8")
	p("\tDECQ CX")
	p("\tJNZ %s_inner", name)
	hsum2()
	switch t.name {
	case "q4_K":
		p("\t// plus the mins: hsum of 4 lanes per half (acc_m in ggml), lanes 0 and 4")
		p("\tVSHUFPS $0x4e, Y2, Y2, Y4")
		p("\tVADDPS Y4, Y2, Y2")
		p("\tVMOVSHDUP Y2, Y4")
		p("\tVADDPS Y4, Y2, Y2")
		p("\tVEXTRACTF128 $1, Y2, X4")
		p("\tVADDSS X2, X1, X1")
		p("\tVADDSS X4, X3, X3")
	case "q5_K":
		p("\t// plus the mins (summs in ggml): lanes 0 and 4")
		p("\tVEXTRACTF128 $1, Y2, X4")
		p("\tVADDSS X2, X1, X1")
		p("\tVADDSS X4, X3, X3")
	}
	p("\tVMOVSS X1, (DX)")
	p("\tVMOVSS X3, 4(DX)")
	p("\tADDQ $8, DX")
	p("\tADDQ R13, SI")
	p("\tDECQ BX")
	p("\tJNZ %s_outer", name)
	p("%s_done:", name)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// q45Block is one Q4_K or Q5_K super-block of rows SI (a) and DI (b)
// against R8: sumi in Z0, acc in Z1, the mins in Y2.
func q45Block(q5 bool) {
	p("\t// scales [a, a, b, b] (int16 per 128-bit lane) in Z14, mins [a | b] in Y12")
	scales("SI")
	p("\tVMOVQ AX, X14")
	p("\tVMOVQ R9, X12")
	scales("DI")
	p("\tVMOVQ AX, X13")
	p("\tVMOVQ R9, X11")
	p("\tVPMOVZXBW X14, X14")
	p("\tVPMOVZXBW X13, X13")
	p("\tVINSERTI128 $1, X14, Y14, Y14")
	p("\tVINSERTI128 $1, X13, Y13, Y13")
	p("\tVINSERTI64X4 $1, Y13, Z14, Z14")
	p("\tVPMOVZXBW X12, X12")
	p("\tVPMOVZXBW X11, X11")
	p("\tVINSERTI128 $1, X11, Y12, Y12")
	p("\t// dmin per half: (-y.d)*w.dmin, lanes [a x4 | b x4]")
	p("\tVPBROADCASTW 2(SI), X9")
	p("\tVPBROADCASTW 2(DI), X10")
	p("\tVPUNPCKLQDQ X10, X9, X9")
	p("\tVCVTPH2PS X9, Y9")
	p("\tVBROADCASTSS (R8), Y10")
	p("\tVXORPS Y7, Y10, Y10")
	p("\tVMULPS Y10, Y9, Y9")
	p("\tVMOVDQU 260(R8), X8")
	p("\tVPHADDW 276(R8), X8, X8")
	p("\tVINSERTI128 $1, X8, Y8, Y8")
	p("\tVPMADDWD Y12, Y8, Y8")
	if q5 {
		p("\t// summs = fma(dmin, Σ min*bsum, summs), the sum in lanes 0 and 4")
		p("\tVPHADDD Y8, Y8, Y8")
		p("\tVPHADDD Y8, Y8, Y8")
	} else {
		p("\t// acc_m = fma(dmin, madd(mins, hadd(bsums)), acc_m)")
	}
	p("\tVCVTDQ2PS Y8, Y8")
	p("\tVFMADD231PS Y8, Y9, Y2")
	qs := 16
	if q5 {
		qs = 48
		p("\tVMOVDQU 16(SI), Y3")
		p("\tVINSERTI64X4 $1, 16(DI), Z3, Z3")
	}
	for j := range 4 {
		p("\t// 64-element chunk %d", j)
		p("\tVMOVDQU %d(SI), Y12", qs+32*j)
		p("\tVINSERTI64X4 $1, %d(DI), Z12, Z12", qs+32*j)
		p("\tVPANDD Z15, Z12, Z13")
		p("\tVPSRLW $4, Z12, Z12")
		p("\tVPANDD Z15, Z12, Z12")
		if q5 {
			for h, dst := range []string{"Z13", "Z12"} {
				switch b := 2*j + h; {
				case b < 4:
					p("\tVPSLLW $%d, Z3, Z4", 4-b)
				case b > 4:
					p("\tVPSRLW $%d, Z3, Z4", b-4)
				default:
					p("\tVMOVDQU64 Z3, Z4")
				}
				p("\tVPANDD Z16, Z4, Z4")
				p("\tVPORD Z4, %s, %s", dst, dst)
			}
		}
		p("\tVPSHUFB shufk4z<>+%d(SB), Z14, Z11", 128*j)
		p("\tVPSHUFB shufk4z<>+%d(SB), Z14, Z10", 128*j+64)
		p("\tVBROADCASTI64X4 %d(R8), Z8", 4+64*j)
		p("\tVBROADCASTI64X4 %d(R8), Z9", 36+64*j)
		p("\tVPMADDUBSW Z8, Z13, Z8")
		p("\tVPMADDUBSW Z9, Z12, Z9")
		p("\tVPDPWSSD Z11, Z8, Z0")
		p("\tVPDPWSSD Z10, Z9, Z0")
	}
	p("\t// acc = fma(y.d*w.d, sumi, acc), d per half")
	p("\tVPBROADCASTW (SI), X9")
	p("\tVPBROADCASTW (DI), X10")
	p("\tVINSERTI128 $1, X10, Y9, Y9")
	p("\tVCVTPH2PS Y9, Z9")
	p("\tVBROADCASTSS (R8), Z10")
	p("\tVMULPS Z10, Z9, Z9")
	p("\tVCVTDQ2PS Z0, Z0")
	p("\tVFMADD231PS Z0, Z9, Z1")
}

// q6Block is one Q6_K super-block of rows SI (a) and DI (b) against R8.
func q6Block() {
	p("\t// scales [a | b] as int16 in Z13; 32*madd(bsums, scales) in Z5")
	p("\tVPMOVSXBW 192(SI), Y13")
	p("\tVPMOVSXBW 192(DI), Y4")
	p("\tVINSERTI64X4 $1, Y4, Z13, Z13")
	p("\tVBROADCASTI64X4 260(R8), Z5")
	p("\tVPMADDWD Z13, Z5, Z5")
	p("\tVPSLLD $5, Z5, Z5")
	for jj := range 2 {
		p("\t// 128-element half %d", jj)
		p("\tVMOVDQU %d(SI), Y3", 128+32*jj)
		p("\tVINSERTI64X4 $1, %d(DI), Z3, Z3", 128+32*jj)
		for t := range 4 {
			part := 4*jj + t
			ql := 64*jj + 32*(t%2)
			p("\t// part %d: levels 0..63", part)
			p("\tVMOVDQU %d(SI), Y12", ql)
			p("\tVINSERTI64X4 $1, %d(DI), Z12, Z12", ql)
			if t >= 2 {
				p("\tVPSRLW $4, Z12, Z12")
			}
			p("\tVPANDD Z15, Z12, Z12")
			switch t {
			case 0:
				p("\tVPSLLW $4, Z3, Z4")
			case 1:
				p("\tVPSLLW $2, Z3, Z4")
			case 2:
				p("\tVMOVDQU64 Z3, Z4")
			default:
				p("\tVPSRLW $2, Z3, Z4")
			}
			p("\tVPANDD Z14, Z4, Z4")
			p("\tVPORD Z4, Z12, Z12")
			p("\tVMOVDQU64 idxq6<>+%d(SB), Z11", 64*part)
			p("\tVPERMW Z13, Z11, Z11")
			p("\tVBROADCASTI64X4 %d(R8), Z8", 4+32*part)
			p("\tVPMADDUBSW Z8, Z12, Z8")
			p("\tVPDPWSSD Z11, Z8, Z0")
		}
	}
	p("\t// sumi -= 32*madd(bsums, scales); acc = fma(y.d*w.d, sumi, acc)")
	p("\tVPSUBD Z5, Z0, Z0")
	p("\tVPBROADCASTW 208(SI), X9")
	p("\tVPBROADCASTW 208(DI), X10")
	p("\tVINSERTI128 $1, X10, Y9, Y9")
	p("\tVCVTPH2PS Y9, Z9")
	p("\tVBROADCASTSS (R8), Z10")
	p("\tVMULPS Z10, Z9, Z9")
	p("\tVCVTDQ2PS Z0, Z0")
	p("\tVFMADD231PS Z0, Z9, Z1")
}

func main() {
	out := flag.String("o", "matmul_k512_amd64.s", "output file")
	flag.Parse()
	p(`// Code generated by asmgen_k512.go; DO NOT EDIT.

//go:build amd64

#include "textflag.h"

// AVX-512 decode kernels for Q4_K, Q5_K and Q6_K weights: two weight rows
// per 512-bit register against one Q8_K activation row; see asmgen_k512.go.

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
		kernel(t)
	}
	src := strings.TrimRight(strings.Join(lines, "\n"), " \t\r\n\v\f") + "\n"
	if err := os.WriteFile(*out, []byte(src), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
