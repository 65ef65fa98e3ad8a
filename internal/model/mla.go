package model

import (
	"fmt"
	"math"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/quant"
)

// Multi-head latent attention with the absorbed ("MLA cache") formulation llama.cpp runs when
// a file has attn_k_b and attn_v_b (src/models/kimi-linear.cpp, build_attn with v_mla):
//
//	c  = rms_norm(x·W_kv_a[:r]),  k_pe = x·W_kv_a[r:]           (the latent row: [c, k_pe])
//	q  = x·W_q, per head [q_nope, q_pe];  q̃ = [W_k_b·q_nope, q_pe]
//	p  = softmax(q̃·[c, k_pe]ᵀ / √KHeadDim) over positions 0..pos
//	o  = W_v_b · Σ p_j c_j  per head, then attn_output
//
// So a token's cache is the one latent row [c, k_pe] of LatentDim floats per MLA layer, shared
// by every head, instead of Heads × (KHeadDim + VHeadDim) for per-head K and V. In the paged
// blocks the row sits where a one-head K or V row would be: two MLA layers share a slot, one in
// its K half and one in its V half (Config.KVLayers). kimi-linear applies no RoPE (its rope type
// is none): k_pe and q_pe enter unrotated, and positions matter only through causality.
//
// Attention itself is kernels.Attention (one K/V head of LatentDim) over a gathered view of
// the layer's rows (gatherLatents), so the numerics are those of ggml's non-flash path that the
// kernels follow: with an f16 cache the row is stored rounded to f16, and q̃ and the
// probabilities are rounded to f16 before their dot products (ggml's vec_dot_type for an f16
// operand). A q8_0 cache stores the row as q8_0 blocks (ggml's quantize_row_q8_0, unrotated)
// and reads it back dequantized into an f32 view; that is our own choice (llama.cpp's q8_0 K/V
// for MLA runs flash attention over Hadamard-rotated rows). A query's result does not depend
// on the other queries of the call (the kernels' rule), so not on batching or chunking. The
// gather costs one copy of the layer's rows per step, beside the attention's own pass over them.

// MLAConfig is the shape of kimi-linear's MLA layers.
type MLAConfig struct {
	KVLoraRank int // attention.kv_lora_rank: the compressed K/V width
	RopeDims   int // rope.dimension_count: the decoupled k_pe/q_pe width (not rotated in kimi-linear)
	KHeadDim   int // attention.key_length_mla: per-head query/key dims (nope + rope)
	VHeadDim   int // attention.value_length_mla: per-head value dims
}

// LatentDim is the width of the row an MLA layer caches per token: the normalized compressed
// K/V and the decoupled key.
func (m MLAConfig) LatentDim() int { return m.KVLoraRank + m.RopeDims }

// NopeDim is the per-head query/key width without the decoupled part.
func (m MLAConfig) NopeDim() int { return m.KHeadDim - m.RopeDims }

// GQAKVBytesPerToken is what the attention layers' K/V would take per token without MLA's
// compression, for elements of elemBytes: every MLA layer caching per-head K
// (KHeadDim) and V (VHeadDim) for all Heads, as llama.cpp's MHA fallback for MLA files does.
// For models without MLA layers it is KVBytesPerToken.
func (c Config) GQAKVBytesPerToken(elemBytes int) int {
	n := c.count(LayerMLA)
	if n == 0 {
		return c.KVBytesPerToken(elemBytes)
	}
	return 2*c.count(LayerAttention)*c.KVDim()*elemBytes + n*c.Heads*(c.MLA.KHeadDim+c.MLA.VHeadDim)*elemBytes
}

// LatentBytesPerToken is the MLA latent K/V of one token over all MLA layers, unpadded.
func (c Config) LatentBytesPerToken(elemBytes int) int {
	return c.count(LayerMLA) * c.MLA.LatentDim() * elemBytes
}

// mlaSlot returns the K/V slot of MLA layer l and which half (0: K, 1: V) holds its latent.
func (c Config) mlaSlot(l int) (slot, half int) {
	r := 0
	for i := 0; i < l; i++ {
		if c.Kind(i) == LayerMLA {
			r++
		}
	}
	return c.count(LayerAttention) + r/2, r % 2
}

