//go:build amd64 && !race

package model_test

import (
	"testing"

	"stockpot/internal/gguf"
)

// TestDecodeStepAllocatesNothing: a steady-state decode step of a llama-style model allocates
// nothing on the heap, at 1 and 4 streams, for F32 weights and for the quantized pair kernels
// (Q8_0, Q4_0; Q4_K's mix adds the K-quant kernels and the Q5_0/Q8_0 fallbacks). A count, not
// a time: the race detector allocates on its own, hence the build tag.
func TestDecodeStepAllocatesNothing(t *testing.T) {
	for _, wt := range []gguf.Type{gguf.TypeF32, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_K} {
		m := loadSynth(t, "default", wt)
		for _, streams := range []int{1, 4} {
			step := newDecodeBatch(t, m, streams)
			var stepErr error
			if a := testing.AllocsPerRun(20, func() {
				if err := step(); err != nil {
					stepErr = err
				}
			}); stepErr != nil || a != 0 {
				t.Errorf("%v, %d streams: %v allocations per decode step (%v), want 0", wt, streams, a, stepErr)
			}
		}
	}
}

// TestDecodeStepAllocatesNothingArch: the same for the other architectures' own layer code
// (qwen2's biases, qwen3's QK-norm, qwen35's DeltaNet and gated attention, kimi-linear's KDA,
// MLA and MoE, Kimi-K3's residual mix and latent experts), F32 and Q8_0 weights.
func TestDecodeStepAllocatesNothingArch(t *testing.T) {
	for _, p := range []string{"tiny-qwen2", "tiny-qwen3", "tiny-qwen35", "tiny-kimi-linear", "tiny-kimi-k3"} {
		for _, wt := range []gguf.Type{gguf.TypeF32, gguf.TypeQ8_0} {
			m := loadSynth(t, p, wt)
			for _, streams := range []int{1, 4} {
				step := newDecodeBatch(t, m, streams)
				var stepErr error
				if a := testing.AllocsPerRun(10, func() {
					if err := step(); err != nil {
						stepErr = err
					}
				}); stepErr != nil || a != 0 {
					t.Errorf("%s %v, %d streams: %v allocations per decode step (%v), want 0", p, wt, streams, a, stepErr)
				}
			}
		}
	}
}
