package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
)

// Qwen3.5 (arch qwen35) interleaves two kinds of layers, each followed by the usual SwiGLU FFN
// (its pre-FFN norm is named post_attention_norm):
//
//   - Gated full attention: attn_q yields, per head, the query and an output gate; Q and K are
//     RMS-normed per head, rotated (interleaved M-RoPE, which over text is NeoX RoPE on the
//     first n_rot dims), attended over the paged K/V, and the result is multiplied by
//     sigmoid(gate) before attn_output.
//   - Gated DeltaNet: attn_qkv gives q, k and v, which go through a causal depthwise conv of
//     ConvKernel taps and SiLU; q and k are L2-normed per head; then, token by token and per
//     value head, the state matrix S (StateSize × StateSize) decays by exp(g), takes the delta
//     rule's update with strength beta, and is read by q:
//
//     S ← exp(g)·S;  d = β·(v − Sᵀk);  S ← S + k dᵀ;  o = Sᵀq / √StateSize
//
//     with β = sigmoid(x·ssm_beta), g = softplus(x·ssm_alpha + ssm_dt) · ssm_a (ssm_a < 0).
//     o is RMS-normed per head (ssm_norm), multiplied by silu(x·attn_gate), and projected by
//     ssm_out.
//
// The recurrent state of a sequence (the conv's last ConvKernel−1 inputs and S, per layer) lives
// in State, which the caller keeps beside the sequence's K/V blocks. The arithmetic follows
// ggml's CPU kernels (ssm_conv, l2_norm, gated_delta_net) in order, per token, so it does not
// depend on how a prompt is chunked.

// deltaLayer holds a Gated DeltaNet layer's weights.
type deltaLayer struct {
	wqkv, wz      *kernels.Weight // attn_qkv [ConvDim][Dim], attn_gate [ValueDim][Dim]
	wbeta, walpha *kernels.Weight // ssm_beta, ssm_alpha [VHeads][Dim]
	out           *kernels.Weight // ssm_out [Dim][ValueDim]
	conv          []float32       // ssm_conv1d, tap-major (kernels.ConvSiLU): [ConvKernel][ConvDim]
	dtBias, a     []float32       // ssm_dt.bias, ssm_a [VHeads]
	norm          []float32       // ssm_norm [StateSize]
	index         int             // rank among the Gated DeltaNet layers (its slot in State)
}

// State is one sequence's recurrent state in a hybrid model: for each Gated DeltaNet layer the
// conv's last ConvKernel−1 input rows (time-major, ConvDim wide) and the delta-rule matrices
// (per value head, row j over value dims holding S[·][j] over key dims). A new or Reset state
// is all zeros at position 0.
type State struct {
	// Pos is the number of tokens the state has consumed: the next Forward of its sequence
	// must start there.
	Pos   int
	conv  [][]float32
	delta [][]float32
}

// NewState returns a zero state for one sequence of this model (empty for models without
// Gated DeltaNet layers).
func (m *Model) NewState() *State {
	c := m.cfg
	s := &State{}
	for l := 0; l < c.DeltaLayers(); l++ {
		s.conv = append(s.conv, make([]float32, c.SSM.ConvStateFloats()))
		s.delta = append(s.delta, make([]float32, c.SSM.DeltaStateFloats()))
	}
	return s
}

// Reset returns the state to position 0.
func (s *State) Reset() {
	s.Pos = 0
	for _, v := range s.conv {
		clear(v)
	}
	for _, v := range s.delta {
		clear(v)
	}
}

// CopyFrom makes s a copy of src (same model).
func (s *State) CopyFrom(src *State) {
	s.Pos = src.Pos
	for i := range s.conv {
		copy(s.conv[i], src.conv[i])
		copy(s.delta[i], src.delta[i])
	}
}

// Bytes is the size of the state's f32 data (Config.StateBytes).
func (s *State) Bytes() int {
	n := 0
	for i := range s.conv {
		n += 4 * (len(s.conv[i]) + len(s.delta[i]))
	}
	return n
}

// StateFormat names the layout of a hybrid model's State bytes (AppendBinary): what a stored
// checkpoint must match to be restored. "" for models without recurrent layers.
func (c Config) StateFormat() string {
	if !c.Hybrid() {
		return ""
	}
	s := c.SSM
	if c.Kimi() {
		return fmt.Sprintf("kda1/f32/layers%d/conv%dx%d/heads%d/state%d", c.DeltaLayers(), s.ConvKernel-1, s.ConvDim(), s.VHeads, s.StateSize)
	}
	return fmt.Sprintf("gdn1/f32/layers%d/conv%dx%d/heads%d/state%d", c.DeltaLayers(), s.ConvKernel-1, s.ConvDim(), s.VHeads, s.StateSize)
}

