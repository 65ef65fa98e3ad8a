package engine

import (
	"math"

	"stockpot/internal/blend"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
)

// CacheBlend (blend.CacheBlend; package blend has the design) picks the chunk tokens to
// recompute by measuring them. After phase A (every chunk cached), a CacheBlend request runs,
// in order:
//
//  1. The measuring pass: prompt positions [from, checkEnd), checkEnd the end of the last
//     copied run, go through the model up to the check layer L (Config.BlendCheckLayer) as
//     ordinary plain-position items marked BlendCheck (model.ForwardKV), in position order,
//     into the request's own blocks: layers 0..L-1 in full, with attention over the true
//     K/V of every earlier position, so that layer L's K/V are bitwise a full prefill's.
//     With each item go the measures of the copied positions it covers (Plan.Measures),
//     which the runner takes after the step's forward pass (measureBlends): the L2 distance,
//     over every head, of the fresh K and V at layer L from the chunk's cached ones (key
//     re-rotated to the prompt position).
//  2. When the pass's last item is advanced: blend.SelectCacheBlend picks the ⌈f·n⌉ copied
//     positions (n of them, the whole request's) that deviate most, and
//     blend.RecomputePositions lists them with the positions no chunk covers.
//  3. The copies, all of them (Plan.Blends, as for EPIC at 0): they overwrite every layer
//     of every copied position, so nothing the measuring pass wrote there survives, and a
//     picked position's copy is overwritten by its recompute before anything reads it
//     (the causal mask: nothing before it reads it, and its own item stores it before its
//     attention). Then the recompute list in order, budget tokens a step, one item each
//     (PlanItem.Positions when its positions are not consecutive), the last with logits:
//     every position holds its final K/V before a later one is computed, which is what a
//     prefill's order guarantees.
//
// Hence, bitwise (the model's determinism rule: a row's value depends on its token, its
// position and the K/V before it, not on the batch or the step split): at f = 1 every
// position past the exact prefix is recomputed in position order, a full prefill; at f = 0
// the K/V are EPIC's at 0 (copies, then the uncovered positions in order). Both are
// TestCacheBlendBitwise's oracles. The measuring pass costs (L+1)/Layers of a prefill of
// [from, checkEnd).
//
// The usage counts are known at the start (⌈f·n⌉ recomputed, the rest blended); the
// chunks' own Blended counts once the pick is made. The prompt's chain is cut at the first
// copied position unless every one is recomputed (the pick is not known when startBlend
// cuts it; cutting earlier only commits less).

// checkItem is blendItem.chunk for a measuring item.
const checkItem = -2

// BlendMeasure is one CacheBlend measurement for the runner to take after the step's
// forward pass: for j < N, Dev[j] is the L2 distance, over every K/V head, between the K and
// V the step stored at the check layer for position DstPos+j of table Dst and those cached
// at position SrcPos+j of table Src, the key re-rotated by DstPos−SrcPos. The tables and Dev
// are the core's, valid until the next Schedule; the runner writes only Dev.
type BlendMeasure struct {
	BlendCopy
	Dev []float32
}

// cacheBlend is a CacheBlend request's state in the core (blendSeq.cb). Invariant:
// from <= checkNext <= checkEnd; rnext <= len(rpos) == len(rtok); rpos is empty until measured.
type cacheBlend struct {
	checkEnd  int       // the measuring pass covers [from, checkEnd)
	checkNext int       // [from, checkNext) of the pass is planned
	dev       []float32 // every copied position's deviation, in copy order (the runner's)
	measured  bool      // the pass is advanced, picked and rpos are set
	picked    []int     // the copied positions recomputed, ascending
	rpos      []int     // blend.RecomputePositions: what is computed, in order
	rtok      []int32   // the prompt's tokens at rpos
	rnext     int       // rpos[:rnext] is planned
}

// startCacheBlend is startBlend's selection for CacheBlend: SelectEPIC at 0 (every cached
// position copied, the rest recomputed), the counts of the pick to come, and the pass.
func (c *Core) startCacheBlend(s *seq, places []blend.Placement) {
	b, from := s.blend, s.computed
	b.sel = blend.SelectEPIC(from, s.prompt, places, 0)
	n := b.sel.Blended // at 0 every copied position is blended
	k := blend.CacheBlendCount(n, b.spec.Recompute)
	cb := &cacheBlend{checkEnd: from, checkNext: from, dev: make([]float32, n)}
	for _, cp := range b.sel.Copies {
		cb.checkEnd = max(cb.checkEnd, cp.Dst+cp.N)
	}
	b.sel.Blended, b.sel.Recomputed = n-k, k
	if k == n {
		b.sel.Exact = s.prompt // nothing stays blended
	}
	b.cb = cb
	if cb.checkEnd == from {
		c.pickCacheBlend(s) // nothing copied: nothing to measure
	}
}

