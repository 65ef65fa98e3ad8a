package model

import (
	"fmt"
	"math"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
)

// Kimi-Linear (arch kimi-linear) interleaves two kinds of token mixers, each followed by a
// dense SwiGLU FFN (the first leading_dense_block_count layers) or a mixture of experts
// (moe.go):
//
//   - KDA (Kimi Delta Attention), a recurrent layer: q, k and v each come from their own
//     projection and causal depthwise conv (ConvKernel taps) with SiLU; q and k are L2-normed
//     per head; the state matrix S of each head (head dim × head dim) decays per key channel
//     by exp(g), with g = softplus(f_b(f_a(x)) + dt_bias) · A (A = −exp(A_log) < 0, per head),
//     takes the delta rule's update with strength β = sigmoid(x·b), and is read by q:
//
//     S ← diag(exp(g))·S;  d = β·(v − Sᵀk);  S ← S + k dᵀ;  o = Sᵀq / √headdim
//
//     o is RMS-normed per head (ssm_norm) and multiplied by sigmoid(g_b(g_a(x))) before
//     attn_output.
//   - MLA (multi-head latent attention, mla.go), whose cache is one latent row per token.
//     Kimi's MLA has no RoPE: the "rope" part of q and k is used unrotated.
//
// The arithmetic follows llama.cpp's graph (src/models/kimi-linear.cpp) and ggml's CPU kernels
// (ssm_conv, l2_norm, gated_delta_net with a per-channel gate), per token, so it does not
// depend on how a prompt is chunked. The state layout is qwen35's (State): the conv window
// over the q, k and v channels side by side, then the per-head S matrices.