const stateMagic = "SPST"

// AppendBinary appends the state's bytes: "SPST", the position (uint64), then every Gated
// DeltaNet layer's conv then delta floats, little-endian f32. The layout is Config.StateFormat;
// integrity (checksums) is the container's business.
func (s *State) AppendBinary(b []byte) ([]byte, error) {
	b = slices.Grow(b, len(stateMagic)+8+s.Bytes())
	b = append(b, stateMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.Pos))
	for i := range s.conv {
		b = appendF32s(b, s.conv[i])
		b = appendF32s(b, s.delta[i])
	}
	return b, nil
}

// appendF32s appends v's values, little-endian. REQUIRES: cap(b)-len(b) >= 4*len(v).
func appendF32s(b []byte, v []float32) []byte {
	n := len(b)
	b = b[:n+4*len(v)]
	out := b[n:]
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:4*i+4], math.Float32bits(x))
	}
	return b
}

// readF32s fills dst from src's little-endian values (4·len(dst) bytes) and reports whether
// all of them are finite. The 7,679 checkpoints of a 480K-token restore of small-kimi-k3 are
// 1.9 GiB to decode, so this is one pass with no branch on the values: each value's
// all-ones exponent (NaN or ±Inf) is turned into a bit, the bits ORed, and checked once.
func readF32s(dst []float32, src []byte) bool {
	src = src[:4*len(dst)]
	var bad uint32
	for i := range dst {
		u := binary.LittleEndian.Uint32(src[4*i : 4*i+4])
		// 1 when the exponent is all ones: (u & exp) + 1<<23 carries into bit 31 only then.
		bad |= ((u & 0x7f800000) + 0x00800000) >> 31
		dst[i] = math.Float32frombits(u)
	}
	return bad == 0
}

// DecodeState reads bytes written by AppendBinary for this model into a new State. Bytes of
// another length or without the header are refused; NaN or infinite values too. It reads
// only m's configuration, so several goroutines may decode at once.
func (m *Model) DecodeState(b []byte) (*State, error) {
	c := m.cfg
	want := len(stateMagic) + 8 + c.StateBytes()
	if !c.Hybrid() {
		return nil, fmt.Errorf("model: %s has no recurrent state", c.Arch)
	}
	if len(b) != want || string(b[:len(stateMagic)]) != stateMagic {
		return nil, fmt.Errorf("model: state of %d bytes, want %d for %s", len(b), want, c.StateFormat())
	}
	pos := binary.LittleEndian.Uint64(b[len(stateMagic):])
	if pos > uint64(c.ContextLength) {
		return nil, fmt.Errorf("model: state at position %d beyond the context length %d", pos, c.ContextLength)
	}
	s := m.NewState()
	s.Pos = int(pos)
	b = b[len(stateMagic)+8:]
	for i := range s.conv {
		for _, dst := range [2][]float32{s.conv[i], s.delta[i]} {
			if !readF32s(dst, b) {
				return nil, fmt.Errorf("model: state holds a non-finite value")
			}
			b = b[4*len(dst):]
		}
	}
	return s, nil
}

func (s *State) fits(c Config) bool {
	if len(s.conv) != c.DeltaLayers() || len(s.delta) != c.DeltaLayers() {
		return false
	}
	for i := range s.conv {
		if len(s.conv[i]) != c.SSM.ConvStateFloats() || len(s.delta[i]) != c.SSM.DeltaStateFloats() {
			return false
		}
	}
	return true
}

