package synth_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/synth"
)

// TestLlamaCppLoads checks that llama.cpp (node-llama-cpp, the pinned
// reference) loads every preset, agrees on the shape and vocabulary,
// tokenizes and detokenizes text back, and evaluates to finite logits with
// a sane spread. Skipped where the reference is not installed, and in
// -short mode.
//
// Each case starts llama.cpp once (seconds). By default it covers every
// preset in F32 (kquant-80m in the Q4_K_M mix it exists for), tiny-kquant
// in the Q4_K_M mix (SPM with byte fallback) and tiny-qwen2 in the Q4_K_M
// mix (Q5_0 and Q8_0 fallbacks). With STOCKPOT_SYNTH_ALL=1 it adds every
// weight type on tiny-kquant and a few more mixes.
func TestLlamaCppLoads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts llama.cpp; skipped in -short")
	}
	type tc struct {
		preset string
		typ    gguf.Type
	}
	// Every preset, as the issue asks, plus one K-quant mix; STOCKPOT_SYNTH_ALL adds the other
	// weight types.
	var cases []tc
	for _, p := range synth.Presets() {
		typ := gguf.TypeF32
		if p.Name == "kquant-80m" {
			typ = gguf.TypeQ4_K // what it is for; 51 MB rather than 330 in f32
		}
		cases = append(cases, tc{p.Name, typ})
	}
	// tiny-kquant's rows fit Q4_K; tiny-qwen2's 64-wide rows take the Q4_K_M
	// mix's shape fallbacks (Q5_0, Q8_0).
	cases = append(cases, tc{"tiny-kquant", gguf.TypeQ4_K}, tc{"tiny-qwen2", gguf.TypeQ4_K})
	if os.Getenv("STOCKPOT_SYNTH_ALL") != "" {
		for _, ft := range []gguf.Type{gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
			cases = append(cases, tc{"tiny-kquant", ft})
		}
		cases = append(cases, tc{"tiny-qwen3", gguf.TypeQ8_0}, tc{"tiny-qwen2", gguf.TypeQ4_0}, tc{"default", gguf.TypeQ4_K})
	}

	const text = "Hello world, the quick brown fox 123 日本 🙂\nnext line"
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.preset+"/"+c.typ.String(), func(t *testing.T) {
			p, _ := synth.Lookup(c.preset)
			path := filepath.Join(dir, c.preset+"."+c.typ.String()+".gguf")
			if err := synth.WriteFile(c.preset, synth.Options{Seed: 5, Type: c.typ}, path); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			tokens, _ := f.Strings("tokenizer.ggml.tokens")
			bos, _ := f.Uint("tokenizer.ggml.bos_token_id")
			eos, _ := f.Uint("tokenizer.ggml.eos_token_id")
			f.Close()

			b := llamaref.NewBatch(path)
			info := b.Metadata()
			toks := b.Tokenize([]string{text}, false, false)
			prompt := [][]int32{{int32(bos), 10, 20, 30, 40, 50, 60, 70}}
			res := b.Evaluate(prompt, 4, llamaref.Options{})
			err = b.Run()
			if err != nil {
				t.Fatal(err)
			}
			if info.Architecture != p.Arch || info.VocabSize != len(tokens) || info.NLayer != p.Layers || info.NEmbd != p.Embed {
				t.Errorf("llama.cpp sees %+v", *info)
			}
			if info.BOS == nil || uint64(*info.BOS) != bos || info.EOS == nil || uint64(*info.EOS) != eos {
				t.Errorf("llama.cpp bos/eos %v/%v, want %d/%d", info.BOS, info.EOS, bos, eos)
			}
			texts, err := llamaref.Detokenize(path, *toks, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(texts) != 1 || texts[0] != text {
				t.Errorf("llama.cpp round trip %q -> %v -> %q", text, *toks, texts)
			}
			r := (*res)[0]
			if len(r.Continuation) != 4 || len(r.LastLogprobs) != len(tokens) {
				t.Fatalf("result: %d continuation tokens, %d logprobs", len(r.Continuation), len(r.LastLogprobs))
			}
			// log-probabilities are logits minus a constant: their spread is
			// the logits' standard deviation.
			var sum, sq float64
			n := 0
			for _, lp := range r.LastLogprobs {
				if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 1) {
					t.Fatalf("log-probability %v", lp)
				}
				if !math.IsInf(float64(lp), -1) {
					sum += float64(lp)
					sq += float64(lp) * float64(lp)
					n++
				}
			}
			mean := sum / float64(n)
			std := math.Sqrt(sq/float64(n) - mean*mean)
			t.Logf("logit std %.2f, greedy %v", std, r.Continuation)
			if std < 0.5 || std > 5 {
				t.Errorf("logit std %.2f outside [0.5, 5]", std)
			}
		})
	}
}