// mlaLayer holds an MLA layer's weights.
type mlaLayer struct {
	wq *kernels.Weight // attn_q [Heads·KHeadDim][Dim]; nil when queries are compressed
	// K3's compressed queries: attn_q_a [QLoraRank][Dim], attn_q_a_norm, attn_q_b
	// [Heads·KHeadDim][QLoraRank]
	wqa, wqb *kernels.Weight
	qaNorm   []float32
	gate     *kernels.Weight   // K3's output gate attn_gate [Heads·VHeadDim][Dim]; nil without
	wkva     *kernels.Weight   // attn_kv_a_mqa [KVLoraRank+RopeDims][Dim]
	kvNorm   []float32         // attn_kv_a_norm [KVLoraRank]
	kb       []*kernels.Weight // attn_k_b per head [KVLoraRank][NopeDim]
	vb       []*kernels.Weight // attn_v_b per head [VHeadDim][KVLoraRank]
	wo       *kernels.Weight   // attn_output [Dim][Heads·VHeadDim]
	slot     int               // K/V slot holding its latent
	half     int               // 0: the slot's K rows, 1: its V rows
}

// mlaCheck verifies that a sequence's paged view has the latent layout this model writes.
func (m *Model) mlaCheck(kv *kernels.PagedKV) error {
	c := m.cfg
	if kv == nil {
		return fmt.Errorf("model: %s needs the sequence's K/V blocks", c.Arch)
	}
	if kv.KVHeads != 1 || kv.HeadDim != c.MLA.LatentDim() || kv.Layers != c.KVLayers() {
		return fmt.Errorf("model: %s's blocks hold %d layer slots of one %d-wide latent row, got %d × %d heads × %d", c.Arch, c.KVLayers(), c.MLA.LatentDim(), kv.Layers, kv.KVHeads, kv.HeadDim)
	}
	if kv.Q8 != nil && c.MLA.LatentDim()%q8Block != 0 {
		return fmt.Errorf("model: %s's %d-wide MLA latent rows do not fill whole q8_0 blocks of %d", c.Arch, c.MLA.LatentDim(), q8Block)
	}
	return nil
}

const q8Block, q8Bytes = 32, 34

// latentOffsetQ8 is the byte offset of (slot, half, pos)'s row in a Q8_0 arena (rows of
// HeadDim/32 blocks of 34 bytes; kernels.PagedKV's layout).
func latentOffsetQ8(kv *kernels.PagedKV, slot, half, pos int) int {
	bi := pos / kv.BlockSize
	if bi >= len(kv.Table) {
		panic(fmt.Sprintf("model: position %d needs block %d, table has %d", pos, bi, len(kv.Table)))
	}
	row := kv.KVHeads * kv.HeadDim / q8Block * q8Bytes
	return int(kv.Table[bi])*kv.Layers*2*kv.BlockSize*row + ((slot*2+half)*kv.BlockSize+pos%kv.BlockSize)*row
}

// latentOffset is the arena index of (slot, half, pos)'s row (the layout of kernels.PagedKV).
func latentOffset(kv *kernels.PagedKV, slot, half, pos int) int {
	bi := pos / kv.BlockSize
	if bi >= len(kv.Table) {
		panic(fmt.Sprintf("model: position %d needs block %d, table has %d", pos, bi, len(kv.Table)))
	}
	row := kv.KVHeads * kv.HeadDim
	return int(kv.Table[bi])*kv.BlockElems() + ((slot*2+half)*kv.BlockSize+pos%kv.BlockSize)*row
}

func storeLatent(kv *kernels.PagedKV, slot, half, pos int, lat []float32) {
	if kv.Q8 != nil {
		o := latentOffsetQ8(kv, slot, half, pos)
		quant.QuantizeActivations(gguf.TypeQ8_0, lat, kv.Q8[o:o+len(lat)/q8Block*q8Bytes])
		return
	}
	o := latentOffset(kv, slot, half, pos)
	if kv.F16 != nil {
		dst := kv.F16[o : o+len(lat)]
		for i, v := range lat {
			dst[i] = quant.F32ToF16(v)
		}
		return
	}
	copy(kv.F32[o:o+len(lat)], lat)
}

