package model

import (
	"errors"
	"fmt"

	"stockpot/internal/gguf"
)

// Architectures this package runs.
const (
	ArchLlama  = "llama"
	ArchQwen2  = "qwen2"
	ArchQwen3  = "qwen3"
	ArchQwen35 = "qwen35" // hybrid: Gated DeltaNet layers and gated full attention
	// ArchKimiLinear is hybrid: KDA layers and MLA layers, MoE feed-forward (kimi.go).
	ArchKimiLinear = "kimi-linear"
	// ArchKimiK3 is kimi-linear's skeleton with a cross-layer residual mix, situ activations,
	// MLA's output gate, a full-rank KDA gate and latent experts (k3.go).
	ArchKimiK3 = "kimi-k3"
)

// LayerKind says what a layer's token mixer is.
type LayerKind uint8

const (
	LayerAttention LayerKind = iota // softmax attention over the paged K/V
	LayerDeltaNet                   // Gated DeltaNet: causal conv + gated delta rule, a recurrent state
	LayerKDA                        // Kimi Delta Attention: causal conv on q, k, v + channel-wise gated delta rule
	LayerMLA                        // multi-head latent attention: caches one latent row per token (mla.go)
)

func (k LayerKind) String() string {
	switch k {
	case LayerDeltaNet:
		return "deltanet"
	case LayerKDA:
		return "kda"
	case LayerMLA:
		return "mla"
	}
	return "attention"
}

// recurrent reports whether the kind keeps a recurrent state instead of K/V.
func (k LayerKind) recurrent() bool { return k == LayerDeltaNet || k == LayerKDA }

// SSMConfig is the shape of the Gated DeltaNet layers (llama.cpp's ssm.* keys).
type SSMConfig struct {
	ConvKernel int // ssm.conv_kernel: taps of the causal depthwise conv
	StateSize  int // ssm.state_size: head dim of the delta rule's queries, keys and values
	KHeads     int // ssm.group_count: query/key heads
	VHeads     int // ssm.time_step_rank: value heads (a multiple of KHeads; value head h reads key head h mod KHeads)
}

// KeyDim is the width of a token's queries (and of its keys).
func (s SSMConfig) KeyDim() int { return s.KHeads * s.StateSize }

// ValueDim is the width of a token's values (ssm.inner_size).
func (s SSMConfig) ValueDim() int { return s.VHeads * s.StateSize }

// ConvDim is the number of conv channels: queries, keys and values.
func (s SSMConfig) ConvDim() int { return 2*s.KeyDim() + s.ValueDim() }

// ConvStateFloats is one layer's conv state: the last ConvKernel-1 inputs of every channel.
func (s SSMConfig) ConvStateFloats() int { return (s.ConvKernel - 1) * s.ConvDim() }

// DeltaStateFloats is one layer's delta-rule state: a StateSize² matrix per value head.
func (s SSMConfig) DeltaStateFloats() int { return s.VHeads * s.StateSize * s.StateSize }

// ErrUnsupported is returned for files whose architecture or shape this package cannot run.
var ErrUnsupported = errors.New("model: unsupported")

// Config holds the hyper-parameters that determine the numbers a model computes.
type Config struct {
	Arch          string
	Dim           int // embedding length
	Layers        int
	Heads         int
	KVHeads       int
	HeadDim       int // per-head dimension of Q and K (and V)
	FFN           int // feed-forward hidden size
	Vocab         int
	ContextLength int
	NormEps       float32

	RopeDims      int     // rotated dimensions per head (n_rot)
	RopeBase      float32 // freq_base
	RopeFreqScale float32 // 1/linear scaling factor
	RopeNeoX      bool    // NEOX pairing (i, i+n/2) instead of adjacent pairs

	QKVBias bool // qwen2
	QKNorm  bool // qwen3, qwen35
	Tied    bool // output projection shares token_embd

	// Hybrid models (qwen35). Kinds is nil for models whose every layer is attention.
	Kinds        []LayerKind
	AttnGate     bool   // attn_q also yields a per-head sigmoid output gate (qwen35)
	RopeSections [4]int // rope.dimension_sections (interleaved M-RoPE; text uses one position for all)
	SSM          SSMConfig

	// kimi-linear's KDA layers use SSM with KHeads = VHeads = Heads and StateSize the KDA head
	// dim (ConvDim is then q, k and v: 3 × Heads × head dim). Its MLA layers keep one latent row
	// of MLA.LatentDim() per token, so for kimi-linear KVHeads is 1 and HeadDim is that latent
	// width (see KVLayers for how MLA layers share the K/V slots).
	MLA MLAConfig // multi-head latent attention layers (mla.go)
	MoE MoEConfig // mixture-of-experts FFN (moe.go); zero for dense models
	K3  K3Config  // Kimi-K3's additions (k3.go); zero for other architectures
}

