package model_test

import (
	"math"
	"testing"

	"stockpot/internal/model"
)

// TestWork: the per-token work of a llama-style preset counted by hand, and the hybrids'
// attention share: a model with fewer attention layers attends for less of its work.
func TestWork(t *testing.T) {
	c, err := model.ParseConfig(presetFile(t, "tiny-qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	// tiny-qwen2: 64 wide, heads 4×16, kv heads 2×16, ffn 192.
	D, q, kv, f := 64.0, 64.0, 32.0, 192.0
	layer := D*(q+2*kv) + q*D + 3*D*f
	want := model.Work{Token: float64(c.Layers) * layer, Attend: float64(c.Layers) * 2 * q}
	if got := c.Work(); math.Abs(got.Token-want.Token) > 0.5 || got.Attend != want.Attend {
		t.Errorf("qwen2 work %+v, want %+v", got, want)
	}
	if got := c.AttendCost(); math.Abs(got-want.Attend/want.Token) > 1e-12 {
		t.Errorf("attend cost %v", got)
	}
	// Only the attention (or MLA) layers attend: qwen35 one in four, the Kimis one in two or four.
	for _, p := range []string{"tiny-qwen35", "tiny-kimi-linear", "tiny-kimi-k3", "small-kimi-k3"} {
		h, err := model.ParseConfig(presetFile(t, p))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for l := 0; l < h.Layers; l++ {
			if k := h.Kind(l); k == model.LayerAttention || k == model.LayerMLA {
				n++
			}
		}
		per := 2.0 * float64(h.Heads*h.HeadDim)
		if h.Kimi() {
			per = float64(h.Heads * (h.MLA.LatentDim() + h.MLA.KVLoraRank))
		}
		w := h.Work()
		if w.Attend != float64(n)*per || w.Token <= 0 || h.AttendCost() != w.Attend/w.Token {
			t.Errorf("%s: work %+v, attend cost %v; want attend %d layers × %v", p, w, h.AttendCost(), n, per)
		}
	}
}
