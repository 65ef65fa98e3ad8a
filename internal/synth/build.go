package synth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"stockpot/internal/gguf"
)

// ErrUnknownPreset is returned (wrapped) by Lookup, Build and WriteFile for
// a preset name that does not exist.
var ErrUnknownPreset = errors.New("unknown preset")

// Options select the random weights and how they are stored.
type Options struct {
	// Seed selects the weights; the same seed gives the same file.
	Seed uint64
	// Type is the weight type: F32 (the zero value), F16, BF16, Q8_0, Q4_0,
	// Q5_0, Q4_K, Q5_K or Q6_K. Q4_K and Q5_K are llama-quantize's Q4_K_M
	// and Q5_K_M mixes (Q6_K for the output head and for attn_v/attn_qkv
	// and ffn_down in the layers use_more_bits picks), Q4_K_S and Q5_K_S
	// with Small. Every quantized type takes llama-quantize's shape
	// fallbacks where a row is not a multiple of 256 (Q4_K -> Q5_0,
	// Q6_K -> Q8_0); see tensorType.
	Type gguf.Type
	// Small selects llama-quantize's _S mix of Q4_K or Q5_K instead of its
	// _M mix. Other types must leave it false.
	Small bool
}

// fileTypes maps a weight type to llama.cpp's general.file_type (enum
// llama_ftype): ALL_F32, MOSTLY_F16, MOSTLY_Q4_0, MOSTLY_Q8_0, MOSTLY_Q5_0,
// MOSTLY_Q4_K_M, MOSTLY_Q5_K_M, MOSTLY_Q6_K, MOSTLY_BF16. The _S mixes are
// one less (smallFileTypes).
var fileTypes = map[gguf.Type]uint32{
	gguf.TypeF32: 0, gguf.TypeF16: 1, gguf.TypeQ4_0: 2, gguf.TypeQ8_0: 7, gguf.TypeQ5_0: 8,
	gguf.TypeQ4_K: 15, gguf.TypeQ5_K: 17, gguf.TypeQ6_K: 18, gguf.TypeBF16: 32,
}

// smallFileTypes are MOSTLY_Q4_K_S and MOSTLY_Q5_K_S.
var smallFileTypes = map[gguf.Type]uint32{gguf.TypeQ4_K: 14, gguf.TypeQ5_K: 16}

// fileType is o's general.file_type.
func (o Options) fileType() uint32 {
	if o.Small {
		return smallFileTypes[o.Type]
	}
	return fileTypes[o.Type]
}

// FileTypeName is llama.cpp's name for the file type o writes ("Q4_K_M",
// "Q8_0").
func (o Options) FileTypeName() string {
	switch {
	case o.Type == gguf.TypeQ4_K || o.Type == gguf.TypeQ5_K:
		if o.Small {
			return o.Type.String() + "_S"
		}
		return o.Type.String() + "_M"
	}
	return o.Type.String()
}

func (o Options) validate() error {
	if _, ok := fileTypes[o.Type]; !ok {
		return fmt.Errorf("synth: weight type %s is not one of F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K", o.Type)
	}
	if _, ok := smallFileTypes[o.Type]; o.Small && !ok {
		return fmt.Errorf("synth: weight type %s has no _S mix (only Q4_K and Q5_K)", o.Type)
	}
	return nil
}