// Kimi reports whether the model is kimi-linear or Kimi-K3: KDA and MLA layers.
func (c Config) Kimi() bool { return c.Arch == ArchKimiLinear || c.Arch == ArchKimiK3 }

// Kind returns layer l's kind.
func (c Config) Kind(l int) LayerKind {
	if c.Kinds == nil {
		return LayerAttention
	}
	return c.Kinds[l]
}

// Hybrid reports whether some layers keep a recurrent state instead of K/V.
func (c Config) Hybrid() bool {
	for _, k := range c.Kinds {
		if k.recurrent() {
			return true
		}
	}
	return false
}

// count returns the number of layers of kind k.
func (c Config) count(k LayerKind) int {
	n := 0
	for l := 0; l < c.Layers; l++ {
		if c.Kind(l) == k {
			n++
		}
	}
	return n
}

// KVLayers is the number of layer slots of the paged blocks: one per attention layer (its K
// and V rows), and one per two MLA layers, since an MLA layer caches a single latent row per
// token: MLA layer r (its rank among MLA layers) keeps its latent in slot r/2, in the K half
// when r is even and the V half when odd (mlaSlot). The K/V arena's layout has this many
// layers; attention layer l uses slot KVLayerIndex(l).
func (c Config) KVLayers() int { return c.count(LayerAttention) + (c.count(LayerMLA)+1)/2 }

// KVLayerIndex returns the K/V slot of attention layer l (its rank among attention layers).
func (c Config) KVLayerIndex(l int) int {
	n := 0
	for i := 0; i < l; i++ {
		if c.Kind(i) == LayerAttention {
			n++
		}
	}
	return n
}

// DeltaLayers is the number of layers with a recurrent state (Gated DeltaNet or KDA).
func (c Config) DeltaLayers() int { return c.count(LayerDeltaNet) + c.count(LayerKDA) }

// KVBytesPerToken is the K/V one token takes in the blocks, for elements of elemBytes.
func (c Config) KVBytesPerToken(elemBytes int) int { return 2 * c.KVLayers() * c.KVDim() * elemBytes }

// StateBytes is the recurrent state of one sequence (f32), whatever its length: conv and
// delta-rule state of every Gated DeltaNet or KDA layer. 0 for models without such layers.
func (c Config) StateBytes() int {
	return 4 * c.DeltaLayers() * (c.SSM.ConvStateFloats() + c.SSM.DeltaStateFloats())
}