// loadHybrid loads a qwen35 file's layers (tensor names of llama.cpp's qwen35 loader).
func (m *Model) loadHybrid(ld *loader) {
	c := m.cfg
	s := c.SSM
	nDelta := 0
	for i := range m.layers {
		p := fmt.Sprintf("blk.%d.", i)
		l := &m.layers[i]
		l.attnNorm = ld.vector(p+"attn_norm.weight", c.Dim)
		l.ffnNorm = ld.vector(p+"post_attention_norm.weight", c.Dim)
		l.gate = ld.matrix(p+"ffn_gate.weight", c.FFN, c.Dim)
		l.up = ld.matrix(p+"ffn_up.weight", c.FFN, c.Dim)
		l.down = ld.matrix(p+"ffn_down.weight", c.Dim, c.FFN)
		if c.Kind(i) == LayerAttention {
			l.kvLayer = c.KVLayerIndex(i)
			l.wq = ld.matrix(p+"attn_q.weight", 2*c.QDim(), c.Dim)
			l.wk = ld.matrix(p+"attn_k.weight", c.KVDim(), c.Dim)
			l.wv = ld.matrix(p+"attn_v.weight", c.KVDim(), c.Dim)
			l.wo = ld.matrix(p+"attn_output.weight", c.Dim, c.QDim())
			l.qNorm = ld.vector(p+"attn_q_norm.weight", c.HeadDim)
			l.kNorm = ld.vector(p+"attn_k_norm.weight", c.HeadDim)
			continue
		}
		d := &deltaLayer{index: nDelta}
		nDelta++
		d.wqkv = ld.matrix(p+"attn_qkv.weight", s.ConvDim(), c.Dim)
		d.wz = ld.matrix(p+"attn_gate.weight", s.ValueDim(), c.Dim)
		d.wbeta = ld.matrix(p+"ssm_beta.weight", s.VHeads, c.Dim)
		d.walpha = ld.matrix(p+"ssm_alpha.weight", s.VHeads, c.Dim)
		d.out = ld.matrix(p+"ssm_out.weight", c.Dim, s.ValueDim())
		if d.conv = ld.vectorN(p+"ssm_conv1d.weight", s.ConvKernel, s.ConvDim()); len(d.conv) == s.ConvKernel*s.ConvDim() {
			d.conv = kernels.TransposeTaps(d.conv, s.ConvDim(), s.ConvKernel) // tap-major, as kernels.ConvSiLU takes it
		}
		d.dtBias = ld.vector(p+"ssm_dt.bias", s.VHeads)
		d.a = ld.vector(p+"ssm_a", s.VHeads)
		d.norm = ld.vector(p+"ssm_norm.weight", s.StateSize)
		l.delta = d
	}
}

// vectorN loads a 2-D f32 (or f16/bf16) tensor of dims {ne0, ne1} as one flat slice.
func (ld *loader) vectorN(name string, ne0, ne1 int) []float32 {
	ti, data := ld.tensor(name, ne0, ne1)
	if ld.err != nil {
		return nil
	}
	n := ne0 * ne1
	if ti.Type == gguf.TypeF32 {
		return f32View(data)
	}
	out := make([]float32, n)
	if err := dequantizeRow(ti.Type, data, out); err != nil {
		ld.err = fmt.Errorf("tensor %s: %w", name, err)
	}
	return out
}

// hybridScratch sizes the buffers the qwen35 layers use for a step of M tokens.
func (m *Model) hybridScratch(seqs []Sequence, M int) {
	c := m.cfg
	s := c.SSM
	sc := &m.scratch
	sc.qfull = grow(sc.qfull, M*2*c.QDim())
	sc.qgate = grow(sc.qgate, M*c.QDim())
	sc.qkv = grow(sc.qkv, M*s.ConvDim())
	sc.conv = grow(sc.conv, M*s.ConvDim())
	sc.z = grow(sc.z, M*s.ValueDim())
	sc.beta = grow(sc.beta, M*s.VHeads)
	sc.alpha = grow(sc.alpha, M*s.VHeads)
	sc.core = grow(sc.core, M*s.ValueDim())
	maxN := 0
	for _, q := range seqs {
		maxN = max(maxN, len(q.Tokens))
	}
	sc.window = grow(sc.window, (s.ConvKernel-1+maxN)*s.ConvDim())
	sc.stT = grow(sc.stT, s.VHeads*s.StateSize*s.StateSize)
}

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// softplus is ggml's: x above 20 passes through, else logf(1 + expf(x)).
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(float64(1 + float32(math.Exp(float64(x))))))
}

// l2Norm scales x to unit length as ggml_l2_norm: squares summed in float64, scale
// 1/max(sqrt(sum), eps).
func l2Norm(x []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	scale := 1 / max(float32(math.Sqrt(float64(float32(sum)))), eps)
	for i := range x {
		x[i] *= scale
	}
}

