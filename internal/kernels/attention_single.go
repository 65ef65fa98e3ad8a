package kernels

import (
	"unsafe"
)

// Single-query attention (decode): one token's heads straight over the
// paged K/V, without the gather into contiguous (and, for V, transposed)
// f32 matrices that the batched path does once per call. Gathering every
// earlier position to use it once was most of a decode step's attention
// time.
//
// The values are bitwise the ones the batched path gives for the same query
// (the determinism rule: a token decoded alone equals the same token inside
// a prefill chunk), because every operation is the batched path's:
//
//   - S = q·kⱼ runs the same tile kernels on the same (exactly widened) K
//     values, reading the f16 or f32 rows in place (the F16 tile converts
//     with VCVTPH2PS, which is the widening the gather does), and the same
//     in-order scalar tail for HeadDim%kstep.
//   - The softmax is the same function on the same row of padKeys(pos+1).
//   - O = P·V: the batched tile holds, for each output element d, one
//     accumulator lane per key residue j%kstep and adds fma(p_j, v_j[d]) in
//     key order over padKeys(pos+1) keys, then reduces the lanes with the
//     family's horizontal sum. Here lane l of every d is a row of kstep
//     accumulator rows, key j adds p_j*v_j into row j%kstep with the same
//     FMA (axpy), the padded keys (p = 0, v = 0) are the exact +0 they add,
//     and the rows are reduced in the tile's order, element by element.
//
// Heads are the tasks, spread over the pool.

// singleInline is the key×head count below which the caller computes all
// heads itself: a wake-up of another worker costs more than that work.
const singleInline = 4096

// useSingle lets benchmarks compare the single-query path with the batched
// one (the values are the same).
var useSingle = true

// singleOK reports whether Attention can take the single-query path.
func singleOK(kv *PagedKV, hd int) bool {
	if kv.F16 == nil && kv.F32 == nil {
		return false
	}
	// The axpy assembly covers multiples of 8 with FMA; its Go tail does
	// not fuse, unlike the tile, so other sizes take the batched path.
	return simd == nil || hd%8 == 0
}

// singleState is one single-query call over one or more sequences' queries
// (AttentionSeqs); run is its method value, bound once (Pool.attn holds
// one).
type singleState struct {
	run func(worker, lo, hi int)

	p      *Pool
	items  []singleItem // reused: the queries of the call
	layer  int
	a      AttnParams
	group  int
	bufLen int
}

// singleItem is one sequence's query token in a single-query call.
type singleItem struct {
	out, q []float32
	pos    int
	kv     *PagedKV
}

func attendSingle(p *Pool, sc *attnScratch, out, q []float32, pos int, kv *PagedKV, layer int, a AttnParams) {
	st := &sc.single
	st.items = append(st.items[:0], singleItem{out: out, q: q, pos: pos, kv: kv})
	st.attend(p, layer, a)
}

// attend computes every head of every query in st.items; the tasks are the
// (query, head) pairs, query-major, spread over the pool in one loop.
func (st *singleState) attend(p *Pool, layer int, a AttnParams) {
	kstep := 1
	if simd != nil {
		kstep = simd.kstep
	}
	items := st.items
	work, maxPos := 0, 0
	for _, it := range items {
		work += (it.pos + 1) * a.NHeads
		maxPos = max(maxPos, it.pos)
	}
	*st = singleState{run: st.run, p: p, items: items, layer: layer, a: a,
		group: a.NHeads / a.NKVHeads, bufLen: padKeys(maxPos+1) + a.HeadDim*(kstep+1) + 2*256}
	if st.run == nil {
		st.run = st.heads
	}
	if work < singleInline*len(items) {
		// Too little work to be worth waking another thread for. The bound is
		// per query, as when each sequence's query was a call of its own: at a
		// load of 6 on 2 cores, four streams at position 128 (1161 key-heads
		// each) decoded about 5% slower with their attention on the pool.
		st.run(0, 0, len(items)*a.NHeads)
	} else {
		p.forWorker(len(items)*a.NHeads, st.run)
	}
	clear(items) // drop references to the caller's data
	*st = singleState{run: st.run, items: items[:0]}
}

