package model_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// TestKimiConfig: tiny-kimi-linear's hyper-parameters, its per-layer kinds and what its K/V
// and state cost.
func TestKimiConfig(t *testing.T) {
	c, err := model.ParseConfig(presetFile(t, "tiny-kimi-linear"))
	if err != nil {
		t.Fatal(err)
	}
	want := []model.LayerKind{model.LayerKDA, model.LayerMLA, model.LayerKDA, model.LayerMLA, model.LayerKDA, model.LayerMLA}
	for l, k := range want {
		if c.Kind(l) != k {
			t.Errorf("layer %d is %v, want %v", l, c.Kind(l), k)
		}
	}
	if !c.Hybrid() || c.DeltaLayers() != 3 {
		t.Errorf("hybrid %v with %d recurrent layers, want 3", c.Hybrid(), c.DeltaLayers())
	}
	// Three MLA layers of a 48+16 latent: two share slot 0 (K and V halves), one has slot 1.
	if c.KVLayers() != 2 || c.KVHeads != 1 || c.HeadDim != 64 {
		t.Errorf("K/V layout %d slots × %d heads × %d, want 2 × 1 × 64", c.KVLayers(), c.KVHeads, c.HeadDim)
	}
	if got := c.KVBytesPerToken(2); got != 2*2*64*2 {
		t.Errorf("f16 K/V per token %d, want %d", got, 2*2*64*2)
	}
	if got := c.LatentBytesPerToken(2); got != 3*64*2 {
		t.Errorf("f16 latent per token %d, want %d", got, 3*64*2)
	}
	// Uncompressed: 3 layers × 4 heads × (K 32 + V 16).
	if got := c.GQAKVBytesPerToken(2); got != 3*4*(32+16)*2 {
		t.Errorf("f16 per-head K/V per token %d, want %d", got, 3*4*(32+16)*2)
	}
	// Per KDA layer: conv (4−1) × 3·64 floats, delta rule 4 heads × 16².
	if got, want := c.StateBytes(), 4*3*(3*192+4*16*16); got != want {
		t.Errorf("state %d bytes, want %d", got, want)
	}
	if f := c.StateFormat(); !strings.HasPrefix(f, "kda1/") {
		t.Errorf("state format %q", f)
	}
	e := c.MoE
	if e.Experts != 8 || e.Used != 2 || e.Shared != 1 || e.FFN != 32 || e.DenseLead != 1 || e.Gating != model.GatingSigmoid || e.WeightsScale != 2.446 || !e.NormWeights {
		t.Errorf("moe %+v", e)
	}
	if c.MoELayer(0) || !c.MoELayer(1) {
		t.Error("layer 0 should be dense, 1 MoE")
	}
}

// TestKimiLatentSlots: each MLA layer reads back its own latent rows from the slot half
// Config.KVLayers describes, and nothing else is cached: spoiling one MLA layer's rows
// changes the next token's logits, spoiling the unused half (three MLA layers, four halves)
// changes nothing.
func TestKimiLatentSlots(t *testing.T) {
	pool := kernels.NewPool(2)
	defer pool.Close()
	m, err := model.Load(presetFile(t, "tiny-kimi-linear"), pool)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	prompt := []int32{11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133, 144, 155, 166, 177, 188, 199, 210}
	run := func(spoil func(r *runner)) []float32 {
		r := newRunner(t, m, len(prompt)+1, kvcache.F32)
		r.prefill(t, prompt, len(prompt))
		if spoil != nil {
			spoil(r)
		}
		logits := make([]float32, c.Vocab)
		if err := m.Forward([]model.Sequence{{Tokens: []int32{7}, Pos: len(prompt), KV: r.kv, State: r.state, Logits: logits}}); err != nil {
			t.Fatal(err)
		}
		return logits
	}
	want := run(nil)
	l := kvcache.Layout{BlockSize: 16, Layers: c.KVLayers(), KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: kvcache.F32}
	spoilHalf := func(slot, half int) func(r *runner) {
		return func(r *runner) {
			arena := r.arena.F32()
			for pos := 0; pos < len(prompt); pos++ {
				o := int(r.kv.Table[pos/16])*l.BlockElems() + l.Offset(slot, half, pos%16)
				for i := 0; i < l.RowElems(); i++ {
					arena[o+i] = 0.5
				}
			}
		}
	}
	same := func(a []float32) bool {
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(want[i]) {
				return false
			}
		}
		return true
	}
	for _, h := range [][2]int{{0, 0}, {0, 1}, {1, 0}} {
		if same(run(spoilHalf(h[0], h[1]))) {
			t.Errorf("spoiling slot %d half %d changed nothing: no MLA layer reads it", h[0], h[1])
		}
	}
	if !same(run(spoilHalf(1, 1))) {
		t.Error("spoiling the unused half (slot 1, V) changed the logits")
	}
}