// parseKimi reads a kimi-linear file's hyper-parameters as llama.cpp's
// llama_model_kimi_linear::load_arch_hparams (and the generic keys before it) does. c holds
// the generic sizes already.
func parseKimi(f *gguf.File, c Config) (Config, error) {
	a := c.Arch
	var err error
	req := func(key string, lo, hi uint64) int {
		v, ok := f.Uint(a + "." + key)
		if (!ok || v < lo || v > hi) && err == nil {
			err = fmt.Errorf("%w: %s.%s missing or outside [%d, %d]", ErrUnsupported, a, key, lo, hi)
		}
		return int(v)
	}
	opt := func(key string, def, lo, hi uint64) int {
		v, ok := f.Uint(a + "." + key)
		if !ok {
			return int(def)
		}
		if (v < lo || v > hi) && err == nil {
			err = fmt.Errorf("%w: %s.%s = %d outside [%d, %d]", ErrUnsupported, a, key, v, lo, hi)
		}
		return int(v)
	}
	if c.Heads <= 0 || c.Dim <= 0 || c.Layers <= 0 || c.Layers > 1<<12 || c.FFN <= 0 {
		return Config{}, fmt.Errorf("%w: heads %d, dim %d, layers %d, ffn %d", ErrUnsupported, c.Heads, c.Dim, c.Layers, c.FFN)
	}
	m := MLAConfig{
		KVLoraRank: req("attention.kv_lora_rank", 1, 1<<16),
		KHeadDim:   req("attention.key_length_mla", 1, 1<<16),
		VHeadDim:   req("attention.value_length_mla", 1, 1<<16),
	}
	m.RopeDims = opt("rope.dimension_count", uint64(opt("attention.key_length", uint64(c.Dim/c.Heads), 0, 1<<16)), 0, 1<<16)
	hd := req("kda.head_dim", 1, 1<<12)
	conv := req("ssm.conv_kernel", 2, 64)
	moe := MoEConfig{
		Experts:   opt("expert_count", 0, 0, 1<<12),
		Used:      opt("expert_used_count", 0, 0, 1<<12),
		Shared:    opt("expert_shared_count", 0, 0, 64),
		DenseLead: opt("leading_dense_block_count", 0, 0, 1<<12),
		Gating:    req("expert_gating_func", 1, 4),
	}
	if err != nil {
		return Config{}, err
	}
	if m.RopeDims >= m.KHeadDim {
		return Config{}, fmt.Errorf("%w: %s rope.dimension_count %d is not below key_length_mla %d", ErrUnsupported, a, m.RopeDims, m.KHeadDim)
	}
	if moe.Experts > 0 {
		if ffs, ok := f.Ints(a + ".expert_feed_forward_length"); ok {
			for i, v := range ffs {
				if v <= 0 || v > 1<<20 || (i > 0 && v != ffs[0]) {
					return Config{}, fmt.Errorf("%w: %s.expert_feed_forward_length %v (one positive size for every layer)", ErrUnsupported, a, ffs)
				}
			}
			if len(ffs) == 0 {
				return Config{}, fmt.Errorf("%w: %s.expert_feed_forward_length is empty", ErrUnsupported, a)
			}
			moe.FFN = int(ffs[0])
		} else {
			moe.FFN = req("expert_feed_forward_length", 1, 1<<20)
		}
		if groups := opt("expert_group_count", 0, 0, 1<<12); groups > 1 {
			return Config{}, fmt.Errorf("%w: %s.expert_group_count %d (grouped expert selection)", ErrUnsupported, a, groups)
		}
		if err != nil {
			return Config{}, err
		}
		if moe.Used <= 0 || moe.Used > moe.Experts {
			return Config{}, fmt.Errorf("%w: %s.expert_used_count %d with %d experts", ErrUnsupported, a, moe.Used, moe.Experts)
		}
		if v, ok := f.Float(a + ".expert_weights_scale"); ok {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e6 {
				return Config{}, fmt.Errorf("%w: %s.expert_weights_scale %v", ErrUnsupported, a, v)
			}
			moe.WeightsScale = float32(v)
		}
		moe.NormWeights = true // llama.cpp's kimi-linear graph passes norm_w = true
	} else if moe.DenseLead < c.Layers {
		return Config{}, fmt.Errorf("%w: %s has no experts but only %d of %d layers dense", ErrUnsupported, a, moe.DenseLead, c.Layers)
	}
	c.MLA, c.MoE = m, moe
	c.SSM = SSMConfig{ConvKernel: conv, StateSize: hd, KHeads: c.Heads, VHeads: c.Heads}
	if c.Arch == ArchKimiK3 {
		if err := parseK3(f, &c); err != nil {
			return Config{}, err
		}
	}

	// head_count_kv per layer: 0 marks a KDA (recurrent) layer, 1 an MLA layer (its latent is
	// one MQA-like K row).
	kv, ok := f.Ints(a + ".attention.head_count_kv")
	if !ok {
		v, ok := f.Uint(a + ".attention.head_count_kv")
		if !ok {
			return Config{}, fmt.Errorf("%w: %s.attention.head_count_kv missing (per layer: 0 for KDA, 1 for MLA)", ErrUnsupported, a)
		}
		kv = make([]int64, c.Layers)
		for i := range kv {
			kv[i] = int64(v)
		}
	}
	if len(kv) < c.Layers {
		return Config{}, fmt.Errorf("%w: %s.attention.head_count_kv has %d entries for %d layers", ErrUnsupported, a, len(kv), c.Layers)
	}
	c.Kinds = make([]LayerKind, c.Layers)
	for l := range c.Kinds {
		switch kv[l] {
		case 0:
			c.Kinds[l] = LayerKDA
		case 1:
			c.Kinds[l] = LayerMLA
		default:
			return Config{}, fmt.Errorf("%w: %s.attention.head_count_kv[%d] = %d (MLA layers cache one latent head)", ErrUnsupported, a, l, kv[l])
		}
	}
	if uint64(c.Heads)*uint64(hd)*uint64(hd)*uint64(c.Layers) > 1<<28 {
		return Config{}, fmt.Errorf("%w: %s recurrent state of %d layers × %d heads × %d² floats per sequence is absurd", ErrUnsupported, a, c.Layers, c.Heads, hd)
	}
	if uint64(c.Heads)*uint64(m.KHeadDim+m.VHeadDim+m.LatentDim()) > 1<<24 {
		return Config{}, fmt.Errorf("%w: %s MLA of %d heads × %d dims is absurd", ErrUnsupported, a, c.Heads, m.KHeadDim)
	}
	// The paged blocks see MLA's latent as one K/V head of LatentDim.
	c.KVHeads, c.HeadDim = 1, m.LatentDim()
	c.ContextLength = max(c.ContextLength, 1)
	c.NormEps = 1e-5
	if v, ok := f.Float(a + ".attention.layer_norm_rms_epsilon"); ok {
		c.NormEps = float32(v)
	}
	if err := parseVocab(f, &c); err != nil {
		return Config{}, err
	}
	if c.Tied {
		return Config{}, fmt.Errorf("%w: %s needs output.weight", ErrUnsupported, a)
	}
	return c, nil
}

