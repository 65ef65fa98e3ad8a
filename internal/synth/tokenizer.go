package synth

import (
	"fmt"
	"sync"

	"stockpot/internal/gguf"
	"stockpot/internal/synth/vocab"
)

// tokenizerSpec is everything a tokenizer family needs besides training.
type tokenizerSpec struct {
	bpe           bool
	pre           vocab.Pre
	specials      []vocab.Special
	specialsFirst bool
	// Special ids by text; "" leaves the key out.
	bos, eos, unk, pad, eot string
	addBOS                  bool
}

func control(texts ...string) []vocab.Special {
	s := make([]vocab.Special, len(texts))
	for i, t := range texts {
		s[i] = vocab.Special{Text: t, Type: vocab.TypeControl}
	}
	return s
}

// userDefined are added tokens that are not control tokens (Qwen's
// <tool_call> and <think>): llama.cpp matches them in any text and renders
// them when decoding.
func userDefined(texts ...string) []vocab.Special {
	s := make([]vocab.Special, len(texts))
	for i, t := range texts {
		s[i] = vocab.Special{Text: t, Type: vocab.TypeUserDefined}
	}
	return s
}

var tokenizerSpecs = map[Tokenizer]tokenizerSpec{
	TokenizerSPM: {bos: "<s>", eos: "</s>", unk: "<unk>", pad: "<unk>", addBOS: true},
	TokenizerLlama3: {
		bpe: true, pre: vocab.PreLlama3,
		specials: control("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
		bos:      "<|begin_of_text|>", eos: "<|eot_id|>", eot: "<|eot_id|>", pad: "<|end_of_text|>", addBOS: true,
	},
	TokenizerQwen2: {
		bpe: true, pre: vocab.PreQwen2,
		specials: append(control("<|endoftext|>", "<|im_start|>", "<|im_end|>"), userDefined("<tool_call>", "</tool_call>")...),
		bos:      "<|endoftext|>", eos: "<|im_end|>", pad: "<|endoftext|>",
	},
	TokenizerQwen3: {
		bpe: true, pre: vocab.PreQwen2,
		specials: append(control("<|endoftext|>", "<|im_start|>", "<|im_end|>"), userDefined("<tool_call>", "</tool_call>", "<think>", "</think>")...),
		bos:      "<|endoftext|>", eos: "<|im_end|>", pad: "<|endoftext|>",
	},
	TokenizerQwen35: {
		bpe: true, pre: vocab.PreQwen35,
		specials: append(control("<|endoftext|>", "<|im_start|>", "<|im_end|>"), userDefined("<tool_call>", "</tool_call>", "<think>", "</think>")...),
		bos:      "<|endoftext|>", eos: "<|im_end|>", pad: "<|endoftext|>",
	},
	TokenizerKimi: {
		bpe: true, pre: vocab.PreKimiK2,
		specials: control("[BOS]", "[EOS]", "<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>", "<|kimi_image_placeholder|>"),
		bos:      "[BOS]", eos: "<|end_of_msg|>", eot: "<|end_of_msg|>", pad: "[EOS]",
	},
	TokenizerSmolLM: {
		bpe: true, pre: vocab.PreSmolLM, specialsFirst: true,
		specials: control("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
		bos:      "<|im_start|>", eos: "<|im_end|>", unk: "<|endoftext|>", pad: "<|im_end|>",
	},
}

// vocabCache holds trained vocabularies for the life of the process.
// Training is deterministic, so caching changes nothing but time.
var vocabCache struct {
	mu sync.Mutex
	m  map[string]*vocabEntry // protected by mu
}

type vocabEntry struct {
	once sync.Once
	v    *vocab.Vocab
	err  error
}

// trainedVocab returns the (shared, read-only) vocabulary of a family and size.
func trainedVocab(t Tokenizer, size int) (*vocab.Vocab, tokenizerSpec, error) {
	spec, ok := tokenizerSpecs[t]
	if !ok {
		return nil, spec, fmt.Errorf("synth: unknown tokenizer %q", t)
	}
	key := fmt.Sprintf("%s/%d", t, size)
	vocabCache.mu.Lock()
	if vocabCache.m == nil {
		vocabCache.m = make(map[string]*vocabEntry)
	}
	e := vocabCache.m[key]
	if e == nil {
		e = &vocabEntry{}
		vocabCache.m[key] = e
	}
	vocabCache.mu.Unlock()
	e.once.Do(func() {
		if spec.bpe {
			e.v, e.err = vocab.TrainBPE(vocab.BPEConfig{Pre: spec.pre, Size: size, Specials: spec.specials, SpecialsFirst: spec.specialsFirst})
		} else {
			e.v, e.err = vocab.TrainSPM(vocab.SPMConfig{Size: size})
		}
	})
	return e.v, spec, e.err
}

// setTokenizer writes the tokenizer.ggml.* keys and the chat template.
func setTokenizer(w *gguf.Writer, p Preset) error {
	v, spec, err := trainedVocab(p.Tokenizer, p.VocabSize)
	if err != nil {
		return err
	}
	w.Set("tokenizer.ggml.model", v.Model)
	if spec.bpe {
		w.Set("tokenizer.ggml.pre", string(v.Pre))
	}
	w.Set("tokenizer.ggml.tokens", v.Tokens)
	if v.Scores != nil {
		w.Set("tokenizer.ggml.scores", v.Scores)
	}
	types := make([]int32, len(v.Types))
	for i, t := range v.Types {
		types[i] = int32(t)
	}
	w.Set("tokenizer.ggml.token_type", types)
	if spec.bpe {
		w.Set("tokenizer.ggml.merges", v.Merges)
	}
	ids := make(map[string]int, len(v.Tokens))
	for i, t := range v.Tokens {
		if _, dup := ids[t]; !dup {
			ids[t] = i
		}
	}
	for _, k := range []struct{ key, text string }{
		{"tokenizer.ggml.bos_token_id", spec.bos},
		{"tokenizer.ggml.eos_token_id", spec.eos},
		{"tokenizer.ggml.eot_token_id", spec.eot},
		{"tokenizer.ggml.unknown_token_id", spec.unk},
		{"tokenizer.ggml.padding_token_id", spec.pad},
	} {
		if k.text == "" {
			continue
		}
		id, ok := ids[k.text]
		if !ok {
			return fmt.Errorf("synth: %s vocabulary has no %q for %s", p.Tokenizer, k.text, k.key)
		}
		w.Set(k.key, uint32(id))
	}
	w.Set("tokenizer.ggml.add_bos_token", spec.addBOS)
	w.Set("tokenizer.ggml.add_eos_token", false)
	w.Set("tokenizer.ggml.add_space_prefix", !spec.bpe)
	w.Set("tokenizer.chat_template", p.Template)
	return nil
}