// TestMixMatchesLlamaQuantize checks the per-tensor types, and the bytes,
// of synth's quantized files against what llama-quantize makes of the F32
// build of the same seed (llamaref.Quantize: llama_model_quantize in the
// reference library, default parameters): every tensor has the same type,
// dims and data, and the file the same general.file_type. The cases cover
// the K mixes on 256-wide rows (tiny-kquant), their shape fallbacks
// (tiny-qwen2, default), qwen35's fused attn_qkv, which llama.cpp
// counts as attn_v, kimi-linear's MoE router (ffn_gate_inp, never
// quantized) and F16 shape fallbacks, and Kimi-K3's extra tensors (residual
// scores, gates, latent experts) in Q8_0. Skipped in -short mode.
func TestMixMatchesLlamaQuantize(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp's quantizer; skipped in -short")
	}
	type tc struct {
		preset string
		opt    synth.Options
	}
	var cases []tc
	for _, o := range []synth.Options{
		{Type: gguf.TypeQ4_K}, {Type: gguf.TypeQ4_K, Small: true}, {Type: gguf.TypeQ5_K}, {Type: gguf.TypeQ5_K, Small: true},
		{Type: gguf.TypeQ6_K}, {Type: gguf.TypeQ8_0}, {Type: gguf.TypeQ4_0}, {Type: gguf.TypeQ5_0},
	} {
		cases = append(cases, tc{"tiny-kquant", o})
	}
	cases = append(cases, tc{"tiny-qwen2", synth.Options{Type: gguf.TypeQ4_K}}, tc{"tiny-qwen35", synth.Options{Type: gguf.TypeQ4_K}},
		tc{"tiny-qwen35", synth.Options{Type: gguf.TypeQ6_K}}, tc{"default", synth.Options{Type: gguf.TypeQ4_K}},
		tc{"tiny-kimi-linear", synth.Options{Type: gguf.TypeQ8_0}}, tc{"tiny-kimi-k3", synth.Options{Type: gguf.TypeQ8_0}})
	dir := t.TempDir()
	for _, c := range cases {
		c.opt.Seed = 5
		t.Run(c.preset+"/"+c.opt.FileTypeName(), func(t *testing.T) {
			f32 := filepath.Join(dir, c.preset+".f32.gguf")
			if _, err := os.Stat(f32); err != nil {
				if err := synth.WriteFile(c.preset, synth.Options{Seed: 5}, f32); err != nil {
					t.Fatal(err)
				}
			}
			refPath := filepath.Join(dir, c.preset+"."+c.opt.FileTypeName()+".llama.gguf")
			if err := llamaref.Quantize(f32, refPath, c.opt.FileTypeName()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, c.preset+"."+c.opt.FileTypeName()+".gguf")
			if err := synth.WriteFile(c.preset, c.opt, path); err != nil {
				t.Fatal(err)
			}
			ref, err := gguf.Open(refPath)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if a, b := mustUint(t, f, "general.file_type"), mustUint(t, ref, "general.file_type"); a != b {
				t.Errorf("general.file_type %d, llama-quantize %d", a, b)
			}
			if len(f.Tensors()) != len(ref.Tensors()) {
				t.Fatalf("%d tensors, llama-quantize %d", len(f.Tensors()), len(ref.Tensors()))
			}
			types := map[gguf.Type]int{}
			for _, rt := range ref.Tensors() {
				ti, ok := f.Tensor(rt.Name)
				if !ok {
					t.Errorf("%s: missing", rt.Name)
					continue
				}
				types[rt.Type]++
				if ti.Type != rt.Type || fmt.Sprint(trimDims(ti.Dims)) != fmt.Sprint(trimDims(rt.Dims)) {
					t.Errorf("%s: %s %v, llama-quantize %s %v", rt.Name, ti.Type, ti.Dims, rt.Type, rt.Dims)
					continue
				}
				a, err := f.TensorData(rt.Name)
				if err != nil {
					t.Fatal(err)
				}
				b, err := ref.TensorData(rt.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("%s (%s): data differs from llama-quantize's", rt.Name, rt.Type)
				}
			}
			t.Logf("tensor types %v", types)
		})
	}
}

func mustUint(t *testing.T, f *gguf.File, key string) uint64 {
	t.Helper()
	v, ok := f.Uint(key)
	if !ok {
		t.Fatalf("no %s", key)
	}
	return v
}

// trimDims drops trailing dims of 1: ggml's shape is the same with or
// without them, and llama-quantize writes only n_dims of them (kimi-linear's
// ssm_a and conv kernels are {1, heads, 1, 1} and {conv, 1, inner, 1} as the
// converter writes them).
func trimDims(d []uint64) []uint64 {
	for len(d) > 1 && d[len(d)-1] == 1 {
		d = d[:len(d)-1]
	}
	return d
}
