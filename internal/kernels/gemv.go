package kernels

import (
	"fmt"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// Act is one activation row as the products of one row (GEMV) read it:
// rounded to f16 or bf16 for those weights, quantized to Q8_0 (and paired)
// or Q8_K for quantized ones, each form made when a weight first needs it
// and kept until Set. A decode step's team member keeps its own, so that
// every member quantizes the row itself rather than waiting for one to do
// it: for a few thousand values that costs less than a barrier.
//
// Every value GEMV gives is the one MatMul gives for the same row (the same
// rounding or quantization, the same kernels over the same rows).
type Act struct {
	x    []float32
	have actForms
	f16  []float32
	bf16 []float32
	q80  []byte
	q8k  []byte
	pair []byte
}

type actForms uint8

const (
	formF16 actForms = 1 << iota
	formBF16
	formQ8_0
	formQ8_K
	formPairs
)

// Set makes x the row the next products read; the forms made for the
// previous row are dropped. x must not change while they are in use.
func (a *Act) Set(x []float32) {
	a.x = x
	a.have = 0
}

// GEMVOK reports whether GEMV can compute w's rows on this machine: every
// quantized type MatMul takes, and the float types where the SIMD tile
// kernels run (the pure-Go reference has its own path).
func GEMVOK(w *Weight) bool {
	if typeIndex(w.Type) >= 0 {
		return simd != nil
	}
	switch w.Type {
	case gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K:
		return true
	}
	return false
}

// GEMV computes rows [lo, hi) of dst[w.Rows] = W · x for the row set by
// Set, bitwise what MatMul(p, dst, x, 1, w) puts there.
// REQUIRES: GEMVOK(w), len(x) == w.Cols, 0 <= lo <= hi <= w.Rows.
func (a *Act) GEMV(dst []float32, w *Weight, lo, hi int) {
	K, N := w.Cols, w.Rows
	if len(a.x) != K || lo < 0 || hi > N || len(dst) < N {
		panic(fmt.Sprintf("kernels: GEMV of %dx%d rows [%d,%d) with len(x)=%d len(dst)=%d", N, K, lo, hi, len(a.x), len(dst)))
	}
	if lo >= hi {
		return
	}
	if ti := typeIndex(w.Type); ti >= 0 {
		a.gemvFloat(dst, w, ti, lo, hi)
		return
	}
	checkQuantType(w.Type)
	at := quant.ActivationType(w.Type)
	var xq, xp []byte
	if at == gguf.TypeQ8_K {
		xq = a.form(formQ8_K, &a.q8k, at)
	} else {
		xq = a.form(formQ8_0, &a.q80, at)
		if n := quant.PairBytes(1, K); n > 0 && pairType(w.Type) {
			if a.have&formPairs == 0 {
				if len(a.pair) < n {
					a.pair = alignedBytes(n)
				}
				quant.PreparePairs(a.pair[:n], xq, 1, K, 0, 1)
				a.have |= formPairs
			}
			xp = a.pair[:n]
		}
	}
	blockRows := max(1, l2PanelBytes/w.Type.RowBytes(K))
	for n0 := lo; n0 < hi; n0 += blockRows {
		quant.MatMulPaired(w.Type, dst, N, xq, xp, 1, w.Data, K, n0, min(n0+blockRows, hi))
	}
}

// form returns the row quantized to at, quantizing it on first use.
func (a *Act) form(f actForms, buf *[]byte, at gguf.Type) []byte {
	n := at.RowBytes(len(a.x))
	if a.have&f == 0 {
		if len(*buf) < n {
			*buf = alignedBytes(n)
		}
		quant.QuantizeActivations(at, a.x, (*buf)[:n])
		a.have |= f
	}
	return (*buf)[:n]
}

// gemvFloat is GEMV for float weights: matMulFloat's tiles for one row
// (the prefetching ones), over L2 panels of rows from lo.
func (a *Act) gemvFloat(dst []float32, w *Weight, ti, lo, hi int) {
	ks := simd
	K := w.Cols
	x := a.x
	switch w.Type {
	case gguf.TypeF16:
		x = a.rounded(formF16, &a.f16, ks.roundF16)
	case gguf.TypeBF16:
		x = a.rounded(formBF16, &a.bf16, roundBF16)
	}
	tiles := ks.tiles[ti]
	if pf := ks.pf[ti]; len(pf) >= 1 {
		tiles = pf
	}
	row := tiles[0]
	rowBytes := w.Type.RowBytes(K)
	kmain := K / ks.kstep * ks.kstep
	nr := ks.nr
	panel := max(1, l2PanelBytes/(rowBytes*nr)) * nr
	for n0 := lo; n0 < hi; n0 += panel {
		n1 := min(n0+panel, hi)
		for n := n0; n < n1; n += nr {
			row[min(nr, n1-n)-1](&x[0], K, &w.Data[n*rowBytes], rowBytes, kmain, &dst[n], w.Rows)
		}
		if kmain < K {
			addTail(dst, x, 1, w, kmain, n0, n1)
		}
	}
}

// rounded returns the row rounded by round, rounding it on first use.
func (a *Act) rounded(f actForms, buf *[]float32, round func(dst, src []float32)) []float32 {
	n := len(a.x)
	if a.have&f == 0 {
		if len(*buf) < n {
			*buf = alignedFloats(n)
		}
		round((*buf)[:n], a.x)
		a.have |= f
	}
	return (*buf)[:n]
}

// SingleQuery reports whether AttendHeads can run a decode query of kv's
// layers with a's heads (f16 or f32 K/V on the single-query path).
func SingleQuery(kv *PagedKV, a AttnParams) bool {
	return kv != nil && a.HeadDim > 0 && useSingle && singleOK(kv, a.HeadDim)
}

// AttendBufLen is the scratch AttendHeads needs for a query at pos.
func AttendBufLen(pos int, a AttnParams) int {
	kstep := 1
	if simd != nil {
		kstep = simd.kstep
	}
	return padKeys(pos+1) + a.HeadDim*(kstep+1) + 2*256
}

// AttendHeads computes heads [h0, h1) of one query at pos over kv's layer
// into out (NHeads*HeadDim; only those heads' rows are written), bitwise
// what Attention gives for them. buf holds at least AttendBufLen(pos, a)
// floats. The K/V at pos must be stored.
// REQUIRES: SingleQuery(kv, a), 0 <= h0 <= h1 <= a.NHeads.
func AttendHeads(out, q []float32, pos int, kv *PagedKV, layer int, a AttnParams, h0, h1 int, buf []float32) {
	var one [1]int
	checkAttention(out, q, one[:], kv, layer, a)
	if len(buf) < AttendBufLen(pos, a) || h0 < 0 || h1 > a.NHeads {
		panic(fmt.Sprintf("kernels: AttendHeads heads [%d,%d) of %d with %d scratch floats", h0, h1, a.NHeads, len(buf)))
	}
	st := singleState{layer: layer, a: a, group: a.NHeads / a.NKVHeads}
	it := singleItem{out: out, q: q, pos: pos, kv: kv}
	for h := h0; h < h1; h++ {
		st.head(&it, h, buf)
	}
}

// StoreKVHeads writes KV heads [h0, h1) of one token's K (isV 0) or V
// (isV 1) for layer at pos: what StoreKV writes for those heads. f16 and
// f32 arenas only.
func StoreKVHeads(kv *PagedKV, layer, pos, isV int, src []float32, h0, h1 int) {
	hd := kv.HeadDim
	if kv.Q8 != nil || layer < 0 || layer >= kv.Layers || pos < 0 || h0 < 0 || h1 > kv.KVHeads || len(src) < kv.KVHeads*hd {
		panic(fmt.Sprintf("kernels: StoreKVHeads layer %d pos %d heads [%d,%d) of %d, len(src)=%d", layer, pos, h0, h1, kv.KVHeads, len(src)))
	}
	if h0 >= h1 {
		return
	}
	o := kv.offset(layer, isV, pos)
	s := src[h0*hd : h1*hd]
	if kv.F16 != nil {
		convertF32ToF16(kv.F16[o+h0*hd:o+h1*hd], s)
		return
	}
	copy(kv.F32[o+h0*hd:o+h1*hd], s)
}
