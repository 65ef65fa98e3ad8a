package main

import (
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/synth"
)

func TestParseType(t *testing.T) {
	for in, want := range map[string]synth.Options{
		"q4_k": {Type: gguf.TypeQ4_K}, "Q4_K_M": {Type: gguf.TypeQ4_K}, "q4_k_s": {Type: gguf.TypeQ4_K, Small: true},
		"q5_k": {Type: gguf.TypeQ5_K}, "q5_k_m": {Type: gguf.TypeQ5_K}, "q5_k_s": {Type: gguf.TypeQ5_K, Small: true},
		"q6_k": {Type: gguf.TypeQ6_K}, "f32": {Type: gguf.TypeF32},
	} {
		if got, err := parseType(in); err != nil || got != want {
			t.Errorf("parseType(%q) = %+v, %v, want %+v", in, got, err, want)
		}
	}
	if _, err := parseType("q5_1"); err == nil || !strings.Contains(err.Error(), "q5_k_m") {
		t.Errorf("parseType(q5_1): have %v, want an error listing the types", err)
	}
}

func TestTensorTypeLines(t *testing.T) {
	ts := []gguf.TensorInfo{
		{Name: "token_embd.weight", Type: gguf.TypeQ6_K, Dims: []uint64{256, 10}},
		{Name: "blk.0.attn_v.weight", Type: gguf.TypeQ6_K}, {Name: "blk.1.attn_v.weight", Type: gguf.TypeQ4_K},
		{Name: "blk.2.attn_v.weight", Type: gguf.TypeQ4_K}, {Name: "blk.3.attn_v.weight", Type: gguf.TypeQ6_K},
		{Name: "blk.4.attn_v.weight", Type: gguf.TypeQ4_K}, {Name: "blk.10.attn_v.weight", Type: gguf.TypeQ6_K},
		{Name: "blk.0.ffn_down.weight", Type: gguf.TypeQ5_K},
	}
	got := strings.Join(tensorTypeLines(ts), "\n")
	for _, want := range []string{"token_embd.weight                Q6_K  [256 10]",
		"attn_v.weight                    Q6_K layers 0,3,10; Q4_K layers 1-2,4", "ffn_down.weight                  Q5_K layers 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("tensorTypeLines: no %q in\n%s", want, got)
		}
	}
}