// TestKimiBadFiles: a kimi-linear file with a missing or mis-shaped tensor, or a missing or
// absurd key, fails at load naming it.
func TestKimiBadFiles(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	f := presetFile(t, "tiny-kimi-linear")
	if _, err := model.Load(f, pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tensor string
		dims   []uint64
	}{
		{"blk.0.ssm_conv1d_q.weight", nil},
		{"blk.0.ssm_conv1d_v.weight", []uint64{3, 1, 64, 1}},
		{"blk.2.ssm_a", []uint64{4}},
		{"blk.2.ssm_f_b.weight", []uint64{16, 32}},
		{"blk.1.attn_k_b.weight", nil},
		{"blk.3.attn_v_b.weight", []uint64{48, 16, 2}},
		{"blk.5.attn_kv_a_mqa.weight", []uint64{64, 48}},
		{"blk.1.ffn_gate_exps.weight", []uint64{64, 32, 7}},
		{"blk.4.exp_probs_b.bias", nil},
		{"blk.1.ffn_down_shexp.weight", nil},
		{"blk.0.ffn_gate.weight", nil},
		{"output.weight", nil},
	} {
		_, err := model.Load(rewrite(t, f, c.tensor, c.dims), pool)
		if err == nil || !strings.Contains(err.Error(), c.tensor) {
			t.Errorf("%s %v: err %v, want one naming the tensor", c.tensor, c.dims, err)
		}
	}
	for key, val := range map[string]any{
		"kimi-linear.attention.kv_lora_rank":     nil,
		"kimi-linear.expert_gating_func":         nil,
		"kimi-linear.kda.head_dim":               nil,
		"kimi-linear.attention.head_count_kv":    []uint32{0, 2, 0, 1, 0, 1},
		"kimi-linear.expert_used_count":          uint32(9),
		"kimi-linear.ssm.conv_kernel":            uint32(1),
		"kimi-linear.rope.dimension_count":       uint32(32),
		"kimi-linear.expert_weights_scale":       float32(math.Inf(1)),
		"kimi-linear.attention.key_length_mla":   uint32(0),
		"kimi-linear.expert_feed_forward_length": []uint32{32, 16, 32, 32, 32, 32},
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
		var buf bytes.Buffer
		w.WriteTo(&buf)
		g, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(key, "kimi-linear.")
		if _, err := model.ParseConfig(g); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s = %v: err %v, want one naming the key", key, val, err)
		}
	}
}

// FuzzKimiConfig feeds mutated kimi-linear and kimi-k3 files to ParseConfig and Load, and runs a short
// step on what loads: an error or a model, never a panic.
func FuzzKimiConfig(f *testing.F) {
	// tiny-kimi-linear made smaller: a seed of ~150 KB rather than ~2 MB (the fuzzing engine
	// runs a 2 MB input at well under one per second).
	p, err := synth.Lookup("tiny-kimi-linear")
	if err != nil {
		f.Fatal(err)
	}
	p.Embed, p.Heads, p.HeadDim, p.FFN, p.VocabSize, p.Layers = 32, 2, 16, 32, 270, 4
	p.Experts, p.ExpertsUsed, p.ExpertFFN, p.KDAHeadDim, p.KVLoraRank = 4, 2, 32, 8, 16
	w, err := synth.BuildPreset(p, synth.Options{Seed: 1})
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	// And tiny-kimi-k3 made as small: K3's keys and tensors (residual mix, gates, latent
	// experts) get mutated too.
	p3, err := synth.Lookup("tiny-kimi-k3")
	if err != nil {
		f.Fatal(err)
	}
	p3.Embed, p3.Heads, p3.HeadDim, p3.FFN, p3.VocabSize, p3.Layers = 32, 2, 16, 32, 270, 4
	p3.Experts, p3.ExpertsUsed, p3.ExpertFFN, p3.KDAHeadDim, p3.KVLoraRank, p3.ExpertLatent = 4, 2, 32, 8, 16, 16
	w3, err := synth.BuildPreset(p3, synth.Options{Seed: 1})
	if err != nil {
		f.Fatal(err)
	}
	buf.Reset()
	if _, err := w3.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	pool := kernels.NewPool(1)
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Parse(data)
		if err != nil {
			return
		}
		c, err := model.ParseConfig(g)
		if err != nil {
			return
		}
		if c.StateBytes() > 1<<30 {
			t.Fatalf("state of %d bytes per sequence accepted", c.StateBytes())
		}
		m, err := model.Load(g, pool)
		if err != nil || c.Dim*c.Vocab > 1<<22 || c.KVLayers()*c.HeadDim > 1<<16 {
			return
		}
		r := newRunner(t, m, 4, kvcache.F32)
		if err := m.Forward([]model.Sequence{{Tokens: []int32{0, 1 % int32(c.Vocab)}, KV: r.kv, State: r.state, Logits: make([]float32, c.Vocab)}}); err != nil {
			t.Fatalf("a loaded model's first step: %v", err)
		}
	})
}
