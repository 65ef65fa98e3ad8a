package model

import (
	"fmt"
	"math"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
)

// The mixture-of-experts FFN, as llama.cpp's build_moe_ffn runs it for kimi-linear (and
// DeepSeek-style routers): router logits x·W_gate_inp; probabilities by the file's gating
// function (softmax, sigmoid, raw logits later softmaxed over the chosen ones, or
// sqrt(softplus)); the top Used experts by probability plus the selection bias exp_probs_b
// (the bias picks, it does not weigh); weights are the chosen probabilities, renormalized to
// sum 1 (clamped below at 2⁻¹⁴) and scaled by expert_weights_scale; each chosen expert is a
// SwiGLU; the weighted outputs are summed in rank order, then the shared experts' SwiGLU is
// added. A token's numbers do not depend on which other tokens share the step: each expert's
// matmul is row-independent (kernels' rule) and the sum runs in the token's own rank order.

// Expert gating functions (llama.cpp's llama_expert_gating_func_type).
const (
	GatingSoftmax       = 1
	GatingSigmoid       = 2
	GatingSoftmaxWeight = 3 // softmax over the selected experts' logits
	GatingSqrtSoftplus  = 4
)

// MoEConfig is the shape of the mixture-of-experts FFN.
type MoEConfig struct {
	Experts      int     // expert_count
	Used         int     // expert_used_count: experts per token
	Shared       int     // expert_shared_count: shared experts (one SwiGLU of Shared × FFN)
	FFN          int     // expert_feed_forward_length
	DenseLead    int     // leading_dense_block_count: the first layers use a dense FFN
	Gating       int     // expert_gating_func
	WeightsScale float32 // expert_weights_scale (0 or 1: none)
	NormWeights  bool    // the selected weights are renormalized to sum to 1 (kimi-linear: always)
	Latent       int     // K3's expert_latent_length: the routed experts' width (0: Dim)
}

// GatingName names a gating function.
func GatingName(g int) string {
	switch g {
	case GatingSoftmax:
		return "softmax"
	case GatingSigmoid:
		return "sigmoid"
	case GatingSoftmaxWeight:
		return "softmax_weight"
	case GatingSqrtSoftplus:
		return "sqrt_softplus"
	}
	return fmt.Sprintf("gating%d", g)
}

// MoELayer reports whether layer l's FFN is the mixture of experts.
func (c Config) MoELayer(l int) bool { return c.MoE.Experts > 0 && l >= c.MoE.DenseLead }

// moeLayer holds a mixture-of-experts FFN's weights.
type moeLayer struct {
	router *kernels.Weight // ffn_gate_inp [Experts][Dim]
	// K3's latent experts: ffn_routed_down [Latent][Dim], ffn_routed_up [Dim][Latent],
	// ffn_routed_norm [Latent] (optional); nil otherwise
	routedDown, routedUp *kernels.Weight
	routedNorm           []float32
	probsBias            []float32         // exp_probs_b.bias [Experts] (nil: none)
	gate, up, down       []*kernels.Weight // per expert: [FFN][Dim], [FFN][Dim], [Dim][FFN]
	shGate, shUp         *kernels.Weight   // ffn_{gate,up}_shexp [Shared·FFN][Dim] (nil: no shared expert)
	shDown               *kernels.Weight   // ffn_down_shexp [Dim][Shared·FFN]
}

