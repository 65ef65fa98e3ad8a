package kernels

import (
	"fmt"
	"math"
)

// PagedKV is a view of one sequence's K/V in a block arena (see doc.go for
// the layout). Exactly one of F32 and F16 is non-nil: the arena, holding
// whole blocks back to back, each of BlockElems() elements. Table maps the
// sequence's block index (pos / BlockSize) to an arena block.
//
// The view does not own the arena; whoever owns the blocks guarantees that
// the blocks in Table are not written by anyone else during a call.
type PagedKV struct {
	F32 []float32
	F16 []uint16

	BlockSize int // token slots per block
	Layers    int
	KVHeads   int
	HeadDim   int

	Table []int32
}

// BlockElems returns the elements in one block:
// Layers * 2 (K, V) * BlockSize * KVHeads * HeadDim.
func (kv *PagedKV) BlockElems() int {
	return kv.Layers * 2 * kv.BlockSize * kv.KVHeads * kv.HeadDim
}

// offset returns the arena index of the first element of (layer, K or V,
// position pos, kv head 0):
//
//	table[pos/BlockSize]*BlockElems() +
//	  ((layer*2 + isV)*BlockSize + pos%BlockSize) * KVHeads*HeadDim
func (kv *PagedKV) offset(layer, isV, pos int) int {
	bi := pos / kv.BlockSize
	if bi >= len(kv.Table) {
		panic(fmt.Sprintf("kernels: position %d needs block %d, table has %d", pos, bi, len(kv.Table)))
	}
	row := kv.KVHeads * kv.HeadDim
	return int(kv.Table[bi])*kv.BlockElems() + ((layer*2+isV)*kv.BlockSize+pos%kv.BlockSize)*row
}

// StoreKV writes one token's K and V (KVHeads*HeadDim each) for layer at
// position pos, rounding to f16 when the arena is f16.
func StoreKV(kv *PagedKV, layer, pos int, k, v []float32) {
	row := kv.KVHeads * kv.HeadDim
	if len(k) < row || len(v) < row || layer < 0 || layer >= kv.Layers || pos < 0 {
		panic(fmt.Sprintf("kernels: StoreKV layer %d pos %d with len(k)=%d len(v)=%d, row %d", layer, pos, len(k), len(v), row))
	}
	ko, vo := kv.offset(layer, 0, pos), kv.offset(layer, 1, pos)
	if kv.F16 != nil {
		convertF32ToF16(kv.F16[ko:ko+row], k[:row])
		convertF32ToF16(kv.F16[vo:vo+row], v[:row])
		return
	}
	copy(kv.F32[ko:ko+row], k[:row])
	copy(kv.F32[vo:vo+row], v[:row])
}

func convertF32ToF16(dst []uint16, src []float32) {
	for i, f := range src {
		dst[i] = f32ToF16(f)
	}
}

// AttnParams describe the attention heads of a layer.
type AttnParams struct {
	NHeads   int
	NKVHeads int // divides NHeads; query head h reads kv head h/(NHeads/NKVHeads)
	HeadDim  int
	Scale    float32 // applied to q·k before the softmax, usually 1/sqrt(HeadDim)
}

