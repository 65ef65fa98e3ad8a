package llamaref

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"

	"stockpot/internal/gguf"
)

// tinyLlama describes the test model: a 2-layer llama with GQA (4 query heads,
// 2 K/V heads), f32 weights and a small SentencePiece vocabulary (3 specials,
// 256 byte tokens, a few dozen pieces). It exists only to drive llama.cpp in
// this package's tests; internal/synth makes the real test models.
var tinyLlama = struct {
	embd, layers, ff, heads, kvHeads, ctx int
}{embd: 64, layers: 2, ff: 128, heads: 4, kvHeads: 2, ctx: 512}

// tinyPieces are the normal vocabulary entries after the byte tokens, most
// preferred merge first.
var tinyPieces = []string{
	"▁", "▁the", "▁hello", "▁world", "▁a", "▁t", "▁s", "▁w", "▁h", "▁o",
	"he", "th", "in", "er", "an", "ll", "lo", "or", "ld", "el", "wor", "hel", "hello",
	"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
	"n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", ",", ".", "!",
}

// writeTinyLlama writes the tiny test model to dir and returns its path.
func writeTinyLlama(dir string) (string, error) {
	m := tinyLlama
	headDim := m.embd / m.heads
	kvDim := headDim * m.kvHeads

	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3} // unknown, control, control
	scores := []float32{0, 0, 0}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6) // byte
		scores = append(scores, 0)
	}
	for i, p := range tinyPieces {
		tokens = append(tokens, p)
		types = append(types, 1) // normal
		scores = append(scores, -float32(i+1))
	}
	vocab := len(tokens)

	w := gguf.NewWriter()
	w.Set("general.architecture", "llama")
	w.Set("general.name", "llamaref-tiny")
	w.Set("llama.context_length", uint32(m.ctx))
	w.Set("llama.embedding_length", uint32(m.embd))
	w.Set("llama.block_count", uint32(m.layers))
	w.Set("llama.feed_forward_length", uint32(m.ff))
	w.Set("llama.attention.head_count", uint32(m.heads))
	w.Set("llama.attention.head_count_kv", uint32(m.kvHeads))
	w.Set("llama.rope.dimension_count", uint32(headDim))
	w.Set("llama.rope.freq_base", float32(10000))
	w.Set("llama.attention.layer_norm_rms_epsilon", float32(1e-5))
	w.Set("llama.vocab_size", uint32(vocab))
	w.Set("tokenizer.ggml.model", "llama")
	w.Set("tokenizer.ggml.tokens", tokens)
	w.Set("tokenizer.ggml.scores", scores)
	w.Set("tokenizer.ggml.token_type", types)
	w.Set("tokenizer.ggml.unknown_token_id", uint32(0))
	w.Set("tokenizer.ggml.bos_token_id", uint32(1))
	w.Set("tokenizer.ggml.eos_token_id", uint32(2))
	w.Set("tokenizer.ggml.add_bos_token", true)
	w.Set("tokenizer.ggml.add_eos_token", false)

	rng := rand.New(rand.NewPCG(1, 2))
	var addErr error
	add := func(name string, dims []uint64, std, mean float64) {
		n := 1
		for _, d := range dims {
			n *= int(d)
		}
		b := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(mean+std*rng.NormFloat64())))
		}
		if err := w.AddTensor(name, gguf.TypeF32, dims, b); err != nil && addErr == nil {
			addErr = fmt.Errorf("AddTensor(%s): %w", name, err)
		}
	}
	e, v, ff, kv := uint64(m.embd), uint64(vocab), uint64(m.ff), uint64(kvDim)
	add("token_embd.weight", []uint64{e, v}, 1, 0)
	for l := 0; l < m.layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", []uint64{e}, 0.1, 1)
		add(p+"attn_q.weight", []uint64{e, e}, 0.2, 0)
		add(p+"attn_k.weight", []uint64{e, kv}, 0.2, 0)
		add(p+"attn_v.weight", []uint64{e, kv}, 0.2, 0)
		add(p+"attn_output.weight", []uint64{e, e}, 0.1, 0)
		add(p+"ffn_norm.weight", []uint64{e}, 0.1, 1)
		add(p+"ffn_gate.weight", []uint64{e, ff}, 0.15, 0)
		add(p+"ffn_up.weight", []uint64{e, ff}, 0.15, 0)
		add(p+"ffn_down.weight", []uint64{ff, e}, 0.1, 0)
	}
	add("output_norm.weight", []uint64{e}, 0.1, 1)
	add("output.weight", []uint64{e, v}, 0.3, 0)

	if addErr != nil {
		return "", addErr
	}
	path := filepath.Join(dir, "tiny-llama.gguf")
	return path, w.WriteFile(path)
}