// kdaLayer holds a KDA layer's weights.
type kdaLayer struct {
	wq, wk, wv *kernels.Weight // attn_q/k/v [Heads·hd][Dim]
	fa, fb     *kernels.Weight // ssm_f_a [hd][Dim], ssm_f_b [Heads·hd][hd]
	ga, gb     *kernels.Weight // ssm_g_a, ssm_g_b (same shapes); nil in K3
	g          *kernels.Weight // K3's full-rank ssm_g [Heads·hd][Dim]; nil in kimi-linear
	wbeta      *kernels.Weight // ssm_beta [Heads][Dim]
	out        *kernels.Weight // attn_output [Dim][Heads·hd]
	conv       []float32       // q, k then v conv taps, tap-major: [ConvKernel][3·Heads·hd]
	dtBias, a  []float32       // ssm_dt.bias [Heads·hd], ssm_a [Heads]
	norm       []float32       // ssm_norm [hd]
	index      int             // rank among the recurrent layers (its slot in State)
}

// loadKimi loads a kimi-linear file's layers (tensor names of llama.cpp's loader).
func (m *Model) loadKimi(ld *loader) {
	c := m.cfg
	hd := c.SSM.StateSize
	inner := c.Heads * hd
	K := c.SSM.ConvKernel
	nRec := 0
	k3 := c.Arch == ArchKimiK3
	m.outOnly = k3
	if k3 && c.K3.ResBlock > 0 {
		m.outputRes = ld.vector("output_res_score.weight", c.Dim)
	}
	for i := range m.layers {
		p := fmt.Sprintf("blk.%d.", i)
		l := &m.layers[i]
		l.attnNorm = ld.vector(p+"attn_norm.weight", c.Dim)
		l.ffnNorm = ld.vector(p+"ffn_norm.weight", c.Dim)
		if k3 && c.K3.ResBlock > 0 {
			l.attnRes = ld.vector(p+"attn_res_score.weight", c.Dim)
			l.ffnRes = ld.vector(p+"ffn_res_score.weight", c.Dim)
		}
		if c.Kind(i) == LayerKDA {
			d := &kdaLayer{index: nRec}
			nRec++
			d.wq = ld.matrix(p+"attn_q.weight", inner, c.Dim)
			d.wk = ld.matrix(p+"attn_k.weight", inner, c.Dim)
			d.wv = ld.matrix(p+"attn_v.weight", inner, c.Dim)
			d.conv = make([]float32, 0, 3*inner*K)
			for _, n := range []string{"ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v"} {
				d.conv = append(d.conv, ld.convTaps(p+n+".weight", K, inner)...)
			}
			if len(d.conv) == 3*inner*K { // else the loader has an error to report
				d.conv = kernels.TransposeTaps(d.conv, 3*inner, K) // tap-major, as kernels.ConvSiLU takes it
			}
			d.fa = ld.matrix(p+"ssm_f_a.weight", hd, c.Dim)
			d.fb = ld.matrix(p+"ssm_f_b.weight", inner, hd)
			d.wbeta = ld.matrix(p+"ssm_beta.weight", c.Heads, c.Dim)
			d.dtBias = ld.vector(p+"ssm_dt.bias", inner)
			if k3 {
				d.a = ld.anyShape(p+"ssm_a", c.Heads, []int{c.Heads}) // K3's A is 1-D
				d.g = ld.matrix(p+"ssm_g.weight", inner, c.Dim)
			} else {
				d.a = ld.anyShape(p+"ssm_a", c.Heads, []int{1, c.Heads, 1, 1}, []int{1, c.Heads})
				d.ga = ld.matrix(p+"ssm_g_a.weight", hd, c.Dim)
				d.gb = ld.matrix(p+"ssm_g_b.weight", inner, hd)
			}
			d.norm = ld.vector(p+"ssm_norm.weight", hd)
			d.out = ld.matrix(p+"attn_output.weight", c.Dim, inner)
			l.kda = d
		} else {
			ml := c.MLA
			a := &mlaLayer{}
			a.slot, a.half = c.mlaSlot(i)
			if _, ok := ld.f.Tensor(p + "attn_q_a.weight"); ok && ld.err == nil && !k3 {
				ld.err = fmt.Errorf("%w: tensor %sattn_q_a.weight: compressed queries (q_lora_rank) are not supported for %s", ErrUnsupported, p, c.Arch)
			}
			if _, ok := ld.f.Tensor(p + "attn_kv_b.weight"); ok && ld.err == nil {
				if _, split := ld.f.Tensor(p + "attn_k_b.weight"); !split {
					ld.err = fmt.Errorf("%w: tensor %sattn_kv_b.weight: an unsplit kv_b (MLA cache disabled) is not supported; convert with attn_k_b/attn_v_b", ErrUnsupported, p)
				}
			}
			if k3 && c.K3.QLoraRank > 0 {
				r := c.K3.QLoraRank
				a.wqa = ld.matrix(p+"attn_q_a.weight", r, c.Dim)
				a.qaNorm = ld.vector(p+"attn_q_a_norm.weight", r)
				a.wqb = ld.matrix(p+"attn_q_b.weight", c.Heads*ml.KHeadDim, r)
			} else {
				a.wq = ld.matrix(p+"attn_q.weight", c.Heads*ml.KHeadDim, c.Dim)
			}
			if _, ok := ld.f.Tensor(p + "attn_gate.weight"); ok && k3 {
				a.gate = ld.matrix(p+"attn_gate.weight", c.Heads*ml.VHeadDim, c.Dim)
			}
			a.wkva = ld.matrix(p+"attn_kv_a_mqa.weight", ml.LatentDim(), c.Dim)
			a.kvNorm = ld.vector(p+"attn_kv_a_norm.weight", ml.KVLoraRank)
			a.kb = ld.perHead(p+"attn_k_b.weight", ml.NopeDim(), ml.KVLoraRank, c.Heads)
			a.vb = ld.perHead(p+"attn_v_b.weight", ml.KVLoraRank, ml.VHeadDim, c.Heads)
			a.wo = ld.matrix(p+"attn_output.weight", c.Dim, c.Heads*ml.VHeadDim)
			l.mla = a
		}
		if c.MoELayer(i) {
			l.moe = ld.moe(p, c)
		} else {
			l.gate = ld.matrix(p+"ffn_gate.weight", c.FFN, c.Dim)
			l.up = ld.matrix(p+"ffn_up.weight", c.FFN, c.Dim)
			l.down = ld.matrix(p+"ffn_down.weight", c.Dim, c.FFN)
		}
	}
}