// QDim is the width of the concatenated query heads.
func (c Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of one token's K (or V) for one layer.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

// ParseConfig reads the hyper-parameters of a GGUF file's architecture.
func ParseConfig(f *gguf.File) (Config, error) {
	arch, ok := f.String("general.architecture")
	if !ok {
		return Config{}, fmt.Errorf("%w: general.architecture missing", ErrUnsupported)
	}
	c := Config{Arch: arch}
	switch arch {
	case ArchLlama:
	case ArchQwen2:
		c.QKVBias, c.RopeNeoX = true, true
	case ArchQwen3:
		c.QKNorm, c.RopeNeoX = true, true
	case ArchQwen35:
		c.QKNorm, c.RopeNeoX, c.AttnGate = true, true, true
	case ArchKimiLinear, ArchKimiK3:
	default:
		return Config{}, fmt.Errorf("%w: architecture %q (supported: llama, qwen2, qwen3, qwen35, kimi-linear, kimi-k3)", ErrUnsupported, arch)
	}
	var err error
	req := func(key string) int {
		v, ok := f.Uint(arch + "." + key)
		if !ok && err == nil {
			err = fmt.Errorf("%w: %s.%s missing", ErrUnsupported, arch, key)
		}
		if v > 1<<24 && err == nil {
			err = fmt.Errorf("%w: %s.%s = %d is absurd", ErrUnsupported, arch, key, v)
		}
		return int(v)
	}
	opt := func(key string, def int) int {
		if v, ok := f.Uint(arch + "." + key); ok && v <= 1<<24 {
			return int(v)
		}
		return def
	}
	c.Dim = req("embedding_length")
	c.Layers = req("block_count")
	c.FFN = req("feed_forward_length")
	c.Heads = req("attention.head_count")
	c.ContextLength = opt("context_length", 2048)
	if err != nil {
		return Config{}, err
	}
	c.KVHeads = opt("attention.head_count_kv", c.Heads)
	if c.Kimi() {
		return parseKimi(f, c)
	}
	if arch == ArchQwen35 {
		if err := parseHybrid(f, &c); err != nil {
			return Config{}, err
		}
	}
	if c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 || c.Dim <= 0 || c.Layers <= 0 || c.FFN <= 0 {
		return Config{}, fmt.Errorf("%w: heads %d, kv heads %d, dim %d, layers %d, ffn %d", ErrUnsupported, c.Heads, c.KVHeads, c.Dim, c.Layers, c.FFN)
	}
	c.HeadDim = opt("attention.key_length", c.Dim/c.Heads)
	if v := opt("attention.value_length", c.HeadDim); v != c.HeadDim {
		return Config{}, fmt.Errorf("%w: value_length %d != key_length %d", ErrUnsupported, v, c.HeadDim)
	}
	c.RopeDims = opt("rope.dimension_count", c.HeadDim)
	if c.RopeDims > c.HeadDim || c.RopeDims%2 != 0 {
		return Config{}, fmt.Errorf("%w: rope.dimension_count %d with head dim %d", ErrUnsupported, c.RopeDims, c.HeadDim)
	}
	c.NormEps = 1e-5
	if v, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon"); ok {
		c.NormEps = float32(v)
	}
	c.RopeBase = 10000
	if v, ok := f.Float(arch + ".rope.freq_base"); ok {
		c.RopeBase = float32(v)
	}
	c.RopeFreqScale = 1
	scale := 0.0
	if v, ok := f.Float(arch + ".rope.scaling.factor"); ok {
		scale = v
	} else if v, ok := f.Float(arch + ".rope.scale_linear"); ok {
		scale = v
	}
	if t, ok := f.String(arch + ".rope.scaling.type"); ok && t != "linear" && t != "none" && scale != 0 && scale != 1 {
		return Config{}, fmt.Errorf("%w: rope scaling type %q", ErrUnsupported, t)
	}
	if scale != 0 {
		c.RopeFreqScale = float32(1 / scale)
	}
	if c.Arch == ArchQwen35 {
		if err := textRopeCheck(c); err != nil {
			return Config{}, err
		}
	}
	if err := parseVocab(f, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// parseVocab reads the vocabulary size from token_embd and whether the head is tied.
func parseVocab(f *gguf.File, c *Config) error {
	if tok, ok := f.Tensor("token_embd.weight"); ok && len(tok.Dims) == 2 && tok.Dims[1] > 0 && tok.Dims[1] <= 1<<24 {
		c.Vocab = int(tok.Dims[1])
	} else {
		return fmt.Errorf("%w: token_embd.weight missing or not 2-D", ErrUnsupported)
	}
	_, hasOut := f.Tensor("output.weight")
	c.Tied = !hasOut
	return nil
}

// parseHybrid reads qwen35's layer pattern, Gated DeltaNet shape and rope sections, as
// llama.cpp's llama_model_qwen35::load_arch_hparams does. Multi-token-prediction layers
// (nextn_predict_layers, stored after the trunk) are not run: Layers counts the trunk.
func parseHybrid(f *gguf.File, c *Config) error {
	a := c.Arch
	if v, ok := f.Uint(a + ".nextn_predict_layers"); ok && v > 0 {
		if int(v) >= c.Layers {
			return fmt.Errorf("%w: %s.nextn_predict_layers %d with %d blocks", ErrUnsupported, a, v, c.Layers)
		}
		c.Layers -= int(v)
	}
	// head_count_kv may be per layer (0 on the recurrent ones).
	if kv, ok := f.Ints(a + ".attention.head_count_kv"); ok {
		c.KVHeads = 0
		for _, v := range kv {
			if v > 0 && (c.KVHeads == 0 || int(v) == c.KVHeads) {
				c.KVHeads = int(v)
			} else if v > 0 {
				return fmt.Errorf("%w: %s.attention.head_count_kv differs between layers: %v", ErrUnsupported, a, kv)
			}
		}
	}
	var err error
	req := func(key string) int {
		v, ok := f.Uint(a + "." + key)
		if (!ok || v == 0 || v > 1<<20) && err == nil {
			err = fmt.Errorf("%w: %s.%s missing or out of range", ErrUnsupported, a, key)
		}
		return int(v)
	}
	s := SSMConfig{
		ConvKernel: req("ssm.conv_kernel"), StateSize: req("ssm.state_size"),
		KHeads: req("ssm.group_count"), VHeads: req("ssm.time_step_rank"),
	}
	inner := req("ssm.inner_size")
	if err != nil {
		return err
	}
	switch {
	case s.ConvKernel < 2 || s.ConvKernel > 64:
		return fmt.Errorf("%w: %s.ssm.conv_kernel %d", ErrUnsupported, a, s.ConvKernel)
	case s.VHeads%s.KHeads != 0:
		return fmt.Errorf("%w: %s.ssm.time_step_rank %d is not a multiple of ssm.group_count %d", ErrUnsupported, a, s.VHeads, s.KHeads)
	case inner != s.ValueDim():
		return fmt.Errorf("%w: %s.ssm.inner_size %d != time_step_rank %d × state_size %d", ErrUnsupported, a, inner, s.VHeads, s.StateSize)
	case uint64(s.VHeads)*uint64(s.StateSize)*uint64(s.StateSize)*uint64(c.Layers) > 1<<28:
		// 1 GiB of f32 state per sequence: far above real models (Qwen3.5-9B: ~50 MiB).
		return fmt.Errorf("%w: %s recurrent state of %d layers × %d heads × %d² floats per sequence is absurd", ErrUnsupported, a, c.Layers, s.VHeads, s.StateSize)
	}
	c.SSM = s

	c.Kinds = make([]LayerKind, c.Layers)
	if v, ok := f.Value(a + ".attention.recurrent_layers"); ok {
		var rec []bool
		switch x := v.Data.(type) {
		case []bool:
			rec = x
		default:
			ints, ok := f.Ints(a + ".attention.recurrent_layers")
			if !ok {
				return fmt.Errorf("%w: %s.attention.recurrent_layers is not an array of bools", ErrUnsupported, a)
			}
			for _, i := range ints {
				rec = append(rec, i != 0)
			}
		}
		if len(rec) < c.Layers {
			return fmt.Errorf("%w: %s.attention.recurrent_layers has %d entries for %d layers", ErrUnsupported, a, len(rec), c.Layers)
		}
		for l := range c.Kinds {
			if rec[l] {
				c.Kinds[l] = LayerDeltaNet
			}
		}
	} else {
		interval := uint64(4)
		if v, ok := f.Uint(a + ".full_attention_interval"); ok {
			interval = v
		}
		if interval == 0 || interval > 1<<20 {
			return fmt.Errorf("%w: %s.full_attention_interval %d", ErrUnsupported, a, interval)
		}
		for l := range c.Kinds {
			if uint64(l+1)%interval != 0 {
				c.Kinds[l] = LayerDeltaNet
			}
		}
	}

	sec, ok := f.Ints(a + ".rope.dimension_sections")
	if !ok || len(sec) == 0 || len(sec) > 4 {
		return fmt.Errorf("%w: %s.rope.dimension_sections missing or not an array of up to 4", ErrUnsupported, a)
	}
	for i, v := range sec {
		if v < 0 || v > 1<<16 {
			return fmt.Errorf("%w: %s.rope.dimension_sections %v", ErrUnsupported, a, sec)
		}
		c.RopeSections[i] = int(v)
	}
	return nil
}

// textRopeCheck verifies that interleaved M-RoPE over text tokens is plain NeoX RoPE: ggml
// gives each rotated pair i the position of section (i mod Σsections) in the pattern t,h,w,t,h,w…
// (its imrope rule), and for text the t, h and w positions all equal the token's position
// while the fourth is 0. A pair that would take the fourth (no rotation) is not supported.
func textRopeCheck(c Config) error {
	s := c.RopeSections
	total := s[0] + s[1] + s[2] + s[3]
	if total <= 0 || s[0]+s[1]+s[2] <= 0 {
		return fmt.Errorf("%w: rope sections %v", ErrUnsupported, s)
	}
	if total > c.HeadDim {
		return fmt.Errorf("%w: rope sections %v exceed head dim %d", ErrUnsupported, s, c.HeadDim)
	}
	for i := 0; i < c.RopeDims/2; i++ {
		sector := i % total
		text := (sector%3 == 1 && sector < 3*s[1]) || (sector%3 == 2 && sector < 3*s[2]) || (sector%3 == 0 && sector < 3*s[0])
		if !text {
			return fmt.Errorf("%w: rope sections %v rotate pair %d by the extra (non-text) position", ErrUnsupported, s, i)
		}
	}
	return nil
}
