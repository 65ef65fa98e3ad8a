package model_test

import (
	"bytes"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
)

// TestK3Config: tiny-kimi-k3's and small-kimi-k3's hyper-parameters: kimi-linear's layout
// (KDA and MLA kinds, the latent cache, the KDA state) plus what K3 adds.
func TestK3Config(t *testing.T) {
	c, err := model.ParseConfig(presetFile(t, "tiny-kimi-k3"))
	if err != nil {
		t.Fatal(err)
	}
	for l := 0; l < c.Layers; l++ {
		want := model.LayerKDA
		if l%4 == 3 {
			want = model.LayerMLA
		}
		if c.Kind(l) != want {
			t.Errorf("layer %d is %v, want %v", l, c.Kind(l), want)
		}
	}
	// Two MLA layers of a 96+16 latent share slot 0 (K and V halves).
	if c.KVLayers() != 1 || c.KVHeads != 1 || c.HeadDim != 112 || c.DeltaLayers() != 6 {
		t.Errorf("K/V %d slots × %d × %d, %d KDA layers; want 1 × 1 × 112, 6", c.KVLayers(), c.KVHeads, c.HeadDim, c.DeltaLayers())
	}
	k := c.K3
	if k.ResBlock != 3 || k.Banks(c.Layers) != 3 || k.SituBeta != 4 || k.SituLinearBeta != 8 || k.GateLowerBound != -5 || k.QLoraRank != 0 || k.ExpertLatent != 32 {
		t.Errorf("k3 %+v", k)
	}
	if e := c.MoE; e.Latent != 32 || !e.NormWeights || e.Gating != model.GatingSigmoid || e.WeightsScale != 2.5 {
		t.Errorf("moe %+v", e)
	}
	if f := c.StateFormat(); !strings.HasPrefix(f, "kda1/") {
		t.Errorf("state format %q", f)
	}
	s, err := model.ParseConfig(presetFile(t, "small-kimi-k3"))
	if err != nil {
		t.Fatal(err)
	}
	if s.K3.QLoraRank != 128 || s.MoE.Latent != 128 || s.ContextLength != 524288 {
		t.Errorf("small-kimi-k3: q rank %d, latent %d, context %d", s.K3.QLoraRank, s.MoE.Latent, s.ContextLength)
	}
}

// TestK3BadFiles: a kimi-k3 file missing one of K3's tensors or required keys, or with an
// absurd value, fails at load naming it.
func TestK3BadFiles(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	f := presetFile(t, "tiny-kimi-k3")
	if _, err := model.Load(f, pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tensor string
		dims   []uint64
	}{
		{"output_res_score.weight", nil},
		{"blk.2.attn_res_score.weight", nil},
		{"blk.5.ffn_res_score.weight", []uint64{32}},
		{"blk.0.ssm_g.weight", nil},
		{"blk.1.ssm_a", []uint64{1, 4, 1, 1}},
		{"blk.3.attn_gate.weight", []uint64{64, 32}},
		{"blk.2.ffn_routed_down.weight", nil},
		{"blk.6.ffn_routed_up.weight", []uint64{64, 32}},
		{"blk.4.ffn_gate_exps.weight", []uint64{64, 32, 8}},
	} {
		_, err := model.Load(rewrite(t, f, c.tensor, c.dims), pool)
		if err == nil || !strings.Contains(err.Error(), c.tensor) {
			t.Errorf("%s %v: err %v, want one naming the tensor", c.tensor, c.dims, err)
		}
	}
	for key, val := range map[string]any{
		"kimi-k3.attn_res.block_size":         nil,
		"kimi-k3.activation.situ_beta":        nil,
		"kimi-k3.activation.situ_linear_beta": float32(-1),
		"kimi-k3.kda.gate_lower_bound":        float32(0.5),
		"kimi-k3.attention.q_lora_rank":       uint32(0),
		"kimi-k3.expert_latent_length":        uint32(1 << 20),
		"kimi-k3.attention.head_count_kv":     []uint32{0, 0, 0, 2, 0, 0, 0, 1},
		"kimi-k3.expert_feed_forward_length":  []uint32{32, 16, 32, 32, 32, 32, 32, 32},
	} {
		w := gguf.NewWriter()
		for _, k := range f.Keys() {
			v, _ := f.Value(k)
			if k == key {
				if val == nil {
					continue
				}
				w.Set(k, val)
				continue
			}
			w.Set(k, v.Data)
		}
		if _, ok := f.Value(key); !ok && val != nil {
			w.Set(key, val)
		}
		var buf bytes.Buffer
		w.WriteTo(&buf)
		g, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(key, "kimi-k3.")
		if _, err := model.ParseConfig(g); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s = %v: err %v, want one naming the key", key, val, err)
		}
	}
}
