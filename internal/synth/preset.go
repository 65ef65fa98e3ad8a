package synth

import (
	"fmt"

	"stockpot/internal/tokenizer"
)

// Tokenizer names a tokenizer family: the vocabulary kind, pre-tokenizer
// and special tokens a preset uses.
type Tokenizer string

const (
	TokenizerSPM    Tokenizer = "spm"    // Llama 2 SentencePiece: <unk> <s> </s>, byte fallback
	TokenizerLlama3 Tokenizer = "llama3" // byte-level BPE, pre "llama-bpe", Llama 3 header tokens
	TokenizerQwen2  Tokenizer = "qwen2"  // byte-level BPE, pre "qwen2", ChatML tokens, <tool_call> </tool_call> (user-defined)
	TokenizerQwen3  Tokenizer = "qwen3"  // TokenizerQwen2 plus <think> </think> (user-defined)
	TokenizerQwen35 Tokenizer = "qwen35" // TokenizerQwen3's tokens, pre "qwen35"
	TokenizerSmolLM Tokenizer = "smollm" // byte-level BPE, pre "smollm", ChatML tokens at ids 0..2
	// TokenizerKimi is Kimi-K2/K3's kind: byte-level BPE, pre "kimi-k2", [BOS] [EOS] and
	// Kimi-K3's XTML tags <|open|> <|sep|> <|close|> <|end_of_msg|> (the end of a turn, its eos).
	TokenizerKimi Tokenizer = "kimi"
)

// Preset is a named model shape. All sizes are element counts.
type Preset struct {
	Name string
	Arch string // general.architecture: "llama", "qwen2", "qwen3", "qwen35", "kimi-linear" or "kimi-k3"

	Embed   int // embedding_length
	Layers  int // block_count
	Heads   int // attention.head_count
	KVHeads int // attention.head_count_kv
	HeadDim int // attention.key_length = value_length = rope.dimension_count
	FFN     int // feed_forward_length
	Context int // context_length

	Tokenizer Tokenizer
	VocabSize int    // total tokens, specials included
	Template  string // tokenizer.chat_template (package tokenizer owns the texts)

	RopeBase float32 // rope.freq_base
	// RopeLlama3 adds rope_freqs.weight computed as convert_hf_to_gguf does
	// for rope_type "llama3": factor 8, low/high frequency factors 1 and 4,
	// original context 8192.
	RopeLlama3 bool
	NormEps    float32 // attention.layer_norm_rms_epsilon
	// Tied omits output.weight: llama.cpp then uses token_embd.weight as
	// the output head.
	Tied bool

	// Hybrid (qwen35) only.
	Hybrid
	// Kimi (kimi-linear and kimi-k3) only.
	Kimi
}

// Hybrid is the shape of Qwen3.5's Gated DeltaNet layers and of its gated
// full-attention layers.
type Hybrid struct {
	FullAttnInterval int    // full_attention_interval: layer l is full attention when (l+1) % n == 0
	RopeDims         int    // rope.dimension_count (partial rotary); 0 means HeadDim
	RopeSections     [4]int // rope.dimension_sections (interleaved M-RoPE; text uses the first three)
	SSMConv          int    // ssm.conv_kernel: taps of the causal conv
	SSMState         int    // ssm.state_size: head dim of the delta rule's keys and values
	SSMKHeads        int    // ssm.group_count: key (and query) heads
	SSMVHeads        int    // ssm.time_step_rank: value heads; ssm.inner_size = SSMVHeads·SSMState
}

// IsHybrid reports whether the preset has linear-attention layers (qwen35).
func (p Preset) IsHybrid() bool { return p.Arch == "qwen35" }

// Recurrent reports whether layer l of a hybrid preset is a Gated DeltaNet layer.
func (p Preset) Recurrent(l int) bool { return p.IsHybrid() && (l+1)%p.FullAttnInterval != 0 }

