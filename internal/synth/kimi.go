package synth

import (
	"fmt"
	"math"

	"stockpot/internal/gguf"
)

// Kimi is the shape of Kimi-Linear's KDA and MLA layers and of its mixture
// of experts. Keys and tensors are those llama.cpp's kimi-linear loader reads
// (src/models/kimi-linear.cpp) as its converter writes them
// (conversion/kimi_linear.py): MLA split into attn_k_b/attn_v_b (the latent
// cache path), KDA convs as {conv, 1, inner, 1}, A stored as -exp(A_log).
type Kimi struct {
	MLAInterval   int     // layer l is MLA when (l+1) % MLAInterval == 0, else KDA
	KDAHeadDim    int     // kda.head_dim (KDA heads = attention.head_count)
	KDAConv       int     // ssm.conv_kernel
	KVLoraRank    int     // attention.kv_lora_rank
	QKRopeDim     int     // rope.dimension_count: the decoupled (unrotated) q_pe/k_pe width
	QKNopeDim     int     // key_length_mla = QKNopeDim + QKRopeDim
	VHeadDim      int     // value_length_mla
	Experts       int     // expert_count
	ExpertsUsed   int     // expert_used_count
	SharedExperts int     // expert_shared_count
	ExpertFFN     int     // expert_feed_forward_length
	DenseLead     int     // leading_dense_block_count
	Gating        int     // expert_gating_func (1 softmax, 2 sigmoid)
	WeightsScale  float32 // expert_weights_scale

	// Kimi-K3 (arch kimi-k3) only: what llama.cpp's kimi-k3 loader reads beyond
	// kimi-linear's keys (src/models/kimi-k3.cpp; conversion/kimi_k3.py).
	ResBlock       int     // attn_res.block_size: layers l % ResBlock == 0 bank their input for the cross-layer residual mix
	SituBeta       float32 // activation.situ_beta
	SituLinearBeta float32 // activation.situ_linear_beta (0: the up branch is not squashed)
	GateLowerBound float32 // kda.gate_lower_bound (negative): the decay gate is lb·sigmoid(…), not softplus
	QLoraRank      int     // attention.q_lora_rank: 0 for a full-rank attn_q
	ExpertLatent   int     // expert_latent_length: routed experts run at this width (0: at Embed)
}

// IsKimi reports whether the preset is kimi-linear or Kimi-K3 (the same KDA + MLA skeleton).
func (p Preset) IsKimi() bool { return p.Arch == "kimi-linear" || p.IsK3() }

// IsK3 reports whether the preset is Kimi-K3.
func (p Preset) IsK3() bool { return p.Arch == "kimi-k3" }

// KimiMLA reports whether layer l of a kimi-linear preset is an MLA layer.
func (p Preset) KimiMLA(l int) bool { return p.IsKimi() && (l+1)%p.MLAInterval == 0 }

func (p Preset) validateKimi() error {
	k := p.Kimi
	switch {
	case k.MLAInterval < 1 || k.KDAHeadDim <= 0 || k.KDAConv < 2 || k.KVLoraRank <= 0 || k.QKRopeDim <= 0 || k.QKNopeDim <= 0 || k.VHeadDim <= 0:
		return fmt.Errorf("synth: preset %s: kimi sizes must be positive (conv kernel at least 2)", p.Name)
	case k.Experts > 0 && (k.ExpertsUsed <= 0 || k.ExpertsUsed > k.Experts || k.ExpertFFN <= 0):
		return fmt.Errorf("synth: preset %s: %d of %d experts with ffn %d", p.Name, k.ExpertsUsed, k.Experts, k.ExpertFFN)
	case k.Gating < 1 || k.Gating > 4:
		return fmt.Errorf("synth: preset %s: gating function %d", p.Name, k.Gating)
	case p.IsK3() && (k.ResBlock < 0 || k.SituBeta <= 0 || k.SituLinearBeta < 0 || k.GateLowerBound > 0 || k.QLoraRank < 0 || k.ExpertLatent < 0):
		return fmt.Errorf("synth: preset %s: kimi-k3 sizes (res block %d, situ %g/%g, gate bound %g, q rank %d, latent %d)", p.Name, k.ResBlock, k.SituBeta, k.SituLinearBeta, k.GateLowerBound, k.QLoraRank, k.ExpertLatent)
	}
	return nil
}