// moe loads layer p's experts.
func (ld *loader) moe(p string, c Config) *moeLayer {
	e := c.MoE
	l := &moeLayer{}
	l.router = ld.matrix(p+"ffn_gate_inp.weight", e.Experts, c.Dim)
	if _, ok := ld.f.Tensor(p + "exp_probs_b.bias"); ok || c.Kimi() {
		l.probsBias = ld.vector(p+"exp_probs_b.bias", e.Experts)
	}
	E := e.width(c.Dim)
	if e.Latent > 0 {
		l.routedDown = ld.matrix(p+"ffn_routed_down.weight", E, c.Dim)
		l.routedUp = ld.matrix(p+"ffn_routed_up.weight", c.Dim, E)
		if _, ok := ld.f.Tensor(p + "ffn_routed_norm.weight"); ok {
			l.routedNorm = ld.vector(p+"ffn_routed_norm.weight", E)
		}
	}
	l.gate = ld.perHead(p+"ffn_gate_exps.weight", E, e.FFN, e.Experts)
	l.up = ld.perHead(p+"ffn_up_exps.weight", E, e.FFN, e.Experts)
	l.down = ld.perHead(p+"ffn_down_exps.weight", e.FFN, E, e.Experts)
	if e.Shared > 0 {
		sh := e.FFN * e.Shared
		l.shGate = ld.matrix(p+"ffn_gate_shexp.weight", sh, c.Dim)
		l.shUp = ld.matrix(p+"ffn_up_shexp.weight", sh, c.Dim)
		l.shDown = ld.matrix(p+"ffn_down_shexp.weight", c.Dim, sh)
	}
	return l
}

// route picks token i's experts from its router logits: sel (ranked, best first) and their
// weights.
func (c Config) route(logits, bias []float32, sel []int, w []float32) {
	e := c.MoE
	probs := logits // overwritten in place
	switch e.Gating {
	case GatingSoftmax:
		kernels.Softmax(probs)
	case GatingSigmoid:
		for i, v := range probs {
			probs[i] = sigmoid(v)
		}
	case GatingSqrtSoftplus:
		for i, v := range probs {
			probs[i] = float32(math.Sqrt(float64(softplus(v))))
		}
	}
	score := func(x int) float32 {
		if bias != nil {
			return probs[x] + bias[x]
		}
		return probs[x]
	}
	// Top-k by score, ties to the lower index.
	for k := range sel {
		best := -1
		for x := range probs {
			taken := false
			for _, s := range sel[:k] {
				taken = taken || s == x
			}
			if taken {
				continue
			}
			if best < 0 || score(x) > score(best) {
				best = x
			}
		}
		sel[k] = best
		w[k] = probs[best]
	}
	if e.Gating == GatingSoftmaxWeight {
		kernels.Softmax(w)
	}
	if e.NormWeights {
		var sum float64
		for _, v := range w {
			sum += float64(v)
		}
		s := max(float32(sum), 6.103515625e-5)
		for k := range w {
			w[k] /= s
		}
	}
	if e.WeightsScale != 0 && e.WeightsScale != 1 {
		for k := range w {
			w[k] *= e.WeightsScale
		}
	}
}

