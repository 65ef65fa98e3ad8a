package blendeval

import (
	"fmt"
	"math"
	"slices"

	"stockpot/internal/blend"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
)

// Config is what Measure varies and how it runs.
type Config struct {
	// Fractions are the recompute fractions measured, in order (DefaultConfig: 1, 0.5, 0.3,
	// 0.15, 0.05, 0).
	Fractions []float64
	// Steps is how many tokens of the full prefill's greedy continuation the agreement is
	// measured over (32).
	Steps int
	// BlockSize is the engine's block size: a chunk's cached part is its full blocks (16).
	BlockSize int
	// BatchTokens bounds one forward step (512, the engine's default).
	BatchTokens int
	// Policies are the selections measured at each fraction, in order (EPIC, CacheBlend).
	Policies []blend.Policy
	// CheckLayer is the layer CacheBlend measures deviation at (blend.DefaultCheckLayer, the
	// engine's default); like the engine, the model's last layer when it has fewer.
	CheckLayer int
}

// DefaultConfig measures the fractions over 32 tokens with the engine's defaults.
func DefaultConfig() Config {
	return Config{Fractions: []float64{1, 0.5, 0.3, 0.15, 0.05, 0}, Steps: 32, BlockSize: 16, BatchTokens: 512,
		Policies: []blend.Policy{blend.EPIC, blend.CacheBlend}, CheckLayer: blend.DefaultCheckLayer}
}