// setKimiKeys writes kimi-linear's hyper-parameters.
func (p Preset) setKimiKeys(w *gguf.Writer) {
	a, k := p.Arch, p.Kimi
	kv := make([]uint32, p.Layers)
	for l := range kv {
		if p.KimiMLA(l) {
			kv[l] = 1 // MLA as MQA over the latent
		}
	}
	w.Set(a+".attention.head_count_kv", kv)
	w.Set(a+".rope.dimension_count", uint32(k.QKRopeDim))
	w.Set(a+".attention.key_length", uint32(k.KVLoraRank+k.QKRopeDim))
	w.Set(a+".attention.kv_lora_rank", uint32(k.KVLoraRank))
	w.Set(a+".attention.key_length_mla", uint32(k.QKNopeDim+k.QKRopeDim))
	w.Set(a+".attention.value_length_mla", uint32(k.VHeadDim))
	w.Set(a+".ssm.conv_kernel", uint32(k.KDAConv))
	w.Set(a+".kda.head_dim", uint32(k.KDAHeadDim))
	w.Set(a+".expert_count", uint32(k.Experts))
	w.Set(a+".expert_used_count", uint32(k.ExpertsUsed))
	w.Set(a+".expert_shared_count", uint32(k.SharedExperts))
	w.Set(a+".expert_feed_forward_length", uint32(k.ExpertFFN))
	w.Set(a+".leading_dense_block_count", uint32(k.DenseLead))
	w.Set(a+".expert_gating_func", uint32(k.Gating))
	w.Set(a+".expert_weights_scale", k.WeightsScale)
	if !p.IsK3() {
		return
	}
	w.Set(a+".expert_weights_norm", true)
	w.Set(a+".attn_res.block_size", uint32(k.ResBlock))
	w.Set(a+".activation.situ_beta", k.SituBeta)
	w.Set(a+".activation.situ_linear_beta", k.SituLinearBeta)
	if k.GateLowerBound < 0 {
		w.Set(a+".kda.gate_lower_bound", k.GateLowerBound)
	}
	if k.QLoraRank > 0 {
		w.Set(a+".attention.q_lora_rank", uint32(k.QLoraRank))
	}
	if k.ExpertLatent > 0 {
		w.Set(a+".expert_latent_length", uint32(k.ExpertLatent))
	}
}