// moeForward runs layer li's mixture of experts on the residual stream: norm, experts,
// shared experts, add.
func (m *Model) moeForward(li int, M int) {
	c := &m.cfg
	l := &m.layers[li]
	x := l.moe
	sc := &m.scratch
	e := c.MoE
	D, F, U := c.Dim, e.FFN, e.Used
	E := e.width(D) // the routed experts' width: D, or K3's latent
	m.initRowFns()
	m.initMoEFns()
	sc.li = li

	m.pool.For(M, m.fns.ffnNorm)
	sc.router = grow(sc.router, M*e.Experts)
	kernels.MatMul(m.pool, sc.router, sc.h, M, x.router)
	// The routed experts' input: the normed rows, or (K3) their latent projection.
	src := sc.h
	if x.routedDown != nil {
		sc.expLat = grow(sc.expLat, M*E)
		kernels.MatMul(m.pool, sc.expLat, sc.h, M, x.routedDown)
		src = sc.expLat
	}
	if cap(sc.sel) < M*U {
		sc.sel = make([]int, M*U)
	}
	sel := sc.sel[:M*U]
	sc.selW = grow(sc.selW, M*U)
	m.pool.For(M, m.moe.route)

	// Each expert over the tokens that chose it; outputs land at (token, rank).
	sc.expOut = grow(sc.expOut, M*U*E)
	sc.expIn = grow(sc.expIn, M*E)
	sc.gate = grow(sc.gate, M*max(F, F*e.Shared, c.FFN))
	sc.up = grow(sc.up, M*max(F, F*e.Shared, c.FFN))
	sc.expRes = grow(sc.expRes, M*max(D, E))
	if cap(sc.rows) < M {
		sc.rows = make([]int, 0, M)
	}
	for ex := 0; ex < e.Experts; ex++ {
		rows := sc.rows[:0]
		for j, s := range sel {
			if s == ex {
				rows = append(rows, j) // token j/U, rank j%U
			}
		}
		n := len(rows)
		if n == 0 {
			continue
		}
		for k, j := range rows {
			copy(sc.expIn[k*E:(k+1)*E], src[(j/U)*E:(j/U+1)*E])
		}
		sc.gateDst = [2][]float32{sc.gate[:n*F], sc.up[:n*F]}
		sc.gateW = [2]*kernels.Weight{x.gate[ex], x.up[ex]}
		kernels.MatMuls(m.pool, sc.expIn[:n*E], n, sc.gateDst[:], sc.gateW[:])
		sc.n = F // the SwiGLU rows' width
		m.pool.For(n, m.moe.swiglu)
		kernels.MatMul(m.pool, sc.expRes[:n*E], sc.gate[:n*F], n, x.down[ex])
		for k, j := range rows {
			copy(sc.expOut[j*E:(j+1)*E], sc.expRes[k*E:(k+1)*E])
		}
		sc.rows = rows
	}

	// Shared experts on every token, into sc.expRes.
	if x.shGate != nil {
		sf := F * e.Shared
		sc.gateDst = [2][]float32{sc.gate[:M*sf], sc.up[:M*sf]}
		sc.gateW = [2]*kernels.Weight{x.shGate, x.shUp}
		kernels.MatMuls(m.pool, sc.h, M, sc.gateDst[:], sc.gateW[:])
		sc.n = sf
		m.pool.For(M, m.moe.swiglu)
		kernels.MatMul(m.pool, sc.expRes[:M*D], sc.gate[:M*sf], M, x.shDown)
	}

	// out = Σ_k w_k·expert_k (rank order) + shared; x += out. K3's latent experts: the sum
	// is normed and projected back to Dim before the shared experts are added.
	if x.routedDown == nil {
		m.pool.For(M, m.moe.combine)
		return
	}
	m.pool.For(M, m.moe.combineLatent)
	kernels.MatMul(m.pool, sc.h, sc.expLat[:M*E], M, x.routedUp)
	m.pool.For(M, m.moe.shared)
}

// moeFns are moeForward's per-row steps, bound to the model once (initMoEFns) like rowFns.
// They read the layer from scratch.li and swiglu its rows' width from scratch.n.
type moeFns struct {
	route, swiglu, combine, combineLatent, shared func(lo, hi int)
}

