//go:build ignore

// asmgen_pair writes matmul_pair_amd64.s: AVX-512 (F, BW, VL, VNNI)
// kernels for Q8_0, Q4_0 and Q5_0 weight rows against Q8_0 activation rows
// taken two at a time ("pairs"), for batches of 2..8 rows (continuous-batching
// decode) and the bands of prefill.
//
//	go run asmgen_pair.go asmgen_prefetch.go [-o matmul_pair_amd64.s]
//
// TestAsmgenPair checks that the committed file is this program's output.
//
// # Why pairs
//
// ggml's AVX2 vec_dot keeps 8 f32 lanes per (weight row, activation row)
// dot product: per 32-element block, lane k gets the exact integer sum of
// elements 4k..4k+3 and acc = fma(d_w*d_x, lane, acc). A 512-bit register
// holds two such 8-lane dot products side by side, so one weight block,
// broadcast to both halves, meets two activation rows per instruction. Each
// half runs exactly the per-lane sequence of the reference (the halves never
// mix until the final horizontal sum, which is ggml's hsum_float_8 per half),
// so a value does not depend on which pair, band or kernel computes it.
//
// # Integer lanes without sign tricks
//
// AVX-512 has no VPSIGNB, so the weights are made unsigned: u = w + c
// (c = 128 for Q8_0 via XOR 0x80; c = 8 and 16 for Q4_0 and Q5_0, whose
// stored levels are already w + c). VPDPBUSD gives Σ u*x = Σ w*x + c*Σ x
// exactly (|Σ| < 2^17), and the lane starts from -c*Σx (the paired form
// stores -Σx per lane; a shift by log2 c scales it exactly), so the lane is
// Σ w*x, the same integer as ggml's maddubs/madd.
//
// # The paired form of the activations (pairBlock bytes per pair and block)
//
//	[0, 64)    quants of row a (32 bytes) then of row b
//	[64, 128)  -Σ x over elements 4k..4k+3, int32, lanes 0..7 row a, 8..15 row b
//	[128, 192) d_x as f32, eight copies for row a then eight for row b
//
// pairs are stored pair after pair, each nb blocks long; an odd last row
// is paired with itself.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

var lines []string

