package model

import (
	"fmt"
	"math"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
)

// Kimi-K3 (arch kimi-k3) is kimi-linear's skeleton (KDA and MLA token mixers, a dense FFN then
// experts) with five changes, following llama.cpp's graph (src/models/kimi-k3.cpp):
//
//   - A cross-layer residual mix. Every ResBlock-th layer banks its raw input (the residual
//     stream) on a per-token stack before its mixer runs, and then restarts the stream from the
//     mixer's output alone. Each block (the mixer, the FFN, and the output head) reads not the
//     stream but a softmax-weighted sum of the banked inputs and the stream, scored per token
//     by rms_norm(row)·w (w = the fused res_norm·res_proj vector of that block). The stack is
//     per token and per step: it is rebuilt from the embeddings every forward, so it is not
//     state a prefix cache must keep.
//   - situ instead of SwiGLU in every FFN and expert:
//     situ(g, u) = β·tanh(g/β)·sigmoid(g) · β_l·tanh(u/β_l) (β_l = 0: u itself).
//   - MLA's output gate: the heads' output is multiplied by sigmoid(x·W_gate) (x the normed
//     layer input) before attn_output; queries may be compressed (attn_q_a, its norm, attn_q_b).
//   - A full-rank KDA output gate (ssm_g, one matrix), and with kda.gate_lower_bound set the
//     decay gate is lb·sigmoid(exp(A_log)·(f_b(f_a(x)) + dt_bias)) instead of the softplus form.
//   - Latent experts: the router scores the full-width input; the routed experts run on
//     ffn_routed_down(x) at expert_latent_length, their weighted sum is RMS-normed
//     (ffn_routed_norm) and brought back by ffn_routed_up; the shared experts read x itself.
//
// The K/V (MLA's latent rows) and the recurrent state (KDA's conv windows and delta-rule
// matrices) are kimi-linear's, so caching, checkpoints and restores are the same.

// K3Config is what Kimi-K3 adds to kimi-linear's hyper-parameters.
type K3Config struct {
	ResBlock       int     // attn_res.block_size: 0 for no residual mix
	SituBeta       float32 // activation.situ_beta
	SituLinearBeta float32 // activation.situ_linear_beta (0: no squash on the up branch)
	// GateLowerBound is kda.gate_lower_bound when the file has it (then the decay gate is its
	// sigmoid form); 0 when absent (the softplus form, as kimi-linear).
	GateLowerBound float32
	QLoraRank      int // attention.q_lora_rank: 0 for a full-rank attn_q
	ExpertLatent   int // expert_latent_length: 0 when the experts run at Dim
}

// Banks is the number of layer inputs the residual mix banks: layers 0, ResBlock, 2·ResBlock…
func (k K3Config) Banks(layers int) int {
	if k.ResBlock <= 0 {
		return 0
	}
	return (layers + k.ResBlock - 1) / k.ResBlock
}

// parseK3 reads Kimi-K3's keys (llama_model_kimi_k3::load_arch_hparams) into c.
func parseK3(f *gguf.File, c *Config) error {
	a := c.Arch
	k := &c.K3
	res, ok := f.Uint(a + ".attn_res.block_size")
	if !ok || res > 1<<12 {
		return fmt.Errorf("%w: %s.attn_res.block_size missing or absurd", ErrUnsupported, a)
	}
	k.ResBlock = int(res)
	beta, ok := f.Float(a + ".activation.situ_beta")
	if !ok || !(beta > 0 && beta < 1e6) {
		return fmt.Errorf("%w: %s.activation.situ_beta missing or not positive", ErrUnsupported, a)
	}
	lin, ok := f.Float(a + ".activation.situ_linear_beta")
	if !ok || !(lin >= 0 && lin < 1e6) {
		return fmt.Errorf("%w: %s.activation.situ_linear_beta missing or negative", ErrUnsupported, a)
	}
	k.SituBeta, k.SituLinearBeta = float32(beta), float32(lin)
	if lb, ok := f.Float(a + ".kda.gate_lower_bound"); ok {
		// llama.cpp takes the sigmoid form for any bound above -inf; a bound of 0 or above
		// would make the decay exp(g) ≥ 1, which no real file has.
		if !(lb < 0 && lb > -1e6) {
			return fmt.Errorf("%w: %s.kda.gate_lower_bound %v (a negative bound)", ErrUnsupported, a, lb)
		}
		k.GateLowerBound = float32(lb)
	}
	if v, ok := f.Uint(a + ".attention.q_lora_rank"); ok {
		if v == 0 || v > 1<<16 {
			return fmt.Errorf("%w: %s.attention.q_lora_rank %d", ErrUnsupported, a, v)
		}
		k.QLoraRank = int(v)
	}
	if v, ok := f.Uint(a + ".expert_latent_length"); ok && v > 0 {
		if v > 1<<16 {
			return fmt.Errorf("%w: %s.expert_latent_length %d", ErrUnsupported, a, v)
		}
		k.ExpertLatent = int(v)
	}
	if c.MoE.Experts > 0 {
		norm, _ := f.Bool(a + ".expert_weights_norm")
		c.MoE.NormWeights = norm // the graph passes hparams.expert_weights_norm (default false)
		c.MoE.Latent = k.ExpertLatent
	}
	return nil
}