func loadLatent(kv *kernels.PagedKV, slot, half, pos int, dst []float32) {
	if kv.Q8 != nil {
		o := latentOffsetQ8(kv, slot, half, pos)
		if err := quant.DequantizeRow(gguf.TypeQ8_0, kv.Q8[o:o+len(dst)/q8Block*q8Bytes], dst); err != nil {
			panic(err) // a whole number of blocks by construction
		}
		return
	}
	o := latentOffset(kv, slot, half, pos)
	if kv.F16 != nil {
		for i, v := range kv.F16[o : o+len(dst)] {
			dst[i] = quant.F16ToF32(v)
		}
		return
	}
	copy(dst, kv.F32[o:o+len(dst)])
}

// latentViewBlock is the block size of the gathered view.
const latentViewBlock = 64

// gatherLatents copies MLA layer (slot, half)'s latent rows for positions [0, n) into a
// one-layer view of the model's scratch, each row as both the K and the V row, so that
// kernels.Attention computes softmax(q̃·[c, k_pe]ᵀ)·[c, k_pe] (the first KVLoraRank dims of
// which are the latent output). An f32 or f16 cache gives a view of its type, copied bit for
// bit (so the kernels round q̃ and the probabilities to f16 as ggml does for an f16 cache); a
// q8_0 cache is dequantized into an f32 view.
func (m *Model) gatherLatents(kv *kernels.PagedKV, slot, half, n int) *kernels.PagedKV {
	sc := &m.scratch
	D := kv.HeadDim
	nb := (n + latentViewBlock - 1) / latentViewBlock
	v := &sc.latView
	*v = kernels.PagedKV{BlockSize: latentViewBlock, Layers: 1, KVHeads: 1, HeadDim: D, Table: sc.latTable[:0]}
	for b := 0; b < nb; b++ {
		v.Table = append(v.Table, int32(b))
	}
	sc.latTable = v.Table
	elems := nb * v.BlockElems()
	m.initMLAFns()
	sc.latKV, sc.latSlot, sc.latHalf = kv, slot, half
	defer func() { sc.latKV = nil }() // drop the reference to the caller's K/V
	if kv.F16 != nil {
		if cap(sc.latF16) < elems {
			sc.latF16 = make([]uint16, elems)
		}
		v.F16 = sc.latF16[:elems]
		m.pool.For(n, m.mla.gatherF16)
		return v
	}
	sc.lat = grow(sc.lat, elems)
	v.F32 = sc.lat
	m.pool.For(n, m.mla.gatherF32)
	return v
}

// latRowAt is the offset of position pos's K (isV 0) or V (isV 1) row in the gathered view v.
func latRowAt(v *kernels.PagedKV, D, pos, isV int) int {
	return (pos/latentViewBlock)*v.BlockElems() + (isV*latentViewBlock+pos%latentViewBlock)*D
}