// heads computes the (query, head) tasks [lo, hi).
func (st *singleState) heads(worker, lo, hi int) {
	buf := st.p.workerBuf(worker, st.bufLen)
	nh := st.a.NHeads
	for t := lo; t < hi; t++ {
		st.head(&st.items[t/nh], t%nh, buf)
	}
}

func (st *singleState) head(it *singleItem, h int, buf []float32) {
	hd, kv := st.a.HeadDim, it.kv
	n := it.pos + 1
	nb := padKeys(n)
	kvh := h / st.group
	s := buf[:nb]
	qs := buf[nb : nb+hd]
	src := it.q[h*hd : (h+1)*hd]
	f16 := kv.F16 != nil
	if f16 {
		roundF16(qs, src)
	} else {
		copy(qs, src)
	}
	rowElems := kv.KVHeads * hd
	esize := 4
	if f16 {
		esize = 2
	}
	// base returns the address of (layer, K or V, position j, head kvh).
	base := func(isV, j int) unsafe.Pointer {
		o := kv.offset(st.layer, isV, j) + kvh*hd
		if f16 {
			return unsafe.Pointer(&kv.F16[o])
		}
		return unsafe.Pointer(&kv.F32[o])
	}
	bs := kv.BlockSize
	for j0 := 0; j0 < n; j0 += bs - (j0 % bs) {
		cnt := min(bs-j0%bs, n-j0)
		scoresRun(s[j0:j0+cnt], qs, base(0, j0), rowElems*esize, f16)
	}
	softmaxCausal(s, n, st.a.Scale)
	if f16 {
		// As the batched path: ggml's non-flash P·V rounds P to f16 (its vec_dot_type).
		roundF16(s[:n], s[:n])
	}
	out := it.out[h*hd : (h+1)*hd]
	if simd == nil {
		// The reference tile: one sequential sum over the nb keys, the
		// padded ones adding exact zeros.
		clear(out)
		for j := range n {
			vo := kv.offset(st.layer, 1, j) + kvh*hd
			pj := s[j]
			for d := range out {
				var v float32
				if f16 {
					v = f16ToF32(kv.F16[vo+d])
				} else {
					v = kv.F32[vo+d]
				}
				out[d] += float32(pj * v)
			}
		}
		if nb > n {
			for d := range out {
				out[d] += 0
			}
		}
		return
	}
	kstep := simd.kstep
	lanes := buf[nb+hd : nb+hd+kstep*hd]
	clear(lanes)
	j0 := 0
	if pvGroups != nil && kstep == 16 && bs%16 == 0 && hd%16 == 0 {
		// Whole groups of 16 keys (one per lane) first, then the rest: each
		// lane still adds its keys in order.
		// 256 pointers kept in the worker buffer (the arena stays reachable
		// through kv, so the GC need not see them).
		vbuf := buf[nb+hd+kstep*hd : nb+hd+kstep*hd+2*256]
		vptrs := unsafe.Slice((*uintptr)(unsafe.Pointer(&vbuf[0])), 256)
		for j0+16 <= n {
			g := 0
			for ; g < len(vptrs) && j0+16*(g+1) <= n; g++ {
				vptrs[g] = uintptr(base(1, j0+16*g))
			}
			pvGroups(lanes, hd, s[j0:j0+16*g], vptrs[:g], rowElems*esize, f16)
			j0 += 16 * g
		}
	}
	for ; j0 < n; j0 += bs - (j0 % bs) {
		cnt := min(bs-j0%bs, n-j0)
		pvRun(lanes, hd, kstep, j0, s[j0:j0+cnt], base(1, j0), rowElems*esize, f16)
	}
	// Padded keys n..nb-1 add fma(0, 0, acc) = acc + 0 to their lanes.
	for j := n; j < nb && j < n+kstep; j++ {
		l := lanes[(j%kstep)*hd : (j%kstep+1)*hd]
		for d := range l {
			l[d] += 0
		}
	}
	if reduce16 != nil && kstep == 16 && hd%16 == 0 {
		reduce16(out, lanes, hd)
		return
	}
	reduceLanes(out, lanes, kstep, hd)
}