// convTaps loads a KDA conv kernel stored as {K, 1, n, 1} or {K, 1, n} (f32, f16 or bf16).
func (ld *loader) convTaps(name string, K, n int) []float32 {
	return ld.anyShape(name, K*n, []int{K, 1, n, 1}, []int{K, 1, n})
}

// anyShape loads a float tensor of n elements whose dims are one of shapes.
func (ld *loader) anyShape(name string, n int, shapes ...[]int) []float32 {
	if ld.err != nil {
		return nil
	}
	ti, ok := ld.f.Tensor(name)
	if !ok {
		ld.err = fmt.Errorf("%w: tensor %s missing", ErrUnsupported, name)
		return nil
	}
	for _, s := range shapes {
		if len(ti.Dims) != len(s) {
			continue
		}
		match := true
		for i := range s {
			match = match && ti.Dims[i] == uint64(s[i])
		}
		if !match {
			continue
		}
		_, data := ld.tensor(name, s...)
		if ld.err != nil {
			return nil
		}
		out := make([]float32, n)
		if err := dequantizeRow(ti.Type, data, out); err != nil {
			ld.err = fmt.Errorf("tensor %s: %w", name, err)
		}
		return out
	}
	ld.err = fmt.Errorf("%w: tensor %s has shape %v, want one of %v", ErrUnsupported, name, ti.Dims, shapes)
	return nil
}