// mlaForward is an MLA layer's token mixer; it writes each token's latent row into its
// sequence's blocks and adds the layer's output to the residual stream.
func (m *Model) mlaForward(li int, seqs []Sequence, M int) {
	c := &m.cfg
	l := &m.layers[li]
	a := l.mla
	sc := &m.scratch
	ml := c.MLA
	H, r, D := c.Heads, ml.KVLoraRank, ml.LatentDim()
	kd, nope, vd := ml.KHeadDim, ml.NopeDim(), ml.VHeadDim
	m.initRowFns()
	m.initMLAFns()
	sc.li = li

	m.pool.For(M, m.fns.attnNorm)
	sc.qfull = grow(sc.qfull, M*H*kd)
	sc.k = grow(sc.k, M*D)
	// q (or its compressed form), the latent, and K3's output gate read the same normed rows.
	sc.qkvDst[0], sc.qkvW[0] = sc.qfull, a.wq
	if a.wqa != nil {
		sc.qa = grow(sc.qa, M*c.K3.QLoraRank)
		sc.qkvDst[0], sc.qkvW[0] = sc.qa, a.wqa
	}
	sc.qkvDst[1], sc.qkvW[1] = sc.k, a.wkva
	nw := 2
	if a.gate != nil {
		sc.mlaGate = grow(sc.mlaGate, M*H*vd)
		sc.qkvDst[2], sc.qkvW[2] = sc.mlaGate, a.gate
		nw = 3
	}
	kernels.MatMuls(m.pool, sc.h, M, sc.qkvDst[:nw], sc.qkvW[:nw])
	if a.wqa != nil {
		m.pool.For(M, m.mla.qaNorm)
		kernels.MatMul(m.pool, sc.qfull, sc.qa, M, a.wqb)
	}

	// The latent rows: normalized c, raw k_pe; stored at each token's position.
	r0 := 0
	for si := range seqs {
		n := len(seqs[si].Tokens)
		sc.cur, sc.base = &seqs[si], r0
		m.pool.For(n, m.mla.latents)
		r0 += n
	}
	sc.cur = nil // drop the reference to the caller's sequence

	// Absorbed queries q̃ = [W_k_b·q_nope, q_pe] per head, in sc.mlaQ [M][H][D].
	sc.mlaQ = grow(sc.mlaQ, M*H*D)
	sc.headIn = grow(sc.headIn, M*max(nope, r))
	sc.headOut = grow(sc.headOut, M*max(r, vd))
	for h := 0; h < H; h++ {
		sc.head = h
		m.pool.For(M, m.mla.qSplit)
		kernels.MatMul(m.pool, sc.headOut[:M*r], sc.headIn[:M*nope], M, a.kb[h])
		m.pool.For(M, m.mla.qAbsorbed)
	}

	// Attention over the latent rows, into sc.att [M][H][r]: the kernels' attention on a
	// one-layer view whose K and V rows are both the latent (see gatherLatents).
	sc.att = grow(sc.att, M*H*r)
	sc.mlaOut = grow(sc.mlaOut, M*H*D)
	attn := kernels.AttnParams{NHeads: H, NKVHeads: 1, HeadDim: D, Scale: float32(1 / math.Sqrt(float64(kd)))}
	r0 = 0
	for si := range seqs {
		s := &seqs[si]
		n := len(s.Tokens)
		view := m.gatherLatents(s.KV, a.slot, a.half, s.Pos+n)
		sc.positions = sc.positions[:0]
		for j := 0; j < n; j++ {
			sc.positions = append(sc.positions, s.Pos+j)
		}
		kernels.Attention(m.pool, sc.mlaOut[r0*H*D:(r0+n)*H*D], sc.mlaQ[r0*H*D:(r0+n)*H*D], sc.positions, view, 0, attn)
		sc.base = r0
		m.pool.For(n*H, m.mla.attOut)
		r0 += n
	}

	// Per head: o = W_v_b · latent, into sc.core [M][H·VHeadDim].
	sc.core = grow(sc.core, M*H*vd)
	for h := 0; h < H; h++ {
		sc.head = h
		m.pool.For(M, m.mla.headLatent)
		kernels.MatMul(m.pool, sc.headOut[:M*vd], sc.headIn[:M*r], M, a.vb[h])
		m.pool.For(M, m.mla.headCore)
	}
	if a.gate != nil {
		m.pool.For(M, m.mla.gated) // core ·= sigmoid(gate)
	}
	kernels.MatMul(m.pool, sc.h, sc.core[:M*H*vd], M, a.wo)
	m.addResidual(M)
}

// mlaFns are mlaForward's and gatherLatents' per-row steps, bound to the model once
// (initMLAFns) like rowFns. They read the layer (li), the sequence (cur), its first row
// (base), the head (head) and the gathered K/V (latKV, latSlot, latHalf) from scratch.
type mlaFns struct {
	latents, qSplit, qAbsorbed, attOut, headLatent, headCore, gatherF16, gatherF32 func(lo, hi int)
	qaNorm, gated                                                                  func(lo, hi int) // K3's
}