// reduce16 and scores16, where set (AVX-512), are reduceLanes for kstep 16
// and scoresRun for the AVX-512 family, both for HeadDim a multiple of 16,
// in assembly with the same operations.
var (
	reduce16 func(out, lanes []float32, hd int)
	scores16 func(s, q []float32, k unsafe.Pointer, ldk int, f16 bool)
)

// pvRun adds, for the len(p) consecutive V rows of one block starting at v
// (row stride ldv bytes), p[j]*v_j into lane row (lane0+j)%kstep of lanes
// with axpy's FMA. amd64 replaces it with assembly (the same FMAs).
var pvRun = pvRunRef

func pvRunRef(lanes []float32, hd, kstep, lane0 int, p []float32, v unsafe.Pointer, ldv int, f16 bool) {
	for j, pj := range p {
		l := (lane0 + j) % kstep
		row := unsafe.Add(v, j*ldv)
		if f16 {
			axpyF16(lanes[l*hd:(l+1)*hd], pj, unsafe.Slice((*uint16)(row), hd))
		} else {
			axpyF32(lanes[l*hd:(l+1)*hd], pj, unsafe.Slice((*float32)(row), hd))
		}
	}
}

// pvGroups, where set (AVX-512), is pvRun over len(vptrs) groups of 16
// consecutive keys starting at a lane-0 key, group g's V rows at vptrs[g]
// with stride ldv bytes and weights p[16g:16g+16].
var pvGroups func(lanes []float32, hd int, p []float32, vptrs []uintptr, ldv int, f16 bool)

// reduceLanes sets out[d] to the horizontal sum of lanes[l*hd+d] over
// l < kstep in the order of the tile kernels' reduction (asmgen.go):
// halves added until one lane is left.
func reduceLanes(out, lanes []float32, kstep, hd int) {
	for w := kstep / 2; w >= 1; w /= 2 {
		for l := range w {
			a, b := lanes[l*hd:(l+1)*hd], lanes[(l+w)*hd:(l+w+1)*hd]
			for d := range a {
				a[d] += b[d]
			}
		}
	}
	copy(out, lanes[:hd])
}

// scoresRun sets s[j] = q·k_j for the len(s) consecutive K rows of one
// block starting at k (row stride ldk bytes, f16 or f32), as mulRows does
// for gathered rows: the f32 or f16 tile kernels over the first
// HeadDim - HeadDim%kstep elements, then the rest one at a time in order.
func scoresRun(s, q []float32, k unsafe.Pointer, ldk int, f16 bool) {
	hd := len(q)
	ks := simd
	elem := func(j, d int) float32 {
		p := unsafe.Add(k, j*ldk)
		if f16 {
			return f16ToF32(*(*uint16)(unsafe.Add(p, 2*d)))
		}
		return *(*float32)(unsafe.Add(p, 4*d))
	}
	if ks == nil {
		for j := range s {
			var acc float32
			for d, v := range q {
				acc += float32(v * elem(j, d))
			}
			s[j] = acc
		}
		return
	}
	if scores16 != nil && ks.kstep == 16 && hd%16 == 0 {
		scores16(s, q, k, ldk, f16)
		return
	}
	kmain := hd / ks.kstep * ks.kstep
	if kmain > 0 {
		ti := 0
		if f16 {
			ti = 1
		}
		tiles := ks.tiles[ti][0]
		for j := 0; j < len(s); j += ks.nr {
			nr := min(ks.nr, len(s)-j)
			tiles[nr-1](&q[0], hd, (*byte)(unsafe.Add(k, j*ldk)), ldk, kmain, &s[j], 1)
		}
	}
	if kmain < hd {
		for j := range s {
			var acc float32
			if kmain > 0 {
				acc = s[j]
			}
			for d := kmain; d < hd; d++ {
				acc += float32(q[d] * elem(j, d))
			}
			s[j] = acc
		}
	}
}
