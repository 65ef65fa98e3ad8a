package synth

import (
	"strings"
	"testing"

	"stockpot/internal/gguf"
)

// kimiTensors adds layer l's tensors of a kimi-linear or Kimi-K3 preset, with llama.cpp's
// shapes (llama_model_kimi_linear::load_arch_tensors, llama_model_kimi_k3::load_arch_tensors).
func kimiTensors(p Preset, l int, n func(string) string, u func(...int) []uint64, m map[string][]uint64) {
	k := p.Kimi
	k3 := p.IsK3()
	m[n("attn_norm.weight")] = u(p.Embed)
	m[n("ffn_norm.weight")] = u(p.Embed)
	if k3 && k.ResBlock > 0 {
		m[n("attn_res_score.weight")] = u(p.Embed)
		m[n("ffn_res_score.weight")] = u(p.Embed)
	}
	if p.KimiMLA(l) {
		kd := k.QKNopeDim + k.QKRopeDim
		if k3 && k.QLoraRank > 0 {
			m[n("attn_q_a.weight")] = u(p.Embed, k.QLoraRank)
			m[n("attn_q_a_norm.weight")] = u(k.QLoraRank)
			m[n("attn_q_b.weight")] = u(k.QLoraRank, p.Heads*kd)
		} else {
			m[n("attn_q.weight")] = u(p.Embed, p.Heads*kd)
		}
		if k3 {
			m[n("attn_gate.weight")] = u(p.Embed, p.Heads*k.VHeadDim)
		}
		m[n("attn_kv_a_mqa.weight")] = u(p.Embed, k.KVLoraRank+k.QKRopeDim)
		m[n("attn_kv_a_norm.weight")] = u(k.KVLoraRank)
		m[n("attn_k_b.weight")] = u(k.QKNopeDim, k.KVLoraRank, p.Heads)
		m[n("attn_v_b.weight")] = u(k.KVLoraRank, k.VHeadDim, p.Heads)
		m[n("attn_output.weight")] = u(p.Heads*k.VHeadDim, p.Embed)
	} else {
		hd := k.KDAHeadDim
		inner := p.Heads * hd
		for _, t := range []string{"attn_q", "attn_k", "attn_v"} {
			m[n(t+".weight")] = u(p.Embed, inner)
		}
		for _, t := range []string{"ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v"} {
			m[n(t+".weight")] = u(k.KDAConv, 1, inner, 1)
		}
		m[n("ssm_f_a.weight")] = u(p.Embed, hd)
		m[n("ssm_f_b.weight")] = u(hd, inner)
		if k3 {
			m[n("ssm_g.weight")] = u(p.Embed, inner)
			m[n("ssm_a")] = u(p.Heads)
		} else {
			m[n("ssm_g_a.weight")] = u(p.Embed, hd)
			m[n("ssm_g_b.weight")] = u(hd, inner)
			m[n("ssm_a")] = u(1, p.Heads, 1, 1)
		}
		m[n("ssm_beta.weight")] = u(p.Embed, p.Heads)
		m[n("ssm_dt.bias")] = u(inner)
		m[n("ssm_norm.weight")] = u(hd)
		m[n("attn_output.weight")] = u(inner, p.Embed)
	}
	if l < k.DenseLead || k.Experts == 0 {
		m[n("ffn_gate.weight")] = u(p.Embed, p.FFN)
		m[n("ffn_up.weight")] = u(p.Embed, p.FFN)
		m[n("ffn_down.weight")] = u(p.FFN, p.Embed)
		return
	}
	f, sf := k.ExpertFFN, k.ExpertFFN*k.SharedExperts
	m[n("ffn_gate_inp.weight")] = u(p.Embed, k.Experts)
	m[n("exp_probs_b.bias")] = u(k.Experts)
	ed := p.Embed
	if k3 && k.ExpertLatent > 0 {
		ed = k.ExpertLatent
		m[n("ffn_routed_down.weight")] = u(p.Embed, ed)
		m[n("ffn_routed_up.weight")] = u(ed, p.Embed)
		m[n("ffn_routed_norm.weight")] = u(ed)
	}
	m[n("ffn_gate_exps.weight")] = u(ed, f, k.Experts)
	m[n("ffn_up_exps.weight")] = u(ed, f, k.Experts)
	m[n("ffn_down_exps.weight")] = u(f, ed, k.Experts)
	m[n("ffn_gate_shexp.weight")] = u(p.Embed, sf)
	m[n("ffn_up_shexp.weight")] = u(p.Embed, sf)
	m[n("ffn_down_shexp.weight")] = u(sf, p.Embed)
}