func (m *Model) initMLAFns() {
	if m.mla.latents != nil {
		return
	}
	c, sc := &m.cfg, &m.scratch
	ml := &c.MLA
	m.mla.latents = func(lo, hi int) {
		a := m.layers[sc.li].mla
		s, base := sc.cur, sc.base
		r, D := ml.KVLoraRank, ml.LatentDim()
		for j := lo; j < hi; j++ {
			lat := sc.k[(base+j)*D : (base+j+1)*D]
			kernels.RMSNorm(lat[:r], lat[:r], a.kvNorm, c.NormEps)
			storeLatent(s.KV, a.slot, a.half, s.Pos+j, lat)
		}
	}
	m.mla.qSplit = func(lo, hi int) {
		H, r, D := c.Heads, ml.KVLoraRank, ml.LatentDim()
		kd, nope, h := ml.KHeadDim, ml.NopeDim(), sc.head
		for i := lo; i < hi; i++ {
			qh := sc.qfull[(i*H+h)*kd : (i*H+h+1)*kd]
			copy(sc.headIn[i*nope:(i+1)*nope], qh[:nope])
			copy(sc.mlaQ[(i*H+h)*D+r:(i*H+h+1)*D], qh[nope:])
		}
	}
	m.mla.qAbsorbed = func(lo, hi int) {
		H, r, D, h := c.Heads, ml.KVLoraRank, ml.LatentDim(), sc.head
		for i := lo; i < hi; i++ {
			copy(sc.mlaQ[(i*H+h)*D:(i*H+h)*D+r], sc.headOut[i*r:(i+1)*r])
		}
	}
	m.mla.attOut = func(lo, hi int) {
		H, r, D, base := c.Heads, ml.KVLoraRank, ml.LatentDim(), sc.base
		for task := lo; task < hi; task++ {
			row := (base*H + task)
			copy(sc.att[row*r:(row+1)*r], sc.mlaOut[row*D:row*D+r])
		}
	}
	m.mla.headLatent = func(lo, hi int) {
		H, r, h := c.Heads, ml.KVLoraRank, sc.head
		for i := lo; i < hi; i++ {
			copy(sc.headIn[i*r:(i+1)*r], sc.att[(i*H+h)*r:(i*H+h+1)*r])
		}
	}
	m.mla.headCore = func(lo, hi int) {
		H, vd, h := c.Heads, ml.VHeadDim, sc.head
		for i := lo; i < hi; i++ {
			copy(sc.core[(i*H+h)*vd:(i*H+h+1)*vd], sc.headOut[i*vd:(i+1)*vd])
		}
	}
	m.mla.qaNorm = func(lo, hi int) {
		a, r := m.layers[sc.li].mla, c.K3.QLoraRank
		for i := lo; i < hi; i++ {
			kernels.RMSNorm(sc.qa[i*r:(i+1)*r], sc.qa[i*r:(i+1)*r], a.qaNorm, c.NormEps)
		}
	}
	m.mla.gated = func(lo, hi int) {
		w := c.Heads * ml.VHeadDim
		for i := lo; i < hi; i++ {
			o, g := sc.core[i*w:(i+1)*w], sc.mlaGate[i*w:(i+1)*w]
			kernels.Sigmoid(g) // the gate, read only here
			for j := range o {
				o[j] *= g[j]
			}
		}
	}
	m.mla.gatherF16 = func(lo, hi int) {
		kv, slot, half, v := sc.latKV, sc.latSlot, sc.latHalf, &sc.latView
		D := kv.HeadDim
		for j := lo; j < hi; j++ {
			src := kv.F16[latentOffset(kv, slot, half, j):][:D]
			copy(v.F16[latRowAt(v, D, j, 0):][:D], src)
			copy(v.F16[latRowAt(v, D, j, 1):][:D], src)
		}
	}
	m.mla.gatherF32 = func(lo, hi int) {
		kv, slot, half, v := sc.latKV, sc.latSlot, sc.latHalf, &sc.latView
		D := kv.HeadDim
		for j := lo; j < hi; j++ {
			k := v.F32[latRowAt(v, D, j, 0):][:D]
			loadLatent(kv, slot, half, j, k)
			copy(v.F32[latRowAt(v, D, j, 1):][:D], k)
		}
	}
}