// fmaf is a fused multiply-add in f32: a·b is exact in f64, so the one f64 rounding of the
// sum is followed by the f32 rounding (equal to a single rounding but in rare ties).
func fmaf(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// The delta rule's step itself (shared by qwen35's Gated DeltaNet and kimi's KDA; they differ
// only in the decay: one per head or one per key channel) is kernels.DeltaStepT, on each
// head's state transposed for the run of tokens: llama.cpp's operations in llama.cpp's order
// (each sum a chain of fused multiply-adds, as ggml_vec_dot_f32 runs short vectors), sixteen
// rows at a time.

// gatedAttnForward is a qwen35 full-attention layer's token mixer; it adds its output to the
// residual stream.
func (m *Model) gatedAttnForward(li int, seqs []Sequence, M int) {
	c := &m.cfg
	l := &m.layers[li]
	sc := &m.scratch
	qd, hd := c.QDim(), c.HeadDim
	m.initRowFns()
	m.initQ35Fns()
	sc.li = li

	m.pool.For(M, m.fns.attnNorm)
	sc.qkvDst = [3][]float32{sc.qfull, sc.k, sc.v}
	sc.qkvW = [3]*kernels.Weight{l.wq, l.wk, l.wv}
	kernels.MatMuls(m.pool, sc.h, M, sc.qkvDst[:], sc.qkvW[:])

	r0 := 0
	for si := range seqs {
		n := len(seqs[si].Tokens)
		sc.cur, sc.base = &seqs[si], r0
		m.pool.For(n, m.q35.qkRows)
		r0 += n
	}
	sc.cur = nil // drop the reference to the caller's sequence

	attn := kernels.AttnParams{NHeads: c.Heads, NKVHeads: c.KVHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))}
	r0 = 0
	for si := range seqs {
		s := &seqs[si]
		n := len(s.Tokens)
		sc.positions = sc.positions[:0]
		for j := 0; j < n; j++ {
			sc.positions = append(sc.positions, s.Pos+j)
		}
		kernels.Attention(m.pool, sc.att[r0*qd:(r0+n)*qd], sc.q[r0*qd:(r0+n)*qd], sc.positions, s.KV, l.kvLayer, attn)
		r0 += n
	}
	m.pool.For(M, m.q35.gateMul)
	kernels.MatMul(m.pool, sc.h, sc.att, M, l.wo)
	m.addResidual(M)
}

// q35Fns are qwen35's per-row steps, bound to the model once (initQ35Fns) like rowFns: they
// read the layer, the sequence and its rows from scratch (li, cur, base, n, win, state).
type q35Fns struct {
	qkRows, gateMul, conv, heads, gatedNorm func(lo, hi int)
}

func (m *Model) initQ35Fns() {
	if m.q35.qkRows != nil {
		return
	}
	c, sc := &m.cfg, &m.scratch
	m.q35.qkRows = func(lo, hi int) {
		l := &m.layers[sc.li]
		s, base := sc.cur, sc.base
		qd, kvd, hd := c.QDim(), c.KVDim(), c.HeadDim
		for j := lo; j < hi; j++ {
			i := base + j
			full := sc.qfull[i*2*qd : (i+1)*2*qd]
			q := sc.q[i*qd : (i+1)*qd]
			g := sc.qgate[i*qd : (i+1)*qd]
			k := sc.k[i*kvd : (i+1)*kvd]
			v := sc.v[i*kvd : (i+1)*kvd]
			for h := 0; h < c.Heads; h++ {
				// Head h's query, then its gate.
				kernels.RMSNorm(q[h*hd:(h+1)*hd], full[2*h*hd:(2*h+1)*hd], l.qNorm, c.NormEps)
				copy(g[h*hd:(h+1)*hd], full[(2*h+1)*hd:(2*h+2)*hd])
			}
			for h := 0; h < c.KVHeads; h++ {
				kernels.RMSNorm(k[h*hd:(h+1)*hd], k[h*hd:(h+1)*hd], l.kNorm, c.NormEps)
			}
			pos := s.Pos + j
			kernels.RoPE(q, c.Heads, hd, pos, m.rope)
			kernels.RoPE(k, c.KVHeads, hd, pos, m.rope)
			kernels.StoreKV(s.KV, l.kvLayer, pos, k, v)
		}
	}
	m.q35.gateMul = func(lo, hi int) {
		qd := c.QDim()
		for i := lo; i < hi; i++ {
			a, g := sc.att[i*qd:(i+1)*qd], sc.qgate[i*qd:(i+1)*qd]
			kernels.Sigmoid(g) // the gate, read only here
			for j := range a {
				a[j] *= g[j]
			}
		}
	}
	m.q35.conv = func(lo, hi int) {
		d := m.layers[sc.li].delta
		s := c.SSM
		cd, K, kd, S := s.ConvDim(), s.ConvKernel, s.KeyDim(), s.StateSize
		base, win := sc.base, sc.win
		kernels.ConvSiLU(sc.conv[(base+lo)*cd:(base+hi)*cd], win[lo*cd:(hi+K-1)*cd], d.conv, cd, K, hi-lo)
		for t := lo; t < hi; t++ {
			out := sc.conv[(base+t)*cd : (base+t+1)*cd]
			for h := 0; h < s.KHeads; h++ {
				l2Norm(out[h*S:(h+1)*S], c.NormEps)       // q
				l2Norm(out[kd+h*S:kd+(h+1)*S], c.NormEps) // k
			}
			// Decay and strength per value head.
			for h := 0; h < s.VHeads; h++ {
				r := (base+t)*s.VHeads + h
				sc.alpha[r] = softplus(sc.alpha[r]+d.dtBias[h]) * d.a[h]
				sc.beta[r] = sigmoid(sc.beta[r])
			}
		}
	}
	m.q35.heads = func(lo, hi int) {
		d := m.layers[sc.li].delta
		s := c.SSM
		cd, vd, S, kd := s.ConvDim(), s.ValueDim(), s.StateSize, s.KeyDim()
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
			kh := h % s.KHeads
			for t := 0; t < n; t++ {
				row := sc.conv[(base+t)*cd : (base+t+1)*cd]
				qv := row[kh*S : (kh+1)*S]
				kv := row[kd+kh*S : kd+(kh+1)*S]
				vv := row[2*kd+h*S : 2*kd+(h+1)*S]
				r := (base+t)*s.VHeads + h
				decay := [1]float32{float32(math.Exp(float64(sc.alpha[r])))}
				o := sc.core[(base+t)*vd+h*S : (base+t)*vd+(h+1)*S]
				kernels.DeltaStepT(stT, qv, kv, vv, decay[:], delta, o, sc.beta[r], scale)
				for _, cp := range q.Checkpoints {
					if cp.Pos == q.Pos+t+1 {
						kernels.TransposeSquare(cp.delta[d.index][h*S*S:(h+1)*S*S], stT, S)
					}
				}
			}
			kernels.TransposeSquare(st, stT, S)
		}
	}
	m.q35.gatedNorm = func(lo, hi int) {
		d := m.layers[sc.li].delta
		s := c.SSM
		vd, S := s.ValueDim(), s.StateSize
		for i := lo; i < hi; i++ {
			for h := 0; h < s.VHeads; h++ {
				o := sc.core[i*vd+h*S : i*vd+(h+1)*S]
				kernels.RMSNorm(o, o, d.norm, c.NormEps)
				kernels.SwiGLU(o, sc.z[i*vd+h*S:i*vd+(h+1)*S], o)
			}
		}
	}
}

