package tokenizer

import (
	"fmt"
	"math"

	"stockpot/internal/gguf"
)

// GGUF metadata keys read by FromGGUF (llama.cpp's LLM_KV_TOKENIZER_*).
const (
	KeyModel          = "tokenizer.ggml.model"
	KeyPre            = "tokenizer.ggml.pre"
	KeyTokens         = "tokenizer.ggml.tokens"
	KeyScores         = "tokenizer.ggml.scores"
	KeyTokenType      = "tokenizer.ggml.token_type"
	KeyMerges         = "tokenizer.ggml.merges"
	KeyBOS            = "tokenizer.ggml.bos_token_id"
	KeyEOS            = "tokenizer.ggml.eos_token_id"
	KeyUNK            = "tokenizer.ggml.unknown_token_id"
	KeyPAD            = "tokenizer.ggml.padding_token_id"
	KeyEOT            = "tokenizer.ggml.eot_token_id"
	KeyEOM            = "tokenizer.ggml.eom_token_id"
	KeyAddBOS         = "tokenizer.ggml.add_bos_token"
	KeyAddEOS         = "tokenizer.ggml.add_eos_token"
	KeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	KeyChatTemplate   = "tokenizer.chat_template"
	// KeyChatTemplates lists the names of the named templates, each stored
	// under KeyChatTemplate + "." + name (gguf-py's add_chat_template).
	// tokenizer.chat_template.tool_use is read even when unlisted, as
	// llama.cpp does.
	KeyChatTemplates = "tokenizer.chat_templates"
)

// VocabFromGGUF reads the tokenizer metadata of f without validating it.
func VocabFromGGUF(f *gguf.File) (Vocab, error) {
	var v Vocab
	var ok bool
	if v.Model, ok = f.String(KeyModel); !ok {
		return v, fmt.Errorf("%w: missing or non-string %s", ErrVocab, KeyModel)
	}
	v.Pre, _ = f.String(KeyPre)
	if v.Tokens, ok = f.Strings(KeyTokens); !ok {
		return v, fmt.Errorf("%w: missing or non-string-array %s", ErrVocab, KeyTokens)
	}
	if _, present := f.Value(KeyScores); present {
		if v.Scores, ok = f.Floats(KeyScores); !ok {
			ints, ok := f.Ints(KeyScores)
			if !ok {
				return v, fmt.Errorf("%w: %s is not a float or int array", ErrVocab, KeyScores)
			}
			v.Scores = make([]float32, len(ints))
			for i, x := range ints {
				v.Scores[i] = float32(x)
			}
		}
	}
	if _, present := f.Value(KeyTokenType); present {
		ints, ok := f.Ints(KeyTokenType)
		if !ok {
			return v, fmt.Errorf("%w: %s is not an int array", ErrVocab, KeyTokenType)
		}
		v.Types = make([]int32, len(ints))
		for i, x := range ints {
			v.Types[i] = int32(max(min(x, math.MaxInt32), math.MinInt32))
		}
	}
	if _, present := f.Value(KeyMerges); present {
		if v.Merges, ok = f.Strings(KeyMerges); !ok {
			return v, fmt.Errorf("%w: %s is not a string array", ErrVocab, KeyMerges)
		}
		if v.Merges == nil {
			v.Merges = []string{}
		}
	}
	for _, s := range []struct {
		key string
		dst *OptionalID
	}{{KeyBOS, &v.BOS}, {KeyEOS, &v.EOS}, {KeyUNK, &v.UNK}, {KeyPAD, &v.PAD}, {KeyEOT, &v.EOT}, {KeyEOM, &v.EOM}} {
		if x, ok := f.Uint(s.key); ok {
			id := int32(-2) // out of range: New keeps the default, as llama.cpp does
			if x <= math.MaxInt32 {
				id = int32(x)
			}
			*s.dst = ID(id)
		}
	}
	for _, s := range []struct {
		key string
		dst *OptionalBool
	}{{KeyAddBOS, &v.AddBOS}, {KeyAddEOS, &v.AddEOS}, {KeyAddSpacePrefix, &v.AddSpacePrefix}} {
		if b, ok := f.Bool(s.key); ok {
			*s.dst = Bool(b)
		}
	}
	v.ChatTemplate, _ = f.String(KeyChatTemplate)
	names, _ := f.Strings(KeyChatTemplates)
	for _, name := range append([]string{TemplateToolUse}, names...) {
		if name == "" || name == "default" {
			continue
		}
		if src, ok := f.String(KeyChatTemplate + "." + name); ok {
			if v.ChatTemplates == nil {
				v.ChatTemplates = map[string]string{}
			}
			v.ChatTemplates[name] = src
		}
	}
	return v, nil
}

// FromGGUF builds the tokenizer described by f's tokenizer.ggml.* keys and
// tokenizer.chat_template.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := VocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}
