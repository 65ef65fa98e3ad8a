//go:build ignore

// asmgen_attn writes attention_pv_amd64.s: the AVX-512 P·V kernels of
// single-query attention that keep the sixteen lane accumulators of a
// 16-element slice of the head in registers while every key is added,
// instead of loading and storing a lane row per key (pvLanes).
//
//	go run asmgen_attn.go
package main

import (
	"fmt"
	"os"
	"strings"
)

var lines []string

func p(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

func kernel(f16 bool) {
	name := "pvGroups16F32"
	if f16 {
		name = "pvGroups16F16"
	}
	p("// func %s(lanes *float32, hd int, p *float32, vptrs *uintptr, ng, ldv int)", name)
	p("//")
	p("// For key groups g < ng (16 keys each: key l of group g is the V row at")
	p("// vptrs[g] + l*ldv bytes, with weight p[16g+l]) and every 16 elements of")
	p("// the head (hd a multiple of 16): lanes[l*hd+d] = fma(v[d], p, lanes[l*hd+d]),")
	p("// in group order, the FMA of pvLanes.")
	p("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	p("\tMOVQ lanes+0(FP), DI")
	p("\tMOVQ hd+8(FP), R8")
	p("\tMOVQ p+16(FP), SI")
	p("\tMOVQ vptrs+24(FP), R9")
	p("\tMOVQ ng+32(FP), R10")
	p("\tMOVQ ldv+40(FP), R11")
	p("\tMOVQ R8, BX")
	p("\tSHLQ $2, BX")
	p("\tXORQ CX, CX")
	p("%s_chunk:", name)
	p("\tLEAQ (DI)(CX*4), AX")
	for l := range 16 {
		p("\tVMOVUPS (AX), Z%d", l)
		if l < 15 {
			p("\tADDQ BX, AX")
		}
	}
	p("\tMOVQ SI, R12")
	p("\tMOVQ R9, R13")
	p("\tMOVQ R10, DX")
	p("\tTESTQ DX, DX")
	p("\tJZ %s_store", name)
	p("%s_group:", name)
	p("\tMOVQ (R13), AX")
	if f16 {
		p("\tLEAQ (AX)(CX*2), AX")
	} else {
		p("\tLEAQ (AX)(CX*4), AX")
	}
	for l := range 16 {
		if f16 {
			p("\tVCVTPH2PS (AX), Z16")
		} else {
			p("\tVMOVUPS (AX), Z16")
		}
		p("\tVFMADD231PS.BCST %d(R12), Z16, Z%d", 4*l, l)
		if l < 15 {
			p("\tADDQ R11, AX")
		}
	}
	p("\tADDQ $64, R12")
	p("\tADDQ $8, R13")
	p("\tDECQ DX")
	p("\tJNZ %s_group", name)
	p("%s_store:", name)
	p("\tLEAQ (DI)(CX*4), AX")
	for l := range 16 {
		p("\tVMOVUPS Z%d, (AX)", l)
		if l < 15 {
			p("\tADDQ BX, AX")
		}
	}
	p("\tADDQ $16, CX")
	p("\tCMPQ CX, R8")
	p("\tJLT %s_chunk", name)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// reduce16 writes lanesReduce16: the tile kernels' horizontal sum (halves
// added until one lane is left: 8, 4, 2, 1) of the 16 lane rows, element
// by element, 16 elements at a time.
func reduce16() {
	p("// func lanesReduce16(out, lanes *float32, hd int)")
	p("//")
	p("// out[d] = the AVX-512 tiles' horizontal sum over l < 16 of lanes[l*hd+d]")
	p("// (hd a multiple of 16).")
	p("TEXT ·lanesReduce16(SB), NOSPLIT, $0-24")
	p("\tMOVQ out+0(FP), DI")
	p("\tMOVQ lanes+8(FP), SI")
	p("\tMOVQ hd+16(FP), R8")
	p("\tMOVQ R8, BX")
	p("\tSHLQ $2, BX")
	p("\tXORQ CX, CX")
	p("red_chunk:")
	p("\tLEAQ (SI)(CX*4), AX")
	for l := range 16 {
		p("\tVMOVUPS (AX), Z%d", l)
		if l < 15 {
			p("\tADDQ BX, AX")
		}
	}
	for w := 8; w >= 1; w /= 2 {
		for l := range w {
			p("\tVADDPS Z%d, Z%d, Z%d", l+w, l, l)
		}
	}
	p("\tVMOVUPS Z0, (DI)(CX*4)")
	p("\tADDQ $16, CX")
	p("\tCMPQ CX, R8")
	p("\tJLT red_chunk")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// scores writes scoresF16Z/F32Z: s[j] = q·k_j with the arithmetic of the
// AVX-512 1×nr tiles (one 16-lane accumulator per key, FMA over the head in
// order from zero, then the tiles' reduction), four keys at a time.
func scores(f16 bool) {
	name, load, scale := "scoresF32Z", "VMOVUPS", 4
	if f16 {
		name, load, scale = "scoresF16Z", "VCVTPH2PS", 2
	}
	keys := []string{"R9", "R10", "R11", "R12"}
	p("// func %s(s, q *float32, k *byte, ldk, n, hd int)", name)
	p("//")
	p("// s[j] = q·(K row j at k + j*ldk bytes) for j < n over the first hd elements")
	p("// (a multiple of 16), as tileAVX512*_1x* computes it.")
	p("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	p("\tMOVQ s+0(FP), DI")
	p("\tMOVQ q+8(FP), SI")
	p("\tMOVQ k+16(FP), R9")
	p("\tMOVQ ldk+24(FP), R13")
	p("\tMOVQ n+32(FP), DX")
	p("\tMOVQ hd+40(FP), R8")
	for _, g := range []int{4, 1} {
		p("%s_loop%d:", name, g)
		p("\tCMPQ DX, $%d", g)
		p("\tJLT %s_end%d", name, g)
		for i := 1; i < g; i++ {
			p("\tLEAQ (%s)(R13*1), %s", keys[i-1], keys[i])
		}
		for i := range g {
			p("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
		}
		p("\tXORQ CX, CX")
		p("%s_k%d:", name, g)
		for i := range g {
			p("\t%s (%s)(CX*%d), Z%d", load, keys[i], scale, 4+i)
		}
		p("\tVMOVUPS (SI)(CX*4), Z8")
		for i := range g {
			p("\tVFMADD231PS Z%d, Z8, Z%d", 4+i, i)
		}
		p("\tADDQ $16, CX")
		p("\tCMPQ CX, R8")
		p("\tJLT %s_k%d", name, g)
		for i := range g {
			p("\tVEXTRACTF64X4 $1, Z%d, Y9", i)
			p("\tVADDPS Y9, Y%d, Y%d", i, i)
			p("\tVEXTRACTF32X4 $1, Y%d, X9", i)
			p("\tVADDPS X9, X%d, X%d", i, i)
			p("\tVMOVHLPS X%d, X%d, X9", i, i)
			p("\tVADDPS X9, X%d, X%d", i, i)
			p("\tVMOVSHDUP X%d, X9", i)
			p("\tVADDSS X9, X%d, X%d", i, i)
			p("\tVMOVSS X%d, %d(DI)", i, 4*i)
		}
		p("\tADDQ $%d, DI", 4*g)
		p("\tLEAQ (%s)(R13*1), R9", keys[g-1])
		p("\tSUBQ $%d, DX", g)
		p("\tJMP %s_loop%d", name, g)
		p("%s_end%d:", name, g)
	}
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

func main() {
	p("// Code generated by asmgen_attn.go; DO NOT EDIT.\n\n//go:build amd64\n\n#include \"textflag.h\"\n")
	kernel(true)
	kernel(false)
	reduce16()
	scores(true)
	scores(false)
	src := strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n"
	if err := os.WriteFile("attention_pv_amd64.s", []byte(src), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