func (c Config) validate() (Config, error) {
	d := DefaultConfig()
	if c.Fractions == nil {
		c.Fractions = d.Fractions
	}
	if c.Steps == 0 {
		c.Steps = d.Steps
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if c.BatchTokens == 0 {
		c.BatchTokens = d.BatchTokens
	}
	if c.Policies == nil {
		c.Policies = d.Policies
	}
	if c.CheckLayer == 0 {
		c.CheckLayer = d.CheckLayer
	}
	for _, p := range c.Policies {
		if p != blend.EPIC && p != blend.CacheBlend {
			return c, fmt.Errorf("blendeval: unknown policy %v", p)
		}
	}
	for _, f := range c.Fractions {
		if math.IsNaN(f) || f < 0 || f > 1 {
			return c, fmt.Errorf("blendeval: fraction %v outside [0, 1]", f)
		}
	}
	if c.Steps < 1 || c.BlockSize < 1 || c.BatchTokens < 1 || c.CheckLayer < 1 {
		return c, fmt.Errorf("blendeval: Steps %d, BlockSize %d, BatchTokens %d and CheckLayer %d must be positive", c.Steps, c.BlockSize, c.BatchTokens, c.CheckLayer)
	}
	return c, nil
}

// Result is one fraction's and policy's deviation from the full prefill.
type Result struct {
	Fraction float64
	Policy   string // blend.Policy's name: "epic" or "cacheblend"
	// Blended positions kept cached chunk K/V; Recomputed had it and were recomputed (as the
	// engine's Usage.Blend counts them).
	Blended, Recomputed int
	// KDev and VDev are, per layer, ‖blended − full‖₂ / ‖full‖₂ over the chunks' positions.
	KDev, VDev []float64
	// KL is KL(full ‖ blended) of the first next-token distribution, in nats; MeanKL its mean
	// over the Steps teacher-forced positions.
	KL, MeanKL float64
	// Top1 is the share of the Steps teacher-forced positions whose most likely token is the
	// full prefill's greedy token.
	Top1 float64
	// GreedyPrefix is how many free-running greedy tokens equal the full prefill's before the
	// first difference (Steps when none differs); Greedy are the tokens.
	GreedyPrefix int
	Greedy       []int32
	// Bitwise: every K/V value of the prompt and every logit of the Steps positions equal
	// the full prefill's.
	Bitwise bool
}

// Report is a measurement of one prompt on one model.
type Report struct {
	Layers    int
	Prompt    int           // tokens
	Chunks    []blend.Chunk // as measured, sorted
	Reference []int32       // the full prefill's greedy continuation
	Results   []Result
}

// Measure blends prompt's chunks at each of cfg's fractions under each of its policies on m
// and compares each with the full prefill (Results: per fraction, the policies in order). m
// must be an attention model (llama, qwen2, qwen3); CacheBlend needs two layers or more;
// chunks are validated as a request's are.
func Measure(m *model.Model, prompt []int32, chunks []blend.Chunk, cfg Config) (*Report, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	if mc.Hybrid() || mc.Kimi() {
		return nil, fmt.Errorf("blendeval: %s carries recurrent state; blending is for attention models", mc.Arch)
	}
	if slices.Contains(cfg.Policies, blend.CacheBlend) && mc.Layers < 2 {
		return nil, fmt.Errorf("blendeval: CacheBlend measures at layer 1 or deeper, and %s has %d layer", mc.Arch, mc.Layers)
	}
	spec := blend.Spec{Chunks: chunks, Recompute: 1}
	if err := spec.Validate(len(prompt), blend.Limits{ContextLength: mc.ContextLength}); err != nil {
		return nil, err
	}
	spec = spec.Normalize()
	n, B := len(prompt), cfg.BlockSize
	if n+cfg.Steps > mc.ContextLength {
		return nil, fmt.Errorf("blendeval: %d prompt tokens and %d steps pass the context of %d", n, cfg.Steps, mc.ContextLength)
	}
	r := &runner{m: m, cfg: cfg, vocab: mc.Vocab}
	rep := &Report{Layers: mc.KVLayers(), Prompt: n, Chunks: spec.Chunks}

	// The reference: the full prefill, then its greedy continuation with every step's logits.
	full := r.newKV(n + cfg.Steps)
	logits := r.forward(full, prompt, 0, true)
	refLogits := [][]float32{logits}
	for i := range cfg.Steps {
		t := argmax(refLogits[i])
		rep.Reference = append(rep.Reference, t)
		if i+1 < cfg.Steps {
			refLogits = append(refLogits, r.forward(full, []int32{t}, n+i, true))
		}
	}

	// Each chunk's full blocks at position 0, once: what the chunk cache holds.
	places := make([]blend.Placement, len(spec.Chunks))
	chunkKV := make([]*kernels.PagedKV, len(spec.Chunks))
	for i, c := range spec.Chunks {
		places[i].Chunk = c
		if full := c.Len() / B * B; full > 0 {
			places[i].Cached = full
			chunkKV[i] = r.newKV(full)
			r.forward(chunkKV[i], prompt[c.Start:c.Start+full], 0, false)
		}
	}

	for _, f := range cfg.Fractions {
		for _, pol := range cfg.Policies {
			var kv *kernels.PagedKV
			var last []float32
			res := Result{Fraction: f, Policy: pol.String()}
			if pol == blend.CacheBlend {
				kv, last, res.Blended, res.Recomputed = r.cacheBlend(prompt, places, chunkKV, f)
			} else {
				kv, last, res.Blended, res.Recomputed = r.epic(prompt, places, chunkKV, f)
			}
			rep.Results = append(rep.Results, r.compare(res, full, kv, last, refLogits, rep.Reference, spec.Chunks, n))
		}
	}
	return rep, nil
}

// epic replays the engine's EPIC blend of prompt at fraction f: the copies less their
// recomputed heads, then SelectEPIC's ranges in position order. It returns the blended K/V,
// the last prompt token's logits and the counts.
func (r *runner) epic(prompt []int32, places []blend.Placement, chunkKV []*kernels.PagedKV, f float64) (kv *kernels.PagedKV, last []float32, blended, recomputed int) {
	n := len(prompt)
	sel := blend.SelectEPIC(0, n, places, f)
	kv = r.newKV(n + r.cfg.Steps)
	r.place(kv, chunkKV, sel.Copies)
	for _, rg := range sel.Recompute {
		last = r.forward(kv, prompt[rg.Lo:rg.Hi], rg.Lo, rg.Hi == n)
	}
	return kv, last, sel.Blended, sel.Recomputed
}

// cacheBlend replays the engine's CacheBlend blend (engine/blend_cacheblend.go): every
// cached position is a copy (SelectEPIC at 0); the measuring pass runs [0, the last copied
// position] through the check layer's K/V (model.ForwardKV); each copied position's
// deviation is the L2 distance of that fresh K/V from its cached, re-rotated one, computed
// as the engine's runner does; blend.SelectCacheBlend picks ⌈f·n⌉; then the copies, all of
// them, and blend.RecomputePositions in order, in steps of BatchTokens.
func (r *runner) cacheBlend(prompt []int32, places []blend.Placement, chunkKV []*kernels.PagedKV, f float64) (kv *kernels.PagedKV, last []float32, blended, recomputed int) {
	n := len(prompt)
	sel := blend.SelectEPIC(0, n, places, 0)
	kv = r.newKV(n + r.cfg.Steps)
	copied, checkEnd := 0, 0
	for _, cp := range sel.Copies {
		copied += cp.N
		checkEnd = max(checkEnd, cp.Dst+cp.N)
	}
	layer := max(1, min(r.cfg.CheckLayer, r.m.Config().Layers-1))
	for lo := 0; lo < checkEnd; lo += r.cfg.BatchTokens {
		hi := min(lo+r.cfg.BatchTokens, checkEnd)
		if err := r.m.ForwardKV([]model.Sequence{{Tokens: prompt[lo:hi], Pos: lo, KV: kv}}, layer); err != nil {
			panic(fmt.Sprintf("blendeval: measuring pass: %v", err)) // the model was checked
		}
	}
	dev := r.deviations(kv, chunkKV, sel.Copies, layer, copied)
	picked := blend.SelectCacheBlend(sel.Copies, dev, f)
	pos := blend.RecomputePositions(sel, picked)
	r.place(kv, chunkKV, sel.Copies) // overwrites every layer the pass wrote at a copied position
	toks := make([]int32, len(pos))
	for i, p := range pos {
		toks[i] = prompt[p]
	}
	for lo := 0; lo < len(pos); lo += r.cfg.BatchTokens {
		hi := min(lo+r.cfg.BatchTokens, len(pos))
		s := model.Sequence{Tokens: toks[lo:hi], Pos: pos[lo], KV: kv}
		if pos[hi-1]-pos[lo] != hi-1-lo {
			s.Positions = pos[lo:hi] // not consecutive, as the engine sets it
		}
		if hi == len(pos) {
			last = make([]float32, r.vocab)
			s.Logits = last
		}
		if err := r.m.Forward([]model.Sequence{s}); err != nil {
			panic(fmt.Sprintf("blendeval: forward: %v", err))
		}
	}
	return kv, last, copied - len(picked), len(picked)
}

// deviations is CacheBlend's measure of each copied position, in copy order: the L2
// distance, over every K/V head, between the K and V at layer in kv and the chunk's cached
// ones (key re-rotated), summed in float64 as engine.checkBlends does.
func (r *runner) deviations(kv *kernels.PagedKV, chunkKV []*kernels.PagedKV, copies []blend.Copy, layer, n int) []float32 {
	mc := r.m.Config()
	rope := r.m.RoPE()
	row := mc.KVDim()
	k, v, ck, cv := make([]float32, row), make([]float32, row), make([]float32, row), make([]float32, row)
	dev := make([]float32, 0, n)
	for _, cp := range copies {
		for j := range cp.N {
			kernels.LoadKV(kv, layer, cp.Dst+j, k, v)
			kernels.LoadKV(chunkKV[cp.Chunk], layer, cp.Src+j, ck, cv)
			blend.Rerotate(ck, mc.KVHeads, mc.HeadDim, cp.Dst-cp.Src, rope)
			var d float64
			for i := range row {
				dk, dv := float64(k[i]-ck[i]), float64(v[i]-cv[i])
				d += dk*dk + dv*dv
			}
			dev = append(dev, float32(math.Sqrt(d)))
		}
	}
	return dev
}

// compare fills res with the blended K/V's and logits' deviation from the full prefill:
// K/V by layer over the chunks, then Steps teacher-forced positions on kv and a
// free-running greedy continuation on a copy of it.
func (r *runner) compare(res Result, full, kv *kernels.PagedKV, last []float32, refLogits [][]float32, ref []int32, chunks []blend.Chunk, n int) Result {
	steps := r.cfg.Steps
	res.KDev, res.VDev = r.deviation(full, kv, chunks)
	res.Bitwise = r.sameKV(full, kv, n) && slices.Equal(last, refLogits[0])

	// Free-running greedy on a copy; teacher-forced on kv.
	free, first := cloneKV(kv), last
	agree, klSum := 0, 0.0
	for i := range steps {
		kl := klDivergence(refLogits[i], last)
		if i == 0 {
			res.KL = kl
		}
		klSum += kl
		if argmax(last) == ref[i] {
			agree++
		}
		if i+1 < steps {
			next := r.forward(kv, []int32{ref[i]}, n+i, true)
			res.Bitwise = res.Bitwise && slices.Equal(next, refLogits[i+1])
			last = next
		}
	}
	res.MeanKL, res.Top1 = klSum/float64(steps), float64(agree)/float64(steps)
	res.Greedy = r.greedy(free, first, n)
	res.GreedyPrefix = steps
	for i, t := range res.Greedy {
		if t != ref[i] {
			res.GreedyPrefix = i
			break
		}
	}
	return res
}

// greedy decodes Steps greedy tokens from the blended prompt's logits over kv (a copy of
// the blended K/V).
func (r *runner) greedy(kv *kernels.PagedKV, logits []float32, n int) []int32 {
	out := make([]int32, 0, r.cfg.Steps)
	for i := range r.cfg.Steps {
		t := argmax(logits)
		out = append(out, t)
		if i+1 < r.cfg.Steps {
			logits = r.forward(kv, []int32{t}, n+i, true)
		}
	}
	return out
}

// runner runs one model over private K/V slabs.
type runner struct {
	m     *model.Model
	cfg   Config
	vocab int
}

// newKV is a private slab for positions [0, n), its blocks in order.
func (r *runner) newKV(n int) *kernels.PagedKV {
	mc := r.m.Config()
	kv := &kernels.PagedKV{BlockSize: r.cfg.BlockSize, Layers: mc.KVLayers(), KVHeads: mc.KVHeads, HeadDim: mc.HeadDim}
	blocks := (n + r.cfg.BlockSize - 1) / r.cfg.BlockSize
	kv.F32 = make([]float32, blocks*kv.BlockElems())
	for b := range blocks {
		kv.Table = append(kv.Table, int32(b))
	}
	return kv
}

func cloneKV(kv *kernels.PagedKV) *kernels.PagedKV {
	c := *kv
	c.F32, c.Table = slices.Clone(kv.F32), slices.Clone(kv.Table)
	return &c
}

// forward runs tokens at positions pos.. in steps of BatchTokens and returns the last
// token's logits when logits is set.
func (r *runner) forward(kv *kernels.PagedKV, tokens []int32, pos int, logits bool) []float32 {
	var out []float32
	for lo := 0; lo < len(tokens); lo += r.cfg.BatchTokens {
		hi := min(lo+r.cfg.BatchTokens, len(tokens))
		s := model.Sequence{Tokens: tokens[lo:hi], Pos: pos + lo, KV: kv}
		if logits && hi == len(tokens) {
			out = make([]float32, r.vocab)
			s.Logits = out
		}
		if err := r.m.Forward([]model.Sequence{s}); err != nil {
			panic(fmt.Sprintf("blendeval: forward: %v", err)) // the inputs were checked
		}
	}
	return out
}

// place applies a selection's copies as the engine's runner does (engine.applyBlends): the
// recomputed head of each copy is skipped, the rest re-rotated into kv.
func (r *runner) place(kv *kernels.PagedKV, chunkKV []*kernels.PagedKV, copies []blend.Copy) {
	mc := r.m.Config()
	rope := r.m.RoPE()
	row := mc.KVDim()
	k, v := make([]float32, row), make([]float32, row)
	for _, cp := range copies {
		src := chunkKV[cp.Chunk]
		for j := cp.Recompute; j < cp.N; j++ {
			for l := range kv.Layers {
				kernels.LoadKV(src, l, cp.Src+j, k, v)
				blend.Rerotate(k, mc.KVHeads, mc.HeadDim, cp.Dst-cp.Src, rope)
				kernels.StoreKV(kv, l, cp.Dst+j, k, v)
			}
		}
	}
}

// deviation is KDev and VDev over the chunks' positions.
func (r *runner) deviation(full, kv *kernels.PagedKV, chunks []blend.Chunk) (kd, vd []float64) {
	row := full.KVHeads * full.HeadDim
	kf, vf, kb, vb := make([]float32, row), make([]float32, row), make([]float32, row), make([]float32, row)
	for l := range full.Layers {
		var dk, nk, dv, nv float64
		for _, c := range chunks {
			for p := c.Start; p < c.End; p++ {
				kernels.LoadKV(full, l, p, kf, vf)
				kernels.LoadKV(kv, l, p, kb, vb)
				for i := range row {
					dk += sq(float64(kb[i]) - float64(kf[i]))
					nk += sq(float64(kf[i]))
					dv += sq(float64(vb[i]) - float64(vf[i]))
					nv += sq(float64(vf[i]))
				}
			}
		}
		kd, vd = append(kd, math.Sqrt(dk/nk)), append(vd, math.Sqrt(dv/nv))
	}
	return kd, vd
}

// sameKV reports whether positions [0, n) of a and b hold bitwise the same K/V.
func (r *runner) sameKV(a, b *kernels.PagedKV, n int) bool {
	row := a.KVHeads * a.HeadDim
	ka, va, kb, vb := make([]float32, row), make([]float32, row), make([]float32, row), make([]float32, row)
	for l := range a.Layers {
		for p := range n {
			kernels.LoadKV(a, l, p, ka, va)
			kernels.LoadKV(b, l, p, kb, vb)
			for i := range row {
				if math.Float32bits(ka[i]) != math.Float32bits(kb[i]) || math.Float32bits(va[i]) != math.Float32bits(vb[i]) {
					return false
				}
			}
		}
	}
	return true
}

func sq(x float64) float64 { return x * x }

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// klDivergence is KL(softmax(p) ‖ softmax(q)) in nats, in float64.
func klDivergence(p, q []float32) float64 {
	lp, lq := logSoftmax(p), logSoftmax(q)
	kl := 0.0
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return max(kl, 0)
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = max(mx, float64(v))
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	ls := mx + math.Log(s)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - ls
	}
	return out
}