func (m *Model) initMoEFns() {
	if m.moe.route != nil {
		return
	}
	c, sc := &m.cfg, &m.scratch
	m.moe.route = func(lo, hi int) {
		x := m.layers[sc.li].moe
		e := c.MoE
		U := e.Used
		sel := sc.sel
		for i := lo; i < hi; i++ {
			c.route(sc.router[i*e.Experts:(i+1)*e.Experts], x.probsBias, sel[i*U:(i+1)*U], sc.selW[i*U:(i+1)*U])
		}
	}
	m.moe.swiglu = func(lo, hi int) {
		F := sc.n
		for k := lo; k < hi; k++ {
			g, u := sc.gate[k*F:(k+1)*F], sc.up[k*F:(k+1)*F]
			if c.Arch == ArchKimiK3 {
				situ(g, g, u, c.K3.SituBeta, c.K3.SituLinearBeta) // K3's expert activation
				continue
			}
			kernels.SwiGLU(g, g, u)
		}
	}
	m.moe.combine = func(lo, hi int) {
		x := m.layers[sc.li].moe
		D, U := c.Dim, c.MoE.Used
		for i := lo; i < hi; i++ {
			acc := sc.h[i*D : (i+1)*D]
			for k := 0; k < U; k++ {
				w := sc.selW[i*U+k]
				out := sc.expOut[(i*U+k)*D : (i*U+k+1)*D]
				if k == 0 {
					for d := range acc {
						acc[d] = out[d] * w
					}
					continue
				}
				for d := range acc {
					acc[d] += out[d] * w
				}
			}
			if x.shGate != nil {
				kernels.Add(acc, sc.expRes[i*D:(i+1)*D])
			}
			if !m.outOnly {
				kernels.Add(sc.x[i*D:(i+1)*D], acc)
			}
		}
	}
	// combineLatent sums the latent experts into sc.expLat (their input, no longer needed) and
	// norms the sum (ffn_routed_norm).
	m.moe.combineLatent = func(lo, hi int) {
		x := m.layers[sc.li].moe
		E, U := c.MoE.width(c.Dim), c.MoE.Used
		for i := lo; i < hi; i++ {
			acc := sc.expLat[i*E : (i+1)*E]
			for k := 0; k < U; k++ {
				w := sc.selW[i*U+k]
				out := sc.expOut[(i*U+k)*E : (i*U+k+1)*E]
				if k == 0 {
					for d := range acc {
						acc[d] = out[d] * w
					}
					continue
				}
				for d := range acc {
					acc[d] += out[d] * w
				}
			}
			if x.routedNorm != nil {
				kernels.RMSNorm(acc, acc, x.routedNorm, c.NormEps)
			}
		}
	}
	// shared adds the shared experts' rows to the projected sum in sc.h, and sc.h to the
	// stream unless outOnly.
	m.moe.shared = func(lo, hi int) {
		x := m.layers[sc.li].moe
		D := c.Dim
		for i := lo; i < hi; i++ {
			acc := sc.h[i*D : (i+1)*D]
			if x.shGate != nil {
				kernels.Add(acc, sc.expRes[i*D:(i+1)*D])
			}
			if !m.outOnly {
				kernels.Add(sc.x[i*D:(i+1)*D], acc)
			}
		}
	}
}

// width is the routed experts' width: Latent when set, else dim.
func (e MoEConfig) width(dim int) int {
	if e.Latent > 0 {
		return e.Latent
	}
	return dim
}

// moeString describes the MoE shape for model info.
func (e MoEConfig) String() string {
	if e.Experts == 0 {
		return "none"
	}
	return fmt.Sprintf("%d experts, %d per token, %d shared, ffn %d, %d dense lead, gating %s, scale %g", e.Experts, e.Used, e.Shared, e.FFN, e.DenseLead, GatingName(e.Gating), e.WeightsScale)
}

// perHead loads a 3-D tensor {cols, rows, heads} as one [rows][cols] weight per head.
func (ld *loader) perHead(name string, cols, rows, heads int) []*kernels.Weight {
	ti, data := ld.tensor(name, cols, rows, heads)
	if ld.err != nil {
		return nil
	}
	if !ld.runnable(name, ti, cols) {
		return nil
	}
	rb := ti.Type.RowBytes(cols)
	out := make([]*kernels.Weight, heads)
	for h := range out {
		out[h] = &kernels.Weight{Type: ti.Type, Rows: rows, Cols: cols, Data: data[h*rows*rb : (h+1)*rows*rb]}
	}
	return out
}

// runnable verifies that a tensor's type is one the matmul kernels run, on rows of cols.
func (ld *loader) runnable(name string, ti gguf.TensorInfo, cols int) bool {
	switch ti.Type {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K:
	default:
		ld.err = fmt.Errorf("%w: tensor %s has type %s", ErrUnsupported, name, ti.Type)
		return false
	}
	if cols%ti.Type.BlockSize() != 0 {
		ld.err = fmt.Errorf("%w: tensor %s row length %d is not a multiple of %s's block %d", ErrUnsupported, name, cols, ti.Type, ti.Type.BlockSize())
		return false
	}
	return true
}