// TestKimiPreset: tiny-kimi-linear's keys are the ones llama.cpp's kimi-linear loader reads,
// with the layer pattern in head_count_kv (0: KDA, 1: MLA).
func TestKimiPreset(t *testing.T) {
	f, err := gguf.Parse(encodeFile(t, "tiny-kimi-linear", Options{Seed: 7}))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := Lookup("tiny-kimi-linear")
	kv, ok := f.Ints("kimi-linear.attention.head_count_kv")
	if !ok || len(kv) != p.Layers {
		t.Fatalf("head_count_kv %v", kv)
	}
	for l, v := range kv {
		if want := map[bool]int64{true: 1, false: 0}[p.KimiMLA(l)]; v != want {
			t.Errorf("layer %d head_count_kv %d, want %d", l, v, want)
		}
	}
	for key, want := range map[string]uint64{
		"rope.dimension_count": 16, "attention.key_length": 64, "attention.kv_lora_rank": 48,
		"attention.key_length_mla": 32, "attention.value_length_mla": 16, "ssm.conv_kernel": 4,
		"kda.head_dim": 16, "expert_count": 8, "expert_used_count": 2, "expert_shared_count": 1,
		"expert_feed_forward_length": 32, "leading_dense_block_count": 1, "expert_gating_func": 2,
	} {
		if got, ok := f.Uint("kimi-linear." + key); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", key, got, ok, want)
		}
	}
	if v, ok := f.Float("kimi-linear.expert_weights_scale"); !ok || float32(v) != 2.446 {
		t.Errorf("expert_weights_scale %v", v)
	}
	// The conv kernels stay f32 in a quantized file.
	q, err := gguf.Parse(encodeFile(t, "tiny-kimi-linear", Options{Seed: 7, Type: gguf.TypeQ8_0}))
	if err != nil {
		t.Fatal(err)
	}
	if ti, _ := q.Tensor("blk.0.ssm_conv1d_q.weight"); ti.Type != gguf.TypeF32 {
		t.Errorf("conv kernel %s in a Q8_0 file", ti.Type)
	}
}

// TestK3Presets: the Kimi-K3 presets carry the keys llama.cpp's kimi-k3 loader reads beyond
// kimi-linear's (llama_model_kimi_k3::load_arch_hparams; the required ones make it refuse the
// file when missing), Kimi's tokenizer with its turn end as eos, and the Kimi-K3 template.
func TestK3Presets(t *testing.T) {
	for _, name := range []string{"tiny-kimi-k3", "small-kimi-k3"} {
		p, _ := Lookup(name)
		f, err := gguf.Parse(encodeFile(t, name, Options{Seed: 7}))
		if err != nil {
			t.Fatal(err)
		}
		a := "kimi-k3."
		for key, want := range map[string]float64{
			"attn_res.block_size": float64(p.ResBlock), "activation.situ_beta": float64(p.SituBeta),
			"activation.situ_linear_beta": float64(p.SituLinearBeta), "kda.gate_lower_bound": float64(p.GateLowerBound),
			"expert_latent_length": float64(p.ExpertLatent), "expert_gating_func": float64(p.Gating),
		} {
			got, ok := f.Float(a + key)
			if u, isUint := f.Uint(a + key); isUint {
				got, ok = float64(u), true
			}
			if !ok || got != want {
				t.Errorf("%s: %s%s = %v (present %v), want %v", name, a, key, got, ok, want)
			}
		}
		if q, ok := f.Uint(a + "attention.q_lora_rank"); (p.QLoraRank > 0) != ok || q != uint64(p.QLoraRank) {
			t.Errorf("%s: q_lora_rank %d (present %v), want %d", name, q, ok, p.QLoraRank)
		}
		if norm, ok := f.Bool(a + "expert_weights_norm"); !ok || !norm {
			t.Errorf("%s: expert_weights_norm %v (present %v)", name, norm, ok)
		}
		if pre, _ := f.String("tokenizer.ggml.pre"); pre != "kimi-k2" {
			t.Errorf("%s: pre-tokenizer %q", name, pre)
		}
		tokens, _ := f.Strings("tokenizer.ggml.tokens")
		eos, _ := f.Uint("tokenizer.ggml.eos_token_id")
		if int(eos) >= len(tokens) || tokens[eos] != "<|end_of_msg|>" {
			t.Errorf("%s: eos %d", name, eos)
		}
		if tpl, _ := f.String("tokenizer.chat_template"); !strings.Contains(tpl, "<|open|>") {
			t.Errorf("%s: chat template is not Kimi-K3's", name)
		}
	}
}
