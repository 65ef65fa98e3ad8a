package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"stockpot/internal/gguf"
	"stockpot/internal/identity"
	"stockpot/internal/model"
	"stockpot/internal/synth"
	"stockpot/internal/tokenizer"
)

// defaultModel is what `stockpot serve` runs with no --model: a synthetic model generated
// deterministically at start-up, nothing downloaded.
const defaultModel = "synthetic:default"

// loadedFile is a parsed model file with what identifies it.
type loadedFile struct {
	name        string
	file        *gguf.File
	fingerprint identity.Fingerprint
	tok         *tokenizer.Tokenizer
	cfg         model.Config
}

// openModel opens a GGUF path or builds a synthetic preset ("synthetic:NAME"), reporting
// progress on w.
func openModel(spec string, w io.Writer) (*loadedFile, error) {
	start := time.Now()
	var f *gguf.File
	var name string
	if preset, ok := strings.CutPrefix(spec, "synthetic:"); ok {
		fmt.Fprintf(w, "stockpot: generating synthetic model %q (seed 0)...\n", preset)
		wr, err := synth.Build(preset, synth.Options{})
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if _, err := wr.WriteTo(&buf); err != nil {
			return nil, err
		}
		if f, err = gguf.Parse(buf.Bytes()); err != nil {
			return nil, err
		}
		name = "stockpot-" + preset
	} else {
		fi, err := os.Stat(spec)
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		fmt.Fprintf(w, "stockpot: mapping %s (%.1f MB)...\n", spec, float64(fi.Size())/1e6)
		if f, err = gguf.Open(spec); err != nil {
			return nil, err
		}
		name = strings.TrimSuffix(fi.Name(), ".gguf")
	}
	cfg, err := model.ParseConfig(f)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	fp, err := identity.Compute(f)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "stockpot: fingerprint %s (%.0f ms)\n", fp.Short(), ms(time.Since(t0)))
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "stockpot: %s: %s, %d layers, dim %d, %d heads (%d kv), vocab %d, context %d — ready in %.0f ms\n",
		name, cfg.Arch, cfg.Layers, cfg.Dim, cfg.Heads, cfg.KVHeads, cfg.Vocab, cfg.ContextLength, ms(time.Since(start)))
	return &loadedFile{name: name, file: f, fingerprint: fp, tok: tok, cfg: cfg}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func cmdSynth(args []string) error {
	fs := newFlagSet("model synth")
	preset := fs.String("preset", "", "preset name ("+presetNames()+")")
	out := fs.String("out", "", "output GGUF path")
	seed := fs.Uint64("seed", 0, "random seed (same seed, same bytes)")
	typ := fs.String("type", "f32", "weight type: f32, f16, bf16, q8_0, q4_0, q5_0, q4_k_m (alias q4_k), q4_k_s, q5_k_m (alias q5_k), q5_k_s, q6_k; the K types are llama-quantize's mixes")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if *preset == "" || *out == "" {
		return fmt.Errorf("model synth: --preset and --out are required (presets: %s)", presetNames())
	}
	opt, err := parseType(*typ)
	if err != nil {
		return err
	}
	opt.Seed = *seed
	start := time.Now()
	if err := synth.WriteFile(*preset, opt, *out); err != nil {
		return err
	}
	fi, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: preset %s, %s weights, seed %d, %.1f MB in %.0f ms\n", *out, *preset, opt.FileTypeName(), *seed, float64(fi.Size())/1e6, ms(time.Since(start)))
	return nil
}

// parseType maps a --type value to the synth options it selects.
func parseType(s string) (synth.Options, error) {
	switch strings.ToLower(s) {
	case "f32":
		return synth.Options{Type: gguf.TypeF32}, nil
	case "f16":
		return synth.Options{Type: gguf.TypeF16}, nil
	case "bf16":
		return synth.Options{Type: gguf.TypeBF16}, nil
	case "q8_0":
		return synth.Options{Type: gguf.TypeQ8_0}, nil
	case "q4_0":
		return synth.Options{Type: gguf.TypeQ4_0}, nil
	case "q5_0":
		return synth.Options{Type: gguf.TypeQ5_0}, nil
	case "q4_k", "q4_k_m":
		return synth.Options{Type: gguf.TypeQ4_K}, nil
	case "q4_k_s":
		return synth.Options{Type: gguf.TypeQ4_K, Small: true}, nil
	case "q5_k", "q5_k_m":
		return synth.Options{Type: gguf.TypeQ5_K}, nil
	case "q5_k_s":
		return synth.Options{Type: gguf.TypeQ5_K, Small: true}, nil
	case "q6_k":
		return synth.Options{Type: gguf.TypeQ6_K}, nil
	}
	return synth.Options{}, fmt.Errorf("unknown weight type %q (want f32, f16, bf16, q8_0, q4_0, q5_0, q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k)", s)
}