func p(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

type wtype struct {
	name   string
	bytes  int // block bytes
	shift  int // log2 c
	unpack func(ptr, dst string)
}

// Registers. Z0..Z7 accumulators (pair p, weight row h at 2p+h), Z8/Z9
// unsigned weight quants of rows 0/1, Z10/Z11 their d_w, Z12..Z15
// temporaries, Z16 byte mask (0x80 for Q8_0, 0x0f else), Z17 0x10 bytes
// (Q5_0). K1 = 0xcc (qwords of the high nibbles), K2/K3 the Q5_0 5th bits.
var xregs = []string{"R8", "R9", "R10", "R11"}

var types = []wtype{
	{"q8_0", 34, 7, func(ptr, dst string) {
		p("\tVBROADCASTI64X4 2(%s), %s", ptr, dst)
		p("\tVPXORD Z16, %s, %s", dst, dst)
	}},
	{"q4_0", 18, 3, func(ptr, dst string) {
		p("\tVBROADCASTI32X4 2(%s), %s", ptr, dst)
		p("\tVPSRLW $4, %s, Z12", dst)
		p("\tVPBLENDMQ Z12, %s, K1, %s", dst, dst)
		p("\tVPANDD Z16, %s, %s", dst, dst)
	}},
	{"q5_0", 22, 4, func(ptr, dst string) {
		k := "K2"
		if dst == "Z9" {
			k = "K3"
		}
		p("\tVBROADCASTI32X4 6(%s), %s", ptr, dst)
		p("\tVPSRLW $4, %s, Z12", dst)
		p("\tVPBLENDMQ Z12, %s, K1, %s", dst, dst)
		p("\tVPANDD Z16, %s, %s", dst, dst)
		p("\tKMOVD 2(%s), %s", ptr, k)
		p("\tKUNPCKDQ %s, %s, %s", k, k, k)
		p("\tVPADDB Z17, %s, %s, %s", dst, k, dst)
	}},
}

func kernel(t wtype, P int) {
	name := fmt.Sprintf("%sPairs%d", t.name, P)
	p("// func %s(w *byte, rowBytes, nw int, xp *byte, stride, nb int, outs *[8]*float32)", name)
	p("//")
	p("// For weight rows 2i, 2i+1 (i < nw; row r at w + r*rowBytes) and the %d", P)
	p("// pairs at xp + q*stride: outs[2q+h][2i+j] = dot(weight row 2i+j, row h of pair q).")
	p("TEXT ·%s(SB), NOSPLIT, $0-56", name)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ rowBytes+8(FP), R13")
	p("\tMOVQ nw+16(FP), BX")
	p("\tMOVQ outs+48(FP), DX")
	mask := "0x0f0f0f0f"
	if t.name == "q8_0" {
		mask = "0x80808080"
	}
	p("\tMOVL $%s, AX", mask)
	p("\tVPBROADCASTD AX, Z16")
	if t.name == "q5_0" {
		p("\tMOVL $0x10101010, AX")
		p("\tVPBROADCASTD AX, Z17")
	}
	if t.name != "q8_0" {
		p("\tMOVL $0xcc, AX")
		p("\tKMOVW AX, K1")
	}
	prefetchDistance(name, 2)
	p("\tXORQ AX, AX")
	p("\tTESTQ BX, BX")
	p("\tJZ %s_done", name)
	p("%s_outer:", name)
	p("\tLEAQ (SI)(R13*1), DI")
	p("\t// R12: the rows R14 ahead, prefetched while these are read.")
	p("\tLEAQ (SI)(R14*1), R12")
	p("\tMOVQ xp+24(FP), R8")
	for q := 1; q < P; q++ {
		p("\tMOVQ %s, %s", xregs[q-1], xregs[q])
		p("\tADDQ stride+32(FP), %s", xregs[q])
	}
	for a := 0; a < 2*P; a++ {
		p("\tVPXORD Z%d, Z%d, Z%d", a, a, a)
	}
	p("\tMOVQ nb+40(FP), CX")
	p("%s_inner:", name)
	p("\tPREFETCHT0 (R12)")
	p("\tPREFETCHT0 (R12)(R13*1)")
	p("\tADDQ $%d, R12", t.bytes)
	for h, ptr := range []string{"SI", "DI"} {
		t.unpack(ptr, fmt.Sprintf("Z%d", 8+h))
		p("\tVPBROADCASTW (%s), Y%d", ptr, 10+h)
		p("\tVCVTPH2PS Y%d, Z%d", 10+h, 10+h)
	}
	for q := range P {
		x := xregs[q]
		for h := range 2 {
			ti, td := 12+2*h, 13+2*h
			p("\tVPSLLD $%d, 64(%s), Z%d", t.shift, x, ti)
			p("\tVPDPBUSD (%s), Z%d, Z%d", x, 8+h, ti)
			p("\tVCVTDQ2PS Z%d, Z%d", ti, ti)
			p("\tVMULPS 128(%s), Z%d, Z%d", x, 10+h, td)
			p("\tVFMADD231PS Z%d, Z%d, Z%d", ti, td, 2*q+h)
		}
	}
	p("\tADDQ $%d, SI", t.bytes)
	p("\tADDQ $%d, DI", t.bytes)
	for q := range P {
		p("\tADDQ $192, %s", xregs[q])
	}
	p("\tDECQ CX")
	p("\tJNZ %s_inner", name)
	p("\t// ggml's hsum_float_8 on each half; element 0 is row a's sum, 8 row b's.")
	for q := range P {
		for h := range 2 {
			a := fmt.Sprintf("Z%d", 2*q+h)
			p("\tVSHUFF32X4 $0xb1, %s, %s, Z12", a, a)
			p("\tVADDPS Z12, %s, %s", a, a)
			p("\tVSHUFPS $0x4e, %s, %s, Z12", a, a)
			p("\tVADDPS Z12, %s, %s", a, a)
			p("\tVMOVSHDUP %s, Z12", a)
			p("\tVADDPS Z12, %s, %s", a, a)
			p("\tVEXTRACTF32X4 $2, %s, X12", a)
			p("\tMOVQ %d(DX), CX", 16*q)
			p("\tVMOVSS X%d, %d(CX)(AX*1)", 2*q+h, 4*h)
			p("\tMOVQ %d(DX), CX", 16*q+8)
			p("\tVMOVSS X12, %d(CX)(AX*1)", 4*h)
		}
	}
	p("\tADDQ $8, AX")
	p("\tADDQ R13, SI")
	p("\tDECQ BX")
	p("\tJNZ %s_outer", name)
	p("%s_done:", name)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// unpack2 loads weight rows a and b's block quants, unsigned, into the low
// and high halves of dst.
func unpack2(t wtype, a, b, dst string) {
	switch t.name {
	case "q8_0":
		p("\tVMOVDQU 2(%s), Y%s", a, dst[1:])
		p("\tVINSERTI64X4 $1, 2(%s), %s, %s", b, dst, dst)
		p("\tVPXORD Z16, %s, %s", dst, dst)
		return
	case "q4_0":
		p("\tVMOVDQU 2(%s), X%s", a, dst[1:])
		p("\tVINSERTI32X4 $2, 2(%s), %s, %s", b, dst, dst)
	case "q5_0":
		p("\tVMOVDQU 6(%s), X%s", a, dst[1:])
		p("\tVINSERTI32X4 $2, 6(%s), %s, %s", b, dst, dst)
	}
	p("\tVSHUFI64X2 $0xa0, %s, %s, %s", dst, dst, dst)
	p("\tVPSRLW $4, %s, Z12", dst)
	p("\tVPBLENDMQ Z12, %s, K1, %s", dst, dst)
	p("\tVPANDD Z16, %s, %s", dst, dst)
	if t.name == "q5_0" {
		p("\tKMOVD 2(%s), K2", a)
		p("\tKMOVD 2(%s), K3", b)
		p("\tKUNPCKDQ K2, K3, K4")
		p("\tVPADDB Z17, %s, K4, %s", dst, dst)
	}
}

// rowsKernel is the one-activation-row (decode) kernel: a 512-bit register
// holds weight rows a and b in its halves against the activation row in
// both (its paired form, the row paired with itself), four weight rows per
// iteration. Each half is the reference's per-lane sequence, as in the
// pair kernels.
func rowsKernel(t wtype) {
	name := t.name + "Rows4"
	p("// func %s(w *byte, rowBytes, nq int, xp *byte, nb int, out *float32)", name)
	p("//")
	p("// out[4i+r] = dot(weight row 4i+r, x) for i < nq, r < 4 (row r at w + r*rowBytes;")
	p("// xp the paired form of x with itself).")
	p("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ rowBytes+8(FP), R13")
	p("\tLEAQ (R13)(R13*2), R9")
	p("\tMOVQ nq+16(FP), BX")
	p("\tMOVQ out+40(FP), DX")
	mask := "0x0f0f0f0f"
	if t.name == "q8_0" {
		mask = "0x80808080"
	}
	p("\tMOVL $%s, AX", mask)
	p("\tVPBROADCASTD AX, Z16")
	if t.name == "q5_0" {
		p("\tMOVL $0x10101010, AX")
		p("\tVPBROADCASTD AX, Z17")
	}
	if t.name != "q8_0" {
		p("\tMOVL $0xcc, AX")
		p("\tKMOVW AX, K1")
	}
	prefetchDistance(name, 4)
	p("\tXORQ AX, AX")
	p("\tTESTQ BX, BX")
	p("\tJZ %s_done", name)
	p("%s_outer:", name)
	p("\tLEAQ (SI)(R13*1), DI")
	p("\tLEAQ (SI)(R13*2), R10")
	p("\tLEAQ (DI)(R13*2), R11")
	p("\t// R12: the rows R14 ahead, prefetched while these are read.")
	p("\tLEAQ (SI)(R14*1), R12")
	p("\tMOVQ xp+24(FP), R8")
	p("\tVPXORD Z0, Z0, Z0")
	p("\tVPXORD Z1, Z1, Z1")
	p("\tMOVQ nb+32(FP), CX")
	p("%s_inner:", name)
	p("\tPREFETCHT0 (R12)")
	p("\tPREFETCHT0 (R12)(R13*1)")
	p("\tPREFETCHT0 (R12)(R13*2)")
	p("\tPREFETCHT0 (R12)(R9*1)")
	p("\tADDQ $%d, R12", t.bytes)
	for q, rows := range [][2]string{{"SI", "DI"}, {"R10", "R11"}} {
		wq, dw := fmt.Sprintf("Z%d", 8+q), 10+q
		unpack2(t, rows[0], rows[1], wq)
		p("\tVPBROADCASTW (%s), X%d", rows[0], dw)
		p("\tVPBROADCASTW (%s), X14", rows[1])
		p("\tVINSERTI128 $1, X14, Y%d, Y%d", dw, dw)
		p("\tVCVTPH2PS Y%d, Z%d", dw, dw)
	}
	for q := range 2 {
		ti, td := 12+2*q, 13+2*q
		p("\tVPSLLD $%d, 64(R8), Z%d", t.shift, ti)
		p("\tVPDPBUSD (R8), Z%d, Z%d", 8+q, ti)
		p("\tVCVTDQ2PS Z%d, Z%d", ti, ti)
		p("\tVMULPS 128(R8), Z%d, Z%d", 10+q, td)
		p("\tVFMADD231PS Z%d, Z%d, Z%d", ti, td, q)
	}
	for _, r := range []string{"SI", "DI", "R10", "R11"} {
		p("\tADDQ $%d, %s", t.bytes, r)
	}
	p("\tADDQ $192, R8")
	p("\tDECQ CX")
	p("\tJNZ %s_inner", name)
	for q := range 2 {
		a := fmt.Sprintf("Z%d", q)
		p("\tVSHUFF32X4 $0xb1, %s, %s, Z12", a, a)
		p("\tVADDPS Z12, %s, %s", a, a)
		p("\tVSHUFPS $0x4e, %s, %s, Z12", a, a)
		p("\tVADDPS Z12, %s, %s", a, a)
		p("\tVMOVSHDUP %s, Z12", a)
		p("\tVADDPS Z12, %s, %s", a, a)
		p("\tVEXTRACTF32X4 $2, %s, X12", a)
		p("\tVMOVSS X%d, %d(DX)(AX*1)", q, 8*q)
		p("\tVMOVSS X12, %d(DX)(AX*1)", 8*q+4)
	}
	p("\tADDQ $16, AX")
	p("\tADDQ R9, SI")
	p("\tDECQ BX")
	p("\tJNZ %s_outer", name)
	p("%s_done:", name)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

func prepare() {
	p("// func preparePair(xa, xb *byte, nb int, dst *byte)")
	p("//")
	p("// Writes the paired form (see asmgen_pair.go) of Q8_0 rows xa and xb.")
	p("TEXT ·preparePair(SB), NOSPLIT, $0-32")
	p("\tMOVQ xa+0(FP), SI")
	p("\tMOVQ xb+8(FP), DI")
	p("\tMOVQ nb+16(FP), CX")
	p("\tMOVQ dst+24(FP), DX")
	p("\tMOVL $0x01010101, AX")
	p("\tVPBROADCASTD AX, Y15")
	p("\tVPXOR Y14, Y14, Y14")
	p("\tTESTQ CX, CX")
	p("\tJZ prep_done")
	p("prep_loop:")
	for h, ptr := range []string{"SI", "DI"} {
		p("\tVMOVDQU 2(%s), Y%d", ptr, h)
		p("\tVMOVDQU Y%d, %d(DX)", h, 32*h)
		p("\tVPXOR Y%d, Y%d, Y%d", 2+h, 2+h, 2+h)
		p("\tVPDPBUSD Y%d, Y15, Y%d", h, 2+h)
		p("\tVPSUBD Y%d, Y14, Y%d", 2+h, 2+h)
		p("\tVMOVDQU Y%d, %d(DX)", 2+h, 64+32*h)
		p("\tVPBROADCASTW (%s), X%d", ptr, 4+h)
		p("\tVCVTPH2PS X%d, Y%d", 4+h, 4+h)
		p("\tVMOVUPS Y%d, %d(DX)", 4+h, 128+32*h)
	}
	p("\tADDQ $34, SI")
	p("\tADDQ $34, DI")
	p("\tADDQ $192, DX")
	p("\tDECQ CX")
	p("\tJNZ prep_loop")
	p("prep_done:")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

func main() {
	out := flag.String("o", "matmul_pair_amd64.s", "output file")
	flag.Parse()
	p(`// Code generated by asmgen_pair.go; DO NOT EDIT.

//go:build amd64

#include "textflag.h"

// AVX-512 kernels for Q8_0, Q4_0 and Q5_0 weights against pairs of Q8_0
// activation rows; see asmgen_pair.go for the method and the paired form.
`)
	prepare()
	for _, t := range types {
		for P := 1; P <= 4; P++ {
			kernel(t, P)
		}
		rowsKernel(t)
	}
	src := strings.TrimRight(strings.Join(lines, "\n"), " \t\r\n\v\f") + "\n"
	if err := os.WriteFile(*out, []byte(src), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