// kimiScratch sizes the buffers the kimi-linear layers use for a step of M tokens.
func (m *Model) kimiScratch(seqs []Sequence, M int) {
	c := m.cfg
	sc := &m.scratch
	hd := c.SSM.StateSize
	inner := c.Heads * hd
	cd := c.SSM.ConvDim()
	ml := c.MLA
	sc.q = grow(sc.q, M*max(inner, c.Heads*ml.KHeadDim))
	sc.k = grow(sc.k, M*max(inner, ml.LatentDim()))
	sc.v = grow(sc.v, M*inner)
	sc.qkv = grow(sc.qkv, M*cd)
	sc.conv = grow(sc.conv, M*cd)
	sc.z = grow(sc.z, M*inner)         // g2, the output gate
	sc.alpha = grow(sc.alpha, M*inner) // g1, then the per-channel decay exp(g1)
	sc.beta = grow(sc.beta, M*c.Heads)
	sc.core = grow(sc.core, M*max(inner, c.Heads*ml.VHeadDim))
	sc.lowRank = grow(sc.lowRank, M*hd)
	sc.lowRank2 = grow(sc.lowRank2, M*hd)
	maxN := 0
	for _, q := range seqs {
		maxN = max(maxN, len(q.Tokens))
	}
	sc.window = grow(sc.window, (c.SSM.ConvKernel-1+maxN)*cd)
	sc.stT = grow(sc.stT, c.Heads*hd*hd)
}

// kdaForward is a KDA layer's token mixer; it advances each sequence's state for this layer
// and adds its output to the residual stream.
func (m *Model) kdaForward(li int, seqs []Sequence, M int) {
	c := &m.cfg
	l := &m.layers[li]
	d := l.kda
	sc := &m.scratch
	S, K, H := c.SSM.StateSize, c.SSM.ConvKernel, c.Heads
	inner := H * S
	cd := 3 * inner
	m.initRowFns()
	m.initKDAFns()
	sc.li = li

	m.pool.For(M, m.fns.attnNorm)
	sc.kdaDst = [6][]float32{sc.q[:M*inner], sc.k[:M*inner], sc.v[:M*inner], sc.lowRank, sc.lowRank2, sc.beta}
	sc.kdaW = [6]*kernels.Weight{d.wq, d.wk, d.wv, d.fa, d.ga, d.wbeta}
	if d.g != nil {
		sc.kdaDst[4], sc.kdaW[4] = sc.z[:M*inner], d.g // K3: the output gate in one matrix
	}
	kernels.MatMuls(m.pool, sc.h, M, sc.kdaDst[:], sc.kdaW[:])
	kernels.MatMul(m.pool, sc.alpha, sc.lowRank, M, d.fb)
	if d.g == nil {
		kernels.MatMul(m.pool, sc.z, sc.lowRank2, M, d.gb)
	}
	m.pool.For(M, m.kda.prep)

	r0 := 0
	for si := range seqs {
		q := &seqs[si]
		n := len(q.Tokens)
		base := r0
		convState := q.State.conv[d.index]
		win := sc.window[:(K-1+n)*cd]
		copy(win, convState)
		copy(win[(K-1)*cd:], sc.qkv[base*cd:(base+n)*cd])
		sc.cur, sc.base, sc.n, sc.win = q, base, n, win
		m.pool.For(n, m.kda.conv)
		for _, cp := range q.Checkpoints {
			r := cp.Pos - q.Pos
			copy(cp.conv[d.index], win[r*cd:(r+K-1)*cd])
		}
		copy(convState, win[n*cd:(n+K-1)*cd])

		sc.state = q.State.delta[d.index]
		m.pool.For(H, m.kda.heads)
		r0 += n
	}
	sc.cur, sc.state = nil, nil // drop references to the caller's sequence and state

	// Per head: rms_norm(o)·ssm_norm · sigmoid(g2).
	m.pool.For(M, m.kda.gatedNorm)
	kernels.MatMul(m.pool, sc.h, sc.core[:M*inner], M, d.out)
	m.addResidual(M)
}

// kdaFns are kdaForward's per-row steps, bound to the model once (initKDAFns) like rowFns
// and q35Fns, reading the same scratch fields (li, cur, base, n, win, state).
type kdaFns struct {
	prep, conv, heads, gatedNorm func(lo, hi int)
}