func (p Preset) validate() error {
	switch {
	case p.Arch != "llama" && p.Arch != "qwen2" && p.Arch != "qwen3" && p.Arch != "qwen35" && !p.IsKimi():
		return fmt.Errorf("synth: preset %s: unsupported architecture %q", p.Name, p.Arch)
	case p.Embed <= 0 || p.Layers <= 0 || p.Heads <= 0 || p.KVHeads <= 0 || p.FFN <= 0 || p.Context <= 0:
		return fmt.Errorf("synth: preset %s: every size must be positive", p.Name)
	case p.Heads%p.KVHeads != 0:
		return fmt.Errorf("synth: preset %s: %d heads is not a multiple of %d kv heads", p.Name, p.Heads, p.KVHeads)
	case p.HeadDim <= 0 || p.HeadDim%2 != 0:
		return fmt.Errorf("synth: preset %s: head dim %d must be positive and even", p.Name, p.HeadDim)
	case p.Arch != "qwen3" && p.Arch != "qwen35" && p.HeadDim*p.Heads != p.Embed:
		return fmt.Errorf("synth: preset %s: %s needs head dim × heads = embed, have %d × %d != %d", p.Name, p.Arch, p.HeadDim, p.Heads, p.Embed)
	}
	if p.IsKimi() {
		return p.validateKimi()
	}
	if !p.IsHybrid() {
		return nil
	}
	h := p.Hybrid
	rd := p.ropeDims()
	switch {
	case h.FullAttnInterval < 1 || h.SSMConv < 2 || h.SSMState <= 0 || h.SSMKHeads <= 0 || h.SSMVHeads <= 0:
		return fmt.Errorf("synth: preset %s: hybrid sizes must be positive (conv kernel at least 2)", p.Name)
	case h.SSMVHeads%h.SSMKHeads != 0:
		return fmt.Errorf("synth: preset %s: %d value heads is not a multiple of %d key heads", p.Name, h.SSMVHeads, h.SSMKHeads)
	case rd <= 0 || rd%2 != 0 || rd > p.HeadDim:
		return fmt.Errorf("synth: preset %s: rope dims %d with head dim %d", p.Name, rd, p.HeadDim)
	case h.RopeSections[0]+h.RopeSections[1]+h.RopeSections[2]+h.RopeSections[3] <= 0:
		return fmt.Errorf("synth: preset %s: rope sections %v are empty", p.Name, h.RopeSections)
	}
	return nil
}

func (p Preset) ropeDims() int {
	if p.RopeDims > 0 {
		return p.RopeDims
	}
	return p.HeadDim
}

// Build returns a Writer holding the named preset with random weights.
func Build(preset string, opt Options) (*gguf.Writer, error) {
	p, err := Lookup(preset)
	if err != nil {
		return nil, err
	}
	return BuildPreset(p, opt)
}

// WriteFile builds the named preset and writes it to path.
func WriteFile(preset string, opt Options, path string) error {
	w, err := Build(preset, opt)
	if err != nil {
		return err
	}
	return w.WriteFile(path)
}