// situ is Kimi-K3's gated activation, as ggml computes it op by op (scale by the reciprocal,
// tanh, scale, times sigmoid; the up branch likewise).
func situ(dst, gate, up []float32, beta, linBeta float32) {
	ib := 1 / beta
	var il float32
	if linBeta > 0 {
		il = 1 / linBeta
	}
	for i, g := range gate {
		a := tanhf(g*ib) * beta
		a *= sigmoid(g)
		u := up[i]
		if linBeta > 0 {
			u = tanhf(u*il) * linBeta
		}
		dst[i] = a * u
	}
}

func tanhf(x float32) float32 { return float32(math.Tanh(float64(x))) }

// k3Forward runs Kimi-K3's layers over the embeddings in sc.x, leaving in sc.x what the output
// norm reads (the final residual mix).
func (m *Model) k3Forward(seqs []Sequence, M int) {
	c := &m.cfg
	sc := &m.scratch
	D := c.Dim
	m.initK3Fns()
	sc.res = grow(sc.res, M*D)
	copy(sc.res, sc.x[:M*D])
	sc.stack = grow(sc.stack, c.K3.Banks(c.Layers)*M*D)
	sc.resScores = grow(sc.resScores, M*(c.K3.Banks(c.Layers)+1))
	sc.resM = M
	sc.banks = 0
	for li := range m.layers {
		l := &m.layers[li]
		sc.li = li
		sc.resW = l.attnRes
		m.rows(M, D*(sc.banks+1), m.k3.mix)
		if rb := c.K3.ResBlock; rb > 0 && li%rb == 0 {
			copy(sc.stack[sc.banks*M*D:(sc.banks+1)*M*D], sc.res[:M*D])
			sc.banks++
			sc.restart = true
		}
		if l.kda != nil {
			m.kdaForward(li, seqs, M)
		} else {
			m.mlaForward(li, seqs, M)
		}
		m.rows(M, D, m.k3.accumulate) // res = h, or res += h
		sc.restart = false
		sc.li = li
		sc.resW = l.ffnRes
		m.rows(M, D*(sc.banks+1), m.k3.mix)
		if l.moe != nil {
			m.moeForward(li, M)
		} else {
			m.ffnForward(li, M)
		}
		m.rows(M, D, m.k3.accumulate)
	}
	sc.resW = m.outputRes
	m.rows(M, D*(sc.banks+1), m.k3.mix)
	sc.resW = nil
}

// k3Fns are k3Forward's per-row steps, bound once like rowFns. mix writes sc.x from the
// stream sc.res and the sc.banks banked rows with the score vector sc.resW (nil: no mix, a
// copy); accumulate adds the block's output sc.h to the stream, or restarts it from sc.h
// (sc.restart: the layer banked its input).
type k3Fns struct {
	mix, accumulate func(lo, hi int)
}

func (m *Model) initK3Fns() {
	if m.k3.mix != nil {
		return
	}
	c, sc := &m.cfg, &m.scratch
	m.k3.mix = func(lo, hi int) {
		D, M, nb, w := c.Dim, sc.resM, sc.banks, sc.resW
		for i := lo; i < hi; i++ {
			x := sc.x[i*D : (i+1)*D]
			cur := sc.res[i*D : (i+1)*D]
			if w == nil || nb == 0 {
				copy(x, cur)
				continue
			}
			// Scores: Σ rms_norm(row)·w per banked row, then the stream's; softmax over them.
			p := sc.resScores[i*(nb+1) : (i+1)*(nb+1)]
			for j := 0; j < nb; j++ {
				p[j] = normScore(x, sc.stack[(j*M+i)*D:(j*M+i+1)*D], w, c.NormEps)
			}
			p[nb] = normScore(x, cur, w, c.NormEps)
			kernels.Softmax(p)
			// x = Σ_j p_j·bank_j (in bank order), + p_cur·cur.
			for d := range x {
				var s float32
				for j := 0; j < nb; j++ {
					s += sc.stack[(j*M+i)*D+d] * p[j]
				}
				x[d] = s + cur[d]*p[nb]
			}
		}
	}
	m.k3.accumulate = func(lo, hi int) {
		D := c.Dim
		for i := lo; i < hi; i++ {
			if sc.restart {
				copy(sc.res[i*D:(i+1)*D], sc.h[i*D:(i+1)*D])
			} else {
				kernels.Add(sc.res[i*D:(i+1)*D], sc.h[i*D:(i+1)*D])
			}
		}
	}
}

// normScore is Σ_d rms_norm(row)_d·w_d, summed in float64 as ggml's sum_rows does; tmp is
// scratch of the row's length.
func normScore(tmp, row, w []float32, eps float32) float32 {
	kernels.RMSNorm(tmp, row, w, eps)
	var s float64
	for _, v := range tmp {
		s += float64(v)
	}
	return float32(s)
}