// planCacheBlend plans s's CacheBlend work for this step (after phase A) and returns the
// budget left: the measuring pass, else the copies once and the recompute list.
func (c *Core) planCacheBlend(s *seq, plan *Plan, budget int) int {
	b, cb := s.blend, s.blend.cb
	if !cb.measured {
		if cb.checkNext == cb.checkEnd || budget == 0 {
			return budget // the pass's last item is in flight, or no room
		}
		lo := cb.checkNext
		hi := lo + min(cb.checkEnd-lo, budget)
		plan.Items = append(plan.Items, PlanItem{Seq: s.id, Tokens: s.tokens[lo:hi], Pos: lo, Blocks: s.blocks, BlendCheck: true})
		b.inflight = append(b.inflight, blendItem{chunk: checkItem, end: hi})
		off := 0 // cb.dev's index of cp's first position
		for _, cp := range b.sel.Copies {
			if a, e := max(lo, cp.Dst), min(hi, cp.Dst+cp.N); a < e {
				plan.Measures = append(plan.Measures, BlendMeasure{
					BlendCopy: BlendCopy{Src: b.chunks[cp.Chunk].blocks, Dst: s.blocks, SrcPos: cp.Src + a - cp.Dst, DstPos: a, N: e - a},
					Dev:       cb.dev[off+a-cp.Dst : off+e-cp.Dst]})
			}
			off += cp.N
		}
		cb.checkNext = hi
		return budget - (hi - lo)
	}
	if !b.copied {
		for _, cp := range b.sel.Copies {
			plan.Blends = append(plan.Blends, BlendCopy{Src: b.chunks[cp.Chunk].blocks, Dst: s.blocks, SrcPos: cp.Src, DstPos: cp.Dst, N: cp.N})
		}
		b.copied = true
	}
	if budget == 0 || cb.rnext == len(cb.rpos) {
		return budget
	}
	lo := cb.rnext
	hi := lo + min(len(cb.rpos)-lo, budget)
	pos := cb.rpos[lo:hi]
	it := PlanItem{Seq: s.id, Tokens: cb.rtok[lo:hi], Pos: pos[0], Blocks: s.blocks, WantLogits: hi == len(cb.rpos)}
	if pos[len(pos)-1]-pos[0] != len(pos)-1 {
		it.Positions = pos // not consecutive
	}
	plan.Items = append(plan.Items, it)
	b.inflight = append(b.inflight, blendItem{chunk: -1, end: it.End()})
	cb.rnext = hi
	return budget - (hi - lo)
}

// advanceCacheBlendCheck records a measuring item ending at end; the last one picks.
func (c *Core) advanceCacheBlendCheck(s *seq, end int) {
	if end == s.blend.cb.checkEnd {
		c.pickCacheBlend(s)
	}
}

// pickCacheBlend picks the positions to recompute from the measured deviations and lists
// the recompute order; the usage's per-chunk Blended counts follow the pick.
func (c *Core) pickCacheBlend(s *seq) {
	b, cb := s.blend, s.blend.cb
	cb.picked = blend.SelectCacheBlend(b.sel.Copies, cb.dev, b.spec.Recompute)
	cb.rpos = blend.RecomputePositions(b.sel, cb.picked)
	cb.rtok = make([]int32, len(cb.rpos))
	for i, p := range cb.rpos {
		cb.rtok[i] = s.tokens[p]
	}
	cb.rnext, cb.measured = 0, true
	if u := s.usage.Blend; u != nil && len(u.Chunks) == len(b.spec.Chunks) {
		i := 0 // cb.picked[i:] are at or past cp
		for _, cp := range b.sel.Copies {
			n := 0
			for ; i < len(cb.picked) && cb.picked[i] < cp.Dst+cp.N; i++ {
				n++
			}
			u.Chunks[cp.Chunk].Blended = cp.N - n
		}
	}
}

// blendCheckLayer is the layer CacheBlend measures at: Config.BlendCheckLayer, or the
// model's last when it has fewer (checkBlend refuses a model of one layer).
func (e *Engine) blendCheckLayer() int {
	return max(1, min(e.cfg.BlendCheckLayer, e.model.Config().Layers-1))
}

// checkBlends runs a step's measuring items (model.ForwardKV through the check layer) and
// takes their measures. Runner goroutine only; the arena is f32 or f16 (checkBlend).
func (e *Engine) checkBlends(checks []model.Sequence, ms []BlendMeasure) {
	layer := e.blendCheckLayer()
	if err := e.model.ForwardKV(checks, layer); err != nil {
		// Not reachable for a model checkBlend admits; the deviations are then noise, and
		// the answer still the blend's at the fraction asked.
		e.cfg.Logger.Error("blend measuring pass", "err", err)
	}
	mc := e.model.Config()
	rope := e.model.RoPE()
	row := mc.KVDim()
	k, v, ck, cv := make([]float32, row), make([]float32, row), make([]float32, row), make([]float32, row)
	src := kernels.PagedKV{F32: e.arena.F32(), F16: e.arena.F16(), BlockSize: e.cfg.BlockSize, Layers: mc.KVLayers(), KVHeads: mc.KVHeads, HeadDim: mc.HeadDim}
	dst := src
	for _, m := range ms {
		src.Table, dst.Table = blockTable(src.Table, m.Src), blockTable(dst.Table, m.Dst)
		for j := range m.N {
			if !kernels.LoadKV(&dst, layer, m.DstPos+j, k, v) || !kernels.LoadKV(&src, layer, m.SrcPos+j, ck, cv) {
				panic("engine: blending over a q8_0 cache (checkBlend refuses it)")
			}
			blend.Rerotate(ck, mc.KVHeads, mc.HeadDim, m.DstPos-m.SrcPos, rope)
			var d float64
			for i := range row {
				dk, dv := float64(k[i]-ck[i]), float64(v[i]-cv[i])
				d += dk*dk + dv*dv
			}
			m.Dev[j] = float32(math.Sqrt(d))
		}
	}
}