// BuildPreset is Build for a preset value, for shapes not in the list.
func BuildPreset(p Preset, opt Options) (*gguf.Writer, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if err := opt.validate(); err != nil {
		return nil, err
	}
	v, _, err := trainedVocab(p.Tokenizer, p.VocabSize)
	if err != nil {
		return nil, err
	}
	nVocab := len(v.Tokens)

	w := gguf.NewWriter()
	a := p.Arch
	w.Set("general.architecture", a)
	w.Set("general.name", "stockpot-synth-"+p.Name)
	w.Set("general.file_type", opt.fileType())
	w.Set("general.quantization_version", uint32(2))
	w.Set(a+".vocab_size", uint32(nVocab))
	w.Set(a+".context_length", uint32(p.Context))
	w.Set(a+".embedding_length", uint32(p.Embed))
	w.Set(a+".block_count", uint32(p.Layers))
	w.Set(a+".feed_forward_length", uint32(p.FFN))
	w.Set(a+".attention.head_count", uint32(p.Heads))
	if !p.IsKimi() {
		w.Set(a+".attention.head_count_kv", uint32(p.KVHeads))
	}
	if p.Arch == "qwen3" || p.IsHybrid() || p.HeadDim*p.Heads != p.Embed {
		w.Set(a+".attention.key_length", uint32(p.HeadDim))
		w.Set(a+".attention.value_length", uint32(p.HeadDim))
	}
	w.Set(a+".attention.layer_norm_rms_epsilon", p.NormEps)
	w.Set(a+".rope.freq_base", p.RopeBase)
	if p.IsKimi() {
		p.setKimiKeys(w)
	} else {
		w.Set(a+".rope.dimension_count", uint32(p.ropeDims()))
	}
	if p.IsHybrid() {
		h := p.Hybrid
		sec := make([]int32, 4)
		for i, v := range h.RopeSections {
			sec[i] = int32(v)
		}
		w.Set(a+".rope.dimension_sections", sec)
		w.Set(a+".full_attention_interval", uint32(h.FullAttnInterval))
		w.Set(a+".ssm.conv_kernel", uint32(h.SSMConv))
		w.Set(a+".ssm.state_size", uint32(h.SSMState))
		w.Set(a+".ssm.group_count", uint32(h.SSMKHeads))
		w.Set(a+".ssm.time_step_rank", uint32(h.SSMVHeads))
		w.Set(a+".ssm.inner_size", uint32(h.SSMVHeads*h.SSMState))
	}
	if err := setTokenizer(w, p); err != nil {
		return nil, err
	}

	b := &builder{w: w, p: p, opt: opt}
	qDim, kvDim := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
	inStd := 1 / math.Sqrt(float64(p.Embed))
	// The output head: logits = norm(x)·W have std ≈ 1.5 when W's std is
	// 1.5/sqrt(embed). A tied embedding has the same scale, and must stay
	// small beside what the layers add to the residual stream: the logit of
	// the input token itself grows as (its embedding's norm)² / rms(x), and
	// a large one makes every tied model repeat its last token.
	headStd := 1.5 / math.Sqrt(float64(p.Embed))

	b.matrix("token_embd.weight", p.Embed, nVocab, headStd, -1)
	if p.RopeLlama3 {
		b.vector("rope_freqs.weight", llama3RopeFactors(p.HeadDim, p.RopeBase))
	}
	for l := 0; l < p.Layers; l++ {
		n := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		if p.IsHybrid() {
			b.hybridLayer(l, n)
			continue
		}
		if p.IsKimi() {
			b.kimiLayer(l, n)
			continue
		}
		b.norm(n("attn_norm.weight"), p.Embed)
		b.matrix(n("attn_q.weight"), p.Embed, qDim, inStd, l)
		b.matrix(n("attn_k.weight"), p.Embed, kvDim, inStd, l)
		b.matrix(n("attn_v.weight"), p.Embed, kvDim, inStd, l)
		if p.QKVBias() {
			b.bias(n("attn_q.bias"), qDim)
			b.bias(n("attn_k.bias"), kvDim)
			b.bias(n("attn_v.bias"), kvDim)
		}
		if p.QKNorm() {
			b.norm(n("attn_q_norm.weight"), p.HeadDim)
			b.norm(n("attn_k_norm.weight"), p.HeadDim)
		}
		b.matrix(n("attn_output.weight"), qDim, p.Embed, 1/math.Sqrt(float64(qDim)), l)
		b.norm(n("ffn_norm.weight"), p.Embed)
		b.matrix(n("ffn_gate.weight"), p.Embed, p.FFN, inStd, l)
		b.matrix(n("ffn_up.weight"), p.Embed, p.FFN, inStd, l)
		b.matrix(n("ffn_down.weight"), p.FFN, p.Embed, 1/math.Sqrt(float64(p.FFN)), l)
	}
	if p.IsK3() && p.ResBlock > 0 {
		b.filled("output_res_score.weight", p.Embed, 0, 0.3)
	}
	b.norm("output_norm.weight", p.Embed)
	if !p.Tied {
		b.matrix("output.weight", p.Embed, nVocab, headStd, -1)
	}
	if b.err != nil {
		return nil, b.err
	}
	return w, nil
}

