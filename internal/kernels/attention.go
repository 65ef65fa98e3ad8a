package kernels

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// PagedKV is a view of one sequence's K/V in a block arena (see doc.go for
// the layout). Exactly one of F32, F16 and Q8 is non-nil: the arena, holding
// whole blocks back to back, each of BlockElems() elements (for Q8, of
// BlockElems()/32*34 bytes: Q8_0 blocks of 32 elements per head row, so
// HeadDim must be a multiple of 32). Table maps the sequence's block index
// (pos / BlockSize) to an arena block.
//
// The view does not own the arena; whoever owns the blocks guarantees that
// the blocks in Table are not written by anyone else during a call.
type PagedKV struct {
	F32 []float32
	F16 []uint16
	Q8  []byte

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
// position pos, rounding to f16 when the arena is f16 and quantizing to
// Q8_0 (as ggml's x86 from_float does) when it is Q8.
func StoreKV(kv *PagedKV, layer, pos int, k, v []float32) {
	row := kv.KVHeads * kv.HeadDim
	if len(k) < row || len(v) < row || layer < 0 || layer >= kv.Layers || pos < 0 {
		panic(fmt.Sprintf("kernels: StoreKV layer %d pos %d with len(k)=%d len(v)=%d, row %d", layer, pos, len(k), len(v), row))
	}
	if kv.Q8 != nil {
		storeKVQ8(kv, layer, pos, k, v)
		return
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
// f32, with p_j rounded to f16 for an f16 cache (the vec_dot_type of the
// f16 V in ggml's P·V mul_mat). With a Q8_0 cache q is quantized to q8_0 per head and q·k is
// ggml's q8_0 dot (quant.MatMul), as llama.cpp's flash attention does (see
// attention_q8.go). The result for a query does not depend on the other
// queries in the call nor on the thread count (see attendBlock).
//
// Per KV head the call gathers K rows [0, nPad) into a contiguous matrix and
// V transposed, nPad being maxPos+1 rounded up to attnKeyPad with zeros
// beyond maxPos; then, per block of query tokens, the query rows of the
// heads sharing that KV head are stacked and S = Q·Kᵀ, softmax and O = P·V
// run as tile matmuls (see mulRows). A single query (decode) reads the
// paged K/V in place instead, with the same arithmetic (attention_single.go).
func Attention(p *Pool, out, q []float32, positions []int, kv *PagedKV, layer int, a AttnParams) {
	checkAttention(out, q, positions, kv, layer, a)
	hd := a.HeadDim
	nt := len(positions)
	if nt == 0 || hd == 0 {
		return
	}
	nkv := a.NKVHeads
	group := a.NHeads / nkv
	nKeys := 0 // maxPos+1
	for _, pos := range positions {
		nKeys = max(nKeys, pos+1)
	}
	nPad := padKeys(nKeys)
	q8 := kv.Q8 != nil
	if q8 {
		kv.checkQ8()
	}

	var sc *attnScratch
	if p != nil {
		p.attn.mu.Lock()
		defer p.attn.mu.Unlock()
		sc = &p.attn
	} else {
		sc = &attnScratch{}
	}
	if nt == 1 && useSingle && singleOK(kv, hd) {
		attendSingle(p, sc, out, q, positions[0], kv, layer, a)
		return
	}
	need := nkv * nPad * hd
	if len(sc.k) < need {
		sc.k, sc.vt = alignedFloats(need+need/4), alignedFloats(need+need/4)
	}
	st := &sc.state
	*st = attnState{gather: st.gather, attend: st.attend, p: p, out: out, q: q, positions: positions, kv: kv, layer: layer, a: a,
		group: group, nKeys: nKeys, nPad: nPad, k: sc.k[:need], vt: sc.vt[:need],
		nqb:    (nt + attnQBlock - 1) / attnQBlock,
		bufLen: max(attnKeyPad*hd, attnQBlock*group*(2*hd+nPad)) + attnQ8Scratch}
	if st.gather == nil {
		st.gather, st.attend = st.gatherRange, st.attendRange
	}
	p.forWorker(nPad/attnKeyPad, st.gather)
	p.forWorker(nkv*st.nqb, st.attend)
	*st = attnState{gather: st.gather, attend: st.attend} // drop references to the caller's data
}

// checkAttention panics on mis-sized Attention arguments (programmer bugs).
func checkAttention(out, q []float32, positions []int, kv *PagedKV, layer int, a AttnParams) {
	hd := a.HeadDim
	nt := len(positions)
	if a.NKVHeads <= 0 || a.NHeads%a.NKVHeads != 0 || a.NKVHeads != kv.KVHeads || hd != kv.HeadDim ||
		len(q) < nt*a.NHeads*hd || len(out) < nt*a.NHeads*hd || layer < 0 || layer >= kv.Layers {
		panic(fmt.Sprintf("kernels: Attention heads %d/%d (kv %d) headDim %d (kv %d) tokens %d len(q)=%d len(out)=%d layer %d",
			a.NHeads, a.NKVHeads, kv.KVHeads, hd, kv.HeadDim, nt, len(q), len(out), layer))
	}
}

// AttnSeq is one sequence's part of an AttentionSeqs call: Attention's
// out, q, positions and kv.
type AttnSeq struct {
	Out, Q    []float32
	Positions []int
	KV        *PagedKV
}

// AttentionSeqs computes Attention(p, s.Out, s.Q, s.Positions, s.KV, layer,
// a) for every s in seqs, with the same values. The sequences with a single
// query (a decode step's) run together, their (sequence, head) pairs spread
// over the pool in one loop, so that a step over several streams waits for
// its threads once rather than once per stream; the others run one by one.
func AttentionSeqs(p *Pool, seqs []AttnSeq, layer int, a AttnParams) {
	var sc *attnScratch
	if p != nil {
		p.attn.mu.Lock()
		sc = &p.attn
	} else {
		sc = &attnScratch{}
	}
	st := &sc.single
	st.items = st.items[:0]
	for _, s := range seqs {
		checkAttention(s.Out, s.Q, s.Positions, s.KV, layer, a)
		if len(s.Positions) == 1 && a.HeadDim > 0 && useSingle && singleOK(s.KV, a.HeadDim) {
			st.items = append(st.items, singleItem{out: s.Out, q: s.Q, pos: s.Positions[0], kv: s.KV})
		}
	}
	if len(st.items) > 0 {
		st.attend(p, layer, a)
	}
	if p != nil {
		p.attn.mu.Unlock()
	}
	for _, s := range seqs {
		if !(len(s.Positions) == 1 && a.HeadDim > 0 && useSingle && singleOK(s.KV, a.HeadDim)) {
			Attention(p, s.Out, s.Q, s.Positions, s.KV, layer, a)
		}
	}
}

const (
	// attnKeyPad is what the key count of a call (and of a query block) is
	// rounded up to: a multiple of every tile family's kstep, so that the
	// P·V reduction over keys never has a scalar tail whose start moves
	// with the key count.
	attnKeyPad = 64
	// attnQBlock is the number of query tokens per task.
	attnQBlock = 16
	// attnQ8Scratch is the floats at the end of a worker buffer that hold
	// one Q8_0 block (34 bytes) for roundQ8.
	attnQ8Scratch = 9
)

// padKeys rounds n up to a positive multiple of attnKeyPad.
func padKeys(n int) int {
	return max(1, (n+attnKeyPad-1)/attnKeyPad) * attnKeyPad
}

// attnScratch is Attention's reusable state, owned by a Pool (protected by
// mu for a whole call) so that steady-state calls allocate nothing.
type attnScratch struct {
	mu     sync.Mutex
	k, vt  []float32 // gathered K [kvHead][nPad][HeadDim], V [kvHead][HeadDim][nPad]
	state  attnState
	single singleState
}

// attnState is one Attention call; gather and attend are its method values,
// bound once.
type attnState struct {
	gather, attend func(worker, lo, hi int)

	p         *Pool
	out, q    []float32
	positions []int
	kv        *PagedKV
	layer     int
	a         AttnParams
	group     int
	nKeys     int // maxPos+1
	nPad      int // nKeys rounded up to attnKeyPad
	k, vt     []float32
	nqb       int // query blocks
	bufLen    int // per-worker buffer: gather's V chunk, attendBlock's Q, O and S
}

// gatherRange copies the K and V of key chunks [lo, hi) (attnKeyPad
// positions each) of every KV head into st.k and st.vt (V transposed, by
// way of a chunk-sized buffer so that the transposed writes are runs of
// attnKeyPad floats), widening f16 exactly and writing zeros past the last
// position.
func (st *attnState) gatherRange(worker, lo, hi int) {
	kv, hd, nPad := st.kv, st.a.HeadDim, st.nPad
	tmp := st.p.workerBuf(worker, st.bufLen)[:attnKeyPad*hd]
	if kv.Q8 != nil {
		st.gatherRangeQ8(tmp, lo, hi)
		return
	}
	for h := range kv.KVHeads {
		kh := st.k[h*nPad*hd : (h+1)*nPad*hd]
		vh := st.vt[h*hd*nPad : (h+1)*hd*nPad]
		for c := lo; c < hi; c++ {
			j0 := c * attnKeyPad
			for jj := range attnKeyPad {
				j := j0 + jj
				kr, vr := kh[j*hd:(j+1)*hd], tmp[jj*hd:(jj+1)*hd]
				if j >= st.nKeys {
					clear(kr)
					clear(vr)
					continue
				}
				ko := kv.offset(st.layer, 0, j) + h*hd
				vo := kv.offset(st.layer, 1, j) + h*hd
				if kv.F16 != nil {
					widenF16(kr, kv.F16[ko:ko+hd])
					widenF16(vr, kv.F16[vo:vo+hd])
				} else {
					copy(kr, kv.F32[ko:ko+hd])
					copy(vr, kv.F32[vo:vo+hd])
				}
			}
			transposeChunk(vh, tmp, j0, nPad, hd)
		}
	}
}

// transposeChunk writes the attnKeyPad rows of HeadDim floats in tmp into
// columns j0.. of vh ([HeadDim][nPad]).
func transposeChunk(vh, tmp []float32, j0, nPad, hd int) {
	for d := range hd {
		dst := vh[d*nPad+j0 : d*nPad+j0+attnKeyPad]
		for jj := range dst {
			dst[jj] = tmp[jj*hd+d]
		}
	}
}

// gatherRangeQ8 is gatherRange for a Q8 arena: K and V rows are
// dequantized to f32 (exactly: d*q needs 18 bits).
func (st *attnState) gatherRangeQ8(tmp []float32, lo, hi int) {
	kv, hd, nPad := st.kv, st.a.HeadDim, st.nPad
	hb := kv.headBytesQ8()
	for h := range kv.KVHeads {
		kh := st.k[h*nPad*hd : (h+1)*nPad*hd]
		vh := st.vt[h*hd*nPad : (h+1)*hd*nPad]
		for c := lo; c < hi; c++ {
			j0 := c * attnKeyPad
			for jj := range attnKeyPad {
				j := j0 + jj
				kr, vr := kh[j*hd:(j+1)*hd], tmp[jj*hd:(jj+1)*hd]
				if j >= st.nKeys {
					clear(kr)
					clear(vr)
					continue
				}
				ko := kv.byteOffsetQ8(st.layer, 0, j) + h*hb
				vo := kv.byteOffsetQ8(st.layer, 1, j) + h*hb
				dequantQ8(kr, kv.Q8[ko:ko+hb])
				dequantQ8(vr, kv.Q8[vo:vo+hb])
			}
			transposeChunk(vh, tmp, j0, nPad, hd)
		}
	}
}

// attendRange runs tasks [lo, hi): task = kvHead*nqb + query block.
func (st *attnState) attendRange(worker, lo, hi int) {
	buf := st.p.workerBuf(worker, st.bufLen)
	for task := lo; task < hi; task++ {
		st.attendBlock(task/st.nqb, task%st.nqb, buf)
	}
}

// attendBlock computes the heads of KV head kvh for the query tokens of
// block qb. The m = tokens*group stacked query rows (row (t, g) is head
// kvh*group+g of token t) give
//
//	S[m][nb] = Q·Kᵀ, P = softmax(Scale·S) over keys 0..pos (exact zeros
//	beyond), O[m][HeadDim] = P·V
//
// with nb the block's largest position+1 rounded up to attnKeyPad. Every S
// element is one dot product over HeadDim whose instructions do not depend
// on its tile (mulRows); each P row depends only on its own scores and pos;
// and an O element accumulates p_j*v_j lane-wise in key order over nb keys,
// a multiple of every vector width, so the keys past pos add exact zeros
// (FMA(0, v, acc) == acc for finite v) in lanes and iterations that are the
// same whatever nb is. Hence a query's output does not depend on the block
// it lands in.
func (st *attnState) attendBlock(kvh, qb int, buf []float32) {
	a, hd, group := st.a, st.a.HeadDim, st.group
	t0 := qb * attnQBlock
	t1 := min(t0+attnQBlock, len(st.positions))
	m := (t1 - t0) * group
	nKeys := 0
	for _, pos := range st.positions[t0:t1] {
		nKeys = max(nKeys, pos+1)
	}
	nb := padKeys(nKeys)
	rows := attnQBlock * group
	qs, ob, s := buf[:m*hd], buf[rows*hd:rows*hd+m*hd], buf[2*rows*hd:2*rows*hd+m*nb]
	f16, q8 := st.kv.F16 != nil, st.kv.Q8 != nil
	var blk []byte // q8: roundQ8's scratch, the last attnQ8Scratch floats of buf
	if q8 {
		blk = unsafe.Slice((*byte)(unsafe.Pointer(&buf[st.bufLen-attnQ8Scratch])), 4*attnQ8Scratch)
	}
	for t := t0; t < t1; t++ {
		for g := range group {
			src := st.q[(t*a.NHeads+kvh*group+g)*hd:][:hd]
			dst := qs[((t-t0)*group+g)*hd:][:hd]
			switch {
			case f16:
				roundF16(dst, src)
			case q8:
				roundQ8(dst, src, rotK(hd), blk)
			default:
				copy(dst, src)
			}
		}
	}
	mulRows(s, nb, qs, hd, m, st.k[kvh*st.nPad*hd:], hd, nb, hd)
	for r := range m {
		softmaxCausal(s[r*nb:(r+1)*nb], st.positions[t0+r/group]+1, a.Scale)
	}
	if f16 {
		// ggml's non-flash P·V is a mul_mat with the f16 V as src0: P is
		// rounded to f16, its vec_dot_type.
		roundF16(s[:m*nb], s[:m*nb])
	}
	mulRows(ob, hd, s, nb, m, st.vt[kvh*hd*st.nPad:], st.nPad, hd, nb)
	if q8 {
		fwht(ob[:m*hd], rotV(hd)) // undo v's rotation (attention_q8.go)
	}
	for t := t0; t < t1; t++ {
		for g := range group {
			copy(st.out[(t*a.NHeads+kvh*group+g)*hd:][:hd], ob[((t-t0)*group+g)*hd:][:hd])
		}
	}
}

// Softmax and f16 widening for attention; amd64 replaces them with
// SIMD versions at start-up (attention_amd64.go).
var (
	softmaxCausal = softmaxCausalRef
	widenF16      = widenF16Ref
)

func widenF16Ref(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = f16ToF32(v)
	}
}

// softmaxCausalRef sets row[:n] to softmax(scale*row[:n]) and row[n:] to zero
// (n <= 0: all zero). The max is subtracted, exps are f32 (expf32), the sum
// is float64 over four interleaved partial sums, combined in a fixed order.
func softmaxCausalRef(row []float32, n int, scale float32) {
	n = min(max(n, 0), len(row))
	clear(row[n:])
	if n == 0 {
		return
	}
	x := row[:n]
	mx := float32(math.Inf(-1))
	for j, v := range x {
		v *= scale
		x[j] = v
		mx = max(mx, v)
	}
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= n; j += 4 {
		e0, e1, e2, e3 := expf32(x[j]-mx), expf32(x[j+1]-mx), expf32(x[j+2]-mx), expf32(x[j+3]-mx)
		x[j], x[j+1], x[j+2], x[j+3] = e0, e1, e2, e3
		s0 += float64(e0)
		s1 += float64(e1)
		s2 += float64(e2)
		s3 += float64(e3)
	}
	for ; j < n; j++ {
		e := expf32(x[j] - mx)
		x[j] = e
		s0 += float64(e)
	}
	inv := float32(1 / ((s0 + s1) + (s2 + s3)))
	for j := range x {
		x[j] *= inv
	}
}

// expf32 is a single-precision exp computed in float64: x = k*ln2 + r with
// |r| <= ln2/2, e^r by its degree-8 Taylor polynomial (relative error below
// 3e-10), times 2^k, rounded to f32 once. Within about half an ulp of the
// correctly rounded result for normal results; NaN, infinities, overflow
// and underflow follow math.Exp.
func expf32(x float32) float32 {
	if !(x > -87 && x < 88) { // also NaN
		return float32(math.Exp(float64(x)))
	}
	const (
		log2e = 1.4426950408889634
		ln2   = 0.6931471805599453
		round = 0x1.8p52
	)
	xd := float64(x)
	kf := xd*log2e + round
	k := int64(math.Float64bits(kf)) - int64(math.Float64bits(round))
	kf -= round
	r := xd - kf*ln2
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320))))))))
	return float32(p * math.Float64frombits(uint64(k+1023)<<52))
}