// kimiLayer adds one kimi-linear or Kimi-K3 layer: KDA or MLA, then a dense FFN or the
// experts. K3 adds the residual-mix scores, MLA's output gate (and compressed queries when
// QLoraRank is set), a full-rank KDA gate and a 1-D A, and latent experts.
func (b *builder) kimiLayer(l int, n func(string) string) {
	p := b.p
	k := p.Kimi
	inStd := 1 / math.Sqrt(float64(p.Embed))
	b.norm(n("attn_norm.weight"), p.Embed)
	if p.IsK3() && k.ResBlock > 0 {
		// The fused res_norm·res_proj vectors: scores spread by about 1 over the banked inputs.
		b.filled(n("attn_res_score.weight"), p.Embed, 0, 0.3)
		b.filled(n("ffn_res_score.weight"), p.Embed, 0, 0.3)
	}
	if p.KimiMLA(l) {
		kd := k.QKNopeDim + k.QKRopeDim
		if p.IsK3() && k.QLoraRank > 0 {
			b.matrix(n("attn_q_a.weight"), p.Embed, k.QLoraRank, inStd, l)
			b.norm(n("attn_q_a_norm.weight"), k.QLoraRank)
			b.matrix(n("attn_q_b.weight"), k.QLoraRank, p.Heads*kd, 1/math.Sqrt(float64(k.QLoraRank)), l)
		} else {
			b.matrix(n("attn_q.weight"), p.Embed, p.Heads*kd, inStd, l)
		}
		b.matrix(n("attn_kv_a_mqa.weight"), p.Embed, k.KVLoraRank+k.QKRopeDim, inStd, l)
		b.norm(n("attn_kv_a_norm.weight"), k.KVLoraRank)
		b.tensor3(n("attn_k_b.weight"), k.QKNopeDim, k.KVLoraRank, p.Heads, 1/math.Sqrt(float64(k.QKNopeDim)), l)
		b.tensor3(n("attn_v_b.weight"), k.KVLoraRank, k.VHeadDim, p.Heads, 1/math.Sqrt(float64(k.KVLoraRank)), l)
		if p.IsK3() {
			b.matrix(n("attn_gate.weight"), p.Embed, p.Heads*k.VHeadDim, inStd, l)
		}
		b.matrix(n("attn_output.weight"), p.Heads*k.VHeadDim, p.Embed, 1/math.Sqrt(float64(p.Heads*k.VHeadDim)), l)
	} else {
		hd := k.KDAHeadDim
		inner := p.Heads * hd
		b.matrix(n("attn_q.weight"), p.Embed, inner, inStd, l)
		b.matrix(n("attn_k.weight"), p.Embed, inner, inStd, l)
		b.matrix(n("attn_v.weight"), p.Embed, inner, inStd, l)
		// Conv kernels stay f32 in every file type, as for qwen35.
		for _, c := range []string{"ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v"} {
			b.raw(n(c+".weight"), []uint64{uint64(k.KDAConv), 1, uint64(inner), 1}, 0, 1/math.Sqrt(float64(k.KDAConv)))
		}
		b.matrix(n("ssm_f_a.weight"), p.Embed, hd, inStd, l)
		b.matrix(n("ssm_f_b.weight"), hd, inner, 1/math.Sqrt(float64(hd)), l)
		b.matrix(n("ssm_beta.weight"), p.Embed, p.Heads, inStd, l)
		// A = -exp(A_log) in about [-1.5, -0.5] and dt bias near 0: decays
		// spread over (0, 1), as for qwen35.
		if p.IsK3() {
			b.raw(n("ssm_a"), []uint64{uint64(p.Heads)}, -1, 0.3) // K3's A is 1-D
		} else {
			b.raw(n("ssm_a"), []uint64{1, uint64(p.Heads), 1, 1}, -1, 0.3)
		}
		b.filled(n("ssm_dt.bias"), inner, 0, 0.5)
		if p.IsK3() {
			b.matrix(n("ssm_g.weight"), p.Embed, inner, inStd, l) // full rank
		} else {
			b.matrix(n("ssm_g_a.weight"), p.Embed, hd, inStd, l)
			b.matrix(n("ssm_g_b.weight"), hd, inner, 1/math.Sqrt(float64(hd)), l)
		}
		b.norm(n("ssm_norm.weight"), hd)
		b.matrix(n("attn_output.weight"), inner, p.Embed, 1/math.Sqrt(float64(inner)), l)
	}
	b.norm(n("ffn_norm.weight"), p.Embed)
	if l < k.DenseLead || k.Experts == 0 {
		b.matrix(n("ffn_gate.weight"), p.Embed, p.FFN, inStd, l)
		b.matrix(n("ffn_up.weight"), p.Embed, p.FFN, inStd, l)
		b.matrix(n("ffn_down.weight"), p.FFN, p.Embed, 1/math.Sqrt(float64(p.FFN)), l)
		return
	}
	f := k.ExpertFFN
	// A router whose logits spread by about 1 and a selection bias of the
	// same order: both decide which experts are chosen.
	b.matrix(n("ffn_gate_inp.weight"), p.Embed, k.Experts, 1.5*inStd, l)
	b.filled(n("exp_probs_b.bias"), k.Experts, 0, 0.1)
	ed := p.Embed // the experts' width: Embed, or K3's latent
	if p.IsK3() && k.ExpertLatent > 0 {
		ed = k.ExpertLatent
		b.matrix(n("ffn_routed_down.weight"), p.Embed, ed, inStd, l)
		b.matrix(n("ffn_routed_up.weight"), ed, p.Embed, 1/math.Sqrt(float64(ed)), l)
		b.norm(n("ffn_routed_norm.weight"), ed)
	}
	eStd := 1 / math.Sqrt(float64(ed))
	b.tensor3(n("ffn_gate_exps.weight"), ed, f, k.Experts, eStd, l)
	b.tensor3(n("ffn_up_exps.weight"), ed, f, k.Experts, eStd, l)
	b.tensor3(n("ffn_down_exps.weight"), f, ed, k.Experts, 1/math.Sqrt(float64(f)), l)
	if k.SharedExperts > 0 {
		sf := f * k.SharedExperts
		b.matrix(n("ffn_gate_shexp.weight"), p.Embed, sf, inStd, l)
		b.matrix(n("ffn_up_shexp.weight"), p.Embed, sf, inStd, l)
		b.matrix(n("ffn_down_shexp.weight"), sf, p.Embed, 1/math.Sqrt(float64(sf)), l)
	}
}

// tensor3 adds a {cols, rows, n} tensor: n matrices of rows×cols, each row
// stored in the matrix type of the file.
func (b *builder) tensor3(name string, cols, rows, n int, std float64, layer int) {
	if b.err != nil {
		return
	}
	t, err := tensorType(name, cols, b.opt, layer, b.p.Layers, b.p.Tied)
	if err != nil {
		b.err = err
		return
	}
	v := make([]float32, cols*rows*n)
	fill(v, b.opt.Seed, name, 0, std)
	data, err := encode(t, v, cols)
	if err != nil {
		b.err = fmt.Errorf("synth: %s as %s: %w", name, t, err)
		return
	}
	b.err = b.w.AddTensor(name, t, []uint64{uint64(cols), uint64(rows), uint64(n)}, data)
}

// raw adds an f32 tensor of the given dims, uniform around center.
func (b *builder) raw(name string, dims []uint64, center, std float64) {
	if b.err != nil {
		return
	}
	n := uint64(1)
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	fill(v, b.opt.Seed, name, center, std)
	b.err = b.w.AddTensor(name, gguf.TypeF32, dims, f32Bytes(v))
}