// hybridLayer adds one qwen35 layer: a Gated DeltaNet layer or a gated
// full-attention one, then the FFN. Tensor names and shapes are
// llama.cpp's (src/models/qwen35.cpp, load_arch_tensors).
func (b *builder) hybridLayer(l int, n func(string) string) {
	p := b.p
	h := p.Hybrid
	inStd := 1 / math.Sqrt(float64(p.Embed))
	b.norm(n("attn_norm.weight"), p.Embed)
	if p.Recurrent(l) {
		keyDim, valueDim := h.SSMKHeads*h.SSMState, h.SSMVHeads*h.SSMState
		convDim := 2*keyDim + valueDim
		b.matrix(n("attn_qkv.weight"), p.Embed, convDim, inStd, l)
		b.matrix(n("attn_gate.weight"), p.Embed, valueDim, inStd, l)
		// The conv kernel stays f32 in every file type (llama-quantize skips
		// ssm_conv1d, and ggml's ssm_conv reads f32 only); see tensorType.
		b.matrix(n("ssm_conv1d.weight"), h.SSMConv, convDim, 1/math.Sqrt(float64(h.SSMConv)), l)
		// dt bias near 0 and A = -exp(A_log) in about [-1.5, -0.5]: decays
		// exp(softplus(α+dt)·A) spread over (0, 1) as trained models have.
		b.filled(n("ssm_dt.bias"), h.SSMVHeads, 0, 0.5)
		b.filled(n("ssm_a"), h.SSMVHeads, -1, 0.3)
		b.matrix(n("ssm_beta.weight"), p.Embed, h.SSMVHeads, inStd, l)
		b.matrix(n("ssm_alpha.weight"), p.Embed, h.SSMVHeads, inStd, l)
		b.norm(n("ssm_norm.weight"), h.SSMState)
		b.matrix(n("ssm_out.weight"), valueDim, p.Embed, 1/math.Sqrt(float64(valueDim)), l)
	} else {
		qDim, kvDim := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
		// Each head's query is followed by its output gate: 2·qDim rows.
		b.matrix(n("attn_q.weight"), p.Embed, 2*qDim, inStd, l)
		b.matrix(n("attn_k.weight"), p.Embed, kvDim, inStd, l)
		b.matrix(n("attn_v.weight"), p.Embed, kvDim, inStd, l)
		b.norm(n("attn_q_norm.weight"), p.HeadDim)
		b.norm(n("attn_k_norm.weight"), p.HeadDim)
		b.matrix(n("attn_output.weight"), qDim, p.Embed, 1/math.Sqrt(float64(qDim)), l)
	}
	b.norm(n("post_attention_norm.weight"), p.Embed)
	b.matrix(n("ffn_gate.weight"), p.Embed, p.FFN, inStd, l)
	b.matrix(n("ffn_up.weight"), p.Embed, p.FFN, inStd, l)
	b.matrix(n("ffn_down.weight"), p.FFN, p.Embed, 1/math.Sqrt(float64(p.FFN)), l)
}

// filled adds an f32 vector uniform around center with the given std.
func (b *builder) filled(name string, n int, center, std float64) {
	v := make([]float32, n)
	fill(v, b.opt.Seed, name, center, std)
	b.vector(name, v)
}

// builder adds tensors, keeping the first error.
type builder struct {
	w   *gguf.Writer
	p   Preset
	opt Options
	err error
}

// Norm weights are uniform on 1 ± 0.1 and biases have std 0.05: near the values real
// checkpoints hold, and far enough from 1 and 0 that code which ignores
// them gives visibly different numbers.
const (
	normStd = 0.1 / 1.7320508075688772 // uniform on 1 ± 0.1
	biasStd = 0.05
)

func (b *builder) norm(name string, n int) {
	v := make([]float32, n)
	fill(v, b.opt.Seed, name, 1, normStd)
	b.vector(name, v)
}

func (b *builder) bias(name string, n int) {
	v := make([]float32, n)
	fill(v, b.opt.Seed, name, 0, biasStd)
	b.vector(name, v)
}

func (b *builder) vector(name string, v []float32) {
	if b.err != nil {
		return
	}
	b.err = b.w.AddTensor(name, gguf.TypeF32, []uint64{uint64(len(v))}, f32Bytes(v))
}

// matrix adds a rows×cols matrix (cols = ne0, the row length) with the
// given standard deviation; layer is -1 for tensors outside the blocks.
func (b *builder) matrix(name string, cols, rows int, std float64, layer int) {
	if b.err != nil {
		return
	}
	t, err := tensorType(name, cols, b.opt, layer, b.p.Layers, b.p.Tied)
	if err != nil {
		b.err = err
		return
	}
	v := make([]float32, cols*rows)
	fill(v, b.opt.Seed, name, 0, std)
	data, err := encode(t, v, cols)
	if err != nil {
		b.err = fmt.Errorf("synth: %s as %s: %w", name, t, err)
		return
	}
	b.err = b.w.AddTensor(name, t, []uint64{uint64(cols), uint64(rows)}, data)
}

