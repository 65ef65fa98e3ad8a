package model

import (
	"math"
	"testing"
)

// TestRoute: the router's choice and weights per gating function, as llama.cpp's
// build_moe_ffn computes them: the selection bias picks the experts but does not weigh them,
// weights are renormalized over the chosen ones and then scaled.
func TestRoute(t *testing.T) {
	logits := []float32{0.5, -1, 2, 0.1, 1.5}
	bias := []float32{0, 3, 0, 0, 0} // lifts expert 1 (sigmoid(−1) ≈ 0.27) above all
	sig := func(x float32) float64 { return 1 / (1 + math.Exp(-float64(x))) }
	for _, c := range []struct {
		name   string
		moe    MoEConfig
		bias   []float32
		sel    []int
		weight []float64
	}{
		{"sigmoid, no bias", MoEConfig{Gating: GatingSigmoid}, nil, []int{2, 4}, []float64{sig(2), sig(1.5)}},
		{"sigmoid, bias picks", MoEConfig{Gating: GatingSigmoid}, bias, []int{1, 2}, []float64{sig(-1), sig(2)}},
		{"sigmoid, normalized and scaled", MoEConfig{Gating: GatingSigmoid, NormWeights: true, WeightsScale: 2.5}, bias, []int{1, 2},
			[]float64{2.5 * sig(-1) / (sig(-1) + sig(2)), 2.5 * sig(2) / (sig(-1) + sig(2))}},
		{"softmax", MoEConfig{Gating: GatingSoftmax}, nil, []int{2, 4}, func() []float64 {
			var z float64
			for _, l := range logits {
				z += math.Exp(float64(l))
			}
			return []float64{math.Exp(2) / z, math.Exp(1.5) / z}
		}()},
		{"softmax over the chosen", MoEConfig{Gating: GatingSoftmaxWeight}, nil, []int{2, 4},
			[]float64{1 / (1 + math.Exp(-0.5)), 1 / (1 + math.Exp(0.5))}},
	} {
		c.moe.Experts, c.moe.Used = len(logits), 2
		cfg := Config{MoE: c.moe}
		sel, w := make([]int, 2), make([]float32, 2)
		cfg.route(append([]float32(nil), logits...), c.bias, sel, w)
		for k := range sel {
			if sel[k] != c.sel[k] || math.Abs(float64(w[k])-c.weight[k]) > 1e-6 {
				t.Errorf("%s: chose %v weights %v, want %v %v", c.name, sel, w, c.sel, c.weight)
				break
			}
		}
	}
}