// mulRows sets dst[i*ldd+j] = Σ_{k<K} x[i*ldx+k]*w[j*ldw+k] for i < M,
// j < N, with the f32 tile kernels (or a sequential dot product without
// SIMD). Like MatMul, an element's instruction sequence depends only on K:
// lane-wise accumulation over the first K - K%kstep elements, the tile
// family's horizontal sum, then the rest added one at a time in k order.
// Single-threaded; N is walked in blocks whose rows fit in L1 while all M
// tiles sweep over them.
func mulRows(dst []float32, ldd int, x []float32, ldx, M int, w []float32, ldw, N, K int) {
	if M == 0 || N == 0 {
		return
	}
	_ = x[(M-1)*ldx+K-1]
	_ = w[(N-1)*ldw+K-1]
	_ = dst[(M-1)*ldd+N-1]
	ks := simd
	if ks == nil {
		for i := range M {
			xr := x[i*ldx : i*ldx+K]
			for j := range N {
				wr := w[j*ldw : j*ldw+K]
				var s float32
				for k, v := range xr {
					s += float32(v * wr[k])
				}
				dst[i*ldd+j] = s
			}
		}
		return
	}
	mr, nr := ks.mr, ks.nr
	kmain := K / ks.kstep * ks.kstep
	tiles := ks.tiles[0]
	nblk := max(1, (32<<10)/(4*K*nr)) * nr
	for n0 := 0; n0 < N; n0 += nblk {
		n1 := min(n0+nblk, N)
		if kmain > 0 {
			for m0 := 0; m0 < M; m0 += mr {
				row := tiles[min(mr, M-m0)-1]
				for n := n0; n < n1; n += nr {
					row[min(nr, n1-n)-1](&x[m0*ldx], ldx, (*byte)(unsafe.Pointer(&w[n*ldw])), 4*ldw, kmain, &dst[m0*ldd+n], ldd)
				}
			}
		}
		if kmain < K {
			for i := range M {
				xr := x[i*ldx : i*ldx+K]
				for j := n0; j < n1; j++ {
					wr := w[j*ldw : j*ldw+K]
					var s float32
					if kmain > 0 {
						s = dst[i*ldd+j]
					}
					for k := kmain; k < K; k++ {
						s += float32(xr[k] * wr[k])
					}
					dst[i*ldd+j] = s
				}
			}
		}
	}
}