// tensorType picks a matrix's storage type as llama-quantize does
// (llama_tensor_get_type in llama.cpp's src/llama-quant.cpp) for the file
// types offered and the architectures synth writes (no Falcon, not 70B;
// kimi-linear's expert tensors take the file type like any matrix, its KDA
// conv kernels stay f32 as ssm_conv1d does):
//   - the output head (token_embd when tied) is Q8_0 when its row length is
//     not a multiple of the file type's block, else Q6_K unless the file is
//     Q8_0;
//   - the attn_v-like tensors (attn_v, and the fused attn_qkv of qwen35's
//     recurrent layers: llama.cpp counts them together, one per layer, so
//     its counter is the layer index) are Q6_K in the layers use_more_bits
//     picks in Q4_K_M and Q5_K_M, Q5_K in layers 0..3 in Q4_K_S;
//   - ffn_down is Q6_K in the use_more_bits layers in Q4_K_M and Q5_K_M,
//     Q5_K in the first eighth of the layers in Q4_K_S;
//   - everything else is the file's type (Q5_K_S changes only the head);
//   - then the shape fallback (tensor_type_fallback): a type whose block does
//     not divide the row length becomes Q5_0 (from Q4_K), Q8_0 (from Q6_K),
//     or stays a 32-block type; F16 when even that does not fit. Q5_K falls
//     back to Q5_1, which Stockpot does not compute: that is an error.
//
// Unquantized files (F32, F16, BF16) keep their type for every matrix, and
// ssm_conv1d (and kimi-linear's ssm_conv1d_q/k/v) is never quantized
// (llama-quantize skips it; it is F32 here). Nor is an MoE router
// (ffn_gate_inp): llama-quantize skips it and llama.cpp's converter writes
// it F32 in every file type, so it is F32 here too.
func tensorType(name string, rowLen int, o Options, layer, layers int, tied bool) (gguf.Type, error) {
	ft := o.Type
	if strings.HasSuffix(name, ".ssm_conv1d.weight") || strings.Contains(name, ".ssm_conv1d_") {
		return gguf.TypeF32, nil
	}
	if strings.HasSuffix(name, ".ffn_gate_inp.weight") {
		return gguf.TypeF32, nil // llama-quantize never quantizes an expert router
	}
	if ft == gguf.TypeF32 || ft == gguf.TypeF16 || ft == gguf.TypeBF16 {
		return ft, nil
	}
	t := ft
	isHead := name == "output.weight" || (tied && name == "token_embd.weight")
	kMix := ft == gguf.TypeQ4_K || ft == gguf.TypeQ5_K
	isLayer := func(suffix string) bool { return layer >= 0 && name == fmt.Sprintf("blk.%d.%s", layer, suffix) }
	switch {
	case isHead && rowLen%ft.BlockSize() != 0:
		t = gguf.TypeQ8_0
	case isHead && ft != gguf.TypeQ8_0:
		t = gguf.TypeQ6_K
	case !kMix || layer < 0:
	case isLayer("attn_v.weight") || isLayer("attn_qkv.weight"):
		switch {
		case !o.Small && useMoreBits(layer, layers):
			t = gguf.TypeQ6_K
		case o.Small && ft == gguf.TypeQ4_K && layer < 4:
			t = gguf.TypeQ5_K
		}
	case isLayer("ffn_down.weight"):
		switch {
		case !o.Small && useMoreBits(layer, layers):
			t = gguf.TypeQ6_K
		case o.Small && ft == gguf.TypeQ4_K && layer < layers/8:
			t = gguf.TypeQ5_K
		}
	}
	if rowLen%t.BlockSize() != 0 {
		switch t {
		case gguf.TypeQ4_K:
			t = gguf.TypeQ5_0
		case gguf.TypeQ5_K:
			return 0, fmt.Errorf("synth: %s: a row of %d is not a multiple of 256, and llama-quantize's fallback for Q5_K there is Q5_1, which Stockpot does not support", name, rowLen)
		case gguf.TypeQ6_K:
			t = gguf.TypeQ8_0
		}
		if rowLen%t.BlockSize() != 0 {
			t = gguf.TypeF16
		}
	}
	return t, nil
}

// useMoreBits is llama.cpp's choice of layers that get more bits in the
// _M mixes: the first and last eighth, and every third layer between.
func useMoreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

// encode stores v (rows of rowLen) as type t.
func encode(t gguf.Type, v []float32, rowLen int) ([]byte, error) {
	if t == gguf.TypeF32 {
		return f32Bytes(v), nil
	}
	rb := t.RowBytes(rowLen)
	rows := len(v) / rowLen
	out := make([]byte, rows*rb)
	for r := 0; r < rows; r++ {
		if err := convertRow(t, v[r*rowLen:(r+1)*rowLen], out[r*rb:(r+1)*rb]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}