func presetNames() string {
	var names []string
	for _, p := range synth.Presets() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

func cmdInfo(args []string) error {
	fs := newFlagSet("model info")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("model info: want one GGUF path or synthetic:PRESET")
	}
	lf, err := openModel(fs.Arg(0), io.Discard)
	if err != nil {
		return err
	}
	c := lf.cfg
	f := lf.file
	fmt.Printf("file:          %s\n", fs.Arg(0))
	fmt.Printf("gguf version:  %d, %d tensors, %d metadata keys\n", f.Version(), len(f.Tensors()), len(f.Keys()))
	fmt.Printf("architecture:  %s\n", c.Arch)
	fmt.Printf("shape:         dim %d, layers %d, heads %d, kv heads %d, head dim %d, ffn %d, vocab %d\n", c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Vocab)
	fmt.Printf("context:       %d\n", c.ContextLength)
	if c.Kimi() {
		fmt.Printf("rope:          none (%s's MLA uses its rope dims unrotated)\n", c.Arch)
	} else {
		fmt.Printf("rope:          base %g, dims %d, freq scale %g, neox %v\n", c.RopeBase, c.RopeDims, c.RopeFreqScale, c.RopeNeoX)
	}
	fmt.Printf("norm eps:      %g; qkv bias %v; qk norm %v; tied embeddings %v\n", c.NormEps, c.QKVBias, c.QKNorm, c.Tied)
	fmt.Printf("layer kinds:   %s\n", layerKinds(c))
	if ml := c.MLA; ml.KVLoraRank > 0 {
		// MLA: one latent row per token and layer, two layers per K/V slot.
		fmt.Printf("kv per token:  %d bytes f32, %d bytes f16 (%d MLA layers × latent %d = kv_lora_rank %d + rope %d, in %d K/V slots)\n",
			c.KVBytesPerToken(4), c.KVBytesPerToken(2), c.Layers-c.DeltaLayers(), ml.LatentDim(), ml.KVLoraRank, ml.RopeDims, c.KVLayers())
		gqa := c.GQAKVBytesPerToken(2)
		fmt.Printf("kv vs gqa:     %d bytes f16 per token with per-head K/V (%d heads × (K %d + V %d) per layer): the latent is %.1f× smaller\n",
			gqa, c.Heads, ml.KHeadDim, ml.VHeadDim, float64(gqa)/float64(c.KVBytesPerToken(2)))
		fmt.Printf("mla:           kv_lora_rank %d, rope dims %d (unrotated), key length %d, value length %d\n", ml.KVLoraRank, ml.RopeDims, ml.KHeadDim, ml.VHeadDim)
	} else {
		fmt.Printf("kv per token:  %d bytes f32, %d bytes f16 (%d attention layers × K and V × %d)\n",
			c.KVBytesPerToken(4), c.KVBytesPerToken(2), c.KVLayers(), c.KVDim())
	}
	fmt.Printf("state per seq: %d bytes (f32, any length)", c.StateBytes())
	if c.Hybrid() {
		s := c.SSM
		kind := "deltanet"
		if c.Kimi() {
			kind = "kda"
		}
		fmt.Printf(": %d %s layers × (conv %d + delta rule %d floats), format %s\n", c.DeltaLayers(), kind, s.ConvStateFloats(), s.DeltaStateFloats(), c.StateFormat())
		if kind == "kda" {
			fmt.Printf("kda:           conv kernel %d on q, k and v, head dim %d, heads %d; per-channel decay, sigmoid output gate\n", s.ConvKernel, s.StateSize, s.VHeads)
		} else {
			fmt.Printf("deltanet:      conv kernel %d, state size %d, key heads %d, value heads %d; attention gated; rope sections %v\n",
				s.ConvKernel, s.StateSize, s.KHeads, s.VHeads, c.RopeSections)
		}
		// What serve keeps per checkpoint, against the K/V of the block it ends (at the
		// default block size): the cost of --state-checkpoint-blocks 1.
		const bs = 16
		fmt.Printf("checkpoints:   %d bytes each (format %s); one per block of %d tokens is %.2fx its f32 K/V (%d bytes)\n",
			c.StateEncodedBytes(), c.StateFormat(), bs, float64(c.StateEncodedBytes())/float64(bs*c.KVBytesPerToken(4)), bs*c.KVBytesPerToken(4))
	} else {
		fmt.Println()
	}
	if c.MoE.Experts > 0 {
		fmt.Printf("moe:           %s\n", c.MoE)
	}
	types := map[gguf.Type]int{}
	var params uint64
	for _, t := range f.Tensors() {
		types[t.Type]++
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		params += n
	}
	fmt.Printf("parameters:    %.1fM; tensor types %v\n", float64(params)/1e6, types)
	if ft, ok := f.Uint("general.file_type"); ok {
		fmt.Printf("file type:     %s (general.file_type %d)\n", fileTypeName(ft), ft)
	}
	fmt.Printf("tensors:       type of every tensor (per-layer tensors by name, with their layers)\n")
	for _, l := range tensorTypeLines(f.Tensors()) {
		fmt.Printf("  %s\n", l)
	}
	tm, _ := f.String("tokenizer.ggml.model")
	pre, _ := f.String("tokenizer.ggml.pre")
	fmt.Printf("tokenizer:     %s (pre %q), %d tokens, bos %d, eos %d, add bos %v\n", tm, pre, lf.tok.VocabSize(), lf.tok.BOS(), lf.tok.EOS(), lf.tok.AddBOS())
	tmpl, _ := f.String("tokenizer.chat_template")
	fmt.Printf("chat template: %s\n", oneLine(tmpl, 100))
	fmt.Printf("fingerprint:   %s\n", lf.fingerprint)
	return nil
}