// attentionRef is the straightforward implementation kept as the reference
// for tests and benchmarks: each (token, head) alone, one dot product and
// one axpy per key, float64 math.Exp.
func attentionRef(p *Pool, out, q []float32, positions []int, kv *PagedKV, layer int, a AttnParams) {
	hd := a.HeadDim
	nt := len(positions)
	group := a.NHeads / a.NKVHeads
	maxLen := 0
	for _, pos := range positions {
		maxLen = max(maxLen, pos+1)
	}
	p.forWorker(nt*a.NHeads, func(worker, lo, hi int) {
		buf := make([]float32, maxLen+2*hd)
		for i := lo; i < hi; i++ {
			t, h := i/a.NHeads, i%a.NHeads
			o := (t*a.NHeads + h) * hd
			if kv.Q8 != nil {
				attendOneQ8(out[o:o+hd], q[o:o+hd], positions[t]+1, kv, layer, h/group, a.Scale, buf)
			} else {
				attendOne(out[o:o+hd], q[o:o+hd], positions[t]+1, kv, layer, h/group, a.Scale, buf)
			}
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
		if kv.F16 != nil {
			pj = f16ToF32(f32ToF16(pj)) // as in Attention: P in f16 for an f16 V
		}
		vo := kv.offset(layer, 1, j) + headOff
		if kv.F16 != nil {
			axpyF16(out, pj, kv.F16[vo:vo+hd])
		} else {
			axpyF32(out, pj, kv.F32[vo:vo+hd])
		}
	}
}

// workerBuf returns worker's float buffer, grown to at least n elements and
// kept in the pool between calls. REQUIRES: p.attn.mu held (only Attention
// uses these buffers) and either called from a forWorker fn on p (only this
// worker touches its buffer) or, for worker 0, from the Attention caller
// outside any forWorker; a nil p gets a fresh buffer.
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