// QKVBias reports whether the architecture has attn_{q,k,v}.bias (qwen2).
func (p Preset) QKVBias() bool { return p.Arch == "qwen2" }

// QKNorm reports whether the architecture has per-head attn_{q,k}_norm (qwen3).
func (p Preset) QKNorm() bool { return p.Arch == "qwen3" || p.Arch == "qwen35" }

var presets = []Preset{
	{
		Name: "tiny-llama-spm", Arch: "llama",
		Embed: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 192, Context: 2048,
		Tokenizer: TokenizerSPM, VocabSize: 1000, Template: tokenizer.TemplateLlama2,
		RopeBase: 10000, NormEps: 1e-5,
	},
	{
		Name: "tiny-llama3", Arch: "llama",
		Embed: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 192, Context: 8192,
		Tokenizer: TokenizerLlama3, VocabSize: 1500, Template: tokenizer.TemplateLlama3,
		RopeBase: 500000, RopeLlama3: true, NormEps: 1e-5,
	},
	{
		Name: "tiny-qwen2", Arch: "qwen2",
		Embed: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 192, Context: 4096,
		Tokenizer: TokenizerQwen2, VocabSize: 1500, Template: tokenizer.TemplateQwen25,
		RopeBase: 1000000, NormEps: 1e-6,
	},
	{
		// Head dim 32 with 4 heads: q is 128 wide on a 64-wide stream, as
		// Qwen3 decouples head_dim from embedding_length / head_count.
		Name: "tiny-qwen3", Arch: "qwen3",
		Embed: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 192, Context: 4096,
		Tokenizer: TokenizerQwen3, VocabSize: 1500, Template: tokenizer.TemplateQwen3Real,
		RopeBase: 1000000, NormEps: 1e-6, Tied: true,
	},
	{
		// Qwen3.5's layout at toy size: 8 layers, every 4th full attention
		// (gated, Q/K norm, partial interleaved M-RoPE), the rest Gated
		// DeltaNet with more value heads than key heads (4 and 2, so the
		// head broadcast is exercised). Tied, like the small Qwen3.5s.
		Name: "tiny-qwen35", Arch: "qwen35",
		Embed: 64, Layers: 8, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 192, Context: 8192,
		Tokenizer: TokenizerQwen35, VocabSize: 1500, Template: tokenizer.TemplateQwen3Real,
		RopeBase: 10000000, NormEps: 1e-6, Tied: true,
		Hybrid: Hybrid{FullAttnInterval: 4, RopeDims: 16, RopeSections: [4]int{3, 3, 2, 0},
			SSMConv: 4, SSMState: 16, SSMKHeads: 2, SSMVHeads: 4},
	},
	{
		// Kimi-Linear's layout at toy size: KDA and MLA layers alternating
		// (three MLA layers, so two share a K/V slot and one has a slot to
		// itself), the first layer's FFN dense and the rest 8 experts with 2
		// per token, one shared expert, sigmoid gating with a selection bias
		// and Kimi's routed scaling factor. HeadDim is Embed/Heads; the MLA
		// and KDA widths are in Kimi.
		Name: "tiny-kimi-linear", Arch: "kimi-linear",
		Embed: 64, Layers: 6, Heads: 4, KVHeads: 1, HeadDim: 16, FFN: 192, Context: 8192,
		Tokenizer: TokenizerQwen2, VocabSize: 1500, Template: tokenizer.TemplateQwen25,
		RopeBase: 10000, NormEps: 1e-5,
		Kimi: Kimi{MLAInterval: 2, KDAHeadDim: 16, KDAConv: 4,
			KVLoraRank: 48, QKRopeDim: 16, QKNopeDim: 16, VHeadDim: 16,
			Experts: 8, ExpertsUsed: 2, SharedExperts: 1, ExpertFFN: 32, DenseLead: 1,
			Gating: 2, WeightsScale: 2.446},
	},
	{
		// Kimi-K3's layout at toy size: KDA with every fourth layer MLA (two
		// MLA layers, sharing a K/V slot), the cross-layer residual mix
		// banking every third layer's input, MLA's output gate, a full-rank
		// KDA gate with the sigmoid lower bound, situ activations, and latent
		// experts (routed at 32 of 64 dims) after one dense layer. Kimi's
		// tokenizer and the real Kimi-K3 template. The KDA head dim, MLA's
		// nope dims and kv_lora_rank are multiples of 32, so that a Q8_0
		// file has no F16 fallback rows for llama.cpp to send through its
		// AMX kernel (see internal/model's llama.cpp tests).
		Name: "tiny-kimi-k3", Arch: "kimi-k3",
		Embed: 64, Layers: 8, Heads: 4, KVHeads: 1, HeadDim: 16, FFN: 192, Context: 8192,
		Tokenizer: TokenizerKimi, VocabSize: 1500, Template: tokenizer.TemplateKimiK3,
		RopeBase: 10000, NormEps: 1e-5,
		Kimi: Kimi{MLAInterval: 4, KDAHeadDim: 32, KDAConv: 4,
			KVLoraRank: 96, QKRopeDim: 16, QKNopeDim: 32, VHeadDim: 16,
			Experts: 8, ExpertsUsed: 2, SharedExperts: 1, ExpertFFN: 32, DenseLead: 1,
			Gating: 2, WeightsScale: 2.5,
			ResBlock: 3, SituBeta: 4, SituLinearBeta: 8, GateLowerBound: -5, ExpertLatent: 32},
	},
	{
		// A small Kimi-K3 for long context on a CPU: 256 wide, 8 layers of
		// which the last is MLA (K3 interleaves KDA and MLA; one MLA layer of
		// 2 heads keeps a 128K-token prefill to minutes on 2 cores, its
		// attention still quadratic), compressed queries (q_lora_rank) on,
		// a 128-wide latent for the experts. Its cache is one 80-float
		// latent row per token (64 + 16) plus the 7 KDA layers' fixed state
		// per checkpoint.
		Name: "small-kimi-k3", Arch: "kimi-k3",
		Embed: 256, Layers: 8, Heads: 2, KVHeads: 1, HeadDim: 128, FFN: 512, Context: 524288,
		Tokenizer: TokenizerKimi, VocabSize: 4096, Template: tokenizer.TemplateKimiK3,
		RopeBase: 10000, NormEps: 1e-5,
		Kimi: Kimi{MLAInterval: 8, KDAHeadDim: 64, KDAConv: 4,
			KVLoraRank: 64, QKRopeDim: 16, QKNopeDim: 32, VHeadDim: 32,
			Experts: 16, ExpertsUsed: 2, SharedExperts: 1, ExpertFFN: 128, DenseLead: 1,
			Gating: 2, WeightsScale: 2.5,
			ResBlock: 3, SituBeta: 4, SituLinearBeta: 8, GateLowerBound: -5, QLoraRank: 128, ExpertLatent: 128},
	},
	{
		// small-kimi-k3's size in Kimi-Linear's layout, for long-context prefill against
		// llama-bench (the hybrid rows of bench-vs-llama): 8 layers, the last MLA, KDA head
		// dim 64, 16 experts of 2 used. F32 weights keep every tensor off llama.cpp's AMX
		// buffer type (tiny-kimi-linear's notes in internal/model/llamacpp_test.go).
		Name: "small-kimi-linear", Arch: "kimi-linear",
		Embed: 256, Layers: 8, Heads: 2, KVHeads: 1, HeadDim: 128, FFN: 512, Context: 524288,
		Tokenizer: TokenizerQwen2, VocabSize: 4096, Template: tokenizer.TemplateQwen25,
		RopeBase: 10000, NormEps: 1e-5,
		Kimi: Kimi{MLAInterval: 8, KDAHeadDim: 64, KDAConv: 4,
			KVLoraRank: 64, QKRopeDim: 16, QKNopeDim: 32, VHeadDim: 32,
			Experts: 16, ExpertsUsed: 2, SharedExperts: 1, ExpertFFN: 128, DenseLead: 1,
			Gating: 2, WeightsScale: 2.5},
	},
	{
		// Qwen3.5's layout at the same size, for the same rows: 8 layers, every fourth gated
		// attention (2 of 8), Gated DeltaNet with a 64-wide state, 2 key heads and 4 value
		// heads, context 512K.
		Name: "small-qwen35", Arch: "qwen35",
		Embed: 256, Layers: 8, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512, Context: 524288,
		Tokenizer: TokenizerQwen35, VocabSize: 4096, Template: tokenizer.TemplateQwen3Real,
		RopeBase: 10000000, NormEps: 1e-6, Tied: true,
		Hybrid: Hybrid{FullAttnInterval: 4, RopeDims: 16, RopeSections: [4]int{3, 3, 2, 0},
			SSMConv: 4, SSMState: 64, SSMKHeads: 2, SSMVHeads: 4},
	},
	{
		Name: "tiny-smollm", Arch: "llama",
		Embed: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 192, Context: 2048,
		Tokenizer: TokenizerSmolLM, VocabSize: 1500, Template: tokenizer.TemplateQwen25,
		RopeBase: 10000, NormEps: 1e-5, Tied: true,
	},
	{
		// Every matrix row length is a multiple of 256, so Q4_K and Q6_K
		// apply without fallback.
		Name: "tiny-kquant", Arch: "llama",
		Embed: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 768, Context: 2048,
		Tokenizer: TokenizerSPM, VocabSize: 1000, Template: tokenizer.TemplateLlama2,
		RopeBase: 10000, NormEps: 1e-5,
	},
	{
		// The model `stockpot serve` builds at start. Its template is
		// Qwen2.5's, so that tools and tool calls render in a real
		// family's format (ChatML, which the SmolLM vocabulary has).
		Name: "default", Arch: "llama",
		Embed: 384, Layers: 8, Heads: 6, KVHeads: 2, HeadDim: 64, FFN: 1024, Context: 8192,
		Tokenizer: TokenizerSmolLM, VocabSize: 4096, Template: tokenizer.TemplateQwen25,
		RopeBase: 100000, NormEps: 1e-5, Tied: true,
	},
	{
		// A GPT-2-small width (768) whose every matrix row length is a multiple of
		// 256 (768, 2048), so the Q4_K_M mix is Q4_K and Q6_K throughout, not the
		// Q5_0 and Q8_0 fallbacks smollm-135m's 576 forces: the bench's K-quant row.
		Name: "kquant-80m", Arch: "llama",
		Embed: 768, Layers: 12, Heads: 12, KVHeads: 4, HeadDim: 64, FFN: 2048, Context: 8192,
		Tokenizer: TokenizerSmolLM, VocabSize: 8192, Template: tokenizer.TemplateSmolLM,
		RopeBase: 100000, NormEps: 1e-5, Tied: true,
	},
	{
		// SmolLM2-135M's shape. The vocabulary is smaller than its 49152:
		// the shipped corpus supports about 10k merges.
		Name: "smollm-135m", Arch: "llama",
		Embed: 576, Layers: 30, Heads: 9, KVHeads: 3, HeadDim: 64, FFN: 1536, Context: 8192,
		Tokenizer: TokenizerSmolLM, VocabSize: 8192, Template: tokenizer.TemplateSmolLM,
		RopeBase: 100000, NormEps: 1e-5, Tied: true,
	},
}

// Presets returns every preset, in a fixed order. The slice is a copy.
func Presets() []Preset { return append([]Preset(nil), presets...) }

// Lookup returns the preset with this name.
func Lookup(name string) (Preset, error) {
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
	}
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	return Preset{}, fmt.Errorf("synth: unknown preset %q (have %v): %w", name, names, ErrUnknownPreset)
}