// fileTypeName is llama.cpp's name for a general.file_type (enum
// llama_ftype) value.
func fileTypeName(ft uint64) string {
	names := map[uint64]string{0: "F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 8: "Q5_0", 10: "Q2_K", 11: "Q3_K_S",
		12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}
	if n, ok := names[ft]; ok {
		return n
	}
	return fmt.Sprintf("ftype %d", ft)
}

// tensorTypeLines lists every tensor's type: tensors outside the layers one
// per line with their dims, then each per-layer tensor name
// ("attn_v.weight") once, with the layers of each type it has
// ("Q6_K layers 0-3,6; Q4_K layers 4,5,7"). Names keep the file's order of
// first appearance.
func tensorTypeLines(ts []gguf.TensorInfo) []string {
	type role struct {
		types  []gguf.Type
		layers map[gguf.Type][]int
	}
	var order []string
	roles := map[string]*role{}
	var lines []string
	for _, t := range ts {
		var layer int
		var rest string
		if n, err := fmt.Sscanf(t.Name, "blk.%d.", &layer); err != nil || n != 1 {
			lines = append(lines, fmt.Sprintf("%-32s %-5s %v", t.Name, t.Type, t.Dims))
			continue
		}
		rest = strings.TrimPrefix(t.Name, fmt.Sprintf("blk.%d.", layer))
		r := roles[rest]
		if r == nil {
			r = &role{layers: map[gguf.Type][]int{}}
			roles[rest] = r
			order = append(order, rest)
		}
		if _, ok := r.layers[t.Type]; !ok {
			r.types = append(r.types, t.Type)
		}
		r.layers[t.Type] = append(r.layers[t.Type], layer)
	}
	for _, name := range order {
		r := roles[name]
		var parts []string
		for _, ty := range r.types {
			parts = append(parts, fmt.Sprintf("%s layers %s", ty, layerRuns(r.layers[ty])))
		}
		lines = append(lines, fmt.Sprintf("%-32s %s", name, strings.Join(parts, "; ")))
	}
	return lines
}

// layerRuns writes sorted layer numbers as runs: "0-3,6,9-11".
func layerRuns(ls []int) string {
	ls = append([]int(nil), ls...)
	sort.Ints(ls)
	var parts []string
	for i := 0; i < len(ls); {
		j := i
		for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ls[i], ls[j]))
		} else {
			parts = append(parts, fmt.Sprint(ls[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// layerKinds writes the layer pattern as runs: "deltanet×3 attention deltanet×3 attention".
func layerKinds(c model.Config) string {
	var parts []string
	for l := 0; l < c.Layers; {
		k, n := c.Kind(l), 0
		for l < c.Layers && c.Kind(l) == k {
			l++
			n++
		}
		if n == 1 {
			parts = append(parts, k.String())
		} else {
			parts = append(parts, fmt.Sprintf("%s×%d", k, n))
		}
	}
	return strings.Join(parts, " ")
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	if s == "" {
		return "(none)"
	}
	return s
}