// Attention computes causal attention for len(positions) query tokens of one
// sequence. q and out hold one row of NHeads*HeadDim per token; query t
// attends to the positions 0..positions[t] of the sequence, whose K/V must
// already be stored.
//
// Numerics follow ggml's non-flash path: with an f16 cache q is rounded to
// f16 (the vec_dot_type of an f16 K), scores are q·k times Scale, softmax
// subtracts the max, exps in f32, sums in float64, and out = Σ p_j v_j in
// f32. Each (token, head) is computed alone, so the result for a query does
// not depend on the other queries in the call.
func Attention(p *Pool, out, q []float32, positions []int, kv *PagedKV, layer int, a AttnParams) {
	hd := a.HeadDim
	nt := len(positions)
	if a.NKVHeads <= 0 || a.NHeads%a.NKVHeads != 0 || a.NKVHeads != kv.KVHeads || hd != kv.HeadDim ||
		len(q) < nt*a.NHeads*hd || len(out) < nt*a.NHeads*hd || layer < 0 || layer >= kv.Layers {
		panic(fmt.Sprintf("kernels: Attention heads %d/%d (kv %d) headDim %d (kv %d) tokens %d len(q)=%d len(out)=%d layer %d",
			a.NHeads, a.NKVHeads, kv.KVHeads, hd, kv.HeadDim, nt, len(q), len(out), layer))
	}
	group := a.NHeads / a.NKVHeads
	maxLen := 0
	for _, pos := range positions {
		maxLen = max(maxLen, pos+1)
	}
	p.forWorker(nt*a.NHeads, func(worker, lo, hi int) {
		buf := p.workerBuf(worker, maxLen+hd)
		for i := lo; i < hi; i++ {
			t, h := i/a.NHeads, i%a.NHeads
			o := (t*a.NHeads + h) * hd
			attendOne(out[o:o+hd], q[o:o+hd], positions[t]+1, kv, layer, h/group, a.Scale, buf)
		}
	})
}

// attendOne computes one head of one query over positions [0, n).
// buf holds at least n + HeadDim floats.
func attendOne(out, q []float32, n int, kv *PagedKV, layer, kvh int, scale float32, buf []float32) {
	hd := len(q)
	scores, qr := buf[:n], buf[n:n+hd]
	headOff := kvh * hd
	if kv.F16 != nil {
		roundF16(qr, q)
	} else {
		copy(qr, q)
	}
	mx := float32(math.Inf(-1))
	for j := range n {
		ko := kv.offset(layer, 0, j) + headOff
		var s float32
		if kv.F16 != nil {
			s = dotF16(qr, kv.F16[ko:ko+hd])
		} else {
			s = dotF32(qr, kv.F32[ko:ko+hd])
		}
		s *= scale
		scores[j] = s
		mx = max(mx, s)
	}
	var sum float64
	for j, s := range scores {
		e := expf(s - mx)
		scores[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	clear(out)
	for j, pj := range scores {
		pj *= inv
		vo := kv.offset(layer, 1, j) + headOff
		if kv.F16 != nil {
			axpyF16(out, pj, kv.F16[vo:vo+hd])
		} else {
			axpyF32(out, pj, kv.F32[vo:vo+hd])
		}
	}
}

// workerBuf returns worker's float buffer, grown to at least n elements and
// kept in the pool between calls. REQUIRES: called from a forWorker fn on p
// (so p.mu is held and only this worker touches its buffer); a nil p gets a
// fresh buffer.
func (p *Pool) workerBuf(worker, n int) []float32 {
	if p == nil {
		return make([]float32, n)
	}
	if len(p.perWorker[worker]) < n {
		p.perWorker[worker] = make([]float32, n+n/4)
	}
	return p.perWorker[worker]
}

// Pure-Go vector helpers; amd64 may replace them with SIMD versions at
// start-up (see simd_amd64.go).
var (
	dotF32   = dotF32Ref
	dotF16   = dotF16Ref
	axpyF32  = axpyF32Ref
	axpyF16  = axpyF16Ref
	roundF16 = roundF16Ref
)

func dotF32Ref(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, v := range a {
		s += float32(v * b[i])
	}
	return s
}

func dotF16Ref(a []float32, b []uint16) float32 {
	b = b[:len(a)]
	var s float32
	for i, v := range a {
		s += float32(v * f16ToF32(b[i]))
	}
	return s
}

// axpyF32Ref sets y += a*x.
func axpyF32Ref(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += float32(a * x[i])
	}
}

func axpyF16Ref(y []float32, a float32, x []uint16) {
	x = x[:len(y)]
	for i := range y {
		y[i] += float32(a * f16ToF32(x[i]))
	}
}