// deltaNetForward is a Gated DeltaNet layer's token mixer; it advances each sequence's state
// for this layer and adds its output to the residual stream.
func (m *Model) deltaNetForward(li int, seqs []Sequence, M int) {
	c := &m.cfg
	l := &m.layers[li]
	d := l.delta
	s := c.SSM
	sc := &m.scratch
	cd, K := s.ConvDim(), s.ConvKernel
	m.initRowFns()
	m.initQ35Fns()
	sc.li = li

	m.pool.For(M, m.fns.attnNorm)
	sc.dnDst = [4][]float32{sc.qkv, sc.z, sc.beta, sc.alpha}
	sc.dnW = [4]*kernels.Weight{d.wqkv, d.wz, d.wbeta, d.walpha}
	kernels.MatMuls(m.pool, sc.h, M, sc.dnDst[:], sc.dnW[:])

	r0 := 0
	for si := range seqs {
		q := &seqs[si]
		n := len(q.Tokens)
		base := r0
		convState := q.State.conv[d.index]
		// The conv's input window: the K−1 rows kept from earlier tokens, then this step's.
		win := sc.window[:(K-1+n)*cd]
		copy(win, convState)
		copy(win[(K-1)*cd:], sc.qkv[base*cd:(base+n)*cd])
		sc.cur, sc.base, sc.n, sc.win = q, base, n, win
		m.pool.For(n, m.q35.conv)
		// Checkpoints: the conv state after position c consumed is the window's rows for
		// positions c−K+1 … c−1.
		for _, cp := range q.Checkpoints {
			r := cp.Pos - q.Pos
			copy(cp.conv[d.index], win[r*cd:(r+K-1)*cd])
		}
		copy(convState, win[n*cd:(n+K-1)*cd])

		sc.state = q.State.delta[d.index]
		m.pool.For(s.VHeads, m.q35.heads)
		r0 += n
	}
	sc.cur, sc.state = nil, nil // drop references to the caller's sequence and state

	// Gated norm per value head: rms_norm(o)·ssm_norm · silu(z).
	m.pool.For(M, m.q35.gatedNorm)
	kernels.MatMul(m.pool, sc.h, sc.core, M, d.out)
	m.addResidual(M)
}