func (m *Model) initKDAFns() {
	if m.kda.prep != nil {
		return
	}
	c, sc := &m.cfg, &m.scratch
	dims := func() (S, K, H, inner, cd int) {
		S, K, H = c.SSM.StateSize, c.SSM.ConvKernel, c.Heads
		return S, K, H, H * S, 3 * H * S
	}
	m.kda.prep = func(lo, hi int) {
		d := m.layers[sc.li].kda
		S, _, H, inner, cd := dims()
		for i := lo; i < hi; i++ {
			row := sc.qkv[i*cd : (i+1)*cd]
			copy(row, sc.q[i*inner:(i+1)*inner])
			copy(row[inner:], sc.k[i*inner:(i+1)*inner])
			copy(row[2*inner:], sc.v[i*inner:(i+1)*inner])
			g := sc.alpha[i*inner : (i+1)*inner]
			if lb := c.K3.GateLowerBound; lb < 0 {
				// K3's bounded gate: lb·sigmoid(−A·(x + dt_bias)), A = −exp(A_log) < 0.
				for j := range g {
					g[j] = -((g[j] + d.dtBias[j]) * d.a[j/S])
				}
				kernels.Sigmoid(g)
				for j := range g {
					g[j] *= lb
				}
			} else {
				for j := range g {
					g[j] += d.dtBias[j]
				}
				kernels.Softplus(g)
				for j := range g {
					g[j] *= d.a[j/S]
				}
			}
			kernels.Exp(g) // the decay itself, exp(g): what heads reads
			kernels.Sigmoid(sc.beta[i*H : (i+1)*H])
		}
	}
	m.kda.conv = func(lo, hi int) {
		d := m.layers[sc.li].kda
		S, K, H, inner, cd := dims()
		base, win := sc.base, sc.win
		kernels.ConvSiLU(sc.conv[(base+lo)*cd:(base+hi)*cd], win[lo*cd:(hi+K-1)*cd], d.conv, cd, K, hi-lo)
		for t := lo; t < hi; t++ {
			out := sc.conv[(base+t)*cd : (base+t+1)*cd]
			for h := 0; h < H; h++ {
				l2Norm(out[h*S:(h+1)*S], c.NormEps)             // q
				l2Norm(out[inner+h*S:inner+(h+1)*S], c.NormEps) // k
			}
		}
	}
	m.kda.heads = func(lo, hi int) {
		d := m.layers[sc.li].kda
		S, _, H, inner, cd := dims()
		q, base, n, state := sc.cur, sc.base, sc.n, sc.state
		scale := 1 / float32(math.Sqrt(float64(S)))
		var dl [256]float32
		delta := dl[:0]
		if S <= len(dl) {
			delta = dl[:S]
		} else {
			delta = make([]float32, S)
		}
		for h := lo; h < hi; h++ {
			st := state[h*S*S : (h+1)*S*S]
			stT := sc.stT[h*S*S : (h+1)*S*S] // the run steps it transposed (kernels.DeltaStepT)
			kernels.TransposeSquare(stT, st, S)
			for t := 0; t < n; t++ {
				row := sc.conv[(base+t)*cd : (base+t+1)*cd]
				qv := row[h*S : (h+1)*S]
				kv := row[inner+h*S : inner+(h+1)*S]
				vv := row[2*inner+h*S : 2*inner+(h+1)*S]
				decay := sc.alpha[(base+t)*inner+h*S : (base+t)*inner+(h+1)*S] // exp(g), from prep
				beta := sc.beta[(base+t)*H+h]
				o := sc.core[(base+t)*inner+h*S : (base+t)*inner+(h+1)*S]
				kernels.DeltaStepT(stT, qv, kv, vv, decay, delta, o, beta, scale)
				for _, cp := range q.Checkpoints {
					if cp.Pos == q.Pos+t+1 {
						kernels.TransposeSquare(cp.delta[d.index][h*S*S:(h+1)*S*S], stT, S)
					}
				}
			}
			kernels.TransposeSquare(st, stT, S)
		}
	}
	m.kda.gatedNorm = func(lo, hi int) {
		d := m.layers[sc.li].kda
		S, _, H, inner, _ := dims()
		for i := lo; i < hi; i++ {
			kernels.Sigmoid(sc.z[i*inner : (i+1)*inner]) // the gate, read only here
			for h := 0; h < H; h++ {
				o := sc.core[i*inner+h*S : i*inner+(h+1)*S]
				g := sc.z[i*inner+h*S : i*inner+(h+1)*S]
				kernels.RMSNorm(o, o, d.norm, c.NormEps)
				for j := range o {
					o[j] *= g[j]
				}
			}
		}
	}
}
