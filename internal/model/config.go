package model

import (
	"errors"
	"fmt"

	"stockpot/internal/gguf"
)

// Architectures this package runs.
const (
	ArchLlama = "llama"
	ArchQwen2 = "qwen2"
	ArchQwen3 = "qwen3"
)

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
	QKNorm  bool // qwen3
	Tied    bool // output projection shares token_embd
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
	default:
		return Config{}, fmt.Errorf("%w: architecture %q (supported: llama, qwen2, qwen3)", ErrUnsupported, arch)
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
	if tok, ok := f.Tensor("token_embd.weight"); ok && len(tok.Dims) == 2 {
		c.Vocab = int(tok.Dims[1])
	} else {
		return Config{}, fmt.Errorf("%w: token_embd.weight missing or not 2-D", ErrUnsupported)
	}
	_, hasOut := f.Tensor("output.weight")
	c.Tied = !hasOut
	return c, nil
}
